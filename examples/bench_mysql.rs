//! `bench --backend mysql`: sk on MySQL/MariaDB against the server's own limit, in one run.
//!
//! The same measures as on SQLite, each beside its raw-SQL baseline on a plain table of the
//! queue table's shape in the same database, run in alternation (sk, raw, ...), ratios as
//! medians of the pairs:
//! - `enqueue_single` / `raw_insert_single`: one job per statement (one commit each).
//! - `enqueue_bulk` / `raw_insert_bulk`: batches of 10,000 jobs (multi-row inserts of
//!   2,000 rows, as sk's); and beside `raw_insert_bulk_queue_table`, the same inserts into
//!   a copy of sk's queue table (`CREATE TABLE … LIKE`: its columns, defaults and check,
//!   and its indexes, three since migration 8 as the plain table's), which tells sk's
//!   statement from its schema.
//! - `burn_down` / `raw_burn_down`: a backlog burned by one worker at `--concurrency`;
//!   the raw baseline is eight clients each claiming 100 rows (`SELECT … FOR UPDATE SKIP
//!   LOCKED`, then `UPDATE`, in one READ COMMITTED transaction) and deleting them (one
//!   `DELETE`), as sk's claim and completion do without sk.
//! - `failure_storm` / `burn_down`: `burn_down` of jobs whose first run fails and whose
//!   retry (at once) succeeds, beside `burn_down` of no-op jobs (as on PostgreSQL).
//! - `burn_down_c16_no_history`: `burn_down_c16` by a worker that keeps no history of
//!   successes (`result_retention` of zero), beside the same with it
//!   (`burn_down_c16_wall`), both timed by the wall clock, then beside `min_burn_down`.
//! - `pickup_latency_*`: an idle worker, jobs enqueued one at a time in the same process.
//! - `min_insert_single`, `min_insert_bulk` (1,000 rows a statement) and `min_burn_down`
//!   (4 clients each taking 100 rows with `FOR UPDATE SKIP LOCKED` and deleting them in
//!   one READ COMMITTED transaction) on the minimal queue table (`MIN_TABLE`), beside
//!   `enqueue_single`, `enqueue_bulk` and `burn_down_c16` (which is measured beside
//!   `raw_burn_down` too): the physical limit. The burn-downs note the server's CPU
//!   time per job (`*_server_cpu_us_per_job`, the `mariadbd` or `mysqld` process, from
//!   `/proc`) and the redo log written per job (`*_wal_bytes_per_job`, from
//!   `Innodb_lsn_current`, or `Innodb_os_log_written` where the server has no LSN
//!   status).
//!
//! The database is `sk_bench` on `MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`'s
//! server), recreated for every run.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sk_runtime::{Schema, Worker};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{MySqlPool, QueryBuilder};

use super::figures::{server_cpu_seconds, side_lines, Cost, FIGURES};
use super::pairs::Pair;
use super::side::{
    burn_down, burn_down_rated, enqueue_bulk, enqueue_single, min_fill, min_insert_bulk,
    min_insert_single, Side,
};
use super::sqlite::SPAN;
use super::{Args, BenchPing, BoxError, Latency, Load};

