//! The quickstart: four jobs — one that fails twice and then succeeds, one delayed, one
//! on a cron schedule, one that fails fatally — a worker that runs them, and a report.
//! It exits 0 by itself once every job has reached its final state.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run -p sk-examples --bin quickstart
//! ```
//! It works in its own schema, `sk_quickstart`, which it recreates at each start.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sk_runtime::{
    job, Data, Enqueue, Job as _, JobContext, JobError, JobStatus, QueueInfo, Schema, Worker,
};
use sqlx::PgPool;
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
async fn heartbeat_report(ticks: Data<AtomicU32>) -> Result<(), JobError> {
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
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        let scheme = url.split("://").next().unwrap_or_default();
        return Err(format!(
            "DATABASE_URL is a {scheme}:// URL; sk runs on PostgreSQL (postgres://...) so far, SQLite and MySQL are coming (docs/backends.md)"
        )
        .into());
    }
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
    let pool = PgPool::connect_with(options)
        .await
        .map_err(|e| format!("cannot connect to {place}: {e}"))?;
    sqlx::query("DROP SCHEMA IF EXISTS sk_quickstart CASCADE")
        .execute(&pool)
        .await?;
    let schema = Schema::new("sk_quickstart", "sk_")?;
    sk_runtime::migrate(&pool, &schema).await?;

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
        .enqueue(&mut *tx)
        .await?;
    tx.commit().await?;
    println!("  {flaky} flaky_upload, {reminder} send_reminder (in 2 s), {fatal} charge_card");
    println!("running a worker:");

    let info = QueueInfo::new(pool.clone()).schema(schema.clone());
    let worker = Worker::builder(pool.clone())
        .schema(schema.clone())
        .concurrency(4)
        .poll_interval(Duration::from_millis(250))
        .data(AtomicU32::new(0))
        .build()?;
    let (watcher, watch_pool) = (info.clone(), pool.clone());
    worker
        .run_until(async move {
            // Stop once the three jobs are final and the schedule has fired twice.
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Ok(true) = all_done(&watcher, &watch_pool, &[flaky, reminder, fatal]).await {
                    return;
                }
            }
        })
        .await?;

    println!("results (sk_quickstart.sk_task_results_t):");
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
        "  {} scheduled heartbeat_report runs processed; {} jobs processed in all, {} fatal",
        ticks_done(&pool).await?,
        counts.status(JobStatus::Processed),
        counts.status(JobStatus::Fatal)
    );
    Ok(())
}

async fn all_done(info: &QueueInfo, pool: &PgPool, ids: &[Uuid]) -> sk_runtime::Result<bool> {
    for id in ids {
        match info.job(*id).await? {
            Some(job) if job.status().is_final() => {}
            _ => return Ok(false),
        }
    }
    Ok(ticks_done(pool).await? >= 2)
}

async fn ticks_done(pool: &PgPool) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM sk_quickstart.sk_task_results_t WHERE task_type = $1 AND task_status = 3",
    )
    .bind(HeartbeatReport::TASK_TYPE)
    .fetch_one(pool)
    .await
}
