//! The chaos schedule: worker processes (`sk-fault-worker --job chaos`), an enqueuer and a
//! controller run against one database while a seeded nemesis injects faults; every
//! operation goes to a history, and a checker verifies the whole history against sk's
//! guarantees afterwards.
//!
//! The history has three sources. The worker processes append each run's start and end to
//! a file of their own (one line per event, written whole, so a `kill -9` loses no line it
//! finished). The enqueuer and controller (in this process) record each call with the time
//! it was made and the time it returned, and its outcome; a call that failed is
//! indeterminate (its commit may or may not have happened). The nemesis records each fault
//! with its target and its start and end. The database's final state is read at the end.
//!
//! Faults (server backends; SQLite takes the process faults only): `kill -9` and restart of
//! a worker, SIGSTOP past the lease and SIGCONT, the database's connections terminated, the
//! database restarted, a worker's clock moved ahead, and, with each worker in a network
//! namespace of its own joined to the database through a veth pair (and a forwarder on the
//! host end, as the servers listen on loopback only), partitions: the link down both ways,
//! or one way (a `pfifo limit 0` queue on one end of the pair drops everything sent from
//! that end: the worker's writes arrive but the replies do not, or the other way round),
//! or silent (both ends drop, the link up: no call of the worker's is answered).
//!
//! The checker's rules: every committed enqueue reaches exactly one final state; an
//! enqueue rolled back never runs and leaves no job; no run starts after its job's final
//! state; two runs of a job overlap only where the first one's lease could have run out: it
//! saw its lease lost and stopped, or a fault of its worker or of the database began at
//! least 2/3 of a lease before the second run started, or the second run's worker had its
//! clock moved ahead; a job cancelled (and not retried since) ends cancelled; a job completed
//! with a transaction has its application write exactly once, and any other job none; two
//! jobs holding the same unique key are never live at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use sk_runtime::{job, Client, Enqueue, Job, JobFilter, JobStatus};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

use crate::{Db, TestBackend};

// The worker binary's chaos jobs, declared here with the same names, payloads and
// attributes to enqueue them; this side never runs them.
#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
/// The worker binary's `chaos`.
pub async fn chaos(n: u64, millis: u64, fail: i32) {
    let _ = (n, millis, fail);
}

#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
/// The worker binary's `chaos_tx_pg`.
pub async fn chaos_tx_pg(n: u64, millis: u64, fail: i32) {
    let _ = (n, millis, fail);
}

#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
/// The worker binary's `chaos_tx_mysql`.
pub async fn chaos_tx_mysql(n: u64, millis: u64, fail: i32) {
    let _ = (n, millis, fail);
}

#[job(
    queue = "chaos",
    max_attempts = 25,
    backoff = "constant",
    backoff_base = "20ms"
)]
/// The worker binary's `chaos_tx_sqlite`.
pub async fn chaos_tx_sqlite(n: u64, millis: u64, fail: i32) {
    let _ = (n, millis, fail);
}

/// What the chaos schedule needs of a backend beyond [`TestBackend`].
pub trait ChaosBackend: TestBackend
where
    sqlx::Pool<Self>: Into<sk_runtime::Pool>,
{
    /// The worker's job that writes in its own transaction.
    type TxJob: Job;
    /// A job of [`ChaosBackend::TxJob`].
    fn tx_job(n: u64, millis: u64, fail: i32) -> Self::TxJob;
    /// The table of the application's writes.
    const EFFECTS_TABLE: &'static str;
    /// `n:count` per job of the application's writes.
    const EFFECTS_BY_JOB: &'static str;
    /// Whether the database is a server (network and database faults apply).
    const SERVER: bool;
    /// Terminates every connection to the test database but `pool`'s own; returns how many.
    fn terminate(
        pool: &sqlx::Pool<Self>,
    ) -> impl std::future::Future<Output = sqlx::Result<usize>> + Send;
    /// Restarts the database server and waits until it accepts connections.
    fn restart_server();
}

impl ChaosBackend for sqlx::Postgres {
    type TxJob = ChaosTxPg;
    fn tx_job(n: u64, millis: u64, fail: i32) -> ChaosTxPg {
        ChaosTxPg::new(n, millis, fail)
    }
    const EFFECTS_TABLE: &'static str =
        "CREATE TABLE chaos_effects (n bigint NOT NULL, attempt int NOT NULL)";
    const EFFECTS_BY_JOB: &'static str =
        "SELECT n::text || ':' || count(*)::text FROM chaos_effects GROUP BY n";
    const SERVER: bool = true;

    async fn terminate(pool: &sqlx::PgPool) -> sqlx::Result<usize> {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
        )
        .fetch_one(pool)
        .await
        .map(|n| n as usize)
    }

    fn restart_server() {
        let version = std::fs::read_dir("/etc/postgresql")
            .expect("PostgreSQL's clusters in /etc/postgresql")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .max()
            .expect("a PostgreSQL cluster");
        run(Command::new("pg_ctlcluster").args([
            "--skip-systemctl-redirect",
            &version,
            "main",
            "restart",
        ]));
    }
}

impl ChaosBackend for sqlx::MySql {
    type TxJob = ChaosTxMysql;
    fn tx_job(n: u64, millis: u64, fail: i32) -> ChaosTxMysql {
        ChaosTxMysql::new(n, millis, fail)
    }
    const EFFECTS_TABLE: &'static str =
        "CREATE TABLE chaos_effects (n BIGINT NOT NULL, attempt INT NOT NULL, KEY (n))";
    const EFFECTS_BY_JOB: &'static str =
        "SELECT CONCAT(n, ':', count(*)) FROM chaos_effects GROUP BY n";
    const SERVER: bool = true;

