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
        let log = log_dir().join(format!("{id}.log"));
        let file = File::create(&log).unwrap();
        let child = Command::new(WORKER)
            .env("DATABASE_URL", url)
            // Everything at INFO, sqlx's too: a quiet start is part of what is tested.
            .env("RUST_LOG", "info")
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

async fn setup<B: TestBackend>(jobs: u32, millis: u64) -> (Db<B>, Vec<Uuid>)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let db = Db::<B>::new().await;
    db.execute(if B::BACKEND == "SQLite" {
        "CREATE TABLE fault_runs (task_id BLOB NOT NULL, attempt INTEGER NOT NULL, pid INTEGER NOT NULL,
                                  started_at TEXT NOT NULL)"
    } else if B::BACKEND == "MySQL" {
        "CREATE TABLE fault_runs (task_id BINARY(16) NOT NULL, attempt INT NOT NULL, pid INT NOT NULL,
                                  started_at DATETIME(6) NOT NULL, KEY (task_id))"
    } else {
        "CREATE TABLE fault_runs (task_id uuid NOT NULL, attempt int NOT NULL, pid int NOT NULL,
                                  started_at timestamptz NOT NULL DEFAULT clock_timestamp())"
    })
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_restarts_loses_nothing_and_finalizes_once() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 30_000;
    const DUE: u32 = JOBS * 9 / 10;
    const LEASE_MS: u64 = 1000;
    let (db, mut ids) = setup::<sqlx::Postgres>(DUE, 20).await;
    ids.extend(hold_reserve(&db, (DUE..JOBS).map(|_| Burn::new(20))).await);
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
    ];
    let mut victims = vec![Proc::spawn(&db.url, "kill-victim-0", &args)];
    let mut steady = [
        Proc::spawn(&db.url, "kill-steady-1", &args),
        Proc::spawn(&db.url, "kill-steady-2", &args),
    ];
    let started = Instant::now();
    let mut kills: Vec<(i32, DateTime<Utc>)> = Vec::new();
    let mut expiries: Vec<f64> = Vec::new();
    let mut held_at_kill = 0i64;
    for k in 1..=6 {
        let left = at_kill_point(&db, &mut rng, (k, 6), DUE).await;
        let victim = victims.last_mut().unwrap();
        assert!(victim.alive(), "the victim was running");
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        kills.push((victim.pid() as i32, Utc::now()));
        // What the kill stranded: jobs leased to the dead process, claimable again when
        // their lease runs out.
        let (held, remaining): (i64, Option<f64>) = sqlx::query_as(
            "SELECT count(*), extract(epoch FROM max(task_locked_until_ts) - clock_timestamp())::float8
             FROM sk_tasks_queue_t WHERE task_locked_by = $1",
        )
        .bind(&victim.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        held_at_kill += held;
        expiries.extend(remaining);
        report(&format!(
            "kill-9: kill {k} of pid {} with {left} jobs left",
            victim.pid()
        ));
        victims.push(Proc::spawn(&db.url, &format!("kill-victim-{k}"), &args));
    }
    release_reserve(&db).await;
    wait_processed(&db, JOBS as usize, Duration::from_secs(300)).await;
    let elapsed = started.elapsed();
    for p in victims.iter_mut().rev().take(1).chain(steady.iter_mut()) {
        p.signal("TERM");
        assert_eq!(
            p.exit_code(Duration::from_secs(30)).await,
            Some(0),
            "{} exits 0 on SIGTERM",
            p.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;

    // Runs cut short by a kill ran again, once their lease had run out.
    let killed_pids: Vec<i32> = kills.iter().map(|k| k.0).collect();
    let reruns: Vec<(i32, DateTime<Utc>)> = sqlx::query_as(
        "SELECT first.pid, next.started_at FROM fault_runs first
         JOIN LATERAL (SELECT started_at FROM fault_runs n WHERE n.task_id = first.task_id AND n.attempt > first.attempt
                       ORDER BY n.attempt LIMIT 1) next ON true
         WHERE first.pid = ANY($1)",
    )
    .bind(&killed_pids)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut recovery: Vec<f64> = reruns
        .iter()
        .map(|(pid, at)| {
            let killed_at = kills.iter().find(|k| k.0 == *pid).unwrap().1;
            (*at - killed_at).as_seconds_f64()
        })
        .collect();
    recovery.sort_by(f64::total_cmp);
    expiries.sort_by(f64::total_cmp);
    assert!(
        !recovery.is_empty(),
        "some runs were cut short by the kills"
    );
    let lease = LEASE_MS as f64 / 1000.0;
    // Stranded leases ran out within one lease of the kill (heartbeats extend by one lease).
    assert!(
        expiries.iter().all(|e| *e <= lease + 0.05),
        "a lease outlived the kill by more than the lease: {expiries:?}"
    );
    // The last heartbeat before a kill extended the lease from at most a third of a lease
    // earlier, so a rerun cannot start sooner than 2/3 of a lease after the kill.
    assert!(
        recovery[0] >= lease * 2.0 / 3.0 - 0.05,
        "a rerun started before the lease ran out: {recovery:?}"
    );
    // The job record: a job that ran again shows the attempt it lost (the killed worker's),
    // and its first attempt is the first run's claim, not the rerun's.
    let (reran_without_lost, first_too_late, lost_on_record): (i64, i64, i64) = sqlx::query_as(
        "WITH runs AS (SELECT task_id, count(*) AS n, min(started_at) AS first FROM fault_runs GROUP BY task_id)
         SELECT count(*) FILTER (WHERE runs.n > 1 AND NOT r.task_errors @> '[{\"outcome\": \"lost\"}]'),
                count(*) FILTER (WHERE r.task_first_processing_attempted_at_ts > runs.first),
                count(*) FILTER (WHERE r.task_errors @> '[{\"outcome\": \"lost\"}]')
         FROM runs JOIN sk_task_results_t r USING (task_id)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (reran_without_lost, first_too_late),
        (0, 0),
        "lost attempts and first-attempt times on record"
    );
    report(&format!(
        "kill-9: seed={seed} jobs={JOBS} workers=3 kills={k} restarts={k} lost=0 finalized_twice=0 reran_jobs={reran} \
         leased_to_killed={held_at_kill} lease_s={lease:.1} lease_left_at_kill_s(max)={:.2} \
         rerun_after_kill_s(min/p50/max)={:.2}/{:.2}/{:.2} (lease expiry, then FIFO behind older waiting jobs) burn_down_s={:.1} \
         jobs_with_a_lost_attempt_on_record={lost_on_record}",
        expiries.last().copied().unwrap_or(f64::NAN),
        recovery[0],
        percentile(&recovery, 0.5),
        recovery.last().unwrap(),
        elapsed.as_secs_f64(),
        k = kills.len(),
    ));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_are_reconnected_and_nothing_is_lost() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 10_000;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 5).await;
    let args = [
        "--concurrency",
        "8",
        "--lease-ms",
        "2000",
        "--poll-ms",
        "100",
    ];
    let mut workers = [
        Proc::spawn(&db.url, "term-a", &args),
        Proc::spawn(&db.url, "term-b", &args),
    ];
    let mut terminated = 0;
    for round in 0..3 {
        wait_processed(&db, 1500 + round * 2000, Duration::from_secs(60)).await;
        terminated += <sqlx::Postgres as ChaosBackend>::terminate(&db.pool)
            .await
            .unwrap();
    }
    wait_processed(&db, JOBS as usize, Duration::from_secs(120)).await;
    for w in &mut workers {
        assert!(w.alive(), "{} survived the terminations", w.id);
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
        let log = w.log_text();
        assert!(
            log.contains("listener connection lost") || log.contains("listener failed"),
            "{} noticed: {log}",
            w.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;
    let retried: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sk_task_results_t WHERE task_error_count > 0")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    report(&format!(
        "db-terminate: jobs={JOBS} workers=2 rounds=3 backends_terminated={terminated} lost=0 finalized_twice=0 \
         reran_jobs={reran} jobs_with_a_recorded_error={retried}"
    ));
    db.drop().await;
}

/// MySQL/MariaDB: every connection of the workers killed (`KILL CONNECTION`), three
/// times during a burn-down; the pools replace them and nothing is lost or run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_connections_are_replaced_and_nothing_is_lost() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 10_000;
    let (db, ids) = setup::<sqlx::MySql>(JOBS, 5).await;
    let args = [
        "--concurrency",
        "8",
        "--lease-ms",
        "2000",
        "--poll-ms",
        "100",
    ];
    let mut workers = [
        Proc::spawn(&db.url, "mysql-kill-conn-a", &args),
        Proc::spawn(&db.url, "mysql-kill-conn-b", &args),
    ];
    let mut killed = 0;
    for round in 0..3 {
        wait_processed(&db, 1500 + round * 2000, Duration::from_secs(60)).await;
        killed += <sqlx::MySql as ChaosBackend>::terminate(&db.pool)
            .await
            .unwrap();
    }
    wait_processed(&db, JOBS as usize, Duration::from_secs(120)).await;
    for w in &mut workers {
        assert!(w.alive(), "{} survived the kills", w.id);
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    }
    assert!(killed > 0, "connections were killed");
    let reran = assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "mysql db-kill: jobs={JOBS} workers=2 rounds=3 connections_killed={killed} lost=0 finalized_twice=0 reran_jobs={reran}"
    ));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_database_is_away_keeps_trying_without_spinning() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 3000;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 2).await;
    let proxy = Proxy::start().await;
    let via_proxy = db.url.replace(":5432/", &format!(":{}/", proxy.port));
    assert_ne!(via_proxy, db.url, "the test database URL names port 5432");
    let mut w = Proc::spawn(
        &via_proxy,
        "away",
        &[
            "--concurrency",
            "8",
            "--poll-ms",
            "100",
            "--lease-ms",
            "2000",
        ],
    );
    wait_processed(&db, 500, Duration::from_secs(60)).await;

    proxy.switch.down();
    let down_at = processed(&db).await;
    let cpu_before = w.cpu_seconds();
    let outage = Instant::now();
    // Whichever stage meets the outage first reports it: the claim when slots are free,
    // the completer when every slot holds a finished job waiting to be recorded.
    wait_until(
        "the worker to log failed database calls",
        Duration::from_secs(30),
        || async { (w.log_text().matches(", retrying in ").count() >= 3).then_some(()) },
    )
    .await;
    fault_pause(Duration::from_secs(3)).await; // the outage goes on
    let outage_s = outage.elapsed().as_secs_f64();
    let cpu = w.cpu_seconds() - cpu_before;
    assert!(
        w.alive(),
        "the worker did not exit while the database was away"
    );
    assert!(
        cpu < 0.25 * outage_s,
        "the worker spun: {cpu:.2} s CPU in {outage_s:.1} s"
    );
    let log = w.log_text();
    let failures = log.matches(", retrying in ").count();
    assert!(
        log.contains(&format!(
            "cannot reach the database at 127.0.0.1:{}/",
            proxy.port
        )),
        "the outage is named in sk's words, with the address: {log}"
    );
    assert!(
        log.contains("retrying in 100ms") && log.contains("retrying in 200ms"),
        "backoff grows: {log}"
    );

    // Then a database that does not answer at all: the pool's connections time out
    // (its acquire timeout, 5 s), and every line that meets it names the cause, in sk's
    // words, never a bare "pool timed out" (the stored schedules' read and the
    // listener's reconnect said only that).
    proxy.switch.hang();
    let hung_from = w.log_text().len();
    wait_until(
        "the stored schedules' read to meet the pool's timeout",
        Duration::from_secs(30),
        || async {
            w.log_text()[hung_from..]
                .lines()
                .any(|l| {
                    l.contains("cannot read the stored schedules") && l.contains("no answer within")
                })
                .then_some(())
        },
    )
    .await;
    let log = w.log_text();
    let bare: Vec<&str> = log[hung_from..]
        .lines()
        .filter(|l| l.contains("pool timed out") && !l.contains("cannot reach the database"))
        .collect();
    assert!(
        bare.is_empty(),
        "a pool timeout without its cause: {bare:#?}"
    );

    proxy.switch.restore();
    wait_processed(&db, JOBS as usize, Duration::from_secs(60)).await;
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    assert!(
        w.log_text().contains(" again after "),
        "the recovery is logged"
    );
    let reran = assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "db-away: jobs={JOBS} processed_before_outage={down_at} outage_s={outage_s:.1} retries_logged={failures} \
         cpu_s_during_outage={cpu:.3} lost=0 finalized_twice=0 reran_jobs={reran}"
    ));
    db.drop().await;
}

