//! The primary of a replicated PostgreSQL goes silent, with workers and an enqueuer at work:
//! what it loses, doubles, how long work stops on each worker, what the enqueuer sees, how
//! long a stop takes during the partition, and how long the old node takes to rejoin.
//!
//! ```text
//! cargo build --release -p sk-tests --bin sk-fault-worker --example silent_failover
//! target/release/examples/silent_failover [--rounds 3] [--jobs 4000] [--workers 3] [--default-monitor]
//! ```
//! Needs root (network namespaces) and Debian's `postgresql-15-auto-failover`.
//!
//! A pg_auto_failover cluster (the tests' `cluster`: monitor and two nodes, a synchronous
//! standby, the monitor tuned as docs/scaling.md says; `--default-monitor` for its
//! defaults) and `--workers` worker processes (`sk-fault-worker --job effect`, 16 at a
//! time, sk's default lease and bounds) plus an enqueuer process (`--enqueue`: a job a
//! call, a call every 5 ms), all in a network namespace that reaches each node by a link
//! of its own (`sk_tests::netns`). Each round preloads `--jobs` jobs of 100 ms, each of
//! which writes one row in its own transaction; once a third is done the primary's host
//! goes silent: every packet of its link dropped and its `pg_autoctl` and PostgreSQL
//! frozen (SIGSTOP), so that neither the workers nor the monitor nor the standby hear from
//! it. A second later the first worker gets SIGTERM. The monitor promotes the standby;
//! the round waits for every job (the preload and every acknowledged enqueue) to end, then
//! fences the old primary (SIGKILL), lets its link pass again and restarts it, which
//! rejoins as the standby (a copy of the new primary: pg_rewind fails on this packaging).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sk_runtime::job;
use sk_tests::cluster::Cluster;
use sk_tests::netns::Links;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

/// The worker binary's transaction job, declared here to enqueue it.
#[job(max_attempts = 1000, backoff = "constant", backoff_base = "50ms")]
async fn effect_pg(millis: u64) {
    let _ = millis;
}

const WORK_MS: u64 = 100;
/// The stopped worker's grace period.
const GRACE: Duration = Duration::from_secs(3);

struct Args {
    rounds: usize,
    jobs: u32,
    workers: usize,
    default_monitor: bool,
    worker_bin: PathBuf,
}

