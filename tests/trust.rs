//! What an outside application ran into: rows sk cannot read written past every check, a
//! job's run that must not start once its lease is gone. A module of the `queue` test
//! binary.

use std::time::Duration;

use sk_runtime::{job, Clock, Data, Job, JobContext, JobError, JobStatus, ManualClock, Worker};
use sk_tests::{recv, Db, RunningWorker, TestBackend};
use uuid::Uuid;

use super::{gate, probe, worker, Gate, Probe, Record, T};

/// Reports its start, then holds SQLite's write lock (its transaction's) until the gate opens.
#[job]
async fn holds_the_write_lock(
    label: String,
    ctx: JobContext,
    probe: Data<Probe>,
    gate: Data<Gate>,
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
) -> Result<(), JobError> {
    probe.saw(&ctx, &label);
    let mut open = gate.0.clone();
    let _ = open.wait_for(|open| *open).await;
    sqlx::query("SELECT 1").execute(&mut **tx).await?;
    Ok(())
}

/// Two transaction jobs claimed together on SQLite: the one that begins first holds the
/// write lock while the clock passes the other's lease, whose `BEGIN IMMEDIATE` waits
/// meanwhile. The other's handler never starts on that claim (another worker may have
/// run it by then): it is handed back unstarted and runs on a claim of its own, after the
/// lease (the give back's, or the claim of a lease that ran out, whichever comes first).
/// Before, the lease was checked only before the `BEGIN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_job_does_not_start_after_its_lease_on_sqlite() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let (open, gate) = gate(false);
    let lease = Duration::from_secs(30);
    for label in ["one", "other"] {
        HoldsTheWriteLock::new(label.into())
            .enqueue(&db.pool)
            .await
            .unwrap();
    }
    // Past the jobs' posting.
    let clock = ManualClock::new(chrono::Utc::now() + chrono::Duration::seconds(1));
    let claimed_at = clock.now();
    let w = RunningWorker::start(
        worker(&db, &[HoldsTheWriteLock::TASK_TYPE])
            .concurrency(2)
            .lease(lease)
            .clock(clock.clone())
            .data(probe)
            .data(gate),
    );
    let first = recv(&mut rx, "the first job's start", T).await;
    assert_eq!(first.attempted_at, claimed_at);
    clock.advance(lease * 2);
    open.send(true).unwrap();
    let second = recv(&mut rx, "the second job's start", T).await;
    assert_ne!(second.id, first.id);
    assert!(
        second.attempted_at >= claimed_at + lease * 2,
        "the second job started on a claim of {}, whose lease ended at {}",
        second.attempted_at,
        claimed_at + lease
    );
    w.stop().await;
    db.drop().await;
}

/// One claim takes three good jobs and a row sk cannot read, written by hand past the
/// table's checks (`bad_row`: statements on one connection, `{id}` the row's id): the bad
/// row alone ends fatal with the reason, and each good job runs once. Before, the whole
/// claim failed to decode after leasing its batch (SQLite, MySQL) or panicked in the
/// producer (PostgreSQL's `infinity`), and no job ran.
async fn ends_alone<B: TestBackend>(db: Db<B>, bad_row: &str)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let (probe, mut rx) = probe();
    let mut good = Vec::new();
    for label in ["a", "b", "c"] {
        good.push(Record::new(label.into()).enqueue(&db.pool).await.unwrap());
    }
    let bad = Uuid::now_v7();
    db.execute(&bad_row.replace("{id}", &bad.simple().to_string()))
        .await;
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let mut ran = Vec::new();
    for _ in 0..3 {
        ran.push(recv(&mut rx, "a good job", T).await.id);
    }
    ran.sort();
    assert_eq!(ran, good, "each good job ran");
    let status = format!(
        "SELECT CAST(task_status AS BIGINT) FROM sk_task_results_t WHERE task_id = {}",
        match B::BACKEND {
            "PostgreSQL" => format!("'{bad}'"),
            _ => format!("x'{}'", bad.simple()),
        }
    );
    sk_tests::wait_until("the unreadable job to end", T, || async {
        (db.scalar(&status, None).await == Some(JobStatus::Fatal as i64)).then_some(())
    })
    .await;
    for &id in &good {
        sk_tests::wait_until("the good jobs' successes to be recorded", T, || async {
            (db.job(id).await.status() == JobStatus::Processed).then_some(())
        })
        .await;
    }
    w.stop().await;
    assert!(rx.try_recv().is_err(), "nothing else ran");
    let reason = db
        .texts(&status.replace("CAST(task_status AS BIGINT)", "task_last_error_message"))
        .await;
    assert!(
        reason[0].starts_with("sk cannot read the job's queue row: "),
        "{reason:?}"
    );
    for id in good {
        let record = db.job(id).await;
        assert_eq!(record.error_count, 0, "{id} used no attempt");
        assert_eq!(
            record.status(),
            JobStatus::Processed,
            "{id}'s success is recorded"
        );
    }
    assert_eq!(
        db.job(bad).await.status(),
        JobStatus::Fatal,
        "its record reads"
    );
    db.drop().await;
}

