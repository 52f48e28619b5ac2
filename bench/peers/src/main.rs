//! sk, graphile_worker and River's Rust client side by side on one PostgreSQL server,
//! each through its own API under one protocol (README.md). Prints one line per figure,
//! `queue measure value unit`, each the median of `--repeat` runs.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Handler runs of the burn-down running now, whichever queue's.
static RUNS: AtomicU64 = AtomicU64::new(0);
/// Where a ping's handler sends its latency, in ms.
static LATENCY: Mutex<Option<mpsc::UnboundedSender<f64>>> = Mutex::new(None);

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// A ping's first line: its latency since `sent` goes to the measure.
fn pinged(sent: i64) {
    let latency = (now_micros() - sent) as f64 / 1000.0;
    if let Some(tx) = LATENCY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
    {
        let _ = tx.send(latency);
    }
}

const POOL: u32 = 16;
const CHUNK: u64 = 10_000;

#[derive(Clone)]
struct Args {
    url: String,
    jobs: u64,
    single: u64,
    /// The burn-down's concurrencies, each measured; the first serves the pings.
    concurrencies: Vec<usize>,
    concurrency: usize,
    latency_jobs: u64,
    repeat: usize,
    only: Vec<String>,
    queues: Vec<String>,
}

fn args() -> Result<Args, BoxError> {
    let mut a = Args {
        url: std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        jobs: 200_000,
        single: 5_000,
        concurrencies: vec![16],
        concurrency: 16,
        latency_jobs: 300,
        repeat: 3,
        only: ["single", "bulk", "burn_down", "latency"]
            .map(String::from)
            .to_vec(),
        queues: ["sk", "graphile", "river"].map(String::from).to_vec(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let list = || value.split(',').map(str::to_owned).collect::<Vec<_>>();
        match flag.as_str() {
            "--jobs" => a.jobs = value.parse()?,
            "--single" => a.single = value.parse()?,
            "--concurrency" => {
                a.concurrencies = list().iter().map(|c| c.parse()).collect::<Result<_, _>>()?;
                a.concurrency = *a.concurrencies.first().ok_or("--concurrency: none given")?;
            }
            "--latency-jobs" => a.latency_jobs = value.parse()?,
            "--repeat" => a.repeat = value.parse::<usize>()?.max(1),
            "--only" => a.only = list(),
            "--queues" => a.queues = list(),
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    for q in &a.queues {
        if !["sk", "graphile", "river"].contains(&q.as_str()) {
            return Err(format!("--queues {q}: sk, graphile or river").into());
        }
    }
    Ok(a)
}

/// A database of its own for one run, created afresh: its URL.
async fn fresh_database(args: &Args, name: &str) -> Result<String, BoxError> {
    let admin = sqlx::PgPool::connect(&args.url).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&admin)
        .await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await?;
    admin.close().await;
    let base = args
        .url
        .rsplit_once('/')
        .map_or(args.url.as_str(), |(b, _)| b);
    Ok(format!("{base}/{name}"))
}

/// The server's write-ahead log and CPU time over the last burn-down: (bytes, seconds).
static COST: Mutex<Option<(f64, f64)>> = Mutex::new(None);

/// Where the server's write-ahead log is, in bytes since its start.
async fn wal_bytes(pool: &sqlx::PgPool) -> Result<f64, BoxError> {
    Ok(
        sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8")
            .fetch_one(pool)
            .await?,
    )
}

/// The CPU time so far of every `postgres` process on this machine, in seconds (those
/// that exited count in the postmaster's children's time).
fn server_cpu_seconds() -> Result<f64, BoxError> {
    let mut ticks = 0.0;
    for entry in std::fs::read_dir("/proc")? {
        let Ok(stat) = std::fs::read_to_string(entry?.path().join("stat")) else {
            continue;
        };
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        if head.split_once('(').map(|(_, c)| c) != Some("postgres") {
            continue;
        }
        // utime, stime, cutime and cstime: the 12th to 15th fields after the name.
        let fields: Vec<&str> = tail.split_whitespace().collect();
        for i in 11..15 {
            ticks += fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    Ok(ticks / 100.0)
}

/// Waits until `left` says no job is left to run, polling every 20 ms, and notes the
/// server's write-ahead log and CPU time from the call to the end (`COST`).
async fn until_done<F, Fut>(pool: &sqlx::PgPool, mut left: F) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, BoxError>>,
{
    let (wal, cpu) = (wal_bytes(pool).await?, server_cpu_seconds()?);
    let deadline = Instant::now() + Duration::from_secs(600);
    while left().await? {
        if Instant::now() > deadline {
            return Err("the burn-down did not finish within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cost = (wal_bytes(pool).await? - wal, server_cpu_seconds()? - cpu);
    *COST.lock().unwrap_or_else(PoisonError::into_inner) = Some(cost);
    Ok(())
}

/// Checks that the handlers ran exactly `n` times.
fn check_runs(queue: &str, n: u64) -> Result<(), BoxError> {
    let runs = RUNS.swap(0, Ordering::SeqCst);
    if runs != n {
        return Err(format!("{queue}: {runs} handler runs for {n} jobs").into());
    }
    Ok(())
}

/// Random gaps of 5-50 ms between pings.
struct Gaps(u64);

impl Gaps {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(5 + self.0 % 46)
    }
}

/// Sends `n` pings through `send` at random gaps and collects their latencies.
async fn pings<F, Fut>(n: u64, mut send: F) -> Result<Vec<f64>, BoxError>
where
    F: FnMut(i64) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let (tx, mut rx) = mpsc::unbounded_channel();
    *LATENCY.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
    let mut gaps = Gaps(now_micros() as u64 | 1);
    let mut samples = Vec::new();
    for _ in 0..n {
        tokio::time::sleep(gaps.next()).await;
        send(now_micros()).await?;
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(ms)) => samples.push(ms),
            _ => return Err("a ping did not run within 10 s".into()),
        }
    }
    *LATENCY.lock().unwrap_or_else(PoisonError::into_inner) = None;
    Ok(samples)
}

/// A figure's queue, measure and unit, and (beside it) its runs' values.
type Figure = (&'static str, String, &'static str);

/// One queue under the protocol: a fresh database with its schema and a worker on it;
/// the measures below drive it the same way for every queue.
trait Queue: Sized {
    const NAME: &'static str;
    /// The table vacuumed and analyzed before a burn-down.
    const TABLE: &'static str;
    /// One boolean: whether a job is left to run.
    const LEFT: &'static str;
    /// A fresh database with the queue's schema and a worker of `concurrency`, not
    /// started; `throughput`: tuned for it as its documentation advises.
    async fn open(args: &Args, concurrency: usize, throughput: bool) -> Result<Self, BoxError>;
    /// A pool of sk's sqlx on the queue's database, for the harness's own reads.
    fn pool(&self) -> &sqlx::PgPool;
    async fn insert_one(&self, n: u64) -> Result<(), BoxError>;
    /// Jobs `range` in one call of the queue's batch insert.
    async fn insert_many(&self, range: std::ops::Range<u64>) -> Result<(), BoxError>;
    async fn ping(&self, sent: i64) -> Result<(), BoxError>;
    fn start(&mut self) -> Result<(), BoxError>;
    /// Stops the worker if started, and closes the pools.
    async fn stop(self) -> Result<(), BoxError>;
}

async fn fill<Q: Queue>(queue: &Q, n: u64) -> Result<(), BoxError> {
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        queue.insert_many(i..end).await?;
        i = end;
    }
    Ok(())
}

/// Jobs enqueued one call at a time: jobs/s.
async fn single<Q: Queue>(args: &Args) -> Result<f64, BoxError> {
    let queue = Q::open(args, args.concurrency, false).await?;
    let start = Instant::now();
    for n in 0..args.single {
        queue.insert_one(n).await?;
    }
    let rate = args.single as f64 / start.elapsed().as_secs_f64();
    queue.stop().await?;
    Ok(rate)
}

/// Jobs enqueued in batches: jobs/s.
async fn bulk<Q: Queue>(args: &Args) -> Result<f64, BoxError> {
    let queue = Q::open(args, args.concurrency, false).await?;
    let start = Instant::now();
    fill(&queue, args.jobs).await?;
    let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
    queue.stop().await?;
    Ok(rate)
}

/// A backlog burned down at `concurrency`: jobs/s, from the worker's start until no job
/// is left.
async fn burn_down<Q: Queue>(args: &Args, concurrency: usize) -> Result<f64, BoxError> {
    let mut queue = Q::open(args, concurrency, true).await?;
    fill(&queue, args.jobs).await?;
    sqlx::query(&format!("VACUUM ANALYZE {}", Q::TABLE))
        .execute(queue.pool())
        .await?;
    let start = Instant::now();
    queue.start()?;
    until_done(queue.pool(), || async {
        Ok(sqlx::query_scalar(Q::LEFT).fetch_one(queue.pool()).await?)
    })
    .await?;
    let rate = args.jobs as f64 / start.elapsed().as_secs_f64();
    queue.stop().await?;
    Ok(rate)
}

/// Pickup latencies of an idle worker, in ms.
async fn latency<Q: Queue>(args: &Args) -> Result<Vec<f64>, BoxError> {
    // Not tuned for throughput: graphile_worker's local queue trades latency for it.
    let mut queue = Q::open(args, args.concurrency, false).await?;
    queue.start()?;
    // The worker comes up and goes idle (LISTEN established).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = pings(args.latency_jobs, |sent| queue.ping(sent)).await?;
    queue.stop().await?;
    Ok(samples)
}

mod graphile;
mod river;
mod sk;

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("peers: {e}");
        std::process::exit(1);
    }
}