/// The reply to a completion's COMMIT is lost on its way back (the connection closes
/// after the server committed): the worker retries the write, finds its own results
/// already recorded, and says so; it neither counts them as fenced nor runs them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_commit_reply_is_lost_is_recorded_once() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 200;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 1).await;
    let proxy = Proxy::start().await;
    let via_proxy = db.url.replace(":5432/", &format!(":{}/", proxy.port));
    proxy.lose_a_commit_reply();
    let mut w = Proc::spawn(
        &via_proxy,
        "lost-reply",
        &["--concurrency", "4", "--poll-ms", "100"],
    );
    wait_until(
        "a completion's COMMIT reply to be lost",
        Duration::from_secs(30),
        || async { proxy.lost_a_commit_reply().then_some(()) },
    )
    .await;
    wait_processed(&db, JOBS as usize, Duration::from_secs(60)).await;
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    let log = w.log_text();
    let recognised = log
        .matches(
            "the job's result was recorded by an earlier try, whose reply was lost; recorded once",
        )
        .count();
    assert!(
        recognised >= 1,
        "the retried completion recognised its own results: {log}"
    );
    assert!(
        !log.contains("lost the job's lease"),
        "its own results were taken for a lost lease: {log}"
    );
    let fenced = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = 'lost-reply' AND metric_id = 'jobs_fenced'",
            None,
        )
        .await;
    assert_eq!(fenced.unwrap_or(0), 0, "no result counted as fenced");
    let reran = assert_each_job_finished_once(&db, &ids).await;
    assert_eq!(reran, 0, "no job ran twice");
    report(&format!(
        "lost-commit-reply: jobs={JOBS} results_recognised={recognised} fenced=0 reran=0"
    ));
    db.drop().await;
}

