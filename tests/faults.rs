//! Fault injection against real worker processes (`sk-fault-worker`) and the real
//! PostgreSQL: SIGKILL with restarts, backends terminated mid-run, a database that goes
//! away and comes back, a worker paused past its lease, SIGTERM. Each test checks the
//! tables afterwards: every job has exactly one final result, none is lost, none is
//! finalized twice. Figures go to stderr and to `target/tmp/fault-report.txt`.
//!
//! The pauses between faults (`fault_pause`) and the kill points (`at_kill_point`) are the
//! fault schedule itself, drawn from a seeded generator (`FAULT_SEED` replays a run); every
//! wait for an outcome is a poll of the database under a timeout. The kill tests hold a
//! tenth of their jobs back in a paused queue until the last kill (`hold_reserve`), so no
//! burn-down can end before its kills.

#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use proxy::Proxy;
use sk_runtime::{job, JobStatus};
use sk_tests::chaos::{ChaosBackend, Rng};
use sk_tests::{wait_until, Db, TestBackend};
use uuid::Uuid;

/// The job the worker binary runs; declared here with the same name and payload so the
/// test can enqueue it (this binary never runs it).
#[job]
async fn burn(millis: u64) {
    let _ = millis;
}

/// The worker binary's transaction jobs, declared here to enqueue them.
#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn effect_pg(millis: u64) {
    let _ = millis;
}

#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn effect_mysql(millis: u64) {
    let _ = millis;
}

/// The worker binary's job of five resumable steps.
#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn stepped(millis: u64) {
    let _ = millis;
}

#[path = "faults/proxy.rs"]
mod proxy;

/// One fault test per backend named: `mod $name` with a test `postgres`, `sqlite` or
/// `mysql` each, calling `$run::<that backend>(its name)` (the `each_backend!` pattern of
/// the other suites, for tests that drive worker processes and need no `Db` up front).
macro_rules! on_backends {
    ($(#[doc = $doc:literal])* fn $name:ident => $run:ident [$($backend:ident),+]) => {
        $(#[doc = $doc])*
        mod $name {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $backend() {
                    super::$run::<on_backends!(@ $backend)>(stringify!($backend)).await;
                }
            )+
        }
    };
    (@ postgres) => { sqlx::Postgres };
    (@ sqlite) => { sqlx::Sqlite };
    (@ mysql) => { sqlx::MySql };
}

const WORKER: &str = env!("CARGO_BIN_EXE_sk-fault-worker");

/// The fault tests run one at a time: each drives several processes with up to ~20
/// connections apiece, and in parallel they would exhaust the server's connection slots
/// (100 by default) and share two cores, which would measure the machine, not sk.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One worker process.
struct Proc {
    child: Child,
    id: String,
    log: PathBuf,
}

impl Proc {
    fn spawn(url: &str, id: &str, args: &[&str]) -> Proc {
        Proc::spawn_in(None, url, id, args)
    }

    /// As `spawn`, in network namespace `ns` if given (`ip netns exec`, which runs the
    /// worker in place: the pid is the worker's).
    fn spawn_in(ns: Option<&str>, url: &str, id: &str, args: &[&str]) -> Proc {
        let log = log_dir().join(format!("{id}.log"));
        let file = File::create(&log).unwrap();
        let mut command = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, WORKER]);
                c
            }
            None => Command::new(WORKER),
        };
        let child = command
            .env("DATABASE_URL", url)
            // Everything at INFO, sqlx's too: a quiet start is part of what is tested.
            .env(
                "RUST_LOG",
                std::env::var("SK_FAULT_LOG").unwrap_or_else(|_| "info".into()),
            )
            .arg("--id")
            .arg(id)
            .args(args)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        Proc {
            child,
            id: id.to_owned(),
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {}", self.pid());
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the process to exit (polling, under a timeout); returns its exit code.
    async fn exit_code(&mut self, timeout: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                start.elapsed() < timeout,
                "{} did not exit within {timeout:?}",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// CPU seconds used so far (user + system), from /proc.
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / 100.0
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn report(line: &str) {
    eprintln!("{line}");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-report.txt");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// The fault schedule's pause between two faults.
async fn fault_pause(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Waits for the `k`th of `kills` kill points (`k` from 1) and returns the jobs left then.
/// A kill point is a count of finalized jobs, drawn from the `k`th of `kills` equal
/// stretches of the first 80 % of the `due` jobs' burn-down (in its last three quarters,
/// so that the process killed has run a while). The test's reserve ([`hold_reserve`])
/// waits behind the due jobs, so jobs are left at every kill however fast the workers go
/// and however late this poll comes: without it, a MariaDB run on CI finished its last
/// 1,907 jobs between the third kill and the fourth kill point.
async fn at_kill_point<B: TestBackend>(
    db: &Db<B>,
    rng: &mut Rng,
    (k, kills): (u32, u32),
    due: u32,
) -> i64
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let stretch = u64::from(due) * 8 / 10 / u64::from(kills);
    let point = stretch * u64::from(k - 1) + rng.range(stretch / 4, stretch);
    wait_processed(db, point as usize, Duration::from_secs(120)).await;
    // The live jobs: on PostgreSQL a job has no results row until its first outcome.
    let left = db
        .scalar("SELECT count(*) FROM sk_tasks_queue_t", None)
        .await
        .expect("a count");
    assert!(left > 0, "kill {k} came after the burn-down ended");
    left
}

/// The queue of a kill test's reserve: paused while the kills land, resumed after the
/// last one.
const RESERVE: &str = "fault-reserve";

/// Pauses [`RESERVE`] and stores `jobs` in it; returns their ids.
async fn hold_reserve<B: TestBackend, J: sk_runtime::Job>(
    db: &Db<B>,
    jobs: impl IntoIterator<Item = J>,
) -> Vec<Uuid>
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let client = sk_runtime::Client::new(db.pool.clone());
    assert!(client.pause(RESERVE).await.unwrap(), "a new queue");
    let jobs = jobs
        .into_iter()
        .map(|j| sk_runtime::Enqueue::new(j).with_queue(RESERVE));
    sk_runtime::Enqueue::enqueue_many(&db.pool, jobs)
        .await
        .unwrap()
}

/// Resumes [`RESERVE`]: after the last kill, the workers burn the reserve down too.
async fn release_reserve<B: TestBackend>(db: &Db<B>)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let client = sk_runtime::Client::new(db.pool.clone());
    assert!(
        client.resume(RESERVE).await.unwrap(),
        "the reserve was held"
    );
}

/// The table where the fault worker's `burn` job records each run it starts.
fn fault_runs<B: TestBackend>() -> &'static str {
    if B::BACKEND == "SQLite" {
        "CREATE TABLE fault_runs (task_id BLOB NOT NULL, attempt INTEGER NOT NULL, pid INTEGER NOT NULL,
                                  started_at TEXT NOT NULL)"
    } else if B::BACKEND == "MySQL" {
        "CREATE TABLE fault_runs (task_id BINARY(16) NOT NULL, attempt INT NOT NULL, pid INT NOT NULL,
                                  started_at DATETIME(6) NOT NULL, KEY (task_id))"
    } else {
        "CREATE TABLE fault_runs (task_id uuid NOT NULL, attempt int NOT NULL, pid int NOT NULL,
                                  started_at timestamptz NOT NULL DEFAULT clock_timestamp())"
    }
}

