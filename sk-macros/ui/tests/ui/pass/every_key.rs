use std::time::Duration;

use sk_runtime::{job, Data, Job, JobContext, JobError};

struct Mailer;

#[job(name = "mail.welcome", queue = "mail", priority = -10, max_attempts = 5, backoff = "linear",
      backoff_base = "2s", backoff_max = "1m", timeout = "30s", tenant = user_id)]
async fn send_welcome(
    user_id: i64,
    template: String,
    ctx: JobContext,
    mailer: Data<Mailer>,
) -> Result<(), JobError> {
    let _ = (user_id, template, ctx.attempt(), &*mailer);
    Ok(())
}

fn every_ten_seconds(_attempt: u32) -> Duration {
    Duration::from_secs(10)
}

#[job(backoff = every_ten_seconds, rate = "10/1s")]
async fn custom_backoff(values: Vec<u8>) -> Result<(), std::io::Error> {
    let _ = values;
    Ok(())
}

#[job(schedule = "0 0 3 * * *", overlap = true, missed = "run_once")]
async fn nightly() {}

#[job(every = "30s", timeout = "10s")]
async fn tidy_up() {}

#[job(schedule = "*/5 * * * *", backoff = "constant")]
pub async fn every_five_minutes(ctx: JobContext) -> Result<(), JobError> {
    let _ = ctx;
    Ok(())
}

pub fn main() {
    assert_eq!(SendWelcome::TASK_TYPE, "mail.welcome");
    assert_eq!(SendWelcome::OPTIONS.queue, "mail");
    assert_eq!(SendWelcome::OPTIONS.priority, -10);
    assert_eq!(SendWelcome::OPTIONS.timeout, Some(Duration::from_secs(30)));
    assert_eq!(
        CustomBackoff::OPTIONS.backoff.delay(3),
        Duration::from_secs(10)
    );
    assert_eq!(Nightly::TASK_TYPE, "nightly");
    assert_eq!(TidyUp::TASK_TYPE, "tidy_up");
    let job = SendWelcome::new(1, "hi".into());
    assert_eq!((job.user_id, job.template.as_str()), (1, "hi"));
    // Its tenant is its `user_id`, as text; a job without `tenant` has none.
    assert_eq!(job.tenant().as_deref(), Some("1"));
    assert_eq!(TidyUp::new().tenant(), None);
    let _later = EveryFiveMinutes::new()
        .with_priority(3)
        .run_after(Duration::from_secs(1));
    // Clone and Debug (the payload as JSON), and every per-enqueue shortcut.
    let copy = job.clone();
    assert_eq!(
        format!("{copy:?}"),
        r#"SendWelcome { user_id: 1, template: "hi" }"#
    );
    let schema = sk_runtime::Schema::new("jobs", "sk_").unwrap();
    let _keyed = job.with_unique_key("welcome:1");
    let _small = copy.clone().with_max_payload(64);
    let _elsewhere = copy.with_schema(&schema);
    // The fn itself stays callable.
    let _future = nightly();
}