on_backends! {
    /// A worker stopped (SIGSTOP) in the middle of a job past its lease: another takes the
    /// job over and finishes it; the first, resumed, has its late result fenced.
    fn a_stale_worker_resumed_after_its_lease_is_fenced => stale_worker_on [postgres, mysql]
}

async fn stale_worker_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    let (db, ids) = setup::<B>(1, 1500).await;
    let id = ids[0];
    let mut a = Proc::spawn(
        &db.url,
        "stale-a",
        &["--concurrency", "1", "--lease-ms", "600", "--poll-ms", "50"],
    );
    wait_runs_started(&db, 1, "worker A to start the job").await;
    a.signal("STOP");
    let stopped_at = Utc::now();
    let mut b = Proc::spawn(
        &db.url,
        "stale-b",
        &["--concurrency", "4", "--lease-ms", "600", "--poll-ms", "50"],
    );
    let r = db
        .wait_job(id, Duration::from_secs(30), |r| {
            r.status() == JobStatus::Processed
        })
        .await;
    a.signal("CONT");
    // A wakes with its sleep over, tries to finalize, and is refused.
    wait_until(
        "worker A's refused result",
        Duration::from_secs(30),
        || async {
            a.log_text()
                .contains("result refused: this worker lost the job's lease")
                .then_some(())
        },
    )
    .await;
    for w in [&mut a, &mut b] {
        w.signal("TERM");
        assert_eq!(w.exit_code(Duration::from_secs(30)).await, Some(0));
    }
    let fenced = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = 'stale-a' AND metric_id = 'jobs_fenced'",
            None,
        )
        .await;
    assert_eq!(fenced, Some(1));
    let b_started = db
        .time("SELECT started_at FROM fault_runs WHERE attempt = 2", None)
        .await
        .expect("B's run");
    let takeover = (b_started - stopped_at).as_seconds_f64();
    let runs = (
        db.scalar("SELECT count(*) FROM fault_runs", None).await,
        db.scalar(
            "SELECT CAST(pid AS BIGINT) FROM fault_runs WHERE attempt = 1",
            None,
        )
        .await,
        db.scalar(
            "SELECT CAST(pid AS BIGINT) FROM fault_runs WHERE attempt = 2",
            None,
        )
        .await,
    );
    assert_eq!(
        runs,
        (Some(2), Some(i64::from(a.pid())), Some(i64::from(b.pid())))
    );
    // A's attempt is on record as lost (one error); B's result is the job's.
    let after = db.job(id).await;
    assert_eq!(
        (after.status(), after.finalized_at, after.error_count),
        (JobStatus::Processed, r.finalized_at, 1)
    );
    assert_eq!(
        after
            .attempts()
            .iter()
            .map(|a| (a.attempt, a.outcome, a.worker.as_deref()))
            .collect::<Vec<_>>(),
        [
            (1, sk_runtime::AttemptOutcome::Lost, Some("stale-a")),
            (2, sk_runtime::AttemptOutcome::Processed, Some("stale-b")),
        ]
    );
    assert_each_job_finished_once(&db, &ids).await;
    assert!(
        takeover >= 0.6 * 2.0 / 3.0 - 0.05,
        "B took over before A's lease ran out: {takeover:.2} s"
    );
    report(&format!(
        "{label} stale-worker: A SIGSTOPped mid-job (lease 0.6 s); B took the job over {takeover:.2} s later and finished it; \
         A resumed: its late result was fenced (jobs_fenced=1), one final result"
    ));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_running_jobs_and_gives_the_rest_back() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 400;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 200).await;
    let mut a = Proc::spawn(
        &db.url,
        "term-graceful",
        &[
            "--concurrency",
            "8",
            "--grace-ms",
            "5000",
            "--lease-ms",
            "30000",
        ],
    );
    wait_processed(&db, 40, Duration::from_secs(30)).await;
    let asked = Instant::now();
    a.signal("TERM");
    assert_eq!(a.exit_code(Duration::from_secs(10)).await, Some(0));
    let stop_s = asked.elapsed().as_secs_f64();
    // Everything A started has its result; nothing is still leased to A.
    let (started_unfinished, held): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM fault_runs f JOIN sk_task_results_t r USING (task_id) WHERE r.task_status <> 3),
                (SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (started_unfinished, held),
        (0, 0),
        "running jobs finished, the rest given back"
    );
    let done_by_a = processed(&db).await;

    // Interrupted past a short grace period: given back at once, not after the 30 s lease.
    let mut b = Proc::spawn(
        &db.url,
        "term-short-grace",
        &[
            "--concurrency",
            "8",
            "--grace-ms",
            "100",
            "--lease-ms",
            "30000",
        ],
    );
    wait_until("B to start jobs", Duration::from_secs(30), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = 'term-short-grace'",
        )
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (n > 0).then_some(())
    })
    .await;
    b.signal("TERM");
    assert_eq!(b.exit_code(Duration::from_secs(10)).await, Some(0));
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL OR task_locked_until_ts > now()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(held, 0, "every lease given back and claimable now");

    let c = Proc::spawn(
        &db.url,
        "term-finisher",
        &["--concurrency", "32", "--lease-ms", "30000"],
    );
    let finish = Instant::now();
    wait_processed(&db, JOBS as usize, Duration::from_secs(20)).await;
    c.signal("TERM");
    assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "sigterm: exit 0 after {stop_s:.2} s (grace 5 s); {done_by_a} jobs done by A, 0 started-but-unfinished, 0 leases held; \
         short-grace worker interrupted and gave back its leases; the rest finished {:.1} s later (lease 30 s)",
        finish.elapsed().as_secs_f64()
    ));
    drop(c);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_at_once() {
    let _serial = SERIAL.lock().await;
    // Jobs that work for a minute and do not look at the stop request.
    let (db, ids) = setup::<sqlx::Postgres>(4, 60_000).await;
    let mut w = Proc::spawn(
        &db.url,
        "term-twice",
        &[
            "--concurrency",
            "4",
            "--grace-ms",
            "30000",
            "--lease-ms",
            "30000",
        ],
    );
    wait_runs_started(&db, 4, "all four jobs to start").await;
    w.signal("TERM");
    wait_until(
        "the first SIGTERM to be logged",
        Duration::from_secs(10),
        || async {
            w.log_text()
                .contains("sk: SIGTERM received; stopping gracefully within 30s")
                .then_some(())
        },
    )
    .await;
    let asked = Instant::now();
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(10)).await, Some(0));
    let stop_s = asked.elapsed().as_secs_f64();
    assert!(
        stop_s < 5.0,
        "stopped {stop_s:.1} s after the second SIGTERM (grace 30 s)"
    );
    let log = w.log_text();
    assert!(
        log.contains("sk: SIGTERM received again; stopping at once"),
        "{log}"
    );
    let (held, attempts): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE task_locked_by IS NOT NULL OR task_locked_until_ts > now()),
                coalesce(sum(task_attempt), 0)
         FROM sk_tasks_queue_t",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (held, attempts),
        (0, 0),
        "the four running jobs were given back, attempts unused"
    );
    assert_eq!(ids.len(), 4);
    report(&format!(
        "second SIGTERM: exit 0 {stop_s:.2} s after it (grace 30 s), 4 running jobs given back with their attempts"
    ));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_its_database_names_the_cause_and_waits() {
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 200;
    let (db, ids) = setup::<sqlx::Postgres>(JOBS, 1).await;
    // A port where nothing listens yet; the database appears there later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = db.url.replace(":5432/", &format!(":{port}/"));
    let spawned = Instant::now();
    let mut w = Proc::spawn(&url, "early", &["--concurrency", "8"]);
    let (first, after) = wait_until("the first sk log line", Duration::from_secs(10), || async {
        let log = w.log_text();
        let line = log.lines().find(|l| l.contains(" sk: "))?.to_owned();
        Some((line, spawned.elapsed()))
    })
    .await;
    assert!(
        after < Duration::from_secs(1),
        "the first line came after {after:?}: {first}"
    );
    assert!(
        first.contains(&format!(
            "sk: cannot reach the database at 127.0.0.1:{port}/"
        )) && first.contains("Connection refused")
            && first.contains("retrying in"),
        "the first line names the address and the cause: {first}"
    );
    fault_pause(Duration::from_secs(3)).await; // the database is not there yet
    assert!(w.alive(), "the worker waits for the database");
    let _proxy = Proxy::start_on(port).await;
    let appeared = Instant::now();
    wait_processed(&db, JOBS as usize, Duration::from_secs(30)).await;
    let came_up = appeared.elapsed().as_secs_f64();
    let log = w.log_text();
    assert!(
        log.contains(" answers after "),
        "the recovery is logged: {log}"
    );
    assert!(
        !log.contains("sqlx::postgres::notice") && !log.contains("job succeeded"),
        "no server notices at start and no line per successful job at INFO: {log}"
    );
    w.signal("TERM");
    assert_eq!(w.exit_code(Duration::from_secs(10)).await, Some(0));
    assert_each_job_finished_once(&db, &ids).await;
    report(&format!(
        "database late: first sk line {:.0} ms after start ({}), {} waiting lines; all {JOBS} jobs done {came_up:.1} s after the database appeared",
        after.as_secs_f64() * 1000.0,
        first.split(" sk: ").nth(1).unwrap_or(&first),
        log.matches("sk: cannot reach the database").count()
    ));
    db.drop().await;
}

