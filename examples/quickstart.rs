//! The quickstart: four jobs — one that fails twice and then succeeds, one delayed, one
//! on a cron schedule, one that fails fatally — a worker that runs them, and a report.
//! It exits 0 by itself once every job has reached its final state.
//!
//! ```text
//! cargo run -p sk-examples --bin quickstart        # SQLite, a file in the temp dir
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run -p sk-examples --bin quickstart
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run -p sk-examples --bin quickstart
//! ```
//! Without `DATABASE_URL` it runs on SQLite, in `sk-quickstart.sqlite` in the system's
//! temp dir, and needs no server. On PostgreSQL it works in its own schema,
//! `sk_quickstart`; on MySQL or MariaDB in tables named `sk_quickstart_…` of the URL's
//! database. Each starts afresh each time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sk_runtime::{
    job, Backend, Data, Enqueue, JobContext, JobError, JobStatus, QueueInfo, Schema, Worker,
};
use uuid::Uuid;

/// Fails on its first two attempts, then succeeds.
#[job(max_attempts = 5, backoff = "constant", backoff_base = "300ms")]
async fn flaky_upload(file: String, ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() < 3 {
        println!("  flaky_upload({file}): attempt {} fails", ctx.attempt());
        return Err(JobError::new(format!(
            "storage unavailable (attempt {})",
            ctx.attempt()
        )));
    }
    println!("  flaky_upload({file}): attempt {} succeeds", ctx.attempt());
    Ok(())
}

/// Enqueued with a delay.
#[job(queue = "mail")]
async fn send_reminder(to: String, ctx: JobContext) -> Result<(), JobError> {
    let waited = chrono::Utc::now() - ctx.posted_at();
    println!(
        "  send_reminder({to}): sent {:.1} s after it was enqueued",
        waited.as_seconds_f64()
    );
    Ok(())
}

/// Every second, at second granularity (six fields, seconds first).
#[job(schedule = "* * * * * *")]
async fn heartbeat_report(ticks: Data<Arc<AtomicU32>>) -> Result<(), JobError> {
    let n = ticks.fetch_add(1, Ordering::Relaxed) + 1;
    println!("  heartbeat_report: scheduled tick #{n}");
    Ok(())
}

/// Refuses negative amounts for good: a fatal error is not retried.
#[job(priority = -1)]
async fn charge_card(cents: i64) -> Result<(), JobError> {
    if cents < 0 {
        println!("  charge_card({cents}): fatal, will not retry");
        return Err(JobError::fatal(format!(
            "cannot charge a negative amount ({cents} cents)"
        )));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let Ok(url) = std::env::var("DATABASE_URL") else {
        return sqlite().await;
    };
    let scheme = url.split("://").next().unwrap_or_default();
    match scheme {
        "postgres" | "postgresql" => postgres(&url).await,
        "sqlite" => {
            let options: sqlx::sqlite::SqliteConnectOptions = url
                .parse()
                .map_err(|e| format!("DATABASE_URL is not a SQLite URL: {e}"))?;
            println!("database: SQLite at {}", options.get_filename().display());
            let pool = sqlx::SqlitePool::connect_with(options.create_if_missing(true)).await?;
            run(pool, Schema::new("public", "sk_quickstart_")?).await
        }
        "mysql" | "mariadb" => mysql(&url.replacen("mariadb://", "mysql://", 1)).await,
        _ => Err(format!(
            "DATABASE_URL is a {scheme}:// URL; sk runs on PostgreSQL (postgres://...), SQLite (sqlite://...) and MySQL or MariaDB (mysql://...)"
        )
        .into()),
    }
}

/// SQLite, in a fresh file in the temp dir: no server at all.
async fn sqlite() -> Result<(), Box<dyn std::error::Error>> {
    let file = std::env::temp_dir().join("sk-quickstart.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.clone().into_os_string();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    println!(
        "database: SQLite at {} (DATABASE_URL is not set)",
        file.display()
    );
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&file)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
    let pool = sqlx::SqlitePool::connect_with(options).await?;
    run(pool, Schema::default()).await
}

/// MySQL or MariaDB: sk's tables go in the URL's database, named `sk_quickstart_…`.
async fn mysql(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let options: sqlx::mysql::MySqlConnectOptions = url
        .parse()
        .map_err(|e| format!("DATABASE_URL is not a MySQL URL: {e}"))?;
    let place = format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("(none)")
    );
    println!("database: MySQL/MariaDB at {place}");
    let pool = sqlx::MySqlPool::connect_with(options)
        .await
        .map_err(|e| format!("cannot connect to {place}: {e}"))?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'sk\\_quickstart\\_%'",
    )
    .fetch_all(&pool)
    .await?;
    for table in tables {
        sqlx::query(&format!("DROP TABLE `{table}`"))
            .execute(&pool)
            .await?;
    }
    run(pool, Schema::new("public", "sk_quickstart_")?).await
}

async fn postgres(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let options: sqlx::postgres::PgConnectOptions = url
        .parse()
        .map_err(|e| format!("DATABASE_URL is not a PostgreSQL URL: {e}"))?;
    // Which database it runs on, without the password the URL may carry.
    let place = format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("(the user's)")
    );
    println!("database: PostgreSQL at {place}");
    let pool = sqlx::PgPool::connect_with(options)
        .await
        .map_err(|e| format!("cannot connect to {place}: {e}"))?;
    sqlx::query("DROP SCHEMA IF EXISTS sk_quickstart CASCADE")
        .execute(&pool)
        .await?;
    run(pool, Schema::new("sk_quickstart", "sk_")?).await
}

