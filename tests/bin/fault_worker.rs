//! A worker process for the fault-injection suite (`tests/faults.rs`): runs `burn` jobs,
//! each of which records its start in `fault_runs` and then works for its `millis`.
//!
//! ```text
//! DATABASE_URL=... sk-fault-worker --id w1 --concurrency 16 --lease-ms 1000 --grace-ms 5000 --poll-ms 100 \
//!     [--start-timeout-ms 0] [--job burn|effect|stepped|chaos] [--history FILE] [--clock-jump-ms 0]
//!     [--retention-ms 604800000] [--enqueue FILE] [--listen-on URL]
//! ```
//! Stops gracefully on SIGTERM/SIGINT; logs to stderr.
//!
//! `--enqueue FILE` makes it an enqueuer instead of a worker (PostgreSQL): one `effect_pg`
//! job of `--poll-ms` a call, a call every 5 ms, each outcome a line of FILE (`ok ID MS`
//! or `err MS ERROR`, MS the call's duration), until SIGTERM.
//!
//! `--job chaos` runs the jobs of the chaos schedule (`sk_tests::chaos`), which append each
//! run's start and end to the `--history` file. With `--clock-jump-ms`, SIGUSR1 sets the
//! worker's clock that far ahead and SIGUSR2 sets it right again.

use std::fs::File;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
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
        .persistent(false)
        .bind(ctx.id())
        .execute(&mut **tx)
        .await?;
    tokio::time::sleep(Duration::from_millis(millis)).await;
    // A statement of the application's after the work: on a host that went silent
    // meanwhile, it waits with no bound of sk's (`faults::silence`).
    sqlx::query("SELECT 1")
        .persistent(false)
        .execute(&mut **tx)
        .await?;
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

/// Five resumable steps (`JobContext::step`), the third `millis` long and the others
/// 2 ms, each recording its run in `fault_steps` as it starts; each step's output names
/// the step and the attempt that ran it, checked as the later steps receive it.
#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn stepped(millis: u64, ctx: JobContext, log: Data<RunLog>) -> Result<(), JobError> {
    log_run(&ctx, &log).await?;
    for step in 1..=5u32 {
        let (ran, attempt): (u32, i32) = ctx
            .step(&format!("step {step}"), async {
                log_step(&ctx, &log, step).await?;
                let work = if step == 3 { millis } else { 2 };
                tokio::time::sleep(Duration::from_millis(work)).await;
                Ok::<_, JobError>((step, ctx.attempt()))
            })
            .await?;
        if ran != step || attempt > ctx.attempt() {
            return Err(JobError::fatal(format!(
                "step {step} received the output of step {ran}, attempt {attempt}"
            )));
        }
    }
    Ok(())
}

/// Records the start of a step's run in `fault_steps`, outside any transaction.
async fn log_step(ctx: &JobContext, log: &RunLog, step: u32) -> Result<(), JobError> {
    let step = i32::try_from(step).unwrap_or(i32::MAX);
    let insert = "INSERT INTO fault_steps (task_id, step, attempt) VALUES ($1, $2, $3)";
    match log {
        RunLog::Postgres(pool) => {
            let q = sqlx::query(insert).bind(ctx.id()).bind(step);
            q.bind(ctx.attempt()).execute(pool).await?;
        }
        RunLog::Sqlite(pool) => {
            let q = sqlx::query(insert).bind(ctx.id()).bind(step);
            q.bind(ctx.attempt()).execute(pool).await?;
        }
        RunLog::MySql(pool) => {
            let insert = "INSERT INTO fault_steps (task_id, step, attempt) VALUES (?, ?, ?)";
            let q = sqlx::query(insert).bind(ctx.id()).bind(step);
            q.bind(ctx.attempt()).execute(pool).await?;
        }
    }
    Ok(())
}

/// Where the chaos jobs append their runs: one JSON line per event, each written whole
/// with one `write` to a file opened for appending, so a kill loses no line it finished.
struct History {
    file: Mutex<File>,
    worker: String,
}

impl History {
    fn record(&self, ctx: &JobContext, n: u64, op: &str, result: Option<&str>) {
        let line = serde_json::json!({
            "t": chrono::Utc::now().timestamp_micros(),
            "w": self.worker,
            "pid": std::process::id(),
            "op": op,
            "n": n,
            "id": ctx.id(),
            "attempt": ctx.attempt(),
            "claimed": ctx.attempted_at().timestamp_micros(),
            "result": result,
        });
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A lost line is a broken test, never a quiet one.
        file.write_all(format!("{line}\n").as_bytes())
            .expect("append to the history");
    }
}

