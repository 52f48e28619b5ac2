use sk_runtime::{job, JobContext, JobError};

fn english() -> String {
    "en".into()
}

/// The payload's fields take serde's attributes: an old name (`alias`), a value for
/// payloads written before an argument existed (`default`), a stored name of its own
/// (`rename`).
#[job]
async fn send_digest(
    #[serde(alias = "uid")] user_id: i64,
    #[serde(default = "english")] locale: String,
    #[serde(rename = "n")] count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")] note: Option<String>,
    ctx: JobContext,
) -> Result<(), JobError> {
    let _ = (user_id, locale, count, note, ctx.attempt());
    Ok(())
}

/// Errors that are only `Display + Debug` are job errors too.
#[job]
async fn with_anyhow(fail: bool) -> anyhow::Result<u32> {
    anyhow::ensure!(!fail, "asked to fail");
    Ok(1)
}

#[job]
async fn with_boxed(fail: bool) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if fail {
        return Err("asked to fail".into());
    }
    Ok(())
}

pub fn main() {
    // A payload from before: the argument was `uid`, there was no locale.
    let old: SendDigest = serde_json::from_str(r#"{"uid": 7, "n": 3}"#).unwrap();
    assert_eq!((old.user_id, old.locale.as_str(), old.count), (7, "en", 3));
    assert_eq!(old.note, None);
    assert_eq!(
        serde_json::to_string(&old).unwrap(),
        r#"{"user_id":7,"locale":"en","n":3}"#
    );
    let _ = (WithAnyhow::new(true), WithBoxed::new(false));
    // sk's sqlx, for code that must name its types.
    let _options: Option<sk_runtime::sqlx::postgres::PgConnectOptions> = None;
}
