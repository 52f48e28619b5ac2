//! A stored payload is outside input: any producer may write the row (the seeds' raw SQL,
//! an older build, a hand edit). Each job below gets the fuzzer's text as its payload and
//! runs through its handler as a worker runs a row ([`Runner::perform_raw`]): it must
//! succeed exactly when the text decodes into the job's arguments, with those arguments,
//! and otherwise fail for good with an error of kind "payload" -- never panic.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sk_runtime::testing::{Outcome, Runner};
use sk_runtime::{job, Job, JobError};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Shape {
    Circle { r: u32 },
    Polygon { points: Vec<(i16, i16)> },
    Empty,
}

#[job]
async fn plain(
    n: i64,
    name: String,
    tags: Vec<String>,
    extra: Option<u8>,
) -> Result<Value, JobError> {
    Ok(json!({ "n": n, "name": name, "tags": tags, "extra": extra }))
}

#[job]
async fn shaped(shape: Shape, scale: u16) -> Result<Value, JobError> {
    Ok(json!({ "shape": shape, "scale": scale }))
}

#[job]
async fn mapped(fields: BTreeMap<String, Value>, flag: bool) -> Result<Value, JobError> {
    Ok(json!({ "fields": fields, "flag": flag }))
}

#[job]
async fn bare() -> Result<Value, JobError> {
    Ok(json!({}))
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    })
}

/// Runs `payload` as a job `J` and checks the outcome against serde's own reading of it.
fn check<J: Job + Serialize>(payload: &str) {
    let outcome = runtime()
        .block_on(Runner::new().perform_raw(J::TASK_TYPE, payload))
        .expect("the job is linked in");
    match (serde_json::from_str::<J>(payload), outcome) {
        (Ok(job), Outcome::Succeeded { output }) => {
            // The output comes back through JSON text, so the expected value does too (a
            // float need not survive serde_json's default parsing twice unchanged).
            let text = serde_json::to_string(&job).expect("a decoded job encodes");
            let expected: Value = serde_json::from_str(&text).expect("its own JSON parses");
            assert_eq!(
                output,
                Some(expected),
                "{payload:?} ran with other arguments"
            );
        }
        (Err(_), Outcome::Failed { error }) => {
            assert_eq!(error.kind(), "payload", "{payload:?}: {error:?}");
            assert!(
                error.message().contains(J::TASK_TYPE),
                "{payload:?}: {error:?}"
            );
        }
        (decoded, outcome) => panic!(
            "{payload:?}: serde says {:?}, the handler {outcome:?}",
            decoded.map(drop)
        ),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    // Rows hold text: a payload that is not UTF-8 never reaches a handler.
    let Ok(payload) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 4 {
        0 => check::<Plain>(payload),
        1 => check::<Shaped>(payload),
        2 => check::<Mapped>(payload),
        _ => check::<Bare>(payload),
    }
});