/// One run of a chaos job: recorded, failed for its first `fail` attempts, then the
/// application's write (`effect`, in the job's transaction where it has one) and `millis`
/// of work that ends early when the run is stopped (lease lost, cancelled). The handler
/// returns success even then: the store must refuse a completion it no longer owns.
async fn chaos_run<F>(
    n: u64,
    millis: u64,
    fail: i32,
    ctx: &JobContext,
    history: &History,
    effect: F,
) -> Result<(), JobError>
where
    F: std::future::Future<Output = Result<(), sqlx::Error>>,
{
    history.record(ctx, n, "start", None);
    let out = async {
        if ctx.attempt() <= fail {
            return Err(JobError::new(format!(
                "chaos job {n} fails attempt {}",
                ctx.attempt()
            )));
        }
        effect.await?;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(millis)) => {}
            () = ctx.cancelled() => {}
        }
        Ok(())
    }
    .await;
    let result = match (&out, ctx.is_cancelled()) {
        (Err(_), _) => "error",
        (Ok(()), true) => "stopped",
        (Ok(()), false) => "ok",
    };
    history.record(ctx, n, "end", Some(result));
    out
}

#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
async fn chaos(
    n: u64,
    millis: u64,
    fail: i32,
    ctx: JobContext,
    history: Data<History>,
) -> Result<(), JobError> {
    chaos_run(n, millis, fail, &ctx, &history, async { Ok(()) }).await
}

#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
async fn chaos_tx_pg(
    n: u64,
    millis: u64,
    fail: i32,
    ctx: JobContext,
    history: Data<History>,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> Result<(), JobError> {
    let write = sqlx::query("INSERT INTO chaos_effects (n, attempt) VALUES ($1, $2)")
        .bind(i64::try_from(n).unwrap_or(-1))
        .bind(ctx.attempt())
        .execute(&mut **tx);
    chaos_run(n, millis, fail, &ctx, &history, async {
        write.await.map(drop)
    })
    .await
}

#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
async fn chaos_tx_mysql(
    n: u64,
    millis: u64,
    fail: i32,
    ctx: JobContext,
    history: Data<History>,
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
) -> Result<(), JobError> {
    let write = sqlx::query("INSERT INTO chaos_effects (n, attempt) VALUES (?, ?)")
        .bind(i64::try_from(n).unwrap_or(-1))
        .bind(ctx.attempt())
        .execute(&mut **tx);
    chaos_run(n, millis, fail, &ctx, &history, async {
        write.await.map(drop)
    })
    .await
}

#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
async fn chaos_tx_sqlite(
    n: u64,
    millis: u64,
    fail: i32,
    ctx: JobContext,
    history: Data<History>,
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
) -> Result<(), JobError> {
    let write = sqlx::query("INSERT INTO chaos_effects (n, attempt) VALUES (?, ?)")
        .bind(i64::try_from(n).unwrap_or(-1))
        .bind(ctx.attempt())
        .execute(&mut **tx);
    chaos_run(n, millis, fail, &ctx, &history, async {
        write.await.map(drop)
    })
    .await
}

/// The system clock plus an offset that SIGUSR1 and SIGUSR2 move: a worker whose clock
/// jumps, for the chaos schedule's clock faults.
#[derive(Clone)]
struct JumpClock(Arc<AtomicI64>);

impl sk_runtime::Clock for JumpClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now() + chrono::Duration::milliseconds(self.0.load(Ordering::Relaxed))
    }
}

/// Moves `clock` ahead by `jump_ms` on SIGUSR1 and back to the system time on SIGUSR2.
fn listen_for_clock_jumps(clock: JumpClock, jump_ms: i64) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut ahead = signal(SignalKind::user_defined1())?;
    let mut back = signal(SignalKind::user_defined2())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = ahead.recv() => clock.0.store(jump_ms, Ordering::Relaxed),
                Some(()) = back.recv() => clock.0.store(0, Ordering::Relaxed),
                else => break,
            }
            tracing::info!(offset_ms = clock.0.load(Ordering::Relaxed), "clock moved");
        }
    });
    Ok(())
}

