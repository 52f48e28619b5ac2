//! sk and River's Rust client on SQLite, each through its own API under the protocol of
//! `bench/peers` (../README.md): a fresh file per run (WAL mode, `synchronous = NORMAL`),
//! no-op jobs; single enqueue, bulk enqueue, burn-down at each `--concurrency`. Prints
//! `queue measure value unit`, medians of `--repeat` interleaved runs.

use std::future::Future;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Handler runs of the burn-down running now.
static RUNS: AtomicU64 = AtomicU64::new(0);

const CHUNK: u64 = 10_000;

#[derive(Clone)]
struct Args {
    jobs: u64,
    single: u64,
    concurrencies: Vec<usize>,
    repeat: usize,
}

fn args() -> Result<Args, BoxError> {
    let mut a = Args {
        jobs: 100_000,
        single: 2_000,
        concurrencies: vec![16],
        repeat: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => a.jobs = value.parse()?,
            "--single" => a.single = value.parse()?,
            "--concurrency" => {
                a.concurrencies = value.split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            "--repeat" => a.repeat = value.parse::<usize>()?.max(1),
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    Ok(a)
}

/// A file of its own for one run, removed (with its WAL) when dropped.
struct File(PathBuf);

impl File {
    fn new(queue: &str) -> Self {
        File(std::env::temp_dir().join(format!("sk-peers-{queue}-{}.sqlite", std::process::id())))
    }
}

impl Drop for File {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut name = self.0.as_os_str().to_owned();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
}

/// Waits until `left` says no job is left to run, polling every 20 ms.
async fn until_done<F, Fut>(mut left: F) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, BoxError>>,
{
    let deadline = Instant::now() + Duration::from_secs(600);
    while left().await? {
        if Instant::now() > deadline {
            return Err("the burn-down did not finish within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn check_runs(queue: &str, n: u64) -> Result<(), BoxError> {
    let runs = RUNS.swap(0, Ordering::SeqCst);
    if runs != n {
        return Err(format!("{queue}: {runs} handler runs for {n} jobs").into());
    }
    Ok(())
}

mod sk {
    use super::*;
    use sk_runtime::{job, Enqueue, Schema, Worker};
    use sqlx::sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
    };
    use sqlx::SqlitePool;

    #[job]
    async fn peer_noop(n: u64) {
        let _ = n;
        RUNS.fetch_add(1, Ordering::Relaxed);
    }

    async fn fresh(file: &File) -> Result<SqlitePool, BoxError> {
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&file.0)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal),
            )
            .await?;
        sk_runtime::migrate(&pool, &Schema::default()).await?;
        Ok(pool)
    }

    async fn fill(pool: &SqlitePool, n: u64) -> Result<(), BoxError> {
        let mut i = 0;
        while i < n {
            let end = (i + CHUNK).min(n);
            Enqueue::enqueue_many(pool, (i..end).map(PeerNoop::new)).await?;
            i = end;
        }
        Ok(())
    }

    pub(super) async fn single(n: u64) -> Result<f64, BoxError> {
        let file = File::new("sk");
        let pool = fresh(&file).await?;
        let start = Instant::now();
        for i in 0..n {
            PeerNoop::new(i).enqueue(&pool).await?;
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        pool.close().await;
        Ok(rate)
    }

    pub(super) async fn bulk(n: u64) -> Result<f64, BoxError> {
        let file = File::new("sk");
        let pool = fresh(&file).await?;
        let start = Instant::now();
        fill(&pool, n).await?;
        let rate = n as f64 / start.elapsed().as_secs_f64();
        pool.close().await;
        Ok(rate)
    }

    pub(super) async fn burn_down(n: u64, concurrency: usize) -> Result<f64, BoxError> {
        let file = File::new("sk");
        let pool = fresh(&file).await?;
        fill(&pool, n).await?;
        let start = Instant::now();
        let worker = Worker::builder(pool.clone())
            .task_types(["peer_noop"])
            .concurrency(concurrency)
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(worker.run_until(async move {
            let _ = stopped.await;
        }));
        until_done(|| {
            let pool = pool.clone();
            async move {
                Ok(
                    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sk_tasks_queue_t)")
                        .fetch_one(&pool)
                        .await?,
                )
            }
        })
        .await?;
        let rate = n as f64 / start.elapsed().as_secs_f64();
        let _ = stop.send(());
        running.await??;
        pool.close().await;
        Ok(rate)
    }
}

mod river {
    use super::*;
    use riverqueue::migrate::SqliteMigrator;
    use riverqueue::sqlx::sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
    };
    use riverqueue::sqlx::SqlitePool;
    use riverqueue::{
        BoxError as RiverError, Client, Job, JobArgs, QueueConfig, WorkContext, WorkOutcome,
        Workers,
    };

    #[derive(Clone, Serialize, Deserialize)]
    struct PeerNoop {
        n: u64,
    }

    impl JobArgs for PeerNoop {
        const KIND: &'static str = "peer_noop";
    }

    async fn noop(_: WorkContext, job: Job<PeerNoop>) -> Result<WorkOutcome, RiverError> {
        let _ = job.args.n;
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(WorkOutcome::Complete)
    }

    /// As its SQLite example advises: WAL mode and a busy timeout; `synchronous = NORMAL`
    /// as sk's.
    async fn fresh(file: &File, concurrency: usize) -> Result<(Client, SqlitePool), BoxError> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", file.0.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        SqliteMigrator::new(pool.clone()).migrate_up().await?;
        let mut workers = Workers::new();
        workers.add_fn(noop)?;
        let client = Client::builder(pool.clone())
            .workers(workers)
            .fetch_cooldown(riverqueue::FETCH_COOLDOWN_MIN)
            .queue(
                "default",
                QueueConfig::new(concurrency).with_fetch_poll_interval(Duration::from_millis(100)),
            )
            .build()?;
        Ok((client, pool))
    }

    async fn fill(client: &Client, n: u64) -> Result<(), BoxError> {
        let mut i = 0;
        while i < n {
            let end = (i + CHUNK).min(n);
            client.insert_many((i..end).map(|n| PeerNoop { n })).await?;
            i = end;
        }
        Ok(())
    }

    pub(super) async fn single(n: u64) -> Result<f64, BoxError> {
        let file = File::new("river");
        let (client, pool) = fresh(&file, 16).await?;
        let start = Instant::now();
        for i in 0..n {
            client.insert(PeerNoop { n: i }).await?;
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        pool.close().await;
        Ok(rate)
    }

    pub(super) async fn bulk(n: u64) -> Result<f64, BoxError> {
        let file = File::new("river");
        let (client, pool) = fresh(&file, 16).await?;
        let start = Instant::now();
        fill(&client, n).await?;
        let rate = n as f64 / start.elapsed().as_secs_f64();
        pool.close().await;
        Ok(rate)
    }

    pub(super) async fn burn_down(n: u64, concurrency: usize) -> Result<f64, BoxError> {
        let file = File::new("river");
        let (client, pool) = fresh(&file, concurrency).await?;
        fill(&client, n).await?;
        let start = Instant::now();
        let mut run = client.start()?;
        until_done(|| {
            let pool = pool.clone();
            async move {
                Ok(riverqueue::sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM river_job WHERE state <> 'completed')",
                )
                .fetch_one(&pool)
                .await?)
            }
        })
        .await?;
        let rate = n as f64 / start.elapsed().as_secs_f64();
        run.stop().await?;
        pool.close().await;
        Ok(rate)
    }
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("peers-sqlite: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let args = args()?;
    let mut figures: Vec<(String, Vec<f64>)> = Vec::new();
    let mut note = |name: String, value: f64| {
        eprintln!("peers-sqlite: {name} {value:.1} jobs/s");
        match figures.iter_mut().find(|(n, _)| *n == name) {
            Some((_, runs)) => runs.push(value),
            None => figures.push((name, vec![value])),
        }
    };
    for _ in 0..args.repeat {
        note("sk single_enqueue".into(), sk::single(args.single).await?);
        note(
            "river single_enqueue".into(),
            river::single(args.single).await?,
        );
        note("sk bulk_enqueue".into(), sk::bulk(args.jobs).await?);
        note("river bulk_enqueue".into(), river::bulk(args.jobs).await?);
        for &c in &args.concurrencies {
            note(
                format!("sk burn_down_c{c}"),
                sk::burn_down(args.jobs, c).await?,
            );
            check_runs("sk", args.jobs)?;
            note(
                format!("river burn_down_c{c}"),
                river::burn_down(args.jobs, c).await?,
            );
            check_runs("river", args.jobs)?;
        }
    }
    for (name, mut runs) in figures {
        runs.sort_by(f64::total_cmp);
        println!("{name} {:.1} jobs/s", runs[runs.len() / 2]);
    }
    Ok(())
}