/// Per backend, a row written past the table's checks with a value sk cannot read.
mod an_unreadable_row_ends_alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        // PostgreSQL's times go past chrono's: sqlx's decoder panics on `infinity`. The
        // table's check refuses it (migration 11)...
        let db = Db::<sqlx::Postgres>::new().await;
        let refused = sqlx::query(
            "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_posted_at_ts, task_locked_until_ts)
             VALUES (gen_random_uuid(), 'record', 'hand', '{}', 'infinity', now())",
        )
        .execute(&db.pool)
        .await
        .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("sk_tasks_queue_times_are_finite"),
            "{refused}"
        );
        // ...and one written past it ends alone, its posting time recorded as its claim's.
        db.execute("ALTER TABLE sk_tasks_queue_t DROP CONSTRAINT sk_tasks_queue_times_are_finite")
            .await;
        super::ends_alone(
            db,
            "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_posted_at_ts, task_locked_until_ts)
             VALUES ('{id}', 'record', 'hand', '{\"label\": \"bad\"}', 'infinity', now())",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        let db = Db::<sqlx::Sqlite>::new().await;
        // The table's check refuses it (migration 6)...
        let refused = sqlx::query(&format!(
            "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_max_attempts) VALUES (x'{}', 'record', 3000000000)",
            Uuid::now_v7().simple()
        ))
        .execute(&db.pool)
        .await
        .unwrap_err();
        assert!(
            refused.to_string().contains("task_max_attempts_is_an_int4"),
            "{refused}"
        );
        // ...and one written past it ends alone.
        super::ends_alone(
            db,
            "PRAGMA ignore_check_constraints = ON;
             INSERT INTO sk_tasks_queue_t (task_id, task_type, task_payload, task_priority)
             VALUES (x'{id}', 'record', '{\"label\": \"bad\"}', 99999999999);
             PRAGMA ignore_check_constraints = OFF",
        )
        .await;
    }

    /// An attempt out of range fails the check of the lease's `task_attempt + 1`: every
    /// claim that took the row failed, and no job ran.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_attempt() {
        super::ends_alone(
            Db::<sqlx::Sqlite>::new().await,
            "PRAGMA ignore_check_constraints = ON;
             INSERT INTO sk_tasks_queue_t (task_id, task_type, task_payload, task_attempt)
             VALUES (x'{id}', 'record', '{\"label\": \"bad\"}', -3000000000);
             PRAGMA ignore_check_constraints = OFF",
        )
        .await;
    }

    /// MariaDB's queue keeps metadata as text, unchecked; the results table's virtual
    /// columns read it as JSON, and refused every outcome of the batch for it, for ever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_metadata() {
        let db = Db::<sqlx::MySql>::new().await;
        super::ends_alone(
            db,
            "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_payload, task_metadata)
             VALUES (x'{id}', 'record', '{\"label\": \"bad\"}', 'not json {')",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql() {
        // The queue's check refuses a zero date (migration 6), not the 30th of February.
        let db = Db::<sqlx::MySql>::new().await;
        super::ends_alone(
            db,
            "SET STATEMENT sql_mode = 'ALLOW_INVALID_DATES' FOR
             INSERT INTO sk_tasks_queue_t (task_id, task_type, task_payload, task_posted_at_ts)
             VALUES (x'{id}', 'record', '{\"label\": \"bad\"}', '2026-02-30 10:00:00')",
        )
        .await;
    }
}

