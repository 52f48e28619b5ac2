//! `bench --backend sqlite`: sk on a SQLite file against SQLite's own limit, in one run.
//!
//! The same measures as on PostgreSQL where SQLite has them, each beside its raw-SQL
//! baseline on a plain table of the queue table's shape in the same file, run in
//! alternation (sk, raw, ...), ratios as medians of the pairs:
//! - `enqueue_single` / `raw_insert_single`: one job per statement (one commit each).
//! - `enqueue_bulk` / `raw_insert_bulk`: 10,000 jobs per statement.
//! - `burn_down` / `raw_burn_down`: a backlog burned by one worker at `--concurrency`;
//!   the raw baseline is four clients each claiming 100 rows (one `UPDATE … RETURNING`)
//!   and deleting them (one `DELETE`), as sk's claim and completion do without sk.
//! - `failure_storm` / `burn_down`: `burn_down` of jobs whose first run fails and whose
//!   retry (at once) succeeds, beside `burn_down` of no-op jobs (as on PostgreSQL).
//! - `burn_down_c16_no_history`: `burn_down_c16` by a worker that keeps no history of
//!   successes (`result_retention` of zero), beside the same with it
//!   (`burn_down_c16_wall`), both timed by the wall clock, then beside `min_burn_down`.
//! - `pickup_latency_*`: an idle worker, jobs enqueued one at a time in the same process.
//! - `min_insert_single`, `min_insert_bulk` (1,000 rows a statement) and `min_burn_down`
//!   on SQLite's minimal queue table (`MIN_TABLE`), beside `enqueue_single`,
//!   `enqueue_bulk` and `burn_down_c16` (which is measured beside `raw_burn_down` too):
//!   the physical limit. SQLite writes one
//!   transaction at a time, so the minimal burn-down is one client deleting 100 rows a
//!   statement (`DELETE … WHERE id IN (SELECT … LIMIT 100) RETURNING id`: the claim and
//!   the completion in one transaction). The burn-downs note this process's CPU time per
//!   job (`*_server_cpu_us_per_job`: the database runs in it) and the bytes it wrote per
//!   job (`*_wal_bytes_per_job`: the write-ahead log and the checkpoints into the file).
//!
//! Each run has a file of its own in the temp dir (`sk-bench-<pid>-<n>.sqlite`), in WAL mode
//! with `synchronous = NORMAL` (as docs/backends.md recommends).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sk_runtime::{Schema, Worker};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

use super::figures::{cpu_seconds, side_lines, written_bytes, Cost, FIGURES};
use super::pairs::Pair;
use super::side::{
    burn_down, burn_down_rated, enqueue_bulk, enqueue_single, min_fill, min_insert_bulk,
    min_insert_single, Side,
};
use super::{Args, BenchPing, BoxError, Latency, Load};

const RAW_TABLE: &str = "CREATE TABLE raw_queue (
    task_lock_handle_id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id BLOB NOT NULL UNIQUE,
    task_type TEXT NOT NULL,
    task_source TEXT NOT NULL,
    task_payload TEXT NULL,
    task_priority INTEGER NOT NULL,
    task_posted_at_ts TEXT NOT NULL,
    task_locked_until_ts TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    task_attempt INTEGER NOT NULL DEFAULT 0,
    task_max_attempts INTEGER NOT NULL,
    task_locked_by TEXT NULL
);
CREATE INDEX raw_queue_dequeue_idx ON raw_queue (task_priority, task_locked_until_ts, task_lock_handle_id);";

/// The minimal queue table on SQLite: the PostgreSQL one's columns (payload as text),
/// its partial index.
const MIN_TABLE: &str = "CREATE TABLE min_job (id INTEGER PRIMARY KEY, kind TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}', priority INTEGER NOT NULL DEFAULT 0,
    run_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    state INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, locked_until TEXT);
CREATE INDEX min_job_dequeue_idx ON min_job (priority, run_at, id) WHERE state = 0;";

fn ts(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A file of its own for each measure, removed after it with its WAL and shared-memory
/// files. (One name for all measures made a run fail now and then with "disk I/O error
/// (code 522)": SQLite removes a WAL file by name when its last connection closes, and a
/// connection of the last measure closed late removed the next one's.)
fn new_file() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("sk-bench-{}-{n}.sqlite", std::process::id()))
}

fn remove(file: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

/// Runs one measure on a fresh file, closing the pool before the file goes.
async fn on_fresh(f: Run, args: &Args) -> Result<f64, BoxError> {
    let file = new_file();
    let pool = fresh(&file).await?;
    let value = f(pool.clone(), args).await;
    pool.close().await;
    remove(&file);
    value
}

/// A fresh file with sk's schema and the raw table.
async fn fresh(file: &std::path::Path) -> Result<SqlitePool, BoxError> {
    let pool = SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(file)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal),
        )
        .await?;
    sk_runtime::migrate(&pool, &Schema::default()).await?;
    sqlx::raw_sql(RAW_TABLE).execute(&pool).await?;
    sqlx::raw_sql(MIN_TABLE).execute(&pool).await?;
    Ok(pool)
}