#[tokio::test]
async fn a_wrong_database_url_is_a_one_line_error() {
    for (url, cause) in [
        (
            "postgres://postgres@127.0.0.1:1/nowhere",
            "Connection refused",
        ),
        (
            "postgres://nobody@127.0.0.1:5432/nowhere",
            "role \"nobody\" does not exist",
        ),
        ("not a url", "relative URL without a base"),
    ] {
        let out = Command::new(WORKER)
            .env("DATABASE_URL", url)
            .args(["--start-timeout-ms", "0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{url}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one line for {url}: {stderr}"
        );
        assert!(stderr.starts_with("sk-fault-worker: "), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains(cause), "the cause is named: {stderr}");
        report(&format!("bad-url: {url:?} -> {}", stderr.trim()));
    }
}

on_backends! {
    /// As on PostgreSQL, three worker processes, one killed with SIGKILL and restarted four
    /// times. SQLite has no `SKIP LOCKED`: its write lock, taken by each claim before it
    /// reads, keeps the processes' claims apart (docs/backends.md), and a process killed
    /// inside a write leaves no half-written transaction behind. On MySQL/MariaDB claims
    /// meet at `FOR UPDATE SKIP LOCKED`, and a killed process's open transaction is rolled
    /// back by the server when its connection drops.
    fn kill_9_with_restarts_on => kill_9_on [sqlite, mysql]
}

async fn kill_9_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 6_000;
    const DUE: u32 = JOBS * 9 / 10;
    let (db, mut ids) = setup::<B>(DUE, 20).await;
    ids.extend(hold_reserve(&db, (DUE..JOBS).map(|_| Burn::new(20))).await);
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
    ];
    let mut victims = vec![Proc::spawn(&db.url, &format!("{label}-victim-0"), &args)];
    let mut steady = [
        Proc::spawn(&db.url, &format!("{label}-steady-1"), &args),
        Proc::spawn(&db.url, &format!("{label}-steady-2"), &args),
    ];
    let started = Instant::now();
    let mut held_at_kill = 0;
    let kills = 4;
    for k in 1..=kills {
        let left = at_kill_point(&db, &mut rng, (k, kills), DUE).await;
        let victim = victims.last_mut().unwrap();
        assert!(victim.alive(), "the victim was running");
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        held_at_kill += db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = $1",
                Some(&victim.id),
            )
            .await
            .expect("a count");
        report(&format!(
            "{label} kill-9: kill {k} of pid {} with {left} jobs left",
            victim.pid()
        ));
        victims.push(Proc::spawn(&db.url, &format!("{label}-victim-{k}"), &args));
    }
    release_reserve(&db).await;
    wait_processed(&db, JOBS as usize, Duration::from_secs(300)).await;
    let elapsed = started.elapsed();
    for p in victims.iter_mut().rev().take(1).chain(steady.iter_mut()) {
        p.signal("TERM");
        assert_eq!(
            p.exit_code(Duration::from_secs(30)).await,
            Some(0),
            "{} exits 0 on SIGTERM",
            p.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;
    let lost = if B::BACKEND == "MySQL" {
        "JSON_SEARCH(r.task_errors, 'one', 'lost', NULL, '$[*].outcome') IS NOT NULL"
    } else {
        "EXISTS (SELECT 1 FROM json_each(r.task_errors) e WHERE e.value ->> 'outcome' = 'lost')"
    };
    let reran_without_lost = db
        .scalar(
            &format!(
                "SELECT count(*) FROM (SELECT task_id FROM fault_runs GROUP BY task_id HAVING count(*) > 1) d
                 JOIN sk_task_results_t r USING (task_id) WHERE NOT {lost}"
            ),
            None,
        )
        .await;
    assert_eq!(
        reran_without_lost,
        Some(0),
        "a job that ran again has its lost attempt on record"
    );
    assert!(held_at_kill > 0, "the kills stranded leased jobs");
    assert!(reran > 0, "jobs cut short by a kill ran again");
    report(&format!(
        "{label} kill-9: seed={seed} jobs={JOBS} processes=3 kills={kills} restarts={kills} lost=0 finalized_twice=0 \
         reran_jobs={reran} leased_to_killed={held_at_kill} burn_down_s={:.1}",
        elapsed.as_secs_f64()
    ));
    db.drop().await;
}

on_backends! {
    /// As on PostgreSQL: SIGTERM finishes the running jobs within the grace period and
    /// gives the rest back at once; a short grace period interrupts and gives back too.
    fn sigterm_finishes_running_jobs_and_gives_the_rest_back_on => sigterm_on [sqlite, mysql]
}

async fn sigterm_on<B: TestBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 300;
    let (db, ids) = setup::<B>(JOBS, 200).await;
    let slow = ["--grace-ms", "5000", "--lease-ms", "30000"];
    let mut a = Proc::spawn(
        &db.url,
        &format!("{label}-term-graceful"),
        &[&["--concurrency", "8"][..], &slow].concat(),
    );
    wait_processed(&db, 40, Duration::from_secs(30)).await;
    a.signal("TERM");
    assert_eq!(a.exit_code(Duration::from_secs(10)).await, Some(0));
    let started_unfinished = db
        .scalar(
            "SELECT count(*) FROM fault_runs f JOIN sk_task_results_t r USING (task_id) WHERE r.task_status <> 3",
            None,
        )
        .await;
    let held = db
        .scalar(
            "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL",
            None,
        )
        .await;
    assert_eq!(
        (started_unfinished, held),
        (Some(0), Some(0)),
        "running jobs finished, the rest given back"
    );

    let mut b = Proc::spawn(
        &db.url,
        &format!("{label}-term-short-grace"),
        &[
            "--concurrency",
            "8",
            "--grace-ms",
            "100",
            "--lease-ms",
            "30000",
        ],
    );
    wait_until("B to start jobs", Duration::from_secs(30), || async {
        let n = db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = $1",
                Some(&format!("{label}-term-short-grace")),
            )
            .await?;
        (n > 0).then_some(())
    })
    .await;
    b.signal("TERM");
    assert_eq!(b.exit_code(Duration::from_secs(10)).await, Some(0));
    let counts = db.info().counts().await.unwrap();
    assert_eq!(
        (counts.running, counts.lease_expired, counts.scheduled),
        (0, 0, 0),
        "every lease given back and claimable now"
    );

    let c = Proc::spawn(
        &db.url,
        &format!("{label}-term-finisher"),
        &["--concurrency", "32", "--lease-ms", "30000"],
    );
    wait_processed(&db, JOBS as usize, Duration::from_secs(30)).await;
    c.signal("TERM");
    assert_each_job_finished_once(&db, &ids).await;
    drop(c);
    db.drop().await;
}

