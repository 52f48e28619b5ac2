//! Fairness between tenants on PostgreSQL: tenant A's flood is in the queue and draining
//! when tenant B enqueues a few jobs; four workers at concurrency 16 run them. Prints how
//! long B's jobs waited (pickup: from their enqueue to their start) and how many of A's
//! jobs started meanwhile: the figure a fair claim (issue 47) is measured against.
//!
//! ```text
//! cargo run --release -p sk-examples --bin fairness -- [--flood 200000] [--few 20] [--fair] [--prefetch N]
//! ```
//! `--fair`: the workers claim the queue fairly across its tenants (`WorkerBuilder::fair`);
//! without it, in the queue's order. `--prefetch N`: each worker's `WorkerBuilder::prefetch`
//! (default 2,000: the jobs of earlier claims that B's can wait behind).
//! Works in its own schema, `sk_fairness`, recreated at each start.

#[path = "support.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sk_runtime::{job, Data, Enqueue, Worker};
use support::{fresh_schema, rss_kb};

const SCHEMA: &str = "sk_fairness";
const WORKERS: usize = 4;
const CONCURRENCY: usize = 16;

/// What the jobs saw, shared by every worker: A's starts, and each of B's pickups.
#[derive(Clone)]
struct Seen(Arc<Inner>);

struct Inner {
    a_started: AtomicU64,
    b_enqueued: Mutex<Option<Instant>>,
    b_pickups: Mutex<Vec<(Duration, u64)>>,
}

#[job(queue = "fair")]
async fn fair_noop(tenant: String, seen: Data<Seen>) {
    let seen = &seen.0;
    if tenant == "a" {
        seen.a_started.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let enqueued = seen
        .b_enqueued
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .expect("B's jobs are enqueued first");
    let a_so_far = seen.a_started.load(Ordering::Relaxed);
    seen.b_pickups
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((enqueued.elapsed(), a_so_far));
}

fn arg(name: &str, default: u64) -> Result<u64, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number")),
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let flood = arg("--flood", 200_000)?;
    let fair = std::env::args().any(|a| a == "--fair");
    let prefetch = usize::try_from(arg("--prefetch", 2_000)?)?;
    let few = arg("--few", 20)?;
    let (pool, schema) = fresh_schema(SCHEMA, 80).await?;

    let started = Instant::now();
    let mut n = 0;
    while n < flood {
        let batch = (n..(n + 10_000).min(flood)).map(|_| {
            Enqueue::new(FairNoop::new("a".into()))
                .with_tenant("a")
                .with_schema(&schema)
        });
        FairNoop::enqueue_many(&pool, batch).await?;
        n += 10_000;
    }
    println!(
        "fairness: tenant A's {flood} jobs enqueued in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let shared = Seen(Arc::new(Inner {
        a_started: AtomicU64::new(0),
        b_enqueued: Mutex::new(None),
        b_pickups: Mutex::new(Vec::new()),
    }));
    let seen = &shared.0;
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let running = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let mut worker = Worker::builder(pool.clone())
            .schema(schema.clone())
            .concurrency(CONCURRENCY)
            .prefetch(prefetch)
            .data(shared.clone());
        if fair {
            worker = worker.fair("fair");
        }
        let worker = worker.build()?;
        let mut stop = stop_tx.subscribe();
        workers.push(tokio::spawn(worker.run_until(async move {
            let _ = stop.recv().await;
        })));
    }
    // B arrives while A's flood drains, once the workers run at full speed.
    while seen.a_started.load(Ordering::Relaxed) < flood.min(2_000) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let a_before = seen.a_started.load(Ordering::Relaxed);
    *seen
        .b_enqueued
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    let batch = (0..few).map(|_| {
        Enqueue::new(FairNoop::new("b".into()))
            .with_tenant("b")
            .with_schema(&schema)
    });
    FairNoop::enqueue_many(&pool, batch).await?;
    let enqueue_took = seen
        .b_enqueued
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .map(|at| at.elapsed());
    while seen
        .b_pickups
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len()
        < few as usize
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ran = running.elapsed();
    let _ = stop_tx.send(());
    for worker in workers {
        worker.await??;
    }

    let mut pickups = seen
        .b_pickups
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    pickups.sort();
    let at = |q: f64| pickups[((pickups.len() - 1) as f64 * q).round() as usize];
    let (last, a_at_last) = pickups[pickups.len() - 1];
    println!(
        "fairness: tenant B's {few} jobs, enqueued after {a_before} of A's had started, with A's {} waiting; claims {}, prefetch {prefetch}",
        flood - a_before,
        if fair { "fair across tenants" } else { "in the queue's order" }
    );
    println!(
        "fairness_b_pickup_p50 {:.1} ms\nfairness_b_pickup_p99 {:.1} ms\nfairness_b_pickup_max {:.1} ms",
        millis(at(0.5).0),
        millis(at(0.99).0),
        millis(last)
    );
    if let Some(took) = enqueue_took {
        println!(
            "fairness_b_enqueue {:.1} ms (within the pickup)",
            millis(took)
        );
    }
    println!(
        "fairness_a_started_before_b_done {} jobs",
        a_at_last - a_before
    );
    println!(
        "fairness_throughput {:.0} jobs/s (A's and B's starts until B's last)",
        (a_at_last + few) as f64 / ran.as_secs_f64()
    );
    println!(
        "fairness_rss {} MB (this process: the four workers)",
        rss_kb().unwrap_or(-1) / 1024
    );
    sqlx::query(&format!("DROP SCHEMA {SCHEMA} CASCADE"))
        .execute(&pool)
        .await?;
    Ok(())
}