type Run = super::pairs::Run<SqlitePool>;

pub(super) async fn run(args: Args) -> Result<(), BoxError> {
    let pairs: [Pair<SqlitePool>; 14] = [
        (
            "enqueue_single",
            "jobs/s",
            |p, a| Box::pin(enqueue_single(p, a.single)),
            "raw_insert_single",
            |p, a| Box::pin(raw_insert_single(p, a.single)),
        ),
        (
            "enqueue_single",
            "jobs/s",
            |p, a| Box::pin(enqueue_single(p, a.single)),
            "min_insert_single",
            |p, a| Box::pin(min_insert_single(p, a.single)),
        ),
        (
            "enqueue_bulk",
            "jobs/s",
            |p, a| Box::pin(enqueue_bulk(p, a.jobs)),
            "raw_insert_bulk",
            |p, a| Box::pin(raw_insert_bulk(p, a.jobs)),
        ),
        (
            "enqueue_bulk",
            "jobs/s",
            |p, a| Box::pin(enqueue_bulk(p, a.jobs)),
            "min_insert_bulk",
            |p, a| Box::pin(min_insert_bulk(p, a.jobs)),
        ),
        (
            "burn_down",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, a.concurrency, Load::Noop)),
            "raw_burn_down",
            |p, a| Box::pin(raw_burn_down(p, a.jobs)),
        ),
        (
            "burn_down_c16",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Noop)),
            "raw_burn_down",
            |p, a| Box::pin(raw_burn_down(p, a.jobs)),
        ),
        (
            "burn_down_c16",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Noop)),
            "min_burn_down",
            |p, a| Box::pin(min_burn_down(p, a.jobs)),
        ),
        (
            "burn_down_c16_no_history",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Forgotten)),
            "burn_down_c16_wall",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Walled)),
        ),
        (
            "burn_down_c16_no_history",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Forgotten)),
            "min_burn_down",
            |p, a| Box::pin(min_burn_down(p, a.jobs)),
        ),
        (
            "burn_down_c16_rated",
            "jobs/s",
            |p, a| Box::pin(burn_down_rated(p, a.jobs, 16)),
            "burn_down_c16",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Noop)),
        ),
        (
            "burn_down_c16_fair",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Fair)),
            "burn_down_c16",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Noop)),
        ),
        (
            "burn_down_c16_tenant_limit",
            "jobs/s",
            |p, a| {
                let n = a.jobs;
                Box::pin(async move {
                    super::open_tenant_limit(p.clone(), 16).await?;
                    burn_down(p, n, 16, Load::Fair).await
                })
            },
            "burn_down_c16",
            |p, a| Box::pin(burn_down(p, a.jobs, 16, Load::Noop)),
        ),
        (
            "burn_down_batched",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, a.concurrency, Load::Batched)),
            "burn_down",
            |p, a| Box::pin(burn_down(p, a.jobs, a.concurrency, Load::Noop)),
        ),
        (
            "failure_storm",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, a.concurrency, Load::Flaky)),
            "burn_down",
            |p, a| Box::pin(burn_down(p, a.jobs, a.concurrency, Load::Noop)),
        ),
    ];
    let mut lines =
        super::pairs::run(&pairs, &args, |f, a| async move { on_fresh(f, &a).await }).await?;
    if args.wants("latency") {
        let file = new_file();
        let pool = fresh(&file).await?;
        let samples = latency(pool.clone(), args.latency_jobs).await;
        pool.close().await;
        remove(&file);
        lines.extend(super::pairs::latency_lines(samples?));
    }
    lines.extend(side_lines(&FIGURES.take()));
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

impl Side for sqlx::Sqlite {
    const PARAM: &'static str = "$1";

    /// This process's CPU time (the database runs in it) and the bytes it wrote.
    async fn cost(_: &SqlitePool) -> Result<Cost, BoxError> {
        Ok(Cost {
            cpu_seconds: cpu_seconds()?,
            log_bytes: written_bytes()?,
        })
    }

    super::side::same_on_both!(SqlitePool);
}

/// The successes, and the first claim and the last result (`Side::span`).
pub(super) const SPAN: &str =
    "SELECT count(*), min(task_first_processing_attempted_at_ts), max(task_processing_finalized_at_ts)
     FROM sk_task_results_t WHERE task_status = 3";