/// A SQLite table of version 5 holding a value migration 6 would refuse fails that
/// migration, naming the job, the column and the value; nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_row_out_of_range_fails_migration_6_by_name() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_sqlite_to(&db.pool, &old, 5)
        .await
        .unwrap();
    let id = Uuid::now_v7();
    db.execute(&format!(
        "INSERT INTO old_sk_tasks_queue_t (task_id, task_type, task_attempt) VALUES (x'{}', 'record', -3000000000)",
        id.simple()
    ))
    .await;
    let refused = sk_runtime::migrate(&db.pool, &old).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!("migration 6 cannot be applied: the row of job {} in old_sk_tasks_queue_t has task_attempt = -3000000000, which sk cannot read; correct or delete it, then migrate again", id.simple())
    );
    let versions = "SELECT max(version) FROM old_sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(5));
    db.execute("UPDATE old_sk_tasks_queue_t SET task_attempt = 0")
        .await;
    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    assert_eq!(db.scalar(versions, None).await, Some(17));
    let rows = "SELECT count(*) FROM old_sk_tasks_queue_t";
    assert_eq!(db.scalar(rows, None).await, Some(1), "the row is kept");
    db.drop().await;
}

/// A PostgreSQL queue of version 10 holding an `infinity` fails migration 11 by name and
/// changes nothing; the results table refuses one from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_time_past_chronos_fails_migration_11_by_name() {
    let db = Db::<sqlx::Postgres>::new().await;
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_to(&db.pool, &old, 10)
        .await
        .unwrap();
    let id = Uuid::now_v7();
    db.execute(&format!(
        "INSERT INTO old.sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_posted_at_ts, task_locked_until_ts)
         VALUES ('{id}', 'record', 'hand', '{{}}', now(), '-infinity')"
    ))
    .await;
    let refused = sk_runtime::migrate(&db.pool, &old).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!("migration 11 cannot be applied: the row of job {id} in old.sk_tasks_queue_t has task_locked_until_ts = -infinity, which sk cannot read; correct or delete it, then migrate again")
    );
    let versions = "SELECT CAST(max(version) AS BIGINT) FROM old.sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(10));
    db.execute("UPDATE old.sk_tasks_queue_t SET task_locked_until_ts = now()")
        .await;
    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    let newest = sk_runtime::migrations(db.pool.clone(), &old)
        .await
        .unwrap()
        .len() as i64;
    assert_eq!(db.scalar(versions, None).await, Some(newest), "11 and on");
    let refused = sqlx::query(
        "INSERT INTO old.sk_task_results_t (task_id, task_type, task_source, task_queue, task_status, task_priority, task_posted_at_ts)
         VALUES (gen_random_uuid(), 'record', 'hand', 'default', 1, 0, 'infinity')",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("sk_task_results_times_are_finite"),
        "{refused}"
    );
    db.drop().await;
}

