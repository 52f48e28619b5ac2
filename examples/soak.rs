//! Soak run: steady enqueue and processing at a fixed rate for a configurable time,
//! printing once per interval the jobs done, the queue table's live and dead tuples and
//! size, the results table's size, this process's memory and the open connections.
//!
//! ```text
//! cargo run --release -p sk-examples --bin soak -- --minutes 10 --rate 500
//! ```
//! Options: `--minutes M` (default 10), `--rate JOBS_PER_S` (500), `--concurrency N` (16),
//! `--report-secs S` (60), `--retention-secs S` (results kept; default 300, so pruning is
//! exercised). Works in its own schema, `sk_soak`, recreated at each start.

#[path = "support.rs"]
mod support;

use std::time::{Duration, Instant};
use support::{fresh_schema, rss_kb};

use sk_runtime::{job, Enqueue, Schema, Worker};
use sqlx::PgPool;

#[job]
async fn soak_noop(n: u64) {
    let _ = n;
}

struct Args {
    minutes: f64,
    rate: u64,
    concurrency: usize,
    report: Duration,
    retention: Duration,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        minutes: 10.0,
        rate: 500,
        concurrency: 16,
        report: Duration::from_secs(60),
        retention: Duration::from_secs(300),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--minutes" => a.minutes = value.parse().map_err(|e| bad(&e))?,
            "--rate" => a.rate = value.parse().map_err(|e| bad(&e))?,
            "--concurrency" => a.concurrency = value.parse().map_err(|e| bad(&e))?,
            "--report-secs" => a.report = Duration::from_secs(value.parse().map_err(|e| bad(&e))?),
            "--retention-secs" => {
                a.retention = Duration::from_secs(value.parse().map_err(|e| bad(&e))?)
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("soak: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = args()?;
    let (pool, schema) = fresh_schema("sk_soak", 10).await?;
    println!(
        "soak: {} min at {} jobs/s, concurrency {}, results kept {:?}",
        args.minutes, args.rate, args.concurrency, args.retention
    );

    let worker = Worker::builder(pool.clone())
        .schema(schema.clone())
        .concurrency(args.concurrency)
        .result_retention(args.retention)
        .maintenance_interval(Duration::from_secs(10))
        .build()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));

    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let start = Instant::now();
    let producer = tokio::spawn(produce(pool.clone(), schema.clone(), args.rate, total));
    let mut last_done = 0;
    let mut next_report = args.report;
    while start.elapsed() < total {
        tokio::time::sleep_until((start + next_report.min(total)).into()).await;
        next_report += args.report;
        let done = report(&pool, start.elapsed(), last_done, args.report).await?;
        last_done = done;
    }
    let enqueued = producer.await??;
    // Let the backlog drain, then stop the worker.
    let drain = Instant::now();
    while processed(&pool).await? < enqueued && drain.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop_tx.send(());
    worker.await??;
    let done = processed(&pool).await?;
    println!(
        "soak: enqueued {enqueued}, processed {done}, lost {}",
        enqueued - done
    );
    Ok(())
}

async fn produce(
    pool: PgPool,
    schema: Schema,
    rate: u64,
    total: Duration,
) -> Result<i64, sk_runtime::Error> {
    let tick = Duration::from_millis(100);
    let per_tick = (rate / 10).max(1);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < total {
        interval.tick().await;
        let jobs: Vec<_> = (n..n + per_tick)
            .map(|i| Enqueue::new(SoakNoop::new(i)).with_schema(&schema))
            .collect();
        SoakNoop::enqueue_many(&pool, jobs).await?;
        n += per_tick;
    }
    Ok(i64::try_from(n).unwrap_or(i64::MAX))
}

async fn processed(pool: &PgPool) -> sqlx::Result<i64> {
    let n: Option<i64> = sqlx::query_scalar(
        "SELECT coalesce(sum(et_n_execution_cycles), 0)::int8 FROM sk_soak.sk_task_execution_time_stats_t WHERE et_payload_type = 'soak_noop'",
    )
    .fetch_optional(pool)
    .await?;
    Ok(n.unwrap_or(0))
}

async fn report(
    pool: &PgPool,
    elapsed: Duration,
    last_done: i64,
    interval: Duration,
) -> Result<i64, sqlx::Error> {
    let done = processed(pool).await?;
    let (live, dead, queue_bytes, results_bytes): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT s.n_live_tup, s.n_dead_tup,
                pg_total_relation_size('sk_soak.sk_tasks_queue_t'),
                -- The results table is partitioned (schema 5): its partitions hold the rows.
                (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::int8 FROM pg_inherits
                 WHERE inhparent = 'sk_soak.sk_task_results_t'::regclass)
         FROM pg_stat_user_tables s WHERE s.schemaname = 'sk_soak' AND s.relname = 'sk_tasks_queue_t'",
    )
    .fetch_one(pool)
    .await?;
    let conns: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await?;
    println!(
        "t={:>5.0}s done={done} rate={:.0}/s queue_live={live} queue_dead={dead} queue_bytes={queue_bytes} results_bytes={results_bytes} rss_kb={} connections={conns}",
        elapsed.as_secs_f64(),
        (done - last_done) as f64 / interval.as_secs_f64(),
        rss_kb().unwrap_or(-1),
    );
    Ok(done)
}