const RAW_TABLE: &str = "CREATE TABLE raw_queue (
    task_lock_handle_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_id BINARY(16) NOT NULL UNIQUE,
    task_type VARCHAR(255) NOT NULL,
    task_source VARCHAR(255) NOT NULL,
    task_payload LONGTEXT NULL,
    task_priority INT NOT NULL,
    task_posted_at_ts DATETIME(6) NOT NULL,
    task_locked_until_ts DATETIME(6) NOT NULL,
    task_queue VARCHAR(255) NOT NULL,
    task_attempt INT NOT NULL DEFAULT 0,
    task_max_attempts INT NOT NULL,
    task_locked_by VARCHAR(255) NULL,
    KEY raw_queue_dequeue (task_priority, task_locked_until_ts, task_lock_handle_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4";

/// The minimal queue table on MySQL/MariaDB: the PostgreSQL one's columns; with no
/// partial index, the state leads the dequeue index.
const MIN_TABLE: &str = "CREATE TABLE min_job (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind VARCHAR(255) NOT NULL, payload LONGTEXT NOT NULL, priority INT NOT NULL DEFAULT 0,
    run_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), state SMALLINT NOT NULL DEFAULT 0,
    attempts INT NOT NULL DEFAULT 0, locked_until DATETIME(6) NULL,
    KEY min_job_dequeue (state, priority, run_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4";

/// Clients of the minimal burn-down: the fastest of 2, 4, 8 and 16 on a 2-core machine
/// (4: 38,000 jobs/s; 16: 16,400, its claims waiting on each other's locks at the head of
/// the index and picked as deadlock victims).
const MIN_CLIENTS: usize = 4;

fn server() -> String {
    std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// Runs one measure on a fresh database, then closes the pool.
async fn on_fresh(f: Run, args: &Args) -> Result<f64, BoxError> {
    let pool = fresh().await?;
    let value = f(pool.clone(), args).await;
    pool.close().await;
    value
}

/// A fresh `sk_bench` database with sk's schema and the raw table.
async fn fresh() -> Result<MySqlPool, BoxError> {
    let admin = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&server())
        .await?;
    sqlx::raw_sql("DROP DATABASE IF EXISTS sk_bench; CREATE DATABASE sk_bench")
        .execute(&admin)
        .await?;
    admin.close().await;
    let url = server();
    let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
    let pool = MySqlPoolOptions::new()
        .max_connections(16)
        .connect(&format!("{base}/sk_bench"))
        .await?;
    sk_runtime::migrate(&pool, &Schema::default()).await?;
    sqlx::raw_sql(RAW_TABLE).execute(&pool).await?;
    sqlx::raw_sql(MIN_TABLE).execute(&pool).await?;
    sqlx::raw_sql("CREATE TABLE raw_queue_copy LIKE sk_tasks_queue_t")
        .execute(&pool)
        .await?;
    Ok(pool)
}

type Run = super::pairs::Run<MySqlPool>;

pub(super) async fn run(args: Args) -> Result<(), BoxError> {
    let pairs: [Pair<MySqlPool>; 15] = [
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
            "min_insert_bulk",
            |p, a| Box::pin(min_insert_bulk(p, a.jobs)),
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
            "enqueue_bulk",
            "jobs/s",
            |p, a| Box::pin(enqueue_bulk(p, a.jobs)),
            "raw_insert_bulk",
            |p, a| Box::pin(raw_insert_bulk(p, a.jobs, "raw_queue")),
        ),
        (
            "enqueue_bulk",
            "jobs/s",
            |p, a| Box::pin(enqueue_bulk(p, a.jobs)),
            "raw_insert_bulk_queue_table",
            |p, a| Box::pin(raw_insert_bulk(p, a.jobs, "raw_queue_copy")),
        ),
        (
            "burn_down",
            "jobs/s",
            |p, a| Box::pin(burn_down(p, a.jobs, a.concurrency, Load::Noop)),
            "raw_burn_down",
            |p, a| Box::pin(raw_burn_down(p, a.jobs)),
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
        let pool = fresh().await?;
        let samples = latency(pool.clone(), args.latency_jobs).await?;
        pool.close().await;
        lines.extend(super::pairs::latency_lines(samples));
    }
    lines.extend(side_lines(&FIGURES.take()));
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

impl Side for sqlx::MySql {
    const PARAM: &'static str = "?";

    /// The server's CPU time and the bytes of its redo log.
    async fn cost(pool: &MySqlPool) -> Result<Cost, BoxError> {
        let status: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_lsn_current', 'Innodb_os_log_written')",
        )
        .fetch_all(pool)
        .await?;
        let value = |name: &str| {
            status
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.parse())
        };
        let log_bytes = value("Innodb_lsn_current")
            .or_else(|| value("Innodb_os_log_written"))
            .ok_or("the server shows neither Innodb_lsn_current nor Innodb_os_log_written")??;
        Ok(Cost {
            cpu_seconds: server_cpu_seconds(&["mariadbd", "mysqld"])?,
            log_bytes,
        })
    }

    super::side::same_on_both!(MySqlPool);
}