/// The runs' figures so far.
#[derive(Default)]
struct Figures(Vec<(Figure, Vec<f64>)>);

impl Figures {
    fn note(&mut self, queue: &'static str, measure: &str, unit: &'static str, value: f64) {
        eprintln!("peers: {queue} {measure} {value:.2} {unit}");
        let key = (queue, measure.to_owned(), unit);
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, runs)) => runs.push(value),
            None => self.0.push((key, vec![value])),
        }
    }
}

/// One run of `measure` on queue `Q`.
async fn measure<Q: Queue>(
    args: &Args,
    measure: &str,
    figures: &mut Figures,
) -> Result<(), BoxError> {
    let name = Q::NAME;
    match measure {
        "single" => figures.note(name, "single_enqueue", "jobs/s", single::<Q>(args).await?),
        "bulk" => figures.note(name, "bulk_enqueue", "jobs/s", bulk::<Q>(args).await?),
        "burn_down" => {
            for &concurrency in &args.concurrencies {
                let rate = burn_down::<Q>(args, concurrency).await?;
                check_runs(name, args.jobs)?;
                let measure = format!("burn_down_c{concurrency}");
                figures.note(name, &measure, "jobs/s", rate);
                let cost = COST.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some((wal, cpu)) = cost {
                    let n = args.jobs as f64;
                    figures.note(name, &format!("{measure}_wal"), "bytes/job", wal / n);
                    figures.note(
                        name,
                        &format!("{measure}_server_cpu"),
                        "us/job",
                        cpu / n * 1e6,
                    );
                }
            }
        }
        "latency" => {
            let mut samples = latency::<Q>(args).await?;
            samples.sort_by(f64::total_cmp);
            let pick = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
            figures.note(name, "pickup_p50", "ms", pick(0.5));
            figures.note(name, "pickup_p99", "ms", pick(0.99));
        }
        other => return Err(format!("--only {other}: single, bulk, burn_down or latency").into()),
    }
    Ok(())
}

async fn run() -> Result<(), BoxError> {
    let args = args()?;
    let mut figures = Figures::default();
    for _ in 0..args.repeat {
        for m in &args.only {
            for queue in &args.queues {
                match queue.as_str() {
                    "sk" => measure::<sk::Sk>(&args, m, &mut figures).await?,
                    "graphile" => measure::<graphile::Graphile>(&args, m, &mut figures).await?,
                    _ => measure::<river::River>(&args, m, &mut figures).await?,
                }
            }
        }
    }
    for ((queue, measure, unit), mut runs) in figures.0 {
        runs.sort_by(f64::total_cmp);
        println!("{queue} {measure} {:.1} {unit}", runs[runs.len() / 2]);
    }
    Ok(())
}

/// The no-op job's argument, the same for every queue.
#[derive(Clone, Serialize, Deserialize)]
struct Noop {
    n: u64,
}
