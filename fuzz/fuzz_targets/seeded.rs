//! The database the `cli` and `dashboard` targets work on: SQLite in a file of the temp
//! dir, migrated, holding jobs whose every shown field is hostile text (one run until it
//! failed for good, one waiting, one in a paused queue).

use std::sync::OnceLock;

use serde_json::json;
use sk_runtime::{job, Client, JobError, Worker};

/// Markup, a terminal escape, a bell, quotes and SQL: shown by the CLI and the dashboard,
/// it must stay text.
pub const HOSTILE: &str = "<script>alert(1)</script><b>\u{1b}[31m\u{7}red</b>' OR '1'='1";

#[job(max_attempts = 1)]
async fn hostile(text: String) -> Result<(), JobError> {
    Err(JobError::new(text))
}

pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// The seeded database's URL and a client on it, made once per process.
pub fn database() -> &'static (String, Client) {
    static DATABASE: OnceLock<(String, Client)> = OnceLock::new();
    DATABASE.get_or_init(|| runtime().block_on(seed()))
}

async fn seed() -> (String, Client) {
    let path = std::env::temp_dir().join(format!("sk-fuzz-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sk_runtime::sqlx::SqlitePool::connect(&url)
        .await
        .expect("SQLite opens");
    sk_runtime::migrate(pool.clone(), &sk_runtime::Schema::default())
        .await
        .expect("migrated");
    let worker = Worker::builder(pool.clone()).build().expect("a worker");
    let hostile = || {
        Hostile::new(HOSTILE.into())
            .with_queue(HOSTILE)
            .with_tenant(HOSTILE)
            .with_metadata(json!({ "note": HOSTILE }))
    };
    hostile().enqueue(&pool).await.expect("enqueued");
    let drained = sk_runtime::testing::drain(&worker).await.expect("drained");
    assert_eq!(drained.failed(), 1, "the hostile job failed for good");
    hostile()
        .with_queue("waiting")
        .enqueue(&pool)
        .await
        .expect("enqueued");
    hostile()
        .with_queue("paused")
        .enqueue(&pool)
        .await
        .expect("enqueued");
    let client = Client::new(pool);
    client.pause("paused").await.expect("paused");
    (url, client)
}