/// The log lines a subscriber wrote so far.
#[derive(Clone, Default)]
struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Log lines written while `run` runs on a runtime of this thread (the subscriber is this
/// thread's).
fn logs_of<F: std::future::Future<Output = ()>>(run: impl FnOnce() -> F) -> String {
    logs_while(|_| run())
}

/// `logs_of`, with the lines so far readable by `run` as it goes.
fn logs_while<F: std::future::Future<Output = ()>>(run: impl FnOnce(Buffer) -> F) -> String {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let logs = buffer.clone();
    tracing::subscriber::with_default(subscriber, || runtime.block_on(run(logs)));
    buffer.text()
}

/// A pool on `db`'s SQLite file whose connections wait 100 ms for the write lock.
async fn impatient_pool(db: &Db<sqlx::Sqlite>) -> sqlx::SqlitePool {
    let path = std::path::PathBuf::from(db.url.trim_start_matches("sqlite://"));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(sk_tests::sqlite_options(&path).busy_timeout(Duration::from_millis(100)))
        .await
        .unwrap()
}

/// Two transaction jobs claimed together on SQLite: the one that begins first holds the
/// write lock past the other's busy timeout, whose `BEGIN IMMEDIATE` gives up. That job
/// runs again shortly, as a snooze, without using an attempt. Before, each such lock wait
/// was a failed attempt (153 in one run of three processes).
#[test]
fn a_lock_wait_costs_a_sqlite_transaction_job_no_attempt() {
    logs_while(|logs| async move {
        let db = Db::<sqlx::Sqlite>::new().await;
        let (probe, mut rx) = probe();
        let (open, gate) = gate(false);
        let mut ids = Vec::new();
        for label in ["one", "other"] {
            let job = HoldsTheWriteLock::new(label.into());
            ids.push(job.enqueue(&db.pool).await.unwrap());
        }
        let w = RunningWorker::start(
            Worker::builder(impatient_pool(&db).await)
                .task_types([HoldsTheWriteLock::TASK_TYPE])
                .poll_interval(Duration::from_millis(50))
                .concurrency(2)
                .data(probe)
                .data(gate),
        );
        let first = recv(&mut rx, "the first job's start", T).await;
        sk_tests::wait_until("the other's begin to give up", T, || async {
            logs.text()
                .contains("waiting for a lock another connection holds")
                .then_some(())
        })
        .await;
        open.send(true).unwrap();
        let second = recv(&mut rx, "the other job's start", T).await;
        assert_ne!(second.id, first.id);
        assert_eq!(second.attempt, 1, "its first attempt");
        for &id in &ids {
            sk_tests::wait_until("both to succeed", T, || async {
                (db.job(id).await.status() == JobStatus::Processed).then_some(())
            })
            .await;
            assert_eq!(db.job(id).await.error_count, 0, "{id} used no attempt");
        }
        w.stop().await;
        db.drop().await;
    });
}

/// A worker that starts while another process holds SQLite's write lock past the busy
/// timeout waits for it within its start timeout, saying so, and then runs. Before, its
/// migration failed with "database is locked" and the worker exited.
#[test]
fn a_sqlite_worker_starts_past_another_writers_lock() {
    use sqlx::{Connection, Executor};
    let logs = logs_while(|logs| async move {
        let db = Db::<sqlx::Sqlite>::new().await;
        let (probe, mut rx) = probe();
        let id = Record::new("after the lock".into())
            .enqueue(&db.pool)
            .await
            .unwrap();
        let path = std::path::PathBuf::from(db.url.trim_start_matches("sqlite://"));
        let mut other = sqlx::SqliteConnection::connect_with(&sk_tests::sqlite_options(&path))
            .await
            .unwrap();
        other.execute("BEGIN IMMEDIATE").await.unwrap();
        let w = Worker::builder(impatient_pool(&db).await)
            .task_types([Record::TASK_TYPE])
            .start_timeout(T)
            .data(probe)
            .build()
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(w.run_until(async move {
            let _ = stopped.await;
        }));
        sk_tests::wait_until("the start to wait for the lock", T, || async {
            logs.text()
                .contains("waiting for a lock another connection holds")
                .then_some(())
        })
        .await;
        assert!(!run.is_finished(), "the worker waits");
        other.execute("COMMIT").await.unwrap();
        let ran = recv(&mut rx, "the job's run", T).await;
        assert_eq!(ran.id, id);
        stop.send(()).unwrap();
        run.await.unwrap().unwrap();
        db.drop().await;
    });
    assert!(!logs.contains("ERROR"), "{logs}");
}

/// Runs a worker with a pool of 500 connections on `db` until it has started.
async fn start_with_a_large_pool<B: TestBackend>(db: Db<B>)
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let pool = sqlx::pool::PoolOptions::<B>::new()
        .max_connections(500)
        .connect_lazy(&db.url)
        .unwrap();
    let worker = sk_runtime::Worker::builder(pool)
        .task_types([Record::TASK_TYPE])
        .data(probe().0)
        .id("large-pool")
        .build()
        .unwrap();
    worker
        .run_until(db.wait_worker_up("large-pool"))
        .await
        .unwrap();
    db.drop().await;
}

/// A worker whose pool may take more than half of the connections the server has free
/// says so at start, with the numbers (three workers sized concurrency + 5 at 32 each
/// went past PostgreSQL's default of 100, and the server refused connections for minutes).
#[test]
fn a_worker_warns_of_a_pool_too_large_for_the_server() {
    let logs = [
        (
            "PostgreSQL",
            logs_of(|| async { start_with_a_large_pool(Db::<sqlx::Postgres>::new().await).await }),
        ),
        (
            "MySQL",
            logs_of(|| async { start_with_a_large_pool(Db::<sqlx::MySql>::new().await).await }),
        ),
    ];
    for (backend, logs) in logs {
        assert!(
            logs.contains("WARN")
                && logs
                    .contains("this worker's pool may open 500 connections, more than half of the"),
            "{backend}: {logs}"
        );
    }
    let sqlite =
        logs_of(|| async { start_with_a_large_pool(Db::<sqlx::Sqlite>::new().await).await });
    assert!(
        !sqlite.contains("this worker's pool"),
        "SQLite has no server: {sqlite}"
    );
}

