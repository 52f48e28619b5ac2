//! sk and River's Rust client on SQLite, each through its own API under the protocol of
//! `bench/peers` (../README.md): a fresh file per run (WAL mode, `synchronous = NORMAL`),
//! no-op jobs; single enqueue, bulk enqueue, burn-down at each `--concurrency`. Prints
//! `queue measure value unit`, medians of `--repeat` interleaved runs.

use std::future::Future;
use std::ops::Range;
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

/// One queue on a fresh SQLite file with its schema and a worker; the measures below
/// drive it the same way for both.
trait Queue: Sized {
    const NAME: &'static str;
    /// A fresh file (`file`) with the queue's schema and a worker of `concurrency`, not
    /// started.
    async fn open(file: &File, concurrency: usize) -> Result<Self, BoxError>;
    async fn insert_one(&self, n: u64) -> Result<(), BoxError>;
    /// Jobs `range` in one call of the queue's batch insert.
    async fn insert_many(&self, range: Range<u64>) -> Result<(), BoxError>;
    /// Whether a job is left to run.
    async fn left(&self) -> Result<bool, BoxError>;
    fn start(&mut self) -> Result<(), BoxError>;
    /// Stops the worker if started, and closes the pool.
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

async fn single<Q: Queue>(n: u64) -> Result<f64, BoxError> {
    let file = File::new(Q::NAME);
    let queue = Q::open(&file, 16).await?;
    let start = Instant::now();
    for i in 0..n {
        queue.insert_one(i).await?;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    queue.stop().await?;
    Ok(rate)
}

async fn bulk<Q: Queue>(n: u64) -> Result<f64, BoxError> {
    let file = File::new(Q::NAME);
    let queue = Q::open(&file, 16).await?;
    let start = Instant::now();
    fill(&queue, n).await?;
    let rate = n as f64 / start.elapsed().as_secs_f64();
    queue.stop().await?;
    Ok(rate)
}

async fn burn_down<Q: Queue>(n: u64, concurrency: usize) -> Result<f64, BoxError> {
    let file = File::new(Q::NAME);
    let mut queue = Q::open(&file, concurrency).await?;
    fill(&queue, n).await?;
    let start = Instant::now();
    queue.start()?;
    until_done(|| queue.left()).await?;
    let rate = n as f64 / start.elapsed().as_secs_f64();
    queue.stop().await?;
    check_runs(Q::NAME, n)?;
    Ok(rate)
}

mod sk {
    use super::*;
    use sk_runtime::{job, Enqueue, Schema, Worker};
    use sqlx::sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
    };
    use sqlx::SqlitePool;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    #[job]
    async fn peer_noop(n: u64) {
        let _ = n;
        RUNS.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) struct Sk {
        pool: SqlitePool,
        concurrency: usize,
        running: Option<(oneshot::Sender<()>, JoinHandle<sk_runtime::Result<()>>)>,
    }

    impl Queue for Sk {
        const NAME: &'static str = "sk";

        async fn open(file: &File, concurrency: usize) -> Result<Self, BoxError> {
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
            Ok(Sk {
                pool,
                concurrency,
                running: None,
            })
        }

        async fn insert_one(&self, n: u64) -> Result<(), BoxError> {
            PeerNoop::new(n).enqueue(&self.pool).await?;
            Ok(())
        }

        async fn insert_many(&self, range: Range<u64>) -> Result<(), BoxError> {
            Enqueue::enqueue_many(&self.pool, range.map(PeerNoop::new)).await?;
            Ok(())
        }

        // A job's queue row goes when its outcome is recorded.
        async fn left(&self) -> Result<bool, BoxError> {
            Ok(
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sk_tasks_queue_t)")
                    .fetch_one(&self.pool)
                    .await?,
            )
        }

        fn start(&mut self) -> Result<(), BoxError> {
            let worker = Worker::builder(self.pool.clone())
                .task_types(["peer_noop"])
                .concurrency(self.concurrency)
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            let running = tokio::spawn(worker.run_until(async move {
                let _ = stopped.await;
            }));
            self.running = Some((stop, running));
            Ok(())
        }

        async fn stop(self) -> Result<(), BoxError> {
            if let Some((stop, running)) = self.running {
                let _ = stop.send(());
                running.await??;
            }
            self.pool.close().await;
            Ok(())
        }
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
        BoxError as RiverError, Client, Job, JobArgs, QueueConfig, RunHandle, WorkContext,
        WorkOutcome, Workers,
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

    pub(super) struct River {
        client: Client,
        pool: SqlitePool,
        running: Option<RunHandle>,
    }

    impl Queue for River {
        const NAME: &'static str = "river";

        /// As its SQLite example advises: WAL mode and a busy timeout; `synchronous =
        /// NORMAL` as sk's.
        async fn open(file: &File, concurrency: usize) -> Result<Self, BoxError> {
            let options =
                SqliteConnectOptions::from_str(&format!("sqlite://{}", file.0.display()))?
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
                    QueueConfig::new(concurrency)
                        .with_fetch_poll_interval(Duration::from_millis(100)),
                )
                .build()?;
            Ok(River {
                client,
                pool,
                running: None,
            })
        }

        async fn insert_one(&self, n: u64) -> Result<(), BoxError> {
            self.client.insert(PeerNoop { n }).await?;
            Ok(())
        }

        async fn insert_many(&self, range: Range<u64>) -> Result<(), BoxError> {
            self.client
                .insert_many(range.map(|n| PeerNoop { n }))
                .await?;
            Ok(())
        }

        // River keeps a completed job's row (state 'completed').
        async fn left(&self) -> Result<bool, BoxError> {
            Ok(riverqueue::sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM river_job WHERE state <> 'completed')",
            )
            .fetch_one(&self.pool)
            .await?)
        }

        fn start(&mut self) -> Result<(), BoxError> {
            self.running = Some(self.client.start()?);
            Ok(())
        }

        async fn stop(self) -> Result<(), BoxError> {
            if let Some(mut running) = self.running {
                running.stop().await?;
            }
            self.pool.close().await;
            Ok(())
        }
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
    use river::River;
    use sk::Sk;
    for _ in 0..args.repeat {
        note("sk single_enqueue".into(), single::<Sk>(args.single).await?);
        note(
            "river single_enqueue".into(),
            single::<River>(args.single).await?,
        );
        note("sk bulk_enqueue".into(), bulk::<Sk>(args.jobs).await?);
        note("river bulk_enqueue".into(), bulk::<River>(args.jobs).await?);
        for &c in &args.concurrencies {
            note(
                format!("sk burn_down_c{c}"),
                burn_down::<Sk>(args.jobs, c).await?,
            );
            note(
                format!("river burn_down_c{c}"),
                burn_down::<River>(args.jobs, c).await?,
            );
        }
    }
    for (name, mut runs) in figures {
        runs.sort_by(f64::total_cmp);
        println!("{name} {:.1} jobs/s", runs[runs.len() / 2]);
    }
    Ok(())
}
