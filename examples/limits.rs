//! Resource limits on PostgreSQL: what a big backlog, a payload at the size limit and a storm
//! of long error messages cost a worker (its resident memory) and the tables (their size),
//! and whether the worker still runs a job after them.
//!
//! ```text
//! cargo run --release -p sk-examples --bin limits -- [--backlog 1000000] [--failures 10000] [--error-kb 64]
//! ```
//! Works in its own schema, `sk_limits`, recreated at each start. The worker runs in this
//! process, so the resident memory printed is the worker's (plus this program's own few
//! buffers, measured before the worker starts).

#[path = "support.rs"]
mod support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{fresh_schema, rss_kb};

use sk_runtime::{job, Client, Enqueue, JobError, JobStatus, Worker, DEFAULT_MAX_PAYLOAD_BYTES};
use sqlx::PgPool;

const SCHEMA: &str = "sk_limits";

#[job(queue = "limits")]
async fn limits_noop(n: u64) {
    let _ = n;
}

#[job(queue = "limits")]
async fn limits_blob(data: String) -> Result<usize, JobError> {
    Ok(data.len())
}

#[job(queue = "limits", max_attempts = 1)]
async fn limits_fail(n: u64, bytes: usize) -> Result<(), JobError> {
    // Message and detail say which job it is, then fill up to `bytes` each with text that
    // does not compress (the tables' worst case).
    let head = format!("job {n} failed: ");
    let fill = bytes.saturating_sub(head.len());
    Err(JobError::new(format!("{head}{}", noise(n, fill))).with_detail(noise(!n, bytes)))
}

/// `len` pseudo-random letters and digits from `seed` (xorshift).
fn noise(seed: u64, len: usize) -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(CHARS[(x % CHARS.len() as u64) as usize])
        })
        .collect()
}

