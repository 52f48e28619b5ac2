//! A worker process for the fault-injection suite (`tests/faults.rs`): runs `burn` jobs,
//! each of which records its start in `fault_runs` and then works for its `millis`.
//!
//! ```text
//! DATABASE_URL=... sk-fault-worker --id w1 --concurrency 16 --lease-ms 1000 --grace-ms 5000 --poll-ms 100 \
//!     [--start-timeout-ms 0] [--job burn|effect]
//! ```
//! Stops gracefully on SIGTERM/SIGINT; logs to stderr.

use std::process::ExitCode;
use std::time::Duration;

use sk_runtime::{job, Data, JobContext, JobError, Worker};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;

/// Where `burn` records its runs: the database the worker runs on.
enum RunLog {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
    MySql(sqlx::MySqlPool),
}

#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn burn(millis: u64, ctx: JobContext, log: Data<RunLog>) -> Result<(), JobError> {
    log_run(&ctx, &log).await?;
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(())
}

/// As `burn`, with the application's write in the job's transaction: one row per job in
/// `fault_effects`, which must hold exactly one row per job whatever the kills.
#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn effect_pg(
    millis: u64,
    ctx: JobContext,
    log: Data<RunLog>,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> Result<(), JobError> {
    log_run(&ctx, &log).await?;
    sqlx::query("INSERT INTO fault_effects (task_id) VALUES ($1)")
        .bind(ctx.id())
        .execute(&mut **tx)
        .await?;
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(())
}

/// `effect_pg` on MySQL/MariaDB.
#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn effect_mysql(
    millis: u64,
    ctx: JobContext,
    log: Data<RunLog>,
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
) -> Result<(), JobError> {
    log_run(&ctx, &log).await?;
    sqlx::query("INSERT INTO fault_effects (task_id) VALUES (?)")
        .bind(ctx.id())
        .execute(&mut **tx)
        .await?;
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(())
}

/// Records a run's start in `fault_runs`, outside any transaction.
async fn log_run(ctx: &JobContext, log: &RunLog) -> Result<(), JobError> {
    let pid = i32::try_from(std::process::id()).unwrap_or(-1);
    let insert = "INSERT INTO fault_runs (task_id, attempt, pid) VALUES ($1, $2, $3)";
    match log {
        RunLog::Postgres(pool) => {
            sqlx::query(insert)
                .bind(ctx.id())
                .bind(ctx.attempt())
                .bind(pid)
                .execute(pool)
                .await?;
        }
        RunLog::Sqlite(pool) => {
            // The start time in sk's own form on SQLite, to compare with its times.
            sqlx::query(
                "INSERT INTO fault_runs (task_id, attempt, pid, started_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(ctx.id())
            .bind(ctx.attempt())
            .bind(pid)
            .bind(
                chrono::Utc::now()
                    .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                    .to_string(),
            )
            .execute(pool)
            .await?;
        }
        RunLog::MySql(pool) => {
            sqlx::query(
                "INSERT INTO fault_runs (task_id, attempt, pid, started_at) VALUES (?, ?, ?, ?)",
            )
            .bind(ctx.id())
            .bind(ctx.attempt())
            .bind(pid)
            .bind(chrono::Utc::now())
            .execute(pool)
            .await?;
        }
    }
    Ok(())
}

struct Args {
    id: String,
    concurrency: usize,
    lease: Duration,
    grace: Duration,
    poll: Duration,
    start_timeout: Option<Duration>,
    /// `burn`, or `effect` for the backend's transaction job.
    job: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        id: format!("fault-{}", std::process::id()),
        concurrency: 16,
        lease: Duration::from_secs(1),
        grace: Duration::from_secs(5),
        poll: Duration::from_millis(100),
        start_timeout: None,
        job: "burn".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let ms = || {
            value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--id" => args.id = value.clone(),
            "--concurrency" => {
                args.concurrency = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?
            }
            "--lease-ms" => args.lease = ms()?,
            "--grace-ms" => args.grace = ms()?,
            "--poll-ms" => args.poll = ms()?,
            "--start-timeout-ms" => args.start_timeout = Some(ms()?),
            "--job" => args.job = value.clone(),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(args)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
    // Set up as the README shows: lazy, so the worker's start names an unreachable
    // database, and sized for the jobs plus the worker's own tasks.
    let connections = u32::try_from(args.concurrency).unwrap_or(64) + 5;
    let (pool, log): (sk_runtime::Pool, RunLog) = if url.starts_with("sqlite:") {
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse()?;
        let pool = SqlitePoolOptions::new()
            .max_connections(connections.min(8))
            .connect_lazy_with(
                options
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Normal),
            );
        (pool.clone().into(), RunLog::Sqlite(pool))
    } else if url.starts_with("mysql:") {
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(&url)?;
        (pool.clone().into(), RunLog::MySql(pool))
    } else {
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(&url)?;
        (pool.clone().into(), RunLog::Postgres(pool))
    };
    let task_type = match (args.job.as_str(), &log) {
        ("burn", _) => <Burn as sk_runtime::Job>::TASK_TYPE,
        ("effect", RunLog::Postgres(_)) => <EffectPg as sk_runtime::Job>::TASK_TYPE,
        ("effect", RunLog::MySql(_)) => <EffectMysql as sk_runtime::Job>::TASK_TYPE,
        (other, _) => return Err(format!("no job {other} on this backend").into()),
    };
    let mut builder = Worker::builder(pool);
    if let Some(limit) = args.start_timeout {
        builder = builder.start_timeout(limit);
    }
    builder
        .id(args.id)
        .task_types([task_type])
        .concurrency(args.concurrency)
        .lease(args.lease)
        .grace_period(args.grace)
        .poll_interval(args.poll)
        .data(log)
        .build()?
        .run()
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sk-fault-worker: {e}");
            ExitCode::FAILURE
        }
    }
}