on_backends! {
    /// Jobs that write through their own transaction (`effect_pg`, `effect_mysql`): three
    /// worker processes, one killed with SIGKILL at random points and restarted four times,
    /// over 10,000 jobs. A kill between the write and the completion leaves neither, so
    /// every job's write is there exactly once, though the jobs cut short ran again.
    fn kill_9_leaves_each_transaction_jobs_write_exactly_once => kill_9_effects_on [postgres, mysql]
}

/// A backend whose worker binary has a transaction job: the job that writes through it.
trait Effects: TestBackend {
    type Job: sk_runtime::Job;
    fn job(millis: u64) -> Self::Job;
}

impl Effects for sqlx::Postgres {
    type Job = EffectPg;
    fn job(millis: u64) -> EffectPg {
        EffectPg::new(millis)
    }
}

impl Effects for sqlx::MySql {
    type Job = EffectMysql;
    fn job(millis: u64) -> EffectMysql {
        EffectMysql::new(millis)
    }
}

async fn kill_9_effects_on<B: Effects>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let job = B::job;
    let _serial = SERIAL.lock().await;
    const JOBS: u32 = 10_000;
    const DUE: u32 = JOBS * 9 / 10;
    let (db, _) = setup::<B>(0, 0).await;
    db.execute(if B::BACKEND == "MySQL" {
        "CREATE TABLE fault_effects (task_id BINARY(16) NOT NULL, KEY (task_id))"
    } else {
        "CREATE TABLE fault_effects (task_id uuid NOT NULL)"
    })
    .await;
    let mut ids = sk_runtime::Enqueue::enqueue_many(&db.pool, (0..DUE).map(|_| job(20)))
        .await
        .unwrap();
    ids.extend(hold_reserve(&db, (DUE..JOBS).map(|_| job(20))).await);
    let (mut rng, seed) = Rng::from_env();
    let args = [
        "--concurrency",
        "16",
        "--lease-ms",
        "1000",
        "--poll-ms",
        "100",
        "--job",
        "effect",
    ];
    let name = |role: &str| format!("{label}-effects-{role}");
    let mut victims = vec![Proc::spawn(&db.url, &name("victim-0"), &args)];
    let mut steady = [
        Proc::spawn(&db.url, &name("steady-1"), &args),
        Proc::spawn(&db.url, &name("steady-2"), &args),
    ];
    let started = Instant::now();
    let kills = 4;
    let mut in_flight = 0;
    for k in 1..=kills {
        at_kill_point(&db, &mut rng, (k, kills), DUE).await;
        let victim = victims.last_mut().unwrap();
        assert!(victim.alive(), "the victim was running");
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        in_flight += db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = $1",
                Some(&victim.id),
            )
            .await
            .expect("a count");
        victims.push(Proc::spawn(&db.url, &name(&format!("victim-{k}")), &args));
    }
    release_reserve(&db).await;
    wait_processed(&db, JOBS as usize, Duration::from_secs(300)).await;
    let elapsed = started.elapsed();
    for p in victims.iter_mut().rev().take(1).chain(steady.iter_mut()) {
        p.signal("TERM");
        assert_eq!(
            p.exit_code(Duration::from_secs(30)).await,
            Some(0),
            "{} exits 0 on SIGTERM",
            p.id
        );
    }
    let reran = assert_each_job_finished_once(&db, &ids).await;
    let db_ref = &db;
    let count = |sql: &'static str| async move { db_ref.scalar(sql, None).await.expect("a count") };
    let (writes, jobs_written, twice) = (
        count("SELECT count(*) FROM fault_effects").await,
        count("SELECT count(DISTINCT task_id) FROM fault_effects").await,
        count("SELECT count(*) FROM (SELECT task_id FROM fault_effects GROUP BY task_id HAVING count(*) > 1) d").await,
    );
    assert_eq!(
        (writes, jobs_written, twice),
        (i64::from(JOBS), i64::from(JOBS), 0),
        "each job's write exactly once"
    );
    let orphan = count(
        "SELECT count(*) FROM fault_effects f WHERE NOT EXISTS
           (SELECT 1 FROM sk_task_results_t r WHERE r.task_id = f.task_id AND r.task_status = 3)",
    )
    .await;
    assert_eq!(orphan, 0, "no write without its job's completion");
    assert!(in_flight > 0, "the kills cut jobs short");
    assert!(reran > 0, "jobs cut short by a kill ran again");
    report(&format!(
        "{label} kill-9 transaction jobs: seed={seed} jobs={JOBS} processes=3 kills={kills} \
         writes={writes} written_twice=0 reran_jobs={reran} leased_to_killed={in_flight} burn_down_s={:.1}",
        elapsed.as_secs_f64()
    ));
    db.drop().await;
}

