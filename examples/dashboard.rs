//! The dashboard's pages over a big database, timed: how long each page of `sk web` takes
//! to answer with `--jobs` jobs on PostgreSQL (default 2,000,000: 90 % succeeded, 5 %
//! failed for good with 1,000 different messages of 4 patterns, 5 % waiting in a paused
//! queue).
//!
//! ```text
//! cargo run --release -p sk-examples --bin dashboard -- [--jobs 2000000] [--repeat 5]
//! ```
//! Works in its own schema, `sk_dashboard`, recreated at each start; the jobs are run by a
//! worker in this process, then the dashboard is served here and each page fetched
//! `--repeat` times over HTTP: the median and the slowest are printed, in milliseconds.

#[path = "support.rs"]
mod support;

use std::time::{Duration, Instant};

use sk_runtime::{job, Client, Enqueue, JobError, JobFilter, JobStatus, Worker};
use support::{fresh_schema, rss_kb};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const SCHEMA: &str = "sk_dashboard";

/// Succeeds, but for one job in 20, which fails for good with one of 4 messages, each
/// naming its order (so 1,000 different messages in 4 groups).
#[job(queue = "shop", max_attempts = 1)]
async fn dashboard_order(n: u64) -> Result<(), JobError> {
    if n % 20 != 0 {
        return Ok(());
    }
    let order = n % 1000;
    Err(JobError::fatal(match n % 4 {
        0 => format!("gateway timeout charging order {order}"),
        1 => format!("carrier refused order {order}: 'no address'"),
        2 => format!("stock of item {order} is gone"),
        _ => format!("customer {order}@example.com bounced"),
    }))
}

/// Waits in its paused queue.
#[job(queue = "backlog")]
async fn dashboard_backlog(n: u64) {
    let _ = n;
}

struct Args {
    jobs: u64,
    repeat: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        jobs: 2_000_000,
        repeat: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--jobs" => a.jobs = value.parse().map_err(|e| bad(&e))?,
            "--repeat" => a.repeat = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("dashboard: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = args()?;
    let (pool, schema) = fresh_schema(SCHEMA, 20).await?;
    let client = Client::new(pool.clone()).schema(schema.clone());
    client.pause("backlog").await?;
    let backlog = args.jobs / 20;
    let orders = args.jobs - backlog;
    let started = Instant::now();
    for (range, backlog_jobs) in [(0..orders, false), (0..backlog, true)] {
        let mut n = range.start;
        while n < range.end {
            let end = (n + 10_000).min(range.end);
            if backlog_jobs {
                let batch =
                    (n..end).map(|i| Enqueue::new(DashboardBacklog::new(i)).with_schema(&schema));
                DashboardBacklog::enqueue_many(&pool, batch).await?;
            } else {
                let batch =
                    (n..end).map(|i| Enqueue::new(DashboardOrder::new(i)).with_schema(&schema));
                DashboardOrder::enqueue_many(&pool, batch).await?;
            }
            n = end;
        }
    }
    println!(
        "{} jobs enqueued in {:.1} s",
        args.jobs,
        started.elapsed().as_secs_f64()
    );

    let worker = Worker::builder(pool.clone())
        .schema(schema.clone())
        .concurrency(64)
        .build()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));
    let started = Instant::now();
    let shop = JobFilter::new()
        .queue("shop")
        .status(JobStatus::Unprocessed);
    while client.count_where(&shop, 1).await? > 0 {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "{orders} orders run in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The pages, with the worker still up (its heartbeat, its run counts).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(sk_cli::web::serve(
        client.clone(),
        listener,
        sk_cli::web::WebOptions::default(),
    ));
    let day = chrono::Utc::now() - chrono::Duration::hours(24);
    let group = client
        .error_groups(day, 1)
        .await?
        .into_iter()
        .next()
        .ok_or("no error group")?;
    let pages = [
        "/".to_owned(),
        "/queues".to_owned(),
        "/jobs".to_owned(),
        "/jobs?state=fatal".to_owned(),
        "/jobs?queue=backlog&state=waiting".to_owned(),
        format!(
            "/jobs?type={}&error_kind={}&error={}",
            group.task_type,
            group.kind.as_deref().unwrap_or_default(),
            group
                .pattern
                .replace(' ', "%20")
                .replace('{', "%7B")
                .replace('}', "%7D")
        ),
        "/errors".to_owned(),
        format!("/types/{}", group.task_type),
        "/batches".to_owned(),
        "/audit".to_owned(),
    ];
    println!("page                                               median ms    max ms");
    for path in &pages {
        let mut times = Vec::with_capacity(args.repeat);
        for _ in 0..args.repeat {
            let started = Instant::now();
            let status = get(address, path).await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            if status != 200 {
                return Err(format!("{path} answered {status}").into());
            }
        }
        times.sort_by(f64::total_cmp);
        let shown: String = path.chars().take(50).collect();
        println!(
            "{shown:<50} {:>10.1} {:>9.1}",
            times[times.len() / 2],
            times[times.len() - 1]
        );
    }
    println!(
        "this process (worker and dashboard): {} MB resident",
        rss_kb().unwrap_or(-1) / 1024
    );
    let _ = stop_tx.send(());
    worker.await??;
    Ok(())
}

/// `GET path` over a fresh connection; the status code, once the whole answer is read.
async fn get(
    address: std::net::SocketAddr,
    path: &str,
) -> Result<u16, Box<dyn std::error::Error + Send + Sync>> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let head = String::from_utf8_lossy(&answer[..answer.len().min(20)]).to_string();
    Ok(head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0))
}