    async fn terminate(pool: &sqlx::MySqlPool) -> sqlx::Result<usize> {
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
        )
        .fetch_all(pool)
        .await?;
        let mut killed = 0;
        for id in ids {
            // A connection may have closed since the list was read.
            if sqlx::query(&format!("KILL CONNECTION {id}"))
                .execute(pool)
                .await
                .is_ok()
            {
                killed += 1;
            }
        }
        Ok(killed)
    }

    fn restart_server() {
        run(Command::new("mariadb-admin").args(["-h", "127.0.0.1", "-u", "root", "shutdown"]));
        // `shutdown` returns once the server has stopped taking connections; the start
        // below waits for the old process to be gone (--oknodo would take it as running).
        let deadline = Instant::now() + Duration::from_secs(60);
        while Command::new("pgrep")
            .args(["-x", "mariadbd"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(Instant::now() < deadline, "MariaDB did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
        run(Command::new("start-stop-daemon").args([
            "--start",
            "--oknodo",
            "--background",
            "--exec",
            "/usr/sbin/mariadbd",
        ]));
        while !Command::new("mariadb-admin")
            .args(["-h", "127.0.0.1", "-u", "root", "ping"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(Instant::now() < deadline, "MariaDB did not start again");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl ChaosBackend for sqlx::Sqlite {
    type TxJob = ChaosTxSqlite;
    fn tx_job(n: u64, millis: u64, fail: i32) -> ChaosTxSqlite {
        ChaosTxSqlite::new(n, millis, fail)
    }
    const EFFECTS_TABLE: &'static str =
        "CREATE TABLE chaos_effects (n INTEGER NOT NULL, attempt INTEGER NOT NULL)";
    const EFFECTS_BY_JOB: &'static str =
        "SELECT n || ':' || count(*) FROM chaos_effects GROUP BY n";
    const SERVER: bool = false;

    async fn terminate(_: &sqlx::SqlitePool) -> sqlx::Result<usize> {
        Ok(0)
    }

    fn restart_server() {}
}

/// Runs a command that must succeed.
fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How a chaos run is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seeds the fault schedule, the enqueuer and the controller.
    pub seed: u64,
    /// How long faults are injected (the burn-down that follows is not counted).
    pub duration: Duration,
    /// Worker processes.
    pub workers: usize,
    /// The workers' lease.
    pub lease: Duration,
    /// `sk-fault-worker`.
    pub worker_bin: PathBuf,
    /// Where the histories and the workers' logs go.
    pub dir: PathBuf,
    /// Whether to put each worker in a network namespace of its own and partition it.
    pub network: bool,
}

/// What a chaos run did and found.
#[derive(Debug, Default)]
pub struct Summary {
    /// Operations in the history: enqueues, runs (start and end), cancels, retries,
    /// pauses and resumes.
    pub operations: usize,
    /// Jobs enqueued (committed or indeterminate).
    pub jobs: usize,
    /// Runs started.
    pub runs: usize,
    /// Jobs that ran more than once.
    pub reran: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// Final states, by status name.
    pub finals: BTreeMap<String, usize>,
    /// Violations found, each with the history of its job.
    pub violations: Vec<String>,
}

impl Summary {
    /// One line of figures.
    pub fn line(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        let finals: Vec<String> = self
            .finals
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        format!(
            "operations={} jobs={} runs={} reran_jobs={} faults[{}] finals[{}] violations={}",
            self.operations,
            self.jobs,
            self.runs,
            self.reran,
            faults.join(" "),
            finals.join(" "),
            self.violations.len()
        )
    }
}

/// A small seeded generator for fault schedules (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is taken as 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// A generator from `FAULT_SEED`, or from the clock when it is unset; and its seed,
    /// to report so that a run can be replayed.
    pub fn from_env() -> (Rng, u64) {
        let seed = std::env::var("FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| Utc::now().timestamp_subsec_nanos() as u64 | 1);
        (Rng::new(seed), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `from..to`.
    pub fn range(&mut self, from: u64, to: u64) -> u64 {
        from + self.next() % (to - from).max(1)
    }

    /// A duration of `from..to` milliseconds.
    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(self.range(from, to))
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

fn micros() -> i64 {
    Utc::now().timestamp_micros()
}

/// An enqueue as the client saw it.
#[derive(Debug, Clone)]
struct EnqueueOp {
    n: u64,
    how: &'static str,
    key: Option<String>,
    invoked: i64,
    returned: i64,
    /// The id and whether the job was new; an error leaves the outcome unknown.
    result: Result<(Uuid, bool), String>,
}

/// A control call as the client saw it.
#[derive(Debug, Clone)]
struct ControlOp {
    what: &'static str,
    id: Option<Uuid>,
    invoked: i64,
    returned: i64,
    result: Result<String, String>,
}

/// A fault as the nemesis injected it; `worker` is `None` for the database.
#[derive(Debug, Clone)]
struct Fault {
    kind: &'static str,
    worker: Option<usize>,
    start: i64,
    end: i64,
}

/// One run of a job, from a worker's history.
#[derive(Debug, Clone)]
struct Run {
    n: u64,
    id: Uuid,
    attempt: i32,
    worker: usize,
    generation: String,
    /// When the worker claimed it, by the worker's clock.
    claimed: i64,
    start: i64,
    end: Option<(i64, String)>,
}

#[derive(Default)]
struct Recorded {
    enqueues: Vec<EnqueueOp>,
    controls: Vec<ControlOp>,
    faults: Vec<Fault>,
    /// Worker generation (process) → the time it died (killed) or was stopped at the end.
    deaths: HashMap<String, i64>,
}

type Shared = Arc<Mutex<Recorded>>;

/// A worker's network: a namespace, a veth pair, and a forwarder to the database on the
/// host end.
struct Net {
    ns: String,
    host_if: String,
    worker_if: String,
    url: String,
    forwarder: tokio::task::JoinHandle<()>,
}

impl Net {
    async fn create(tag: u32, i: usize, db_url: &str) -> Net {
        let ns = format!("skc{tag}n{i}");
        let host_if = format!("skc{tag}h{i}");
        let worker_if = format!("skc{tag}w{i}");
        let net = format!("10.{}.{}", 200 + tag % 50, i);
        let host_ip = format!("{net}.1");
        // Left over from a run that was killed.
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        run(Command::new("ip").args(["netns", "add", &ns]));
        run(Command::new("ip").args([
            "link", "add", &host_if, "type", "veth", "peer", "name", &worker_if,
        ]));
        run(Command::new("ip").args(["link", "set", &worker_if, "netns", &ns]));
        run(Command::new("ip").args(["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]));
        run(Command::new("ip").args(["link", "set", &host_if, "up"]));
        let in_ns = |args: &[&str]| {
            run(Command::new("ip")
                .args(["netns", "exec", &ns, "ip"])
                .args(args));
        };
        in_ns(&["addr", "add", &format!("{net}.2/30"), "dev", &worker_if]);
        in_ns(&["link", "set", &worker_if, "up"]);
        in_ns(&["link", "set", "lo", "up"]);

        let upstream = server_address(db_url);
        let listener = TcpListener::bind((host_ip.as_str(), 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let forwarder = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
            }
        });
        let url = db_url.replacen(&server_address(db_url), &format!("{host_ip}:{port}"), 1);
        Net {
            ns,
            host_if,
            worker_if,
            url,
            forwarder,
        }
    }

    /// The link down (both ways) or up.
    fn link(&self, up: bool) {
        run(Command::new("ip").args([
            "link",
            "set",
            &self.host_if,
            if up { "up" } else { "down" },
        ]));
    }

    /// Drops what the worker sends (`replies_lost` false) or what it receives (true).
    fn one_way(&self, replies_lost: bool, on: bool) {
        let op = if on { "add" } else { "del" };
        let mut command = if replies_lost {
            let mut c = Command::new("tc");
            c.args(["qdisc", op, "dev", &self.host_if, "root"]);
            c
        } else {
            let mut c = Command::new("ip");
            c.args([
                "netns",
                "exec",
                &self.ns,
                "tc",
                "qdisc",
                op,
                "dev",
                &self.worker_if,
                "root",
            ]);
            c
        };
        if on {
            command.args(["pfifo", "limit", "0"]);
        }
        run(&mut command);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.forwarder.abort();
        // Deleting the namespace deletes the pair.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

/// `host:port` of a database URL.
fn server_address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// One worker slot: its network (if any) and its current process.
struct Slot {
    net: Option<Net>,
    child: Option<Child>,
    generation: String,
    generations: usize,
}

struct Workers {
    slots: Vec<Slot>,
    config: Config,
    db_url: String,
    recorded: Shared,
}

impl Workers {
    fn spawn(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.generations += 1;
        let generation = format!("w{i}g{}", slot.generations);
        let url = slot
            .net
            .as_ref()
            .map_or(self.db_url.clone(), |n| n.url.clone());
        let log = std::fs::File::create(self.config.dir.join(format!("{generation}.log"))).unwrap();
        let mut command = match &slot.net {
            Some(net) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &net.ns])
                    .arg(&self.config.worker_bin);
                c
            }
            None => Command::new(&self.config.worker_bin),
        };
        let lease = self.config.lease.as_millis().to_string();
        let history = self.config.dir.join(format!("history-{generation}.jsonl"));
        let child = command
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "info")
            .args(["--id", &generation, "--job", "chaos", "--concurrency", "8"])
            .args([
                "--lease-ms",
                &lease,
                "--grace-ms",
                "2000",
                "--poll-ms",
                "100",
            ])
            .args([
                "--clock-jump-ms",
                &(2 * self.config.lease.as_millis()).to_string(),
            ])
            .arg("--history")
            .arg(history)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        slot.child = Some(child);
        slot.generation = generation;
    }

    fn signal(&self, i: usize, signal: &str) {
        let pid = self.slots[i].child.as_ref().unwrap().id();
        run(Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string()));
    }

    fn kill(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let mut child = slot.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        self.recorded
            .lock()
            .unwrap()
            .deaths
            .insert(slot.generation.clone(), micros());
    }
}

/// Runs the schedule on `db` and checks the history.
///
/// # Panics
/// When the machine cannot do what the schedule needs (network namespaces need root),
/// or a worker process cannot start: the run fails rather than checking less.
pub async fn run_schedule<B: ChaosBackend>(db: &Db<B>, config: &Config) -> Summary
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    std::fs::create_dir_all(&config.dir).unwrap();
    db.execute(B::EFFECTS_TABLE).await;
    let recorded: Shared = Arc::default();
    let network = config.network && B::SERVER;
    let tag = std::process::id() % 10_000;
    let mut slots = Vec::new();
    for i in 0..config.workers {
        let net = if network {
            Some(Net::create(tag, i, &db.url).await)
        } else {
            None
        };
        slots.push(Slot {
            net,
            child: None,
            generation: String::new(),
            generations: 0,
        });
    }
    let mut workers = Workers {
        slots,
        config: config.clone(),
        db_url: db.url.clone(),
        recorded: recorded.clone(),
    };
    for i in 0..config.workers {
        workers.spawn(i);
    }

    let deadline = Instant::now() + config.duration;
    let client = Client::new(db.pool.clone());
    let enqueuer = tokio::spawn(enqueue_loop::<B>(
        db.pool.clone(),
        Rng::new(config.seed ^ 0x5eed_0001),
        deadline,
        recorded.clone(),
    ));
    let controller = tokio::spawn(control_loop(
        client.clone(),
        Rng::new(config.seed ^ 0x5eed_0002),
        deadline,
        recorded.clone(),
    ));
    nemesis::<B>(&mut workers, db, Rng::new(config.seed), deadline).await;
    enqueuer.await.unwrap();
    controller.await.unwrap();

    // Everything healed (each fault ends before the next); the queue may still be paused
    // if a resume failed.
    let _ = wait_ok(|| client.resume("chaos")).await;
    // A backlog left by the schedule may take a while (a long run on a loaded machine
    // enqueues faster than it runs); what must not happen is a stall: the jobs left must
    // keep going down.
    let stall = Duration::from_secs(120);
    let mut least = i64::MAX;
    let mut progressed = Instant::now();
    loop {
        let counts = wait_ok(|| client.counts()).await;
        let left = counts.available
            + counts.scheduled
            + counts.running
            + counts.lease_expired
            + counts.pending;
        if left == 0 {
            break;
        }
        if left < least {
            least = left;
            progressed = Instant::now();
        }
        if progressed.elapsed() >= stall {
            let holders = stalled_holders(db, &config.dir).await;
            panic!(
                "the chaos jobs stopped ending: none in {stall:?}: {counts:?} (histories and logs in {}){holders}",
                config.dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut exits = Vec::new();
    for i in 0..config.workers {
        workers.signal(i, "TERM");
        let slot = &mut workers.slots[i];
        let mut child = slot.child.take().unwrap();
        let code = wait_exit(&mut child, Duration::from_secs(30)).await;
        recorded
            .lock()
            .unwrap()
            .deaths
            .insert(slot.generation.clone(), micros());
        if code != Some(0) {
            exits.push(format!(
                "worker {} exited with {code:?} on SIGTERM",
                slot.generation
            ));
        }
    }
    drop(workers);

    let history = std::mem::take(&mut *recorded.lock().unwrap());
    let mut summary = check::<B>(db, &client, &config.dir, &history, config.lease).await;
    summary.violations.extend(exits);
    // Kept beside the histories, for a run whose output is gone.
    std::fs::write(
        config.dir.join("violations.txt"),
        summary.violations.join("\n"),
    )
    .unwrap();
    summary
}

/// For a stalled run's message: which workers hold the jobs left, and the end of each
/// one's log (the run's directory may be gone by the time anyone reads the output).
async fn stalled_holders<B: TestBackend>(db: &Db<B>, dir: &Path) -> String
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let mut held: BTreeMap<String, usize> = BTreeMap::new();
    for worker in db
        .texts("SELECT task_locked_by FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL")
        .await
    {
        *held.entry(worker).or_default() += 1;
    }
    let mut out = String::new();
    for (worker, jobs) in &held {
        let log = std::fs::read_to_string(dir.join(format!("{worker}.log"))).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n    ");
        let _ = write!(
            out,
            "\n  {worker} holds {jobs} jobs; the last lines of its log:\n    {tail}"
        );
    }
    out
}

/// Calls `f` until it succeeds (the database may be restarting).
async fn wait_ok<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = sk_runtime::Result<T>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "the database stayed away: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn wait_exit(child: &mut Child, timeout: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The fault schedule: one fault at a time, at seeded intervals, until `deadline`.
async fn nemesis<B: ChaosBackend>(
    workers: &mut Workers,
    db: &Db<B>,
    mut rng: Rng,
    deadline: Instant,
) where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let lease = workers.config.lease.as_millis() as u64;
    let network = workers.slots.iter().all(|s| s.net.is_some());
    let mut kinds: Vec<&'static str> = vec!["kill", "kill", "stop", "clock"];
    if B::SERVER {
        kinds.extend(["terminate", "terminate", "restart"]);
    }
    if network {
        kinds.extend([
            "partition",
            "partition",
            "one-way-replies",
            "one-way-writes",
            "silent",
        ]);
    }
    while Instant::now() < deadline {
        tokio::time::sleep(rng.millis(300, 1500)).await;
        let kind = kinds[rng.range(0, kinds.len() as u64) as usize];
        let i = rng.range(0, workers.slots.len() as u64) as usize;
        let hold = rng.millis(lease * 6 / 5, lease * 3);
        let start = micros();
        let worker = match kind {
            "kill" => {
                workers.kill(i);
                tokio::time::sleep(rng.millis(0, 500)).await;
                workers.spawn(i);
                Some(i)
            }
            "stop" => {
                workers.signal(i, "STOP");
                tokio::time::sleep(hold).await;
                workers.signal(i, "CONT");
                Some(i)
            }
            "clock" => {
                workers.signal(i, "USR1");
                tokio::time::sleep(hold).await;
                workers.signal(i, "USR2");
                Some(i)
            }
            "terminate" => {
                // The harness's own connection may be the one a restart broke; the
                // fault is then a no-op, recorded all the same.
                let _ = B::terminate(&db.pool).await;
                None
            }
            "restart" => {
                tokio::task::spawn_blocking(B::restart_server)
                    .await
                    .unwrap();
                None
            }
            "partition" => {
                let net = workers.slots[i].net.as_ref().unwrap();
                net.link(false);
                tokio::time::sleep(hold).await;
                net.link(true);
                Some(i)
            }
            "silent" => {
                // Both ways dropped, the link up: the worker's connections stay open
                // and nothing answers them (its calls run into their bound).
                let net = workers.slots[i].net.as_ref().unwrap();
                net.one_way(true, true);
                net.one_way(false, true);
                tokio::time::sleep(hold).await;
                net.one_way(true, false);
                net.one_way(false, false);
                Some(i)
            }
            one_way => {
                let replies_lost = one_way == "one-way-replies";
                let net = workers.slots[i].net.as_ref().unwrap();
                net.one_way(replies_lost, true);
                tokio::time::sleep(hold).await;
                net.one_way(replies_lost, false);
                Some(i)
            }
        };
        workers.recorded.lock().unwrap().faults.push(Fault {
            kind,
            worker,
            start,
            end: micros(),
        });
    }
}

/// Enqueues chaos jobs until `deadline`: one at a time, in batches, in transactions that
/// commit or roll back, and with unique keys.
async fn enqueue_loop<B: ChaosBackend>(
    pool: sqlx::Pool<B>,
    mut rng: Rng,
    deadline: Instant,
    recorded: Shared,
) where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let mut n = 0u64;
    while Instant::now() < deadline {
        tokio::time::sleep(rng.millis(2, 20)).await;
        let how = match rng.range(0, 100) {
            0..=64 => "single",
            65..=79 => "batch",
            80..=86 => "tx-commit",
            87..=93 => "tx-rollback",
            _ => "unique",
        };
        let count = if how == "batch" { rng.range(2, 30) } else { 1 };
        let jobs: Vec<(u64, bool, Spec)> = (0..count)
            .map(|_| {
                n += 1;
                (n, rng.chance(50), Spec::draw(&mut rng))
            })
            .collect();
        let key = (how == "unique").then(|| format!("key-{}", rng.range(0, 4)));
        let invoked = micros();
        let result = enqueue::<B>(&pool, how, key.clone(), &jobs).await;
        let returned = micros();
        let mut recorded = recorded.lock().unwrap();
        for (k, (n, _, _)) in jobs.iter().enumerate() {
            recorded.enqueues.push(EnqueueOp {
                n: *n,
                how,
                key: key.clone(),
                invoked,
                returned,
                result: match &result {
                    Ok(ids) => Ok(ids[k]),
                    Err(e) => Err(e.clone()),
                },
            });
        }
    }
}

/// A chaos job's payload besides its number.
#[derive(Debug, Clone, Copy)]
struct Spec {
    millis: u64,
    fail: i32,
    max_attempts: Option<i32>,
}

impl Spec {
    fn draw(rng: &mut Rng) -> Spec {
        let millis = rng.range(0, 60);
        match rng.range(0, 100) {
            // Fails for good: two attempts, both failing.
            0..=4 => Spec {
                millis,
                fail: 99,
                max_attempts: Some(2),
            },
            5..=19 => Spec {
                millis,
                fail: rng.range(1, 3) as i32,
                max_attempts: None,
            },
            _ => Spec {
                millis,
                fail: 0,
                max_attempts: None,
            },
        }
    }
}

fn request<J: Job>(job: J, spec: Spec, key: Option<&str>) -> Enqueue<J> {
    let mut e = Enqueue::new(job);
    if let Some(attempts) = spec.max_attempts {
        e = e.with_max_attempts(attempts);
    }
    if let Some(key) = key {
        e = e.with_unique_key(key);
    }
    e
}

async fn enqueue<B: ChaosBackend>(
    pool: &sqlx::Pool<B>,
    how: &str,
    key: Option<String>,
    jobs: &[(u64, bool, Spec)],
) -> Result<Vec<(Uuid, bool)>, String>
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let err = |e: sk_runtime::Error| e.to_string();
    match how {
        "batch" => {
            // One statement per job type; the two batches commit separately.
            let plain: Vec<Enqueue<Chaos>> = jobs
                .iter()
                .filter(|j| !j.1)
                .map(|&(n, _, s)| request(Chaos::new(n, s.millis, s.fail), s, None))
                .collect();
            let tx: Vec<Enqueue<B::TxJob>> = jobs
                .iter()
                .filter(|j| j.1)
                .map(|&(n, _, s)| request(B::tx_job(n, s.millis, s.fail), s, None))
                .collect();
            let mut plain_ids = Enqueue::<Chaos>::enqueue_many(pool, plain)
                .await
                .map_err(err)?
                .into_iter();
            let mut tx_ids = Enqueue::<B::TxJob>::enqueue_many(pool, tx)
                .await
                .map_err(err)?
                .into_iter();
            Ok(jobs
                .iter()
                .map(|j| {
                    (
                        if j.1 { tx_ids.next() } else { plain_ids.next() }.unwrap(),
                        true,
                    )
                })
                .collect())
        }
        "tx-commit" | "tx-rollback" => {
            let (n, with_tx, s) = jobs[0];
            let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
            let id = if with_tx {
                request(B::tx_job(n, s.millis, s.fail), s, None)
                    .enqueue(&mut tx)
                    .await
            } else {
                request(Chaos::new(n, s.millis, s.fail), s, None)
                    .enqueue(&mut tx)
                    .await
            }
            .map_err(err)?;
            if how == "tx-commit" {
                tx.commit().await.map_err(|e| e.to_string())?;
            } else {
                tx.rollback().await.map_err(|e| e.to_string())?;
            }
            Ok(vec![(id, true)])
        }
        _ => {
            let (n, with_tx, s) = jobs[0];
            let key = key.as_deref();
            let done = if with_tx {
                request(B::tx_job(n, s.millis, s.fail), s, key)
                    .enqueue_outcome(pool)
                    .await
            } else {
                request(Chaos::new(n, s.millis, s.fail), s, key)
                    .enqueue_outcome(pool)
                    .await
            }
            .map_err(err)?;
            Ok(vec![(
                done.id,
                done.outcome == sk_runtime::EnqueueOutcome::Inserted,
            )])
        }
    }
}

/// Cancels, retries, pauses and resumes until `deadline`.
async fn control_loop(client: Client, mut rng: Rng, deadline: Instant, recorded: Shared) {
    while Instant::now() < deadline {
        tokio::time::sleep(rng.millis(50, 400)).await;
        let pick = {
            let r = recorded.lock().unwrap();
            let known: Vec<Uuid> = r
                .enqueues
                .iter()
                .rev()
                .take(200)
                .filter_map(|e| e.result.as_ref().ok().map(|x| x.0))
                .collect();
            let cancelled: Vec<Uuid> = r
                .controls
                .iter()
                .filter(|c| c.what == "cancel" && c.result.is_ok())
                .filter_map(|c| c.id)
                .collect();
            let from_cancelled = rng.chance(50) && !cancelled.is_empty();
            let list = if from_cancelled { cancelled } else { known };
            (!list.is_empty()).then(|| list[rng.range(0, list.len() as u64) as usize])
        };
        let what = match rng.range(0, 100) {
            0..=54 => "cancel",
            55..=84 => "retry",
            _ => "pause",
        };
        if what == "pause" {
            let hold = rng.millis(100, 800);
            let invoked = micros();
            let result = client
                .pause("chaos")
                .await
                .map(|b| b.to_string())
                .map_err(|e| e.to_string());
            push(&recorded, "pause", None, invoked, result);
            tokio::time::sleep(hold).await;
            let invoked = micros();
            let result = client
                .resume("chaos")
                .await
                .map(|b| b.to_string())
                .map_err(|e| e.to_string());
            push(&recorded, "resume", None, invoked, result);
            continue;
        }
        let Some(id) = pick else { continue };
        let invoked = micros();
        let result = if what == "cancel" {
            client.cancel(id).await.map(|o| format!("{o:?}"))
        } else {
            client.retry(id).await.map(|o| format!("{o:?}"))
        }
        .map_err(|e| e.to_string());
        push(&recorded, what, Some(id), invoked, result);
    }
}

fn push(
    recorded: &Shared,
    what: &'static str,
    id: Option<Uuid>,
    invoked: i64,
    result: Result<String, String>,
) {
    recorded.lock().unwrap().controls.push(ControlOp {
        what,
        id,
        invoked,
        returned: micros(),
        result,
    });
}

/// Reads the workers' histories in `dir`.
fn read_runs(dir: &Path) -> Vec<Run> {
    let mut starts: HashMap<(String, Uuid, i32), Run> = HashMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(generation) = name
            .strip_prefix("history-")
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        let worker: usize = generation[1..generation.find('g').unwrap()]
            .parse()
            .unwrap();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("{name}: a history line that is not JSON ({e}): {line}")
            });
            let id: Uuid = v["id"].as_str().unwrap().parse().unwrap();
            let attempt = v["attempt"].as_i64().unwrap() as i32;
            let t = v["t"].as_i64().unwrap();
            let key = (generation.to_owned(), id, attempt);
            match v["op"].as_str().unwrap() {
                "start" => {
                    starts.insert(
                        key,
                        Run {
                            n: v["n"].as_u64().unwrap(),
                            id,
                            attempt,
                            worker,
                            generation: generation.to_owned(),
                            claimed: v["claimed"].as_i64().unwrap(),
                            start: t,
                            end: None,
                        },
                    );
                }
                _ => {
                    let run = starts.get_mut(&key).expect("a run's end follows its start");
                    run.end = Some((t, v["result"].as_str().unwrap_or("?").to_owned()));
                }
            }
        }
    }
    let mut runs: Vec<Run> = starts.into_values().collect();
    runs.sort_by_key(|r| r.start);
    runs
}

/// The database's record of a job at the end.
struct Final {
    /// The job's number: from its payload, or (a succeeded job keeps none) from the
    /// enqueue that returned its id or a run of it; `None` when nothing names it.
    n: Option<u64>,
    status: JobStatus,
    finalized_at: Option<i64>,
    /// Whether it writes in its own transaction.
    tx: bool,
}

fn status_name(status: JobStatus) -> String {
    format!("{status:?}").to_lowercase()
}

/// Whether a job in `status` has ended: succeeded, failed for good, or cancelled.
fn ended(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Processed | JobStatus::Fatal | JobStatus::Cancelled
    )
}