on_backends! {
    /// The chaos schedule (`sk_tests::chaos`): three workers, each in a network namespace
    /// of its own, an enqueuer and a controller, and a seeded nemesis (kills, pauses past
    /// the lease, partitions both ways and one way, terminated connections, the server
    /// restarted, clocks moved ahead; on SQLite the process faults: kills, pauses,
    /// clocks); the whole history is checked afterwards. `CHAOS_SECONDS` sets how long
    /// faults are injected (default 45), `FAULT_SEED` replays a schedule.
    fn chaos_schedule_history_checks_out => chaos_on [postgres, mysql, sqlite]
}

async fn chaos_on<B: sk_tests::chaos::ChaosBackend>(label: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let _serial = SERIAL.lock().await;
    let db = Db::<B>::new().await;
    let (_, seed) = Rng::from_env();
    let seconds: u64 = std::env::var("CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45);
    let dir = log_dir().join(format!("chaos-{label}"));
    let _ = std::fs::remove_dir_all(&dir);
    let config = sk_tests::chaos::Config {
        seed,
        duration: Duration::from_secs(seconds),
        workers: 3,
        lease: Duration::from_millis(1000),
        worker_bin: WORKER.into(),
        dir,
        network: true,
    };
    let started = Instant::now();
    let summary = sk_tests::chaos::run_schedule(&db, &config).await;
    report(&format!(
        "chaos-{label}: seed={seed} faults_for_s={seconds} total_s={:.1} {}",
        started.elapsed().as_secs_f64(),
        summary.line()
    ));
    assert!(
        summary.violations.is_empty(),
        "{} violations; the first (FAULT_SEED={seed} replays the schedule):\n{}",
        summary.violations.len(),
        summary.violations[0]
    );
    assert!(summary.runs > 0 && summary.faults.values().sum::<usize>() > 0);
    db.drop().await;
}