/// The same program on any backend: enqueue, run a worker until every job is final,
/// report.
async fn run<DB>(pool: sqlx::Pool<DB>, schema: Schema) -> Result<(), Box<dyn std::error::Error>>
where
    DB: Backend,
    sqlx::Pool<DB>: Into<sk_runtime::Pool>,
{
    sk_runtime::migrate(pool.clone(), &schema).await?;

    println!("enqueueing:");
    let flaky = Enqueue::new(FlakyUpload::new("report.pdf".into()))
        .with_schema(&schema)
        .enqueue(&pool)
        .await?;
    let reminder = SendReminder::new("ada@example.com".into())
        .run_after(Duration::from_secs(2))
        .with_schema(&schema)
        .enqueue(&pool)
        .await?;
    // Enqueued inside a transaction: the job exists once the transaction commits.
    let mut tx = pool.begin().await?;
    let fatal = Enqueue::new(ChargeCard::new(-500))
        .with_schema(&schema)
        .enqueue(&mut tx)
        .await?;
    tx.commit().await?;
    println!("  {flaky} flaky_upload, {reminder} send_reminder (in 2 s), {fatal} charge_card");
    println!("running a worker:");

    let info = QueueInfo::new(pool.clone()).schema(schema.clone());
    let ticks = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(pool.clone())
        .schema(schema.clone())
        .concurrency(4)
        .poll_interval(Duration::from_millis(250))
        .data(ticks.clone())
        .build()?;
    let (watcher, watched) = (info.clone(), ticks.clone());
    worker
        .run_until(async move {
            // Stop once the three jobs are final and the schedule has fired twice.
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Ok(true) = all_final(&watcher, &[flaky, reminder, fatal]).await {
                    if watched.load(Ordering::Relaxed) >= 2 {
                        return;
                    }
                }
            }
        })
        .await?;

    println!("results:");
    for id in [flaky, reminder, fatal] {
        let Some(job) = info.job(id).await? else {
            continue;
        };
        println!(
            "  {:<16} status={:<9} errors={} last_error={}",
            job.task_type,
            format!("{:?}", job.status()),
            job.error_count,
            job.last_error_message.as_deref().unwrap_or("-")
        );
    }
    let counts = info.counts().await?;
    println!(
        "  {} scheduled heartbeat_report runs; {} jobs processed in all, {} fatal",
        ticks.load(Ordering::Relaxed),
        counts.status(JobStatus::Processed),
        counts.status(JobStatus::Fatal)
    );
    Ok(())
}

async fn all_final(info: &QueueInfo, ids: &[Uuid]) -> sk_runtime::Result<bool> {
    for id in ids {
        match info.job(*id).await? {
            Some(job) if job.status().is_final() => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// The quickstart's jobs under `sk_runtime::testing` (README, "Testing your jobs"):
/// `cargo test -p sk-examples --bin quickstart`, no server needed.
#[cfg(test)]
mod tests {
    use super::*;
    use sk_runtime::testing::{self, Outcome, Runner};
    use sk_runtime::{Job as _, ManualClock};

    /// One job value through its handler, as a worker runs it.
    #[tokio::test]
    async fn a_negative_charge_fails_for_good_and_an_upload_retries() {
        let runner = Runner::new();
        let charged = runner.perform(ChargeCard::new(-500)).await;
        assert!(matches!(charged, Outcome::Failed { .. }), "{charged:?}");
        assert_eq!(
            charged.error().map(JobError::message),
            Some("cannot charge a negative amount (-500 cents)")
        );
        // The first attempt fails and runs again after the job's backoff (300 ms)...
        let first = runner.perform(FlakyUpload::new("a.txt".into())).await;
        assert!(
            matches!(first, Outcome::Retry { after, .. } if after == Duration::from_millis(300)),
            "{first:?}"
        );
        // ...and the third succeeds.
        let third = Runner::new()
            .attempt(3)
            .perform(FlakyUpload::new("a.txt".into()))
            .await;
        assert!(third.is_success(), "{third:?}");
    }

    /// The queue of a throwaway SQLite file, drained inline with a clock the test moves.
    #[tokio::test]
    async fn the_queue_drains_with_a_manual_clock() {
        let dir = std::env::temp_dir().join(format!("sk-quickstart-test-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.join("jobs.sqlite"))
            .create_if_missing(true);
        let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
        sk_runtime::migrate(&pool, &Schema::default())
            .await
            .unwrap();
        FlakyUpload::new("b.txt".into())
            .enqueue(&pool)
            .await
            .unwrap();
        assert_eq!(
            testing::enqueued::<FlakyUpload>(&pool).await.unwrap().len(),
            1
        );

        let clock = ManualClock::new(chrono::Utc::now());
        let worker = Worker::builder(pool.clone())
            .task_types([FlakyUpload::TASK_TYPE])
            .clock(clock.clone())
            .retry_jitter(0.0)
            .build()
            .unwrap();
        let mut attempts = Vec::new();
        for _ in 0..3 {
            let drained = testing::drain(&worker).await.unwrap();
            attempts.extend(
                drained
                    .runs
                    .iter()
                    .map(|r| (r.attempt, r.outcome.is_success())),
            );
            clock.advance(Duration::from_millis(300));
        }
        assert_eq!(attempts, [(1, false), (2, false), (3, true)]);
        assert!(testing::enqueued::<FlakyUpload>(&pool)
            .await
            .unwrap()
            .is_empty());
        pool.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