struct Args {
    backlog: u64,
    failures: u64,
    error_bytes: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        backlog: 1_000_000,
        failures: 10_000,
        error_bytes: 64 * 1024,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--backlog" => a.backlog = value.parse().map_err(|e| bad(&e))?,
            "--failures" => a.failures = value.parse().map_err(|e| bad(&e))?,
            "--error-kb" => a.error_bytes = value.parse::<usize>().map_err(|e| bad(&e))? * 1024,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("limits: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = args()?;
    let (pool, schema) = fresh_schema(SCHEMA, 20).await?;
    let client = Client::new(pool.clone()).schema(schema.clone());

    // 1. The backlog, enqueued before any worker runs.
    let started = Instant::now();
    let mut n = 0;
    while n < args.backlog {
        let batch = (n..(n + 10_000).min(args.backlog))
            .map(|i| Enqueue::new(LimitsNoop::new(i)).with_schema(&schema));
        LimitsNoop::enqueue_many(&pool, batch).await?;
        n += 10_000;
    }
    println!(
        "backlog: {} jobs enqueued in {:.1} s; tables {}",
        args.backlog,
        started.elapsed().as_secs_f64(),
        sizes(&pool).await?
    );
    let before = rss_kb().unwrap_or(-1);
    let worker = Worker::builder(pool.clone())
        .schema(schema.clone())
        .concurrency(64)
        .build()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));
    let peak = Arc::new(AtomicI64::new(before));
    let sampler = tokio::spawn(sample(peak.clone()));
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut next_tenth = 1;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let left = waiting(&pool).await?;
        let done = args
            .backlog
            .saturating_sub(u64::try_from(left).unwrap_or(0));
        while next_tenth <= 10 && done * 10 >= args.backlog * next_tenth {
            samples.push(format!(
                "{}%={} MB",
                next_tenth * 10,
                rss_kb().unwrap_or(-1) / 1024
            ));
            next_tenth += 1;
        }
        if left == 0 {
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "backlog: burned down in {secs:.1} s ({:.0} jobs/s); worker RSS before {} MB, then {}; peak {} MB",
        args.backlog as f64 / secs,
        before / 1024,
        samples.join(" "),
        peak.load(Ordering::Relaxed) / 1024
    );
    println!("backlog: tables after {}", sizes(&pool).await?);

    // 2. A payload at the limit runs; one byte more is refused, with the reason.
    let overhead = serde_json::to_string(&LimitsBlob::new(String::new()))?.len();
    let at_limit = "p".repeat(DEFAULT_MAX_PAYLOAD_BYTES - overhead);
    let id = LimitsBlob::new(at_limit.clone())
        .with_schema(&schema)
        .enqueue(&pool)
        .await?;
    let record = client.wait(id, Duration::from_secs(60)).await?;
    println!(
        "payload: {} bytes (the limit) {:?}; output {:?}",
        DEFAULT_MAX_PAYLOAD_BYTES,
        record.status(),
        record.output_json
    );
    let over = LimitsBlob::new(format!("{at_limit}p"))
        .with_schema(&schema)
        .enqueue(&pool)
        .await;
    match over {
        Err(e) => println!("payload: one byte more is refused: {e}"),
        Ok(id) => return Err(format!("a payload over the limit was enqueued as {id}").into()),
    }

    // 3. Failures with long messages, every one fatal at once.
    let tables = sizes(&pool).await?;
    peak.store(rss_kb().unwrap_or(-1), Ordering::Relaxed);
    let before = rss_kb().unwrap_or(-1);
    let started = Instant::now();
    let mut ids = Vec::new();
    let mut n = 0;
    while n < args.failures {
        let batch = (n..(n + 1000).min(args.failures))
            .map(|i| Enqueue::new(LimitsFail::new(i, args.error_bytes)).with_schema(&schema));
        ids.extend(LimitsFail::enqueue_many(&pool, batch).await?);
        n += 1000;
    }
    let last = *ids.last().ok_or("no failing job")?;
    client.wait(last, Duration::from_secs(600)).await?;
    while waiting(&pool).await? > 0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let sample = client
        .wait(ids[ids.len() / 2], Duration::from_secs(10))
        .await?;
    println!(
        "failures: {} jobs failing with {} kB messages and details, all fatal in {secs:.1} s ({:.0} jobs/s); worker RSS before {} MB, peak {} MB, after {} MB",
        args.failures,
        args.error_bytes / 1024,
        args.failures as f64 / secs,
        before / 1024,
        peak.load(Ordering::Relaxed) / 1024,
        rss_kb().unwrap_or(-1) / 1024
    );
    println!(
        "failures: a sample is {:?} with a stored message of {} bytes and detail of {} bytes",
        sample.status(),
        sample.last_error_message.as_deref().map_or(0, str::len),
        sample.last_error_detail.as_deref().map_or(0, str::len)
    );
    println!(
        "failures: tables before {tables}, after {}",
        sizes(&pool).await?
    );

    // 4. Still healthy: a job enqueued now runs.
    let started = Instant::now();
    let id = LimitsNoop::new(0)
        .with_schema(&schema)
        .enqueue(&pool)
        .await?;
    let record = client.wait(id, Duration::from_secs(30)).await?;
    if record.status() != JobStatus::Processed {
        return Err(format!("the last job ended {:?}", record.status()).into());
    }
    println!(
        "after: a new job ran in {:.0} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
    let _ = stop_tx.send(());
    worker.await??;
    sampler.abort();
    Ok(())
}

/// Keeps the highest resident memory seen, every 100 ms.
async fn sample(peak: Arc<AtomicI64>) {
    loop {
        if let Some(kb) = rss_kb() {
            peak.fetch_max(kb, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Jobs still in the queue table.
async fn waiting(pool: &PgPool) -> sqlx::Result<i64> {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {SCHEMA}.sk_tasks_queue_t"))
        .fetch_one(pool)
        .await
}

/// The queue table's and the results' sizes, with their TOAST and indexes.
async fn sizes(pool: &PgPool) -> sqlx::Result<String> {
    let (queue, results): (i64, i64) = sqlx::query_as(&format!(
        "SELECT pg_total_relation_size('{SCHEMA}.sk_tasks_queue_t'),
                -- The results table is partitioned: its partitions hold the rows.
                (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::int8 FROM pg_inherits
                 WHERE inhparent = '{SCHEMA}.sk_task_results_t'::regclass)"
    ))
    .fetch_one(pool)
    .await?;
    Ok(format!(
        "queue {:.1} MB, results {:.1} MB",
        queue as f64 / 1e6,
        results as f64 / 1e6
    ))
}