async fn raw_insert_single(pool: MySqlPool, n: u64) -> Result<f64, BoxError> {
    let start = Instant::now();
    for i in 0..n {
        let now = Utc::now();
        sqlx::query(
            "INSERT INTO raw_queue (task_id, task_type, task_source, task_payload, task_priority,
                task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
             VALUES (?, 'bench_noop', 'app', ?, 0, ?, ?, 'default', 25)",
        )
        .bind(uuid::Uuid::now_v7())
        .bind(format!("{{\"n\":{i}}}"))
        .bind(now)
        .bind(now)
        .execute(&pool)
        .await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn raw_insert_bulk(pool: MySqlPool, n: u64, table: &str) -> Result<f64, BoxError> {
    let start = Instant::now();
    raw_fill(&pool, n, table).await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn raw_fill(pool: &MySqlPool, n: u64, table: &str) -> Result<(), BoxError> {
    let mut i = 0;
    while i < n {
        let end = (i + 10_000).min(n);
        let now = Utc::now();
        let mut tx = pool.begin().await?;
        let mut k = i;
        while k < end {
            let stop = (k + 2_000).min(end);
            let mut query = QueryBuilder::new(format!(
                "INSERT INTO {table} (task_id, task_type, task_source, task_payload, task_priority,
                    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts) "
            ));
            query.push_values(k..stop, |mut row, k| {
                row.push_bind(uuid::Uuid::now_v7())
                    .push("'bench_noop'")
                    .push("'app'")
                    .push_bind(format!("{{\"n\":{k}}}"))
                    .push("0")
                    .push_bind(now)
                    .push_bind(now)
                    .push("'default'")
                    .push("25");
            });
            query.build().execute(&mut *tx).await?;
            k = stop;
        }
        tx.commit().await?;
        i = end;
    }
    Ok(())
}

async fn raw_burn_down(pool: MySqlPool, n: u64) -> Result<f64, BoxError> {
    raw_fill(&pool, n, "raw_queue").await?;
    let start = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..8 {
        let pool = pool.clone();
        clients.push(tokio::spawn(async move {
            let mut done = 0u64;
            let mut conn = pool.acquire().await?;
            loop {
                let now = Utc::now();
                // InnoDB may pick one of the clients' claims as a deadlock victim (as
                // sk's own claim, which retries): it claims again.
                let claimed = async {
                    let mut tx = sqlx::Connection::begin_with(
                        &mut *conn,
                        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
                    )
                    .await?;
                    let handles: Vec<i64> = sqlx::query_scalar(
                        "SELECT task_lock_handle_id FROM raw_queue WHERE task_locked_until_ts <= ?
                         ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id LIMIT 100
                         FOR UPDATE SKIP LOCKED",
                    )
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                    if !handles.is_empty() {
                        let list = in_list(&handles);
                        sqlx::query(&format!(
                            "UPDATE raw_queue SET task_locked_until_ts = ?, task_attempt = task_attempt + 1,
                                task_locked_by = 'raw' WHERE task_lock_handle_id IN ({list})"
                        ))
                        .bind(now + chrono::Duration::seconds(30))
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                    Ok::<_, sqlx::Error>(handles)
                }
                .await;
                let handles = match claimed {
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("40001") => continue,
                    claimed => claimed?,
                };
                if handles.is_empty() {
                    return Ok::<u64, sqlx::Error>(done);
                }
                let list = in_list(&handles);
                done += handles.len() as u64;
                let delete = format!("DELETE FROM raw_queue WHERE task_lock_handle_id IN ({list})");
                loop {
                    match sqlx::query(&delete).execute(&mut *conn).await {
                        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("40001") => {}
                        deleted => {
                            deleted?;
                            break;
                        }
                    }
                }
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

/// A backlog of `n` rows in the minimal table burned down by 16 clients, each looping
/// START TRANSACTION (READ COMMITTED); SELECT 100 ids FOR UPDATE SKIP LOCKED; DELETE
/// them; COMMIT. A claim InnoDB picks as a deadlock victim rolls back and claims again.
async fn min_burn_down(pool: MySqlPool, n: u64) -> Result<f64, BoxError> {
    min_fill(&pool, n).await?;
    sqlx::query("ANALYZE TABLE min_job").execute(&pool).await?;
    let before = sqlx::MySql::cost(&pool).await?;
    let start = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..MIN_CLIENTS {
        let pool = pool.clone();
        clients.push(tokio::spawn(async move {
            let mut done = 0u64;
            let mut conn = pool.acquire().await?;
            loop {
                let taken = async {
                    let mut tx = sqlx::Connection::begin_with(
                        &mut *conn,
                        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
                    )
                    .await?;
                    let ids: Vec<i64> = sqlx::query_scalar(
                        "SELECT id FROM min_job WHERE state = 0 AND run_at <= NOW(6)
                         ORDER BY priority, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED",
                    )
                    .fetch_all(&mut *tx)
                    .await?;
                    if !ids.is_empty() {
                        sqlx::query(&format!(
                            "DELETE FROM min_job WHERE id IN ({})",
                            in_list(&ids)
                        ))
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                    Ok::<_, sqlx::Error>(ids.len() as u64)
                }
                .await;
                match taken {
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("40001") => {}
                    Ok(0) => return Ok::<u64, sqlx::Error>(done),
                    taken => done += taken?,
                }
            }
        }));
    }
    let mut done = 0;
    for c in clients {
        done += c.await??;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    FIGURES.note_cost(before, sqlx::MySql::cost(&pool).await?, n);
    if done != n {
        return Err(format!("minimal burn-down finished {done} of {n}").into());
    }
    Ok(rate)
}

fn in_list(handles: &[i64]) -> String {
    handles
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Enqueue-to-start latency with an idle worker, in milliseconds.
async fn latency(pool: MySqlPool, jobs: u64) -> Result<Vec<f64>, BoxError> {
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