/// `start_timeout` gives up within 100 ms of its limit, whatever a probe of a database
/// that never answers takes (up to 2 s each: 5 s gave up at 6.3 s). The database is a
/// listener that accepts and never answers. (Each probe gets at least 100 ms, so a limit
/// of zero still names a refusal's cause: `faults::a_wrong_database_url_is_a_one_line_error`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_timeout_is_kept_to_100_ms() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy(&format!("postgres://sk@127.0.0.1:{port}/none"))
        .unwrap();
    let limit = Duration::from_millis(1500);
    let worker = sk_runtime::Worker::builder(pool)
        .task_types([Record::TASK_TYPE])
        .data(probe().0)
        .start_timeout(limit)
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let error = worker.run_until(std::future::pending()).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= limit && took <= limit + Duration::from_millis(100),
        "gave up after {took:?}: {error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("cannot reach the database at 127.0.0.1:"),
        "{error}"
    );
    held.abort();
}

/// Snoozes for an hour, every run.
#[job]
async fn snoozes_an_hour(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "snoozed");
    Err(JobError::snooze(Duration::from_secs(3600)))
}

/// A snooze (a give back with a later time) that the database refuses was retried for
/// ever, and every outcome after it waited behind it: here a job that succeeded after it
/// was never recorded. It is now tried for one lease (the leases have run out by then).
/// The refusal is a trigger on the worker's connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snooze_the_database_refuses_does_not_hold_later_outcomes() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let refuses = "CREATE TEMP TRIGGER IF NOT EXISTS no_give_back BEFORE UPDATE OF task_locked_by
        ON main.sk_tasks_queue_t WHEN NEW.task_locked_by IS NULL
        BEGIN SELECT RAISE(ABORT, 'refused by the test'); END";
    let pool = super::sqlite_pool_running(&db, refuses.into()).await;
    SnoozesAnHour::new().enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(
        sk_runtime::Worker::builder(pool.clone())
            .task_types([SnoozesAnHour::TASK_TYPE, Record::TASK_TYPE])
            .lease(Duration::from_secs(2))
            .poll_interval(Duration::from_millis(50))
            .data(probe),
    );
    let first = recv(&mut rx, "the snooze", T).await;
    assert_eq!(first.label, "snoozed");
    let after = Record::new("after".into()).enqueue(&db.pool).await.unwrap();
    db.wait_job(after, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    pool.close().await;
    db.drop().await;
}

sk_tests::each_backend! {
    /// A stored schedule's tick waiting in a paused queue is one job in the counts by
    /// status, on every backend. Before, PostgreSQL counted a tick that must not overlap
    /// twice (its queue row said it had no results row while it had one) until it ran.
    async fn a_waiting_tick_is_counted_once(db) {
        let client = sk_runtime::Client::new(db.pool.clone());
        assert!(client.pause("default").await.unwrap());
        let start = chrono::Utc::now() + chrono::Duration::seconds(1);
        let clock = ManualClock::new(start);
        let (probe, _rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .clock(clock.clone())
                .data(probe),
        );
        db.wait_worker_up(&w.id).await;
        let schedules = sk_runtime::StoredSchedules::new(db.pool.clone()).clock(clock.clone());
        schedules
            .add("every-second", "* * * * * *", Record::new("tick".into()))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2));
        sk_tests::wait_until("the tick to be posted", T, || async {
            (db.scalar("SELECT count(*) FROM sk_tasks_queue_t", None).await > Some(0)).then_some(())
        })
        .await;
        w.stop().await;
        let waiting = db.scalar("SELECT count(*) FROM sk_tasks_queue_t", None).await.unwrap();
        let counts = db.info().counts().await.unwrap();
        assert_eq!(counts.by_status, [(JobStatus::Unprocessed, waiting)], "each tick once");
        db.drop().await;
    }
}