async fn setup<B: TestBackend>(jobs: u32, millis: u64) -> (Db<B>, Vec<Uuid>)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let db = Db::<B>::new().await;
    db.execute(fault_runs::<B>()).await;
    let mut ids = Vec::new();
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(10_000) {
        ids.extend(
            Burn::enqueue_many(&db.pool, chunk.iter().map(|_| Burn::new(millis)))
                .await
                .unwrap(),
        );
    }
    (db, ids)
}

/// Waits until `n` runs of `burn` have started (`fault_runs` rows).
async fn wait_runs_started<B: TestBackend>(db: &Db<B>, n: i64, what: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    wait_until(what, Duration::from_secs(30), || async {
        let started = db.scalar("SELECT count(*) FROM fault_runs", None).await?;
        (started == n).then_some(())
    })
    .await;
}

/// Jobs with a final, successful result.
async fn processed<B: TestBackend>(db: &Db<B>) -> i64
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    db.scalar(
        "SELECT count(*) FROM sk_task_results_t WHERE task_status = 3",
        None,
    )
    .await
    .expect("a count")
}

async fn wait_processed<B: TestBackend>(db: &Db<B>, n: usize, timeout: Duration)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    wait_until(&format!("{n} finalized jobs"), timeout, || async {
        (processed(db).await >= n as i64).then_some(())
    })
    .await;
}

/// The end state every fault test must reach: each job exactly one final (processed)
/// result, none left in the queue, at least one run each, and no run that started after
/// the job's final result (a second finalization needs a second claim, which needs the
/// queue row the first finalization deleted). Returns how many jobs ran more than once.
async fn assert_each_job_finished_once<B: TestBackend>(db: &Db<B>, ids: &[Uuid]) -> i64
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let count = |sql: &'static str| async move { db.scalar(sql, None).await.expect("a count") };
    let (results, processed_rows, finalized, queue_rows) = (
        count("SELECT count(*) FROM sk_task_results_t").await,
        count("SELECT count(*) FROM sk_task_results_t WHERE task_status = 3").await,
        count("SELECT count(*) FROM sk_task_results_t WHERE task_processing_finalized_at_ts IS NOT NULL").await,
        count("SELECT count(*) FROM sk_tasks_queue_t").await,
    );
    let n = ids.len() as i64;
    assert_eq!(
        (results, processed_rows, finalized, queue_rows),
        (n, n, n, 0),
        "lost = {}",
        n - processed_rows
    );
    let (never_ran, ran_after_final, reran) = (
        count("SELECT count(*) FROM sk_task_results_t r WHERE NOT EXISTS (SELECT 1 FROM fault_runs f WHERE f.task_id = r.task_id)").await,
        count("SELECT count(*) FROM fault_runs f JOIN sk_task_results_t r USING (task_id)
               WHERE f.started_at > r.task_processing_finalized_at_ts").await,
        count("SELECT count(*) FROM (SELECT task_id FROM fault_runs GROUP BY task_id HAVING count(*) > 1) d").await,
    );
    assert_eq!(never_ran, 0, "every finalized job ran");
    assert_eq!(
        ran_after_final, 0,
        "no job ran (let alone was finalized) after its final result"
    );
    reran
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[path = "faults/chaos.rs"]
mod chaos;
#[path = "faults/failover.rs"]
mod failover;
#[path = "faults/kills.rs"]
mod kills;
#[path = "faults/outages.rs"]
mod outages;
#[path = "faults/replica.rs"]
mod replica;
#[path = "faults/signals.rs"]
mod signals;
#[path = "faults/silence.rs"]
mod silence;