async fn raw_insert_single(pool: SqlitePool, n: u64) -> Result<f64, BoxError> {
    let start = Instant::now();
    for i in 0..n {
        let now = ts(Utc::now());
        sqlx::query(
            "INSERT INTO raw_queue (task_id, task_type, task_source, task_payload, task_priority,
                task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
             VALUES ($1, 'bench_noop', 'app', $2, 0, $3, $3, 'default', 25)",
        )
        .bind(uuid::Uuid::now_v7())
        .bind(format!("{{\"n\":{i}}}"))
        .bind(now)
        .execute(&pool)
        .await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn raw_insert_bulk(pool: SqlitePool, n: u64) -> Result<f64, BoxError> {
    let start = Instant::now();
    raw_fill(&pool, n).await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn raw_fill(pool: &SqlitePool, n: u64) -> Result<(), BoxError> {
    let mut i = 0;
    while i < n {
        let end = (i + 10_000).min(n);
        let rows: Vec<serde_json::Value> = (i..end)
            .map(|k| {
                serde_json::json!({
                    "id": uuid::Uuid::now_v7().simple().to_string(),
                    "payload": format!("{{\"n\":{k}}}"),
                })
            })
            .collect();
        sqlx::query(
            "INSERT INTO raw_queue (task_id, task_type, task_source, task_payload, task_priority,
                task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
             SELECT unhex(value ->> 'id'), 'bench_noop', 'app', value ->> 'payload', 0, $2, $2, 'default', 25
             FROM json_each($1) ORDER BY key",
        )
        .bind(serde_json::Value::Array(rows).to_string())
        .bind(ts(Utc::now()))
        .execute(pool)
        .await?;
        i = end;
    }
    Ok(())
}

async fn raw_burn_down(pool: SqlitePool, n: u64) -> Result<f64, BoxError> {
    raw_fill(&pool, n).await?;
    let start = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..4 {
        let pool = pool.clone();
        clients.push(tokio::spawn(async move {
            let mut done = 0u64;
            loop {
                let now = Utc::now();
                let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
                    "UPDATE raw_queue SET task_locked_until_ts = $2, task_attempt = task_attempt + 1,
                        task_locked_by = 'raw'
                     WHERE task_lock_handle_id IN (
                        SELECT task_lock_handle_id FROM raw_queue WHERE task_locked_until_ts <= $1
                        ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id LIMIT 100)
                     RETURNING task_id",
                )
                .bind(ts(now))
                .bind(ts(now + chrono::Duration::seconds(30)))
                .fetch_all(&pool)
                .await?;
                if ids.is_empty() {
                    return Ok::<u64, sqlx::Error>(done);
                }
                done += ids.len() as u64;
                let list: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
                sqlx::query(
                    "DELETE FROM raw_queue WHERE task_id IN (SELECT unhex(value) FROM json_each($1))",
                )
                .bind(serde_json::to_string(&list).unwrap_or_default())
                .execute(&pool)
                .await?;
            }
        }));
    }
    let mut done = 0;
    for c in clients {
        done += c.await??;
    }
    if done != n {
        return Err(format!("raw burn-down finished {done} of {n}").into());
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// A backlog of `n` rows in the minimal table deleted 100 at a time by one client, each
/// statement the claim and the completion in one transaction (SQLite writes one
/// transaction at a time: more clients only wait on its lock).
async fn min_burn_down(pool: SqlitePool, n: u64) -> Result<f64, BoxError> {
    min_fill(&pool, n).await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    let before = sqlx::Sqlite::cost(&pool).await?;
    let start = Instant::now();
    let mut done = 0u64;
    loop {
        let ids: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM min_job WHERE id IN (
                SELECT id FROM min_job WHERE state = 0 AND run_at <= $1
                ORDER BY priority, run_at, id LIMIT 100)
             RETURNING id",
        )
        .bind(ts(Utc::now()))
        .fetch_all(&pool)
        .await?;
        if ids.is_empty() {
            break;
        }
        done += ids.len() as u64;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    FIGURES.note_cost(before, sqlx::Sqlite::cost(&pool).await?, n);
    if done != n {
        return Err(format!("minimal burn-down finished {done} of {n}").into());
    }
    Ok(rate)
}

/// Enqueue-to-start latency with an idle worker, in milliseconds.
async fn latency(pool: SqlitePool, jobs: u64) -> Result<Vec<f64>, BoxError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(pool.clone())
        .task_types(["bench_ping"])
        .concurrency(16)
        .data(Latency(tx))
        .build()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut rng = super::now_micros() as u64 | 1;
    let mut samples = Vec::new();
    for _ in 0..jobs {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        tokio::time::sleep(Duration::from_millis(5 + rng % 46)).await;
        BenchPing::new(super::now_micros()).enqueue(&pool).await?;
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(ms)) => samples.push(ms),
            _ => return Err("a latency job did not run within 10 s".into()),
        }
    }
    let _ = stop_tx.send(());
    running.await??;
    Ok(samples)
}