fn args() -> Result<Args, String> {
    let worker_bin = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("sk-fault-worker")))
        .filter(|bin| bin.exists())
        .ok_or(
            "sk-fault-worker is not built beside this program; build both with\n  \
                cargo build --release -p sk-tests --bin sk-fault-worker --example silent_failover",
        )?;
    let mut a = Args {
        rounds: 3,
        jobs: 4000,
        workers: 3,
        default_monitor: false,
        worker_bin,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut number = || {
            it.next()
                .ok_or(format!("{flag} needs a value"))?
                .parse::<u32>()
                .map_err(|e| format!("{flag}: {e}"))
        };
        match flag.as_str() {
            "--rounds" => a.rounds = number()? as usize,
            "--jobs" => a.jobs = number()?,
            "--workers" => a.workers = (number()? as usize).max(2),
            "--default-monitor" => a.default_monitor = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(a)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("silent_failover: {e}");
            return ExitCode::from(2);
        }
    };
    let mut cluster = Cluster::start(true).await;
    if args.default_monitor {
        cluster.monitor_defaults().await;
    }
    cluster.allow_from("10.0.0.0/8").await;
    let links = Links::create();
    let url = format!(
        "postgres://postgres@{}:{},{}:{}/postgres?target_session_attrs=read-write&sslmode=disable",
        links.host_ip(0),
        cluster.port(0),
        links.host_ip(1),
        cluster.port(1)
    );
    let dir = PathBuf::from(format!("target/tmp/silent-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = on_primary(&cluster).await;
    sk_runtime::migrate(&pool, &sk_runtime::Schema::default())
        .await
        .unwrap();
    for ddl in [
        "CREATE TABLE fault_runs (task_id uuid NOT NULL, attempt int NOT NULL, pid int NOT NULL,
                                  started_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        "CREATE TABLE fault_effects (task_id uuid NOT NULL)",
    ] {
        sqlx::query(ddl).execute(&pool).await.unwrap();
    }
    pool.close().await;
    println!(
        "silent failover: {} rounds of {} jobs, {} workers and an enqueuer, monitor {}",
        args.rounds,
        args.jobs,
        args.workers,
        if args.default_monitor {
            "defaults"
        } else {
            "tuned"
        }
    );
    let mut bad = 0;
    for round in 1..=args.rounds {
        let r = round_of(&args, &mut cluster, &links, &url, &dir, round).await;
        println!("silent failover round {round}: {}", r.line());
        bad += r.lost + r.written_twice;
    }
    if bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A pool on the node the monitor has as primary now (the program's own reads and
/// writes, from the host: never through the silent link or to the frozen node).
async fn on_primary(cluster: &Cluster) -> PgPool {
    let started = Instant::now();
    loop {
        if let Some(i) = cluster.primary().await {
            if let Ok(pool) = PgPoolOptions::new()
                .max_connections(2)
                .acquire_timeout(Duration::from_secs(2))
                .connect(&cluster.node_url(i))
                .await
            {
                return pool;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no primary for 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A count on `pool`, 0 when the call fails or takes over 2 s.
async fn count(pool: &PgPool, sql: &str, ids: &[Uuid]) -> i64 {
    let query = sqlx::query_scalar::<_, i64>(sql).bind(ids).fetch_one(pool);
    match tokio::time::timeout(Duration::from_secs(2), query).await {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

struct Round {
    jobs: usize,
    detected_s: f64,
    promoted_s: f64,
    /// Per still running worker: its first handler start on the new primary.
    resumed_s: Vec<f64>,
    stop_s: f64,
    enqueued: usize,
    failed_enqueues: usize,
    longest_enqueue_s: f64,
    lost: usize,
    written_twice: usize,
    ran_twice: i64,
    log_lines: Vec<usize>,
    longest_line: usize,
    rejoin_s: f64,
}

impl Round {
    fn line(&self) -> String {
        let r = |v: &[f64]| {
            v.iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        format!(
            "jobs {}, monitor saw it unhealthy after {:.1} s and promoted after {:.1} s, \
             workers resumed after {} s, SIGTERM exited after {:.2} s (grace {} s), \
             enqueues acknowledged {} failed {} longest {:.1} s, lost {}, written twice {}, \
             ran twice {}, WARN/ERROR lines per worker {}, longest log line {} chars, rejoin {:.1} s",
            self.jobs,
            self.detected_s,
            self.promoted_s,
            r(&self.resumed_s),
            self.stop_s,
            GRACE.as_secs(),
            self.enqueued,
            self.failed_enqueues,
            self.longest_enqueue_s,
            self.lost,
            self.written_twice,
            self.ran_twice,
            self.log_lines
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join("/"),
            self.longest_line,
            self.rejoin_s,
        )
    }
}

fn spawn(args: &Args, ns: &str, url: &str, log: &Path, extra: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(&args.worker_bin)
        .args(extra)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start sk-fault-worker")
}

fn signal(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
}

async fn exited(child: &mut Child, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if child.try_wait().unwrap().is_some() {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// A worker process in the namespace: transaction jobs, 16 at a time, sk's default lease
/// (the fault worker's own is 1 s) and call bound.
fn spawn_worker(args: &Args, links: &Links, url: &str, log: &Path, id: &str) -> Child {
    let grace = GRACE.as_millis().to_string();
    spawn(
        args,
        links.ns(),
        url,
        log,
        &[
            "--id",
            id,
            "--job",
            "effect",
            "--concurrency",
            "16",
            "--grace-ms",
            &grace,
            "--lease-ms",
            "30000",
        ],
    )
}

/// The enqueuer's outcomes: the acknowledged ids, the failed calls, the longest call in
/// milliseconds.
fn read_enqueue_log(path: &Path) -> (Vec<Uuid>, usize, u64) {
    let (mut ids, mut failed, mut longest_ms) = (Vec::new(), 0, 0u64);
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some("ok"), Some(id), Some(ms)) => {
                ids.push(id.parse().unwrap());
                longest_ms = longest_ms.max(ms.parse().unwrap());
            }
            (Some("err"), Some(ms), _) => {
                failed += 1;
                longest_ms = longest_ms.max(ms.parse().unwrap());
            }
            _ => panic!("an enqueue log line {line:?}"),
        }
    }
    (ids, failed, longest_ms)
}

/// Per worker pid, its first handler start recorded after `frozen_at`, in seconds after
/// `silent_at`; waits for every one.
async fn first_starts(
    pool: &PgPool,
    pids: &[i32],
    silent_at: DateTime<Utc>,
    frozen_at: DateTime<Utc>,
) -> Vec<f64> {
    let mut resumed_s = vec![f64::NAN; pids.len()];
    let waiting = Instant::now();
    while resumed_s.iter().any(|s| s.is_nan()) {
        for (i, pid) in pids.iter().enumerate() {
            if resumed_s[i].is_nan() {
                let first: Option<f64> = sqlx::query_scalar(
                    "SELECT extract(epoch FROM min(started_at) - $1)::float8 FROM fault_runs
                      WHERE pid = $2 AND started_at > $3",
                )
                .bind(silent_at)
                .bind(pid)
                .bind(frozen_at)
                .fetch_one(pool)
                .await
                .unwrap();
                if let Some(s) = first {
                    resumed_s[i] = s;
                }
            }
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(300),
            "a worker never resumed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    resumed_s
}

/// The WARN and ERROR lines of each log, and the longest line of all.
fn log_figures(logs: &[PathBuf]) -> (Vec<usize>, usize) {
    let (mut counts, mut longest) = (Vec::new(), 0);
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap();
        counts.push(
            text.lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .count(),
        );
        longest = longest.max(text.lines().map(str::len).max().unwrap_or(0));
    }
    (counts, longest)
}

async fn round_of(
    args: &Args,
    cluster: &mut Cluster,
    links: &Links,
    url: &str,
    dir: &Path,
    round: usize,
) -> Round {
    let pool = on_primary(cluster).await;
    sqlx::query("TRUNCATE fault_runs, fault_effects")
        .execute(&pool)
        .await
        .unwrap();
    let mut ids = EffectPg::enqueue_many(&pool, (0..args.jobs).map(|_| EffectPg::new(WORK_MS)))
        .await
        .unwrap();
    let primary = cluster.primary().await.expect("a primary");
    let worker_logs: Vec<PathBuf> = (0..args.workers)
        .map(|i| dir.join(format!("round{round}-w{i}.log")))
        .collect();
    let mut workers: Vec<Child> = worker_logs
        .iter()
        .enumerate()
        .map(|(i, log)| spawn_worker(args, links, url, log, &format!("sf-r{round}-w{i}")))
        .collect();
    let enqueue_log = dir.join(format!("round{round}-enqueued.txt"));
    let mut enqueuer = spawn(
        args,
        links.ns(),
        url,
        &dir.join(format!("round{round}-enqueuer.log")),
        &[
            "--enqueue",
            &enqueue_log.display().to_string(),
            "--poll-ms",
            &WORK_MS.to_string(),
        ],
    );
    let third = i64::from(args.jobs / 3);
    let effects = "SELECT count(*) FROM fault_effects WHERE task_id = ANY($1)";
    while count(&pool, effects, &ids).await < third {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The primary's host goes silent, to everyone.
    let silent_at: DateTime<Utc> = Utc::now();
    let silenced = Instant::now();
    links.silence(primary, true);
    cluster.freeze(primary);
    // A run recorded after this was recorded on the new primary.
    let frozen_at: DateTime<Utc> = Utc::now();
    drop(pool);
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(&workers[0], "-TERM");
    let mut first = workers.remove(0);
    let stop = tokio::spawn(async move { exited(&mut first, Duration::from_secs(60)).await });
    let (mut detected_s, mut promoted_s) = (None, None);
    while promoted_s.is_none() {
        if detected_s.is_none() && cluster.unhealthy(primary).await {
            detected_s = Some(silenced.elapsed().as_secs_f64());
        }
        if cluster.primary().await.is_some_and(|p| p != primary) {
            promoted_s = Some(silenced.elapsed().as_secs_f64());
        }
        assert!(
            silenced.elapsed() < Duration::from_secs(180),
            "no promotion in 3 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop_s = stop
        .await
        .unwrap()
        .map_or(f64::INFINITY, |took| took.as_secs_f64());
    let pool = on_primary(cluster).await;
    let pids: Vec<i32> = workers.iter().map(|w| w.id() as i32).collect();
    let resumed_s = first_starts(&pool, &pids, silent_at, frozen_at).await;

    // A little more enqueueing on the new primary, then every job to its end.
    tokio::time::sleep(Duration::from_secs(2)).await;
    signal(&enqueuer, "-TERM");
    exited(&mut enqueuer, Duration::from_secs(30))
        .await
        .expect("the enqueuer stopped");
    let (acknowledged, failed, longest_ms) = read_enqueue_log(&enqueue_log);
    let enqueued = acknowledged.len();
    ids.extend(acknowledged);
    let done_sql =
        "SELECT count(*) FROM sk_task_results_t WHERE task_status = 3 AND task_id = ANY($1)";
    let waiting = Instant::now();
    while count(&pool, done_sql, &ids).await < ids.len() as i64
        && waiting.elapsed() < Duration::from_secs(180)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let done = count(&pool, done_sql, &ids).await as usize;
    for w in &workers {
        signal(w, "-TERM");
    }
    for w in &mut workers {
        exited(w, Duration::from_secs(60))
            .await
            .expect("a worker stopped");
    }
    let written_twice = count(
        &pool,
        "SELECT count(*) FROM (SELECT task_id FROM fault_effects WHERE task_id = ANY($1)
           GROUP BY task_id HAVING count(*) > 1) d",
        &ids,
    )
    .await as usize;
    let ran_twice = count(
        &pool,
        "SELECT count(*) FROM (SELECT task_id FROM fault_runs WHERE task_id = ANY($1)
           GROUP BY task_id HAVING count(*) > 1) d",
        &ids,
    )
    .await;
    pool.close().await;
    let (log_lines, longest_line) = log_figures(&worker_logs);

    // The old primary fenced, its link back, and rejoined as the standby.
    cluster.kill(primary);
    links.silence(primary, false);
    let rejoining = Instant::now();
    cluster.restart(primary).await;
    Round {
        jobs: ids.len(),
        detected_s: detected_s.unwrap_or(f64::NAN),
        promoted_s: promoted_s.unwrap_or(f64::NAN),
        resumed_s,
        stop_s,
        enqueued,
        failed_enqueues: failed,
        longest_enqueue_s: longest_ms as f64 / 1000.0,
        lost: ids.len() - done,
        written_twice,
        ran_twice,
        log_lines,
        longest_line,
        rejoin_s: rejoining.elapsed().as_secs_f64(),
    }
}