/// Records a run's start in `fault_runs`, outside any transaction.
async fn log_run(ctx: &JobContext, log: &RunLog) -> Result<(), JobError> {
    let pid = i32::try_from(std::process::id()).unwrap_or(-1);
    let insert = "INSERT INTO fault_runs (task_id, attempt, pid) VALUES ($1, $2, $3)";
    match log {
        RunLog::Postgres(pool) => {
            // In a transaction of its own and unnamed (not persistent), as through a
            // transaction pooler (`failover`'s PgBouncers): outside a transaction, the
            // statement's parse and its execution may reach two server connections.
            let mut tx = pool.begin().await?;
            sqlx::query(insert)
                .persistent(false)
                .bind(ctx.id())
                .bind(ctx.attempt())
                .bind(pid)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
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
    /// `WorkerBuilder::call_timeout`.
    call_timeout: Option<Duration>,
    /// `burn`, `effect` for the backend's transaction job, `stepped`, or `chaos`.
    job: String,
    /// Where the chaos jobs record their runs.
    history: Option<String>,
    /// How far SIGUSR1 moves the clock ahead (0: no clock jumps).
    clock_jump_ms: i64,
    /// `WorkerBuilder::result_retention` (0: no record of plain successes).
    retention: Option<Duration>,
    /// Enqueue instead of work, each outcome a line of this file.
    enqueue: Option<String>,
    /// `WorkerBuilder::listen_on`: direct hosts to LISTEN on past a transaction pooler.
    listen_on: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        id: format!("fault-{}", std::process::id()),
        concurrency: 16,
        lease: Duration::from_secs(1),
        grace: Duration::from_secs(5),
        poll: Duration::from_millis(100),
        start_timeout: None,
        call_timeout: None,
        job: "burn".to_owned(),
        history: None,
        clock_jump_ms: 0,
        retention: None,
        enqueue: None,
        listen_on: None,
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
            "--call-timeout-ms" => args.call_timeout = Some(ms()?),
            "--job" => args.job = value.clone(),
            "--history" => args.history = Some(value.clone()),
            "--retention-ms" => args.retention = Some(ms()?),
            "--enqueue" => args.enqueue = Some(value.clone()),
            "--listen-on" => args.listen_on = Some(value.clone()),
            "--clock-jump-ms" => {
                args.clock_jump_ms = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?
            }
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
        // A URL may list the hosts of a replicated cluster: the pool follows the primary.
        let pool = sk_runtime::primary_pool(
            PgPoolOptions::new()
                .max_connections(connections)
                .acquire_timeout(Duration::from_secs(5)),
            &url,
        )?;
        (pool.clone().into(), RunLog::Postgres(pool))
    };
    if let (Some(path), RunLog::Postgres(pool)) = (&args.enqueue, &log) {
        return enqueue_until_stopped(pool, path, args.poll).await;
    }
    let task_types = match (args.job.as_str(), &log) {
        ("burn", _) => vec![<Burn as sk_runtime::Job>::TASK_TYPE],
        ("stepped", _) => vec![<Stepped as sk_runtime::Job>::TASK_TYPE],
        ("effect", RunLog::Postgres(_)) => vec![<EffectPg as sk_runtime::Job>::TASK_TYPE],
        ("effect", RunLog::MySql(_)) => vec![<EffectMysql as sk_runtime::Job>::TASK_TYPE],
        ("chaos", log) => vec![
            <Chaos as sk_runtime::Job>::TASK_TYPE,
            match log {
                RunLog::Postgres(_) => <ChaosTxPg as sk_runtime::Job>::TASK_TYPE,
                RunLog::MySql(_) => <ChaosTxMysql as sk_runtime::Job>::TASK_TYPE,
                RunLog::Sqlite(_) => <ChaosTxSqlite as sk_runtime::Job>::TASK_TYPE,
            },
        ],
        (other, _) => return Err(format!("no job {other} on this backend").into()),
    };
    let mut builder = Worker::builder(pool);
    if let Some(limit) = args.start_timeout {
        builder = builder.start_timeout(limit);
    }
    if let Some(bound) = args.call_timeout {
        builder = builder.call_timeout(bound);
    }
    if let Some(keep) = args.retention {
        builder = builder.result_retention(keep);
    }
    if let Some(url) = &args.listen_on {
        builder = builder.listen_on(url.clone());
    }
    if let Some(path) = &args.history {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("history {path}: {e}"))?;
        builder = builder.data(History {
            file: Mutex::new(file),
            worker: args.id.clone(),
        });
    }
    if args.clock_jump_ms != 0 {
        let clock = JumpClock(Arc::new(AtomicI64::new(0)));
        listen_for_clock_jumps(clock.clone(), args.clock_jump_ms)?;
        builder = builder.clock(clock);
    }
    builder
        .id(args.id)
        .task_types(task_types)
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

/// The enqueuer of `--enqueue`: a job a call until SIGTERM, each outcome a line of `path`.
async fn enqueue_until_stopped(
    pool: &sqlx::PgPool,
    path: &str,
    millis: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut file = File::create(path).map_err(|e| format!("enqueue log {path}: {e}"))?;
    let mut term = signal(SignalKind::terminate())?;
    loop {
        let asked = std::time::Instant::now();
        // Each call to its end (its own bound): a stop between calls only.
        let outcome = EffectPg::new(millis.as_millis() as u64).enqueue(pool).await;
        let ms = asked.elapsed().as_millis();
        match outcome {
            Ok(id) => writeln!(file, "ok {id} {ms}")?,
            Err(e) => writeln!(file, "err {ms} {}", e.to_string().replace('\n', " "))?,
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
            _ = term.recv() => break,
        }
    }
    file.sync_all()?;
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