fn time(t: i64) -> String {
    chrono::DateTime::from_timestamp_micros(t)
        .map_or_else(|| t.to_string(), |d| d.format("%H:%M:%S%.6f").to_string())
}

/// Checks the history against the database's final state.
async fn check<B: ChaosBackend>(
    db: &Db<B>,
    client: &Client,
    dir: &Path,
    recorded: &Recorded,
    lease: Duration,
) -> Summary
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let runs = read_runs(dir);
    // The final state of every job in the chaos queue.
    let mut finals: HashMap<Uuid, Final> = HashMap::new();
    let filter = JobFilter::new().queue("chaos");
    let mut after = None;
    loop {
        let page = client
            .jobs(&filter, after, sk_runtime::MAX_PAGE)
            .await
            .unwrap();
        for job in &page.jobs {
            let record = client.job(job.id).await.unwrap().unwrap();
            let payload: Option<serde_json::Value> = record
                .payload
                .as_deref()
                .and_then(|p| serde_json::from_str(p).ok());
            finals.insert(
                job.id,
                Final {
                    n: payload.and_then(|p| p["n"].as_u64()),
                    status: record.status(),
                    finalized_at: record.finalized_at.map(|t| t.timestamp_micros()),
                    tx: job.task_type == B::TxJob::TASK_TYPE,
                },
            );
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let effects: HashMap<u64, usize> = db
        .texts(B::EFFECTS_BY_JOB)
        .await
        .iter()
        .map(|t| {
            let (n, c) = t.split_once(':').unwrap();
            (n.parse().unwrap(), c.parse().unwrap())
        })
        .collect();
    let named = recorded
        .enqueues
        .iter()
        .filter_map(|e| match e.result {
            Ok((id, true)) if e.how != "tx-rollback" => Some((id, e.n)),
            _ => None,
        })
        .chain(runs.iter().map(|r| (r.id, r.n)));
    for (id, n) in named {
        if let Some(f) = finals.get_mut(&id) {
            f.n.get_or_insert(n);
        }
    }
    let mut violations: Vec<(u64, String)> = Vec::new();
    let by_n: HashMap<u64, Uuid> = finals
        .iter()
        .filter_map(|(id, f)| Some((f.n?, *id)))
        .collect();
    let final_status = |id: &Uuid| finals.get(id).map(|f| f.status);

    // Enqueues.
    for e in &recorded.enqueues {
        let stored = by_n.get(&e.n);
        match (&e.result, e.how) {
            (Ok(_), "tx-rollback") => {
                if stored.is_some() || runs.iter().any(|r| r.n == e.n) {
                    violations.push((e.n, "an enqueue rolled back left a job or a run".into()));
                }
            }
            (Ok((id, true)), _) => match finals.get(id) {
                None => violations.push((e.n, format!("a committed enqueue's job {id} is gone"))),
                Some(f) if f.n != Some(e.n) => {
                    violations.push((e.n, format!("job {id} holds job {:?} instead", f.n)));
                }
                Some(f) if !ended(f.status) || f.finalized_at.is_none() => {
                    violations.push((
                        e.n,
                        format!(
                            "job {id} did not reach a final state: {}",
                            status_name(f.status)
                        ),
                    ));
                }
                Some(_) => {}
            },
            (Ok((id, false)), _) => {
                // A duplicate of a live job's key: nothing of its own is stored.
                if stored.is_some() {
                    violations.push((e.n, format!("a duplicate of {id} was stored")));
                }
            }
            (Err(_), _) => {
                if let Some(f) = stored.and_then(|id| finals.get(id)) {
                    if !ended(f.status) {
                        violations.push((e.n, "an indeterminate enqueue's job did not end".into()));
                    }
                }
            }
        }
    }
    // Runs. A run's claim time is the worker's clock's: trusted unless that clock was
    // moved ahead around the run.
    let clock_moved = |r: &Run| {
        recorded.faults.iter().any(|f| {
            f.kind == "clock"
                && f.worker == Some(r.worker)
                && f.start <= r.start
                && f.end >= r.start - 10_000_000
        })
    };
    let mut runs_by_id: HashMap<Uuid, Vec<&Run>> = HashMap::new();
    for r in &runs {
        runs_by_id.entry(r.id).or_default().push(r);
        match finals.get(&r.id) {
            None => violations.push((
                r.n,
                format!("a run of {} whose job is not in the database", r.id),
            )),
            Some(f) => {
                // A cancel takes its time before its statement, which may find the job
                // claimed just after that time: its final state is committed by the time
                // the call returns.
                let cancelled_by = |at: i64| {
                    recorded
                        .controls
                        .iter()
                        .filter(|c| c.what == "cancel" && c.id == Some(r.id))
                        .filter(|c| {
                            c.result
                                .as_deref()
                                .is_ok_and(|o| o.starts_with("Cancelled"))
                        })
                        .filter(|c| c.invoked <= at && at <= c.returned)
                        .map(|c| c.returned)
                        .max()
                        .unwrap_or(at)
                };
                let final_at = f.finalized_at.map(|at| {
                    if f.status == JobStatus::Cancelled {
                        cancelled_by(at)
                    } else {
                        at
                    }
                });
                if final_at.is_some_and(|at| r.claimed > at) && !clock_moved(r) {
                    violations.push((
                        r.n,
                        format!(
                            "attempt {} was claimed at {} after the job's final state at {}",
                            r.attempt,
                            time(r.claimed),
                            time(final_at.unwrap())
                        ),
                    ));
                }
            }
        }
    }
    let lease_us = lease.as_micros() as i64;
    let slack_us = 50_000;
    // When a run ended: its end, or its process's death.
    let ended_at = |r: &Run| {
        r.end
            .as_ref()
            .map(|e| e.0)
            .or_else(|| recorded.deaths.get(&r.generation).copied())
            .unwrap_or(i64::MAX)
    };
    for (id, rs) in &runs_by_id {
        // In claim order: `a` held the lease first, `b` claimed after it. (By start time
        // the later claim may come first: a worker whose clock is ahead claims a job
        // another has just claimed and starts it a moment sooner.)
        let mut rs = rs.clone();
        rs.sort_by_key(|r| (r.attempt, r.start));
        for (k, a) in rs.iter().enumerate() {
            for b in &rs[k + 1..] {
                if b.start >= ended_at(a) || a.start >= ended_at(b) {
                    continue;
                }
                // The first run saw its lease lost (or its job cancelled) and stopped.
                let stopped = a.end.as_ref().is_some_and(|e| e.1 == "stopped");
                // Its lease counts from its claim (by its worker's clock), which may be
                // well before the run started: a claim held up by a partition arrives
                // with a lease that has run out.
                let leased = a.claimed.min(a.start);
                let excused = stopped
                    || recorded.faults.iter().any(|f| {
                        let on_a = f.worker.is_none_or(|w| w == a.worker) && f.kind != "clock";
                        let clock_on_b = f.kind == "clock" && f.worker == Some(b.worker);
                        (on_a
                            && f.end >= leased - lease_us
                            && f.start <= b.start - lease_us * 2 / 3 + slack_us)
                            || (clock_on_b && f.start <= b.start && f.end >= leased - lease_us)
                    });
                if !excused {
                    violations.push((
                        a.n,
                        format!(
                            "job {id}: attempt {} (from {}) overlaps attempt {} (from {}) with no fault that could end its lease",
                            a.attempt,
                            time(a.start),
                            b.attempt,
                            time(b.start)
                        ),
                    ));
                }
            }
        }
    }
    // Cancels: acked and not retried since → ends cancelled.
    for c in recorded.controls.iter().filter(|c| c.what == "cancel") {
        let (Some(id), Ok(outcome)) = (c.id, &c.result) else {
            continue;
        };
        if !outcome.starts_with("Cancelled") {
            continue;
        }
        let retried_since = recorded
            .controls
            .iter()
            .any(|r| r.what == "retry" && r.id == Some(id) && r.invoked >= c.invoked);
        if !retried_since && final_status(&id) != Some(JobStatus::Cancelled) {
            let n = finals.get(&id).and_then(|f| f.n).unwrap_or(0);
            violations.push((
                n,
                format!(
                    "job {id} was cancelled ({outcome}) but ended {}",
                    final_status(&id).map_or_else(|| "missing".into(), status_name)
                ),
            ));
        }
    }
    // The application's writes.
    for (id, f) in &finals {
        let Some(n) = f.n else {
            violations.push((
                0,
                format!(
                    "job {id} ({}) was never enqueued nor run",
                    status_name(f.status)
                ),
            ));
            continue;
        };
        let writes = effects.get(&n).copied().unwrap_or(0);
        let expected = usize::from(f.tx && f.status == JobStatus::Processed);
        if writes != expected {
            violations.push((
                n,
                format!(
                    "job {id} ended {} with {writes} application writes (expected {expected})",
                    status_name(f.status)
                ),
            ));
        }
    }
    // Unique keys: a job inserted with a key while another job with it was live.
    let mut keyed: BTreeMap<&str, Vec<(&EnqueueOp, Uuid)>> = BTreeMap::new();
    for e in &recorded.enqueues {
        if let (Some(key), Ok((id, true))) = (&e.key, &e.result) {
            keyed.entry(key).or_default().push((e, *id));
        }
    }
    // A job retried may live again after another took its key; those are left out.
    let retried: std::collections::HashSet<Uuid> = recorded
        .controls
        .iter()
        .filter(|c| c.what == "retry" && c.result.as_deref() == Ok("Retried"))
        .filter_map(|c| c.id)
        .collect();
    for jobs in keyed.values() {
        for (a, a_id) in jobs {
            for (b, b_id) in jobs {
                // a was stored before b was asked for and still waiting when b was stored:
                // a was claimed after b's enqueue returned.
                let a_waited = runs_by_id
                    .get(a_id)
                    .is_some_and(|rs| rs.iter().any(|r| r.claimed > b.returned && !clock_moved(r)));
                if a_id != b_id
                    && a.returned < b.invoked
                    && a_waited
                    && !retried.contains(a_id)
                    && !retried.contains(b_id)
                {
                    violations.push((
                        b.n,
                        format!("jobs {a_id} and {b_id} held key {:?} at once", b.key),
                    ));
                }
            }
        }
    }

    let mut summary = Summary {
        operations: recorded.enqueues.len()
            + recorded.controls.len()
            + runs.len()
            + runs.iter().filter(|r| r.end.is_some()).count(),
        jobs: finals.len(),
        runs: runs.len(),
        reran: runs_by_id.values().filter(|r| r.len() > 1).count(),
        ..Summary::default()
    };
    for f in &recorded.faults {
        *summary.faults.entry(f.kind).or_default() += 1;
    }
    for f in finals.values() {
        *summary.finals.entry(status_name(f.status)).or_default() += 1;
    }
    for (n, what) in violations {
        summary.violations.push(format!(
            "{what}\n{}",
            job_history(n, recorded, &runs, &by_n)
        ));
    }
    summary
}

/// Everything the history holds on job `n`, in time order.
fn job_history(n: u64, recorded: &Recorded, runs: &[Run], by_n: &HashMap<u64, Uuid>) -> String {
    let id = by_n.get(&n).copied();
    let mut lines: Vec<(i64, String)> = Vec::new();
    for e in recorded.enqueues.iter().filter(|e| e.n == n) {
        lines.push((
            e.invoked,
            format!(
                "enqueue {} ({}{}) → {:?} at {}",
                e.n,
                e.how,
                e.key
                    .as_deref()
                    .map(|k| format!(" key {k}"))
                    .unwrap_or_default(),
                e.result,
                time(e.returned)
            ),
        ));
    }
    for r in runs.iter().filter(|r| r.n == n || Some(r.id) == id) {
        lines.push((
            r.start,
            format!(
                "run {} attempt {} on {} (worker {}) → {:?}",
                r.id,
                r.attempt,
                r.generation,
                r.worker,
                r.end
                    .as_ref()
                    .map(|(t, res)| format!("{res} at {}", time(*t)))
            ),
        ));
    }
    for c in recorded
        .controls
        .iter()
        .filter(|c| c.id.is_some() && c.id == id)
    {
        lines.push((
            c.invoked,
            format!(
                "{} {:?} → {:?} at {}",
                c.what,
                c.id,
                c.result,
                time(c.returned)
            ),
        ));
    }
    let span =
        lines.iter().map(|l| l.0).min().unwrap_or(0)..=lines.iter().map(|l| l.0).max().unwrap_or(0);
    for f in &recorded.faults {
        if f.end >= *span.start() - 5_000_000 && f.start <= *span.end() {
            lines.push((
                f.start,
                format!("fault {} on {:?} until {}", f.kind, f.worker, time(f.end)),
            ));
        }
    }
    lines.sort_by_key(|l| l.0);
    let mut out = String::new();
    for (t, line) in lines {
        let _ = writeln!(out, "  {} {line}", time(t));
    }
    out
}
