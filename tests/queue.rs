//! Integration tests of the queue against a real PostgreSQL, one database per test.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{Timelike, Utc};
use sk_runtime::{
    job, AttemptOutcome, Clock, Data, Error, Job, JobContext, JobError, JobStatus, ManualClock,
    Worker, WorkerBuilder,
};
use sk_tests::{each_backend, recv, wait_until, Db, RunningWorker, TestBackend, TestDb};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

mod cli;
mod control;
mod devkit;
mod partitions;
mod seeds;
mod store;
mod trust;
mod web;
mod workflow;

const T: Duration = Duration::from_secs(20);

/// What a test job reports when it runs.
#[derive(Debug)]
struct Event {
    id: Uuid,
    label: String,
    attempt: i32,
    attempted_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Clone)]
struct Probe(mpsc::UnboundedSender<Event>);

impl Probe {
    fn saw(&self, ctx: &JobContext, label: &str) {
        let _ = self.0.send(Event {
            id: ctx.id(),
            label: label.to_owned(),
            attempt: ctx.attempt(),
            attempted_at: ctx.attempted_at(),
        });
    }
}

fn probe() -> (Probe, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Probe(tx), rx)
}

/// A job blocks until its gate opens.
#[derive(Clone)]
struct Gate(watch::Receiver<bool>);

fn gate(open: bool) -> (watch::Sender<bool>, Gate) {
    let (tx, rx) = watch::channel(open);
    (tx, Gate(rx))
}

#[job]
async fn record(label: String, ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, &label);
    Ok(())
}

#[job(max_attempts = 5, backoff = "exponential", backoff_base = "10s")]
async fn flaky(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "flaky");
    if ctx.attempt() < 3 {
        return Err(JobError::new(format!("failure number {}", ctx.attempt())));
    }
    Ok(())
}

#[job(max_attempts = 3, backoff = "constant", backoff_base = "10ms")]
async fn always_fails(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "always_fails");
    Err(JobError::new(format!(
        "still broken at attempt {}",
        ctx.attempt()
    )))
}

#[job]
async fn refuses(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "refuses");
    Err(JobError::fatal("invalid account: retrying cannot help"))
}

/// Waits for the gate, then fails its first run: for good when `fatal`, else to be retried
/// at once (and succeed).
#[job(max_attempts = 2, backoff = "constant", backoff_base = "1ms")]
async fn fails_together(
    fatal: bool,
    ctx: JobContext,
    probe: Data<Probe>,
    gate: Data<Gate>,
) -> Result<(), JobError> {
    probe.saw(&ctx, "fails_together");
    if ctx.attempt() > 1 {
        return Ok(());
    }
    let mut open = gate.0.clone();
    let _ = open.wait_for(|open| *open).await;
    Err(if fatal {
        JobError::fatal("failed for good")
    } else {
        JobError::new("failed, to retry")
    })
}

#[job(backoff = "constant", backoff_base = "10ms")]
async fn panics_once(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "panics_once");
    assert!(ctx.attempt() > 1, "boom on attempt {}", ctx.attempt());
    Ok(())
}

#[job(timeout = "100ms", backoff = "constant", backoff_base = "10ms")]
async fn slow_once(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "slow_once");
    if ctx.attempt() == 1 {
        // The job's own (too slow) work; the timeout interrupts it.
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    Ok(())
}

#[job]
async fn typed(
    count: i64,
    name: String,
    ctx: JobContext,
    probe: Data<Probe>,
) -> Result<(), JobError> {
    probe.saw(&ctx, &format!("{name}:{count}"));
    Ok(())
}

#[job]
async fn gated(
    label: String,
    ctx: JobContext,
    probe: Data<Probe>,
    gate: Data<Gate>,
) -> Result<(), JobError> {
    probe.saw(&ctx, &label);
    let mut open = gate.0.clone();
    let _ = open.wait_for(|open| *open).await;
    Ok(())
}

#[job]
async fn takes_a_while(millis: u64, ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "started");
    // The job's own work, longer than the worker's lease.
    tokio::time::sleep(Duration::from_millis(millis)).await;
    probe.saw(&ctx, "finished");
    Ok(())
}

#[job(schedule = "* * * * * *")]
async fn every_second(ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, "tick");
    Ok(())
}

/// Counts runs per job id across workers.
#[derive(Clone)]
struct Tally {
    runs: Arc<Mutex<HashMap<Uuid, u32>>>,
    mine: Arc<AtomicU64>,
}

#[job]
async fn counted(n: u32, ctx: JobContext, tally: Data<Tally>) -> Result<(), JobError> {
    let _ = n;
    *tally.runs.lock().unwrap().entry(ctx.id()).or_default() += 1;
    tally.mine.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Works a pseudo-random 0-15 ms (one job in ten fails its first run), so completions
/// reach the completer in an order unrelated to the claim order while many leases are held.
#[job(max_attempts = 3, backoff = "constant", backoff_base = "1ms")]
async fn jittery(n: u32, ctx: JobContext, tally: Data<Tally>) -> Result<(), JobError> {
    let millis = u64::from(n.wrapping_mul(2_654_435_761) >> 28);
    tokio::time::sleep(Duration::from_millis(millis)).await;
    if n % 10 == 0 && ctx.attempt() == 1 {
        return Err(JobError::new("the first run of every tenth job fails"));
    }
    *tally.runs.lock().unwrap().entry(ctx.id()).or_default() += 1;
    tally.mine.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Waits for its gate; asked to stop first, it says so and keeps its attempt. A `rogue`
/// run claims to be interrupted though nobody asked.
#[job(max_attempts = 3)]
async fn cooperative(
    rogue: bool,
    ctx: JobContext,
    probe: Data<Probe>,
    gate: Data<Gate>,
) -> Result<(), JobError> {
    probe.saw(&ctx, "started");
    if rogue {
        return Err(JobError::interrupted());
    }
    let mut open = gate.0.clone();
    tokio::select! {
        _ = open.wait_for(|open| *open) => Ok(()),
        () = ctx.cancelled() => Err(JobError::interrupted()),
    }
}

#[job(name = "evil\"'; DELETE FROM sk_task_results_t; --")]
async fn evil_name(label: String, ctx: JobContext, probe: Data<Probe>) -> Result<(), JobError> {
    probe.saw(&ctx, &label);
    Ok(())
}

#[job(name = "same_name")]
async fn first_of_two() {}

#[job(name = "same_name")]
async fn second_of_two() {}

#[job]
async fn wants_data(config: Data<String>) {
    let _ = config;
}

/// A worker on `db` that runs only `types` and polls often (tests also rely on
/// LISTEN/NOTIFY where they say so).
fn worker<B: TestBackend>(db: &Db<B>, types: &[&str]) -> WorkerBuilder
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    Worker::builder(db.pool.clone())
        .task_types(types.iter().copied())
        .poll_interval(Duration::from_millis(50))
        .grace_period(Duration::from_secs(5))
        // Exact backoff curves, which the retry tests assert.
        .retry_jitter(0.0)
}

/// Enqueues a `record` job per (label, priority), in this order, then runs them with one
/// slot and returns the labels in the order they ran.
async fn run_one_at_a_time<B: TestBackend>(db: &Db<B>, jobs: &[(&str, i32)]) -> Vec<String>
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let (probe, mut rx) = probe();
    for (label, priority) in jobs {
        Record::new((*label).into())
            .with_priority(*priority)
            .enqueue(&db.pool)
            .await
            .unwrap();
    }
    let w = RunningWorker::start(worker(db, &[Record::TASK_TYPE]).concurrency(1).data(probe));
    let mut order = Vec::new();
    for _ in jobs {
        order.push(recv(&mut rx, "a record job", T).await.label);
    }
    w.stop().await;
    order
}

/// Inserts a job row the way an older or foreign producer might, bypassing the typed API.
async fn insert_raw(db: &TestDb, task_type: &str, payload: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "WITH r AS (
            INSERT INTO sk_task_results_t (task_id, task_type, task_source, task_payload, task_queue,
                task_status, task_priority, task_posted_at_ts)
            VALUES ($1, $2, 'test', $3::jsonb, 'default', 1, 0, now()))
         INSERT INTO sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_priority,
             task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
         VALUES ($1, $2, 'test', $3::jsonb, 0, now(), now(), 'default', 25)",
    )
    .bind(id)
    .bind(task_type)
    .bind(payload)
    .execute(&db.pool)
    .await
    .unwrap();
    id
}

each_backend! {
    async fn runs_by_priority_then_fifo(db) {
        let jobs = [
            ("p5-a", 5),
            ("p1-a", 1),
            ("p3", 3),
            ("p1-b", 1),
            ("p5-b", 5),
            ("p-7", -7),
        ];
        let order = run_one_at_a_time(&db, &jobs).await;
        assert_eq!(order, ["p-7", "p1-a", "p1-b", "p3", "p5-a", "p5-b"]);
        let counts = db.info().counts().await.unwrap();
        assert_eq!(counts.status(JobStatus::Processed), 6);
        assert_eq!(
            counts.available + counts.scheduled + counts.running,
            0,
            "the queue table is empty"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn a_delayed_job_does_not_run_early(db) {
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let later = clock.now() + chrono::Duration::hours(1);
        let delayed = Record::new("delayed".into())
            .run_at(later)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let now = Record::new("now".into())
            .with_priority(10)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .concurrency(4)
                .clock(clock.clone())
                .data(probe),
        );

        // The claim that found `now` would have taken `delayed` too (it sorts first by
        // priority) had it been due.
        let first = recv(&mut rx, "the immediate job", T).await;
        assert_eq!((first.id, first.label.as_str()), (now, "now"));
        let record = db.job(delayed).await;
        assert_eq!(record.status(), JobStatus::Unprocessed);
        assert_eq!(record.attempt, Some(0));
        assert_eq!(record.first_attempt_at, None);
        let counts = db.info().clock(clock.clone()).counts().await.unwrap();
        assert_eq!(counts.scheduled, 1);
        // Its result written first: an hour on, its lease would have run out.
        db.wait_job(now, T, |r| r.status() == JobStatus::Processed)
            .await;

        clock.advance(Duration::from_secs(3600));
        let second = recv(&mut rx, "the delayed job", T).await;
        assert_eq!(second.id, delayed);
        let record = db
            .wait_job(delayed, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(record.first_attempt_at, Some(clock.now()));
        assert!(record.first_attempt_at.unwrap() >= later);
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn retries_with_the_jobs_backoff_then_succeeds(db) {
        let (probe, mut rx) = probe();
        let id = Flaky::new().enqueue(&db.pool).await.unwrap();
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let t0 = clock.now();
        let w = RunningWorker::start(
            worker(&db, &[Flaky::TASK_TYPE])
                .clock(clock.clone())
                .data(probe),
        );
        let info = db.info().clock(clock.clone());

        // Attempt 1 fails: retry after base = 10 s.
        assert_eq!(recv(&mut rx, "attempt 1", T).await.attempt, 1);
        let r = db.wait_job(id, T, |r| r.error_count == 1).await;
        assert_eq!(r.status(), JobStatus::Error);
        assert_eq!(r.locked_until, Some(t0 + chrono::Duration::seconds(10)));
        assert_eq!(r.locked_by, None);
        assert_eq!(r.last_error_message.as_deref(), Some("failure number 1"));
        assert_eq!(r.last_error_recoverable, Some(true));
        assert_eq!(
            (r.first_attempt_at, r.last_attempt_at, r.finalized_at),
            (Some(t0), Some(t0), None)
        );

        // Not due 9 s later; due at 10 s.
        clock.advance(Duration::from_secs(9));
        assert_eq!(
            (
                info.counts().await.unwrap().scheduled,
                info.counts().await.unwrap().available
            ),
            (1, 0)
        );
        clock.advance(Duration::from_secs(1));
        let t1 = clock.now();
        assert_eq!(recv(&mut rx, "attempt 2", T).await.attempt, 2);
        let r = db.wait_job(id, T, |r| r.error_count == 2).await;
        assert_eq!(r.status(), JobStatus::Error);
        assert_eq!(
            r.locked_until,
            Some(t1 + chrono::Duration::seconds(20)),
            "exponential: 2 x base"
        );

        clock.advance(Duration::from_secs(20));
        let t2 = clock.now();
        assert_eq!(recv(&mut rx, "attempt 3", T).await.attempt, 3);
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(r.error_count, 2);
        assert_eq!(
            (r.first_attempt_at, r.last_attempt_at, r.finalized_at),
            (Some(t0), Some(t2), Some(t2))
        );
        assert_eq!(r.attempt, None, "a finished job leaves the queue table");
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn fatal_after_max_attempts(db) {
        let (probe, mut rx) = probe();
        let id = AlwaysFails::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[AlwaysFails::TASK_TYPE]).data(probe));
        let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        w.stop().await;
        let runs: Vec<Event> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        let attempts: Vec<i32> = runs.iter().map(|e| e.attempt).collect();
        assert_eq!(attempts, [1, 2, 3]);
        // Each run knows when it was claimed: the record's last attempt time is the last
        // run's (to the microsecond the tables keep), and the first its first.
        let micros_apart = |a: chrono::DateTime<chrono::Utc>, b: Option<chrono::DateTime<chrono::Utc>>| {
            (a - b.expect("a time")).num_microseconds().map(i64::abs)
        };
        assert!(runs.windows(2).all(|w| w[0].attempted_at < w[1].attempted_at));
        assert!(micros_apart(runs[2].attempted_at, r.last_attempt_at) <= Some(1), "{runs:?} {r:?}");
        assert!(micros_apart(runs[0].attempted_at, r.first_attempt_at) <= Some(1), "{runs:?} {r:?}");
        assert_eq!(r.error_count, 3);
        assert_eq!(
            r.last_error_message.as_deref(),
            Some("still broken at attempt 3")
        );
        assert_eq!(r.last_error_recoverable, Some(true));
        assert!(r.finalized_at.is_some() && r.finalized_at >= r.last_attempt_at);
        assert_eq!(r.attempt, None, "a fatal job leaves the queue table");
        db.drop().await;
    }
}

each_backend! {
    async fn a_fatal_error_is_not_retried(db) {
        let (probe, mut rx) = probe();
        let id = Refuses::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[Refuses::TASK_TYPE]).data(probe));
        let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        w.stop().await;
        assert_eq!(std::iter::from_fn(|| rx.try_recv().ok()).count(), 1);
        assert_eq!(r.error_count, 1);
        assert_eq!(r.last_error_recoverable, Some(false));
        assert_eq!(
            r.last_error_message.as_deref(),
            Some("invalid account: retrying cannot help")
        );
        db.drop().await;
    }
}

each_backend! {
    async fn failures_finishing_together_are_recorded_each(db) {
        // Twenty runs held at a gate fail at once, half for good and half to retry: the
        // completer records them together (one statement on PostgreSQL, one transaction on
        // the others), each with its own outcome, message and attempt history.
        const JOBS: usize = 20;
        let (probe, mut rx) = probe();
        let mut ids = Vec::new();
        for i in 0..JOBS {
            ids.push((i % 2 == 0, FailsTogether::new(i % 2 == 0).enqueue(&db.pool).await.unwrap()));
        }
        let (open_tx, closed) = gate(false);
        let w = RunningWorker::start(
            worker(&db, &[FailsTogether::TASK_TYPE])
                .concurrency(JOBS)
                .data(probe)
                .data(closed),
        );
        for _ in 0..JOBS {
            assert_eq!(recv(&mut rx, "a first run", T).await.attempt, 1);
        }
        open_tx.send(true).unwrap();
        for &(fatal, id) in &ids {
            let r = if fatal {
                db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await
            } else {
                db.wait_job(id, T, |r| r.status() == JobStatus::Processed).await
            };
            assert_eq!(r.error_count, 1, "{r:?}");
            assert_eq!(r.last_error_recoverable, Some(!fatal), "{r:?}");
            assert_eq!(r.payload.is_some(), fatal, "a job failed for good keeps its payload: {r:?}");
            let message = if fatal { "failed for good" } else { "failed, to retry" };
            assert_eq!(r.last_error_message.as_deref(), Some(message), "{r:?}");
            let outcome = if fatal { AttemptOutcome::Fatal } else { AttemptOutcome::Retried };
            let failed: Vec<_> = r.failed_attempts.iter().map(|a| (a.attempt, a.outcome, a.message.as_deref())).collect();
            assert_eq!(failed, [(1, outcome, Some(message))], "{r:?}");
        }
        let w_id = w.id.clone();
        w.stop().await;
        let metric = |name: &'static str| {
            let (db, w_id) = (&db, &w_id);
            async move {
                db.scalar(
                    &format!("SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = '{name}'"),
                    Some(w_id),
                )
                .await
            }
        };
        let half = Some(JOBS as i64 / 2);
        assert_eq!(
            (metric("jobs_failed").await, metric("jobs_retried").await, metric("jobs_succeeded").await),
            (half, half, half)
        );
        let runs = db
            .scalar(
                "SELECT CAST(sum(et_n_execution_cycles) AS BIGINT) FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'fails_together'",
                None,
            )
            .await;
        assert_eq!(runs, Some(JOBS as i64 * 3 / 2), "every run in the statistics, once");
        db.drop().await;
    }
}

each_backend! {
    async fn panics_and_timeouts_are_retried(db) {
        let (probe, _rx) = probe();
        let panicking = PanicsOnce::new().enqueue(&db.pool).await.unwrap();
        let slow = SlowOnce::new().enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[PanicsOnce::TASK_TYPE, SlowOnce::TASK_TYPE]).data(probe),
        );
        let p = db
            .wait_job(panicking, T, |r| r.status() == JobStatus::Processed)
            .await;
        let s = db
            .wait_job(slow, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert_eq!(
            (p.error_count, p.last_error_type.as_deref()),
            (1, Some("panic"))
        );
        assert!(
            p.last_error_message
                .as_deref()
                .unwrap()
                .contains("boom on attempt 1"),
            "{p:?}"
        );
        assert_eq!(
            (s.error_count, s.last_error_type.as_deref()),
            (1, Some("timeout"))
        );
        assert_eq!(
            s.last_error_message.as_deref(),
            Some("timed out after 100ms")
        );
        db.drop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_does_not_deserialize_is_fatal_with_its_reason() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let bad = insert_raw(&db, Typed::TASK_TYPE, r#"{"count": "twelve", "name": "x"}"#).await;
    let good = Typed::new(12, "ok".into()).enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(worker(&db, &[Typed::TASK_TYPE]).data(probe));
    let r = db
        .wait_job(bad, T, |r| r.status() == JobStatus::Fatal)
        .await;
    db.wait_job(good, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let ran: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|e| e.label)
        .collect();
    assert_eq!(ran, ["ok:12"], "the bad payload never reached the fn");
    assert_eq!(
        (
            r.error_count,
            r.last_error_type.as_deref(),
            r.last_error_recoverable
        ),
        (1, Some("payload"), Some(false))
    );
    let message = r.last_error_message.unwrap();
    assert!(
        message.contains("payload of `typed` does not deserialize"),
        "{message}"
    );
    assert!(
        message.contains("invalid type: string \"twelve\", expected i64"),
        "{message}"
    );
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_posted_job_without_attempts_is_fatal_with_that_reason() {
    let db = TestDb::new().await;
    let id = insert_raw(&db, Record::TASK_TYPE, r#"{"label":"x"}"#).await;
    sqlx::query("UPDATE sk_tasks_queue_t SET task_max_attempts = 0 WHERE task_id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
    w.stop().await;
    assert!(rx.try_recv().is_err(), "the handler never ran");
    assert_eq!(
        (r.last_error_type.as_deref(), r.last_error_message.as_deref()),
        (
            Some("max_attempts"),
            Some("task_max_attempts is 0, so the job may not run at all; post it with task_max_attempts of at least 1")
        )
    );
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_unknown_task_types_are_left_untouched() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let unknown = insert_raw(&db, "nobody_runs_this", "{}").await;
    let known = Record::new("known".into()).enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    assert_eq!(recv(&mut rx, "the known job", T).await.id, known);
    db.wait_job(known, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let r = db.job(unknown).await;
    assert_eq!(
        (r.status(), r.attempt, r.locked_by.as_deref(), r.error_count),
        (JobStatus::Unprocessed, Some(0), None, 0)
    );
    let head = db.info().peek(10).await.unwrap();
    assert_eq!(
        head.iter()
            .map(|j| (j.id, j.task_type.as_str()))
            .collect::<Vec<_>>(),
        [(unknown, "nobody_runs_this")]
    );
    db.drop().await;
}

each_backend! {
    async fn enqueue_in_a_transaction_is_visible_after_commit_and_gone_after_rollback(db) {
        let (probe, mut rx) = probe();
        // Polling once a minute: only the NOTIFY sent at commit can wake this worker in time.
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .poll_interval(Duration::from_secs(60))
                .data(probe),
        );
        let info = db.info();

        let mut tx = db.pool.begin().await.unwrap();
        let rolled_back = Record::new("rolled back".into())
            .enqueue(&mut *tx)
            .await
            .unwrap();
        assert!(
            info.job(rolled_back).await.unwrap().is_none(),
            "invisible before commit"
        );
        tx.rollback().await.unwrap();
        assert!(
            info.job(rolled_back).await.unwrap().is_none(),
            "gone after rollback"
        );

        let mut tx = db.pool.begin().await.unwrap();
        let committed = Record::new("committed".into())
            .enqueue(&mut *tx)
            .await
            .unwrap();
        assert!(
            info.job(committed).await.unwrap().is_none(),
            "invisible before commit"
        );
        assert!(info.peek(10).await.unwrap().is_empty());
        tx.commit().await.unwrap();

        let ran = recv(&mut rx, "the committed job", Duration::from_secs(10)).await;
        assert_eq!((ran.id, ran.label.as_str()), (committed, "committed"));
        db.wait_job(committed, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert!(rx.try_recv().is_err(), "the rolled-back job never ran");
        db.drop().await;
    }
}

each_backend! {
    async fn two_workers_run_20000_jobs_exactly_once(db) {
        const JOBS: u32 = 20_000;
        let ids = Counted::enqueue_many(&db.pool, (0..JOBS).map(Counted::new))
            .await
            .unwrap();
        assert_eq!(ids.len(), JOBS as usize);
        let runs = Arc::new(Mutex::new(HashMap::new()));
        let tallies: Vec<Tally> = (0..2)
            .map(|_| Tally {
                runs: runs.clone(),
                mine: Arc::default(),
            })
            .collect();
        let second_pool = db.second_pool().await;
        let a = RunningWorker::start(
            worker(&db, &[Counted::TASK_TYPE])
                .concurrency(16)
                .data(tallies[0].clone()),
        );
        let b = RunningWorker::start(
            Worker::builder(second_pool)
                .task_types([Counted::TASK_TYPE])
                .poll_interval(Duration::from_millis(50))
                .concurrency(16)
                .data(tallies[1].clone()),
        );
        let info = db.info();
        wait_until(
            "20,000 processed results",
            Duration::from_secs(120),
            || async {
                let counts = info.counts().await.ok()?;
                (counts.status(JobStatus::Processed) == i64::from(JOBS)).then_some(())
            },
        )
        .await;
        a.stop().await;
        b.stop().await;

        let runs = runs.lock().unwrap().clone();
        assert_eq!(runs.len(), JOBS as usize, "every job ran");
        assert!(runs.values().all(|n| *n == 1), "no job ran twice");
        assert!(ids.iter().all(|id| runs.contains_key(id)));
        let (ran_a, ran_b) = (
            tallies[0].mine.load(Ordering::Relaxed),
            tallies[1].mine.load(Ordering::Relaxed),
        );
        assert_eq!(ran_a + ran_b, u64::from(JOBS));
        assert!(
            ran_a > 0 && ran_b > 0,
            "both workers took jobs: {ran_a} / {ran_b}"
        );
        let counts = info.counts().await.unwrap();
        assert_eq!(
            counts.available + counts.scheduled + counts.running + counts.lease_expired,
            0
        );
        let finalized = db
            .scalar(
                "SELECT count(*) FROM sk_task_results_t WHERE task_processing_finalized_at_ts IS NOT NULL",
                None,
            )
            .await;
        let total = db
            .scalar(
                "SELECT CAST(sum(et_n_execution_cycles) AS BIGINT) FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'counted'",
                None,
            )
            .await;
        assert_eq!(
            (finalized, total),
            (Some(i64::from(JOBS)), Some(i64::from(JOBS))),
            "each job finalized once"
        );
        db.drop().await;
    }
}

/// Heartbeats (every 200 ms, over up to 400 leases) and batched finalizations of the same
/// rows run side by side for the whole burn-down; the server counts no deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_and_finalizations_never_deadlock() {
    const JOBS: u32 = 30_000;
    let db = TestDb::new().await;
    Jittery::enqueue_many(&db.pool, (0..JOBS).map(Jittery::new))
        .await
        .unwrap();
    let before = db.deadlocks().await;
    let tally = Tally {
        runs: Arc::default(),
        mine: Arc::default(),
    };
    let mut workers = Vec::new();
    for _ in 0..2 {
        let pool = db.named_pool("sk-deadlock-test", 12).await;
        workers.push(RunningWorker::start(
            Worker::builder(pool)
                .task_types([Jittery::TASK_TYPE])
                .concurrency(200)
                .lease(Duration::from_secs(2))
                .heartbeat_interval(Duration::from_millis(200))
                .poll_interval(Duration::from_millis(50))
                .data(tally.clone()),
        ));
    }
    let info = db.info();
    wait_until(
        "30,000 processed results",
        Duration::from_secs(240),
        || async {
            let counts = info.counts().await.ok()?;
            (counts.status(JobStatus::Processed) == i64::from(JOBS)).then_some(())
        },
    )
    .await;
    for w in workers {
        w.stop().await;
    }
    // The workers' pools are gone with them; their backends flush their statistics on exit.
    db.wait_disconnected("sk-deadlock-test").await;
    let deadlocks = db.deadlocks().await - before;
    let runs = tally.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), JOBS as usize, "every job succeeded");
    assert!(runs.values().all(|n| *n == 1), "no job succeeded twice");
    assert_eq!(deadlocks, 0, "deadlocks detected by the server");
    db.drop().await;
}

/// A backlog enqueued in bulk gets statistics (and a vacuum) at once, though its live rows
/// far outnumber its dead ones: without statistics every claim scans and sorts the whole
/// queue (docs/reliability.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_backlog_is_analyzed_and_vacuumed_at_once() {
    let db = TestDb::new().await;
    Record::enqueue_many(&db.pool, (0..20_000).map(|i| Record::new(i.to_string())))
        .await
        .unwrap();
    let (probe, _rx) = probe();
    // A worker for another task type: the backlog stays, live and never dead.
    let w = RunningWorker::start(worker(&db, &[Typed::TASK_TYPE]).data(probe));
    let (vacuums, live, dead): (i64, i64, i64) = wait_until(
        "the queue table to be analyzed and vacuumed",
        Duration::from_secs(5),
        || async {
            let row: (i64, i64, i64, bool) = sqlx::query_as(
                "SELECT vacuum_count, n_live_tup, n_dead_tup, last_analyze IS NOT NULL
                 FROM pg_stat_user_tables WHERE relid = 'sk_tasks_queue_t'::regclass",
            )
            .fetch_one(&db.pool)
            .await
            .ok()?;
            (row.0 > 0 && row.3).then_some((row.0, row.1, row.2))
        },
    )
    .await;
    w.stop().await;
    assert!(vacuums >= 1 && live > dead, "{vacuums} {live} {dead}");
    db.drop().await;
}

each_backend! {
    async fn a_cron_job_is_enqueued_once_per_tick_with_two_workers(db) {
        let (probe, mut rx) = probe();
        // Half a second past a whole second, so every advance crosses exactly one tick.
        let start = Utc::now().with_nanosecond(500_000_000).unwrap() + chrono::Duration::seconds(1);
        let clock = ManualClock::new(start);
        let second_pool = db.second_pool().await;
        let a = RunningWorker::start(
            worker(&db, &[EverySecond::TASK_TYPE])
                .clock(clock.clone())
                .data(probe.clone()),
        );
        let b = RunningWorker::start(
            Worker::builder(second_pool)
                .task_types([EverySecond::TASK_TYPE])
                .poll_interval(Duration::from_millis(50))
                .clock(clock.clone())
                .data(probe),
        );
        db.wait_worker_up(&a.id).await;
        db.wait_worker_up(&b.id).await;
        let mut seen = Vec::new();
        for _ in 0..5 {
            clock.advance(Duration::from_secs(1));
            let event = recv(&mut rx, "a scheduled run", T).await;
            seen.push(event.id);
            db.wait_job(event.id, T, |r| r.status() == JobStatus::Processed)
                .await;
        }
        a.stop().await;
        b.stop().await;
        assert!(rx.try_recv().is_err(), "no tick ran twice");
        let keys = db
            .text_and_time(
                "SELECT r.task_unique_key, r.task_first_processing_attempted_at_ts FROM sk_task_results_t r
                 WHERE task_type = 'every_second' ORDER BY task_unique_key",
            )
            .await;
        let ticks: Vec<String> = (1..=5)
            .map(|s| {
                format!(
                    "every_second@{}",
                    (start.with_nanosecond(0).unwrap() + chrono::Duration::seconds(s)).to_rfc3339()
                )
            })
            .collect();
        assert_eq!(
            keys.iter().map(|k| k.0.clone()).collect::<Vec<_>>(),
            ticks,
            "one job per tick"
        );
        assert_eq!(seen.len(), 5);
        db.drop().await;
    }
}

each_backend! {
    async fn a_graceful_stop_gives_unfinished_jobs_back_at_once(db) {
        let (probe, mut rx) = probe();
        let ids = Gated::enqueue_many(&db.pool, ["a", "b", "c"].map(|l| Gated::new(l.into())))
            .await
            .unwrap();
        let (_closed_forever, closed) = gate(false);
        let w = RunningWorker::start(
            worker(&db, &[Gated::TASK_TYPE])
                .concurrency(2)
                .grace_period(Duration::from_millis(200))
                .data(probe.clone())
                .data(closed),
        );
        let started = [
            recv(&mut rx, "a started job", T).await.id,
            recv(&mut rx, "a started job", T).await.id,
        ];
        let stop = std::time::Instant::now();
        w.stop().await;
        assert!(
            stop.elapsed() < Duration::from_secs(5),
            "stopped after the grace period: {:?}",
            stop.elapsed()
        );
        for id in started {
            let r = db.job(id).await;
            assert_eq!(
                (r.status(), r.attempt, r.locked_by.as_deref()),
                (JobStatus::Unprocessed, Some(0), None),
                "{r:?}"
            );
            assert!(
                r.locked_until.unwrap() <= Utc::now(),
                "claimable at once, not after the lease"
            );
        }

        // Another worker (lease 30 s) takes all three well before any lease could run out.
        let (_open_tx, open) = gate(true);
        let w = RunningWorker::start(
            worker(&db, &[Gated::TASK_TYPE])
                .concurrency(4)
                .data(probe)
                .data(open),
        );
        for id in ids {
            db.wait_job(id, Duration::from_secs(10), |r| {
                r.status() == JobStatus::Processed
            })
            .await;
        }
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn a_job_that_stops_when_asked_keeps_its_attempts(db) {
        let (probe, mut rx) = probe();
        let id = Cooperative::new(false).enqueue(&db.pool).await.unwrap();
        // Three deploys in a row, each during the job's run (max_attempts = 3).
        for deploy in 1..=3 {
            let (_closed_forever, closed) = gate(false);
            let w = RunningWorker::start(
                worker(&db, &[Cooperative::TASK_TYPE])
                    .data(probe.clone())
                    .data(closed),
            );
            let run = recv(&mut rx, "the job to start", T).await;
            assert_eq!((run.id, run.attempt), (id, 1), "deploy {deploy}");
            let stop = std::time::Instant::now();
            w.stop().await;
            assert!(
                stop.elapsed() < Duration::from_secs(4),
                "the job stopped when asked, within the 5 s grace period"
            );
            let r = db.job(id).await;
            assert_eq!(
                (r.status(), r.error_count, r.attempt, r.locked_by.as_deref()),
                (JobStatus::Unprocessed, 0, Some(0), None),
                "given back, no attempt used, no error recorded: {r:?}"
            );
            assert!(r.locked_until.unwrap() <= Utc::now(), "claimable at once");
        }
        let (_open_tx, open) = gate(true);
        let w = RunningWorker::start(
            worker(&db, &[Cooperative::TASK_TYPE])
                .data(probe.clone())
                .data(open),
        );
        assert_eq!(recv(&mut rx, "the fourth run", T).await.attempt, 1);
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(r.error_count, 0);

        // Saying "interrupted" when nobody asked is an ordinary, recorded failure.
        let rogue = Cooperative::new(true).enqueue(&db.pool).await.unwrap();
        let r = db.wait_job(rogue, T, |r| r.error_count == 1).await;
        w.stop().await;
        assert_eq!(r.last_error_type.as_deref(), Some("interrupted"));
        assert!(
            r.last_error_message
                .as_deref()
                .unwrap()
                .contains("the worker had not asked it to stop"),
            "{r:?}"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn a_worker_that_lost_its_lease_cannot_finalize(db) {
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let id = Gated::new("x".into()).enqueue(&db.pool).await.unwrap();
        let (release_a, closed) = gate(false);
        let a = RunningWorker::start(
            // One slot, held by the stalled run, so A cannot re-claim the job itself.
            worker(&db, &[Gated::TASK_TYPE])
                .concurrency(1)
                .lease(Duration::from_secs(3600))
                .clock(clock.clone())
                .data(probe.clone())
                .data(closed),
        );
        assert_eq!(recv(&mut rx, "worker A's run", T).await.attempt, 1);

        // A stalls past its lease; B takes the job over and finishes it.
        clock.advance(Duration::from_secs(7200));
        let (_open_tx, open) = gate(true);
        let b = RunningWorker::start(
            worker(&db, &[Gated::TASK_TYPE])
                .clock(clock.clone())
                .data(probe)
                .data(open),
        );
        assert_eq!(recv(&mut rx, "worker B's run", T).await.attempt, 2);
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        b.stop().await;

        // A finishes late: its result is refused.
        release_a.send(true).unwrap();
        let a_id = a.id.clone();
        a.stop().await;
        let fenced = db
            .scalar(
                "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_fenced'",
                Some(&a_id),
            )
            .await;
        assert_eq!(fenced, Some(1), "worker A's late result was refused");
        let after = db.job(id).await;
        // A's attempt counts as failed ("worker lost", recorded by B's claim), once.
        assert_eq!(
            (after.status(), after.error_count, after.finalized_at),
            (JobStatus::Processed, 1, r.finalized_at)
        );
        let finalizations = db
            .scalar(
                "SELECT CAST(sum(et_n_execution_cycles) AS BIGINT) FROM sk_task_execution_time_stats_t WHERE et_payload_type = 'gated'",
                None,
            )
            .await;
        assert_eq!(finalizations, Some(1), "one finalization recorded");
        db.drop().await;
    }
}

/// One worker runs a job twice at once: its clock moves past its own lease, so it claims
/// the job again while the first run still holds a slot. Both runs end together, in one
/// batch of completions: the second run's success is recorded, the first one's is
/// refused, and the worker goes on. (On SQLite the duplicate id failed the whole batch,
/// retried for ever while heartbeats kept the jobs leased.) On a runtime of one thread,
/// so the two ends reach the completer together.
async fn a_job_claimed_again_by_its_own_worker_is_recorded_once<B: TestBackend>()
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let db = Db::<B>::new().await;
    let (probe, mut rx) = probe();
    let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
    let id = Gated::new("x".into()).enqueue(&db.pool).await.unwrap();
    let (release, closed) = gate(false);
    let w = RunningWorker::start(
        worker(&db, &[Gated::TASK_TYPE])
            .concurrency(2)
            .lease(Duration::from_secs(3600))
            .heartbeat_interval(Duration::from_secs(1800))
            .clock(clock.clone())
            .data(probe)
            .data(closed),
    );
    assert_eq!(recv(&mut rx, "the first run", T).await.attempt, 1);
    clock.advance(Duration::from_secs(7200));
    assert_eq!(recv(&mut rx, "the second run", T).await.attempt, 2);
    release.send(true).unwrap();
    let r = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let next = Gated::new("y".into()).enqueue(&db.pool).await.unwrap();
    db.wait_job(next, T, |r| r.status() == JobStatus::Processed)
        .await;
    let worker_id = w.id.clone();
    w.stop().await;
    assert_eq!(failed_attempts(&r), [(1, AttemptOutcome::Lost)], "{r:?}");
    let fenced = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_fenced'",
            Some(&worker_id),
        )
        .await;
    assert_eq!(fenced, Some(1), "the first run's result was refused");
    db.drop().await;
}

#[tokio::test]
async fn a_job_claimed_again_by_its_own_worker_is_recorded_once_on_postgres() {
    a_job_claimed_again_by_its_own_worker_is_recorded_once::<sqlx::Postgres>().await;
}

#[tokio::test]
async fn a_job_claimed_again_by_its_own_worker_is_recorded_once_on_mysql() {
    a_job_claimed_again_by_its_own_worker_is_recorded_once::<sqlx::MySql>().await;
}

#[tokio::test]
async fn a_job_claimed_again_by_its_own_worker_is_recorded_once_on_sqlite() {
    a_job_claimed_again_by_its_own_worker_is_recorded_once::<sqlx::Sqlite>().await;
}

/// Only the completion of a job someone waits on (`Client::wait`) notifies the done
/// channel, whether it succeeded or failed for good: with a notice in every completion, PostgreSQL's one-at-a-time commit of
/// notifying transactions held up workers on many hosts (docs/scaling.md). PostgreSQL
/// only: the others have no notifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_job_waited_on_notifies_the_done_channel() {
    const JOBS: i64 = 200;
    let db = TestDb::new().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen("sk_task_done").await.unwrap();
    for i in 0..JOBS {
        Record::new(format!("job {i}"))
            .enqueue(&db.pool)
            .await
            .unwrap();
    }
    // And some that fail for good.
    for _ in 0..5 {
        Refuses::new().enqueue(&db.pool).await.unwrap();
    }
    let (open_tx, closed) = gate(false);
    let waited = Gated::new("waited on".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (probe, mut rx) = probe();
    // One job at a time, a completion each; the gated one holds its slot until the wait
    // has begun, so every other job finishes first.
    let w = RunningWorker::start(
        worker(
            &db,
            &[Record::TASK_TYPE, Refuses::TASK_TYPE, Gated::TASK_TYPE],
        )
        .concurrency(2)
        .data(probe)
        .data(closed),
    );
    wait_until("the other jobs to finish", T, || async {
        let done = db
            .scalar(
                "SELECT count(*) FROM sk_task_results_t WHERE task_status IN (3, 6)",
                None,
            )
            .await;
        (done == Some(JOBS + 5)).then_some(())
    })
    .await;
    while recv(&mut rx, "a run", T).await.label != "waited on" {}
    // Notices arrive in commit order: had any of those completions notified, its notice
    // would come before this one.
    sqlx::query("SELECT pg_notify('sk_task_done', 'sentinel')")
        .execute(&db.pool)
        .await
        .unwrap();
    let first = tokio::time::timeout(T, listener.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.payload(),
        "sentinel",
        "a completion nobody waited on notified"
    );
    let client = sk_runtime::Client::new(db.pool.clone());
    let waiting = tokio::spawn(async move { client.wait(waited, T).await });
    wait_until("the wait to mark its job", T, || async {
        let marked = db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_waited",
                None,
            )
            .await;
        (marked == Some(1)).then_some(())
    })
    .await;
    open_tx.send(true).unwrap();
    assert_eq!(
        waiting.await.unwrap().unwrap().status(),
        JobStatus::Processed
    );
    let notice = tokio::time::timeout(T, listener.recv())
        .await
        .expect("the waited job's completion notifies")
        .unwrap();
    assert_eq!(notice.payload(), "");
    w.stop().await;
    db.drop().await;
}

/// A claim held up past its lease (a partition, a stopped process, a stalled database)
/// comes back holding jobs whose leases have run out, which another worker may claim at
/// once: the worker hands them back unstarted, with their attempts intact, and claims
/// afresh (found by the chaos checker: such a job ran twice, fenced). PostgreSQL only: its
/// lock wait is what holds the claim up here; the rule lives in the producer, above every
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_comes_back_after_its_lease_ran_out_starts_nothing() {
    let db = TestDb::new().await;
    let id = Record::new("late".into()).enqueue(&db.pool).await.unwrap();
    let start = Utc::now() + chrono::Duration::seconds(1);
    let clock = ManualClock::new(start);
    let lease = Duration::from_secs(30);
    // The queue table locked: the worker's first claim waits on it.
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE sk_tasks_queue_t IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .data(probe)
            .clock(clock.clone())
            .lease(lease),
    );
    wait_until("the claim to wait on the lock", T, || async {
        let waiting = db
            .scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                 AND wait_event_type = 'Lock' AND query LIKE '%task_attempt = q.task_attempt + 1%'",
                None,
            )
            .await;
        (waiting > Some(0)).then_some(())
    })
    .await;
    // Held up past its lease, by the worker's clock.
    clock.advance(lease + Duration::from_secs(1));
    blocker.rollback().await.unwrap();
    let ran = recv(&mut rx, "the job to run", T).await;
    let r = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let worker_id = w.id.clone();
    w.stop().await;
    assert_eq!(
        (ran.id, ran.attempt, ran.attempted_at),
        (id, 1, clock.now()),
        "it ran on a fresh claim, made after the late one, as attempt 1"
    );
    assert!(rx.try_recv().is_err(), "it ran once");
    let attempts: Vec<_> = r
        .attempts()
        .iter()
        .map(|a| (a.attempt, a.started_at))
        .collect();
    assert_eq!(
        attempts,
        [(1, Some(clock.now()))],
        "one attempt, the fresh claim's"
    );
    let given_back = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_given_back'",
            Some(&worker_id),
        )
        .await;
    assert_eq!(given_back, Some(1), "the late claim's job was handed back");
    db.drop().await;
}

/// A job that waits in the local queue for a slot keeps its lease by heartbeats; when
/// they cannot be written (a stalled database, SQLite's writer taken by others) the lease
/// runs out, and another worker may claim the job. The worker does not start a job whose
/// lease, by its own clock, has less than a heartbeat interval left: it hands it back
/// unstarted and the job runs on a fresh claim (found by the chaos checker on SQLite: a
/// prefetched job started 4.5 s after its claim, after another worker had claimed it). No
/// heartbeat is due here (the lease is 30 s), so only the claim's lease is known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_job_whose_lease_ran_out_is_handed_back_unstarted() {
    let db = TestDb::new().await;
    let start = Utc::now() + chrono::Duration::seconds(1);
    let clock = ManualClock::new(start);
    let lease = Duration::from_secs(30);
    let (probe, mut rx) = probe();
    let (open, gate) = gate(false);
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE, Gated::TASK_TYPE])
            .data(probe)
            .data(gate)
            .clock(clock.clone())
            .lease(lease)
            .concurrency(1)
            .prefetch(10),
    );
    // One job run first, so the worker prefetches (it does not before a first run).
    Record::new("first".into()).enqueue(&db.pool).await.unwrap();
    assert_eq!(recv(&mut rx, "the first job", T).await.label, "first");
    Gated::new("holds the slot".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        recv(&mut rx, "the gated job", T).await.label,
        "holds the slot"
    );
    let id = Record::new("waits".into()).enqueue(&db.pool).await.unwrap();
    let sql = format!("SELECT count(*) FROM sk_tasks_queue_t WHERE task_id = '{id}' AND task_locked_by IS NOT NULL");
    wait_until("the waiting job to be prefetched", T, || async {
        (db.scalar(&sql, None).await == Some(1)).then_some(())
    })
    .await;
    // Its lease ran out, by the worker's clock, while it waited for the slot.
    clock.advance(lease + Duration::from_secs(1));
    open.send(true).unwrap();
    let ran = recv(&mut rx, "the waiting job", T).await;
    db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let worker_id = w.id.clone();
    w.stop().await;
    assert_eq!(
        (ran.id, ran.attempted_at),
        (id, clock.now()),
        "it ran on a fresh claim, made after its lease ran out"
    );
    assert!(rx.try_recv().is_err(), "it ran once");
    let given_back = db
        .scalar(
            "SELECT metric_value FROM sk_metrics_t WHERE metric_owner_process_id = $1 AND metric_id = 'jobs_given_back'",
            Some(&worker_id),
        )
        .await;
    assert!(given_back >= Some(1), "handed back: {given_back:?}");
    db.drop().await;
}

/// A handler's slot is free for the next job when the handler returns, not once its
/// result is written; but the results waiting are bounded. With one slot and the results
/// table locked (no result can be written), 1 + 2000 jobs run and then the worker claims no
/// more until the results are written (no prefetch, so the leases held are exactly
/// those). (PostgreSQL: the lock is a table lock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_ahead_of_their_results_up_to_a_bound() {
    const JOBS: usize = 2100;
    const BOUND: usize = 1 + 2000;
    let db = TestDb::new().await;
    // Enqueued (which writes the results table too) before the lock, due only when the
    // worker's clock says so.
    let clock = ManualClock::new(Utc::now());
    let due = clock.now() + chrono::Duration::seconds(10);
    let ids = Record::enqueue_many(
        &db.pool,
        (0..JOBS).map(|i| Record::new(i.to_string()).run_at(due)),
    )
    .await
    .unwrap();
    let (probe, mut rx) = probe();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .concurrency(1)
            .prefetch(0)
            .clock(clock.clone())
            .data(probe),
    );
    // Started and idle: a job has run and been written.
    let warm = Record::new("warm".into())
        .run_at(clock.now())
        .enqueue(&db.pool)
        .await
        .unwrap();
    recv(&mut rx, "a first job", T).await;
    db.wait_job(warm, T, |r| r.status() == JobStatus::Processed)
        .await;
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE sk_task_results_t IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(11));
    for n in 0..BOUND {
        recv(
            &mut rx,
            &format!("job {n} of {BOUND}, no result written"),
            T,
        )
        .await;
    }
    // The worker is held at the bound: its leases are the bound's, and no other job runs
    // while the producer polls (every 50 ms) for a while.
    let held = "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by IS NOT NULL";
    assert_eq!(db.scalar(held, None).await, Some(BOUND as i64));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.try_recv().is_err(), "a job ran past the bound");
    assert_eq!(db.scalar(held, None).await, Some(BOUND as i64));
    blocker.rollback().await.unwrap();
    for n in BOUND..JOBS {
        recv(
            &mut rx,
            &format!("job {n}, once the results were written"),
            T,
        )
        .await;
    }
    for id in ids {
        db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
    }
    w.stop().await;
    db.drop().await;
}

each_backend! {
    /// With short jobs a worker claims beyond its free slots: the jobs wait in the worker,
    /// leased, and start in claim order as slots free; a stop hands the waiting ones back
    /// at once, unstarted and with their attempts intact.
    async fn a_small_concurrency_claims_ahead_and_gives_back_what_waits(db) {
        const JOBS: usize = 20;
        let (probe, mut rx) = probe();
        let (_closed_forever, closed) = gate(false);
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE, Gated::TASK_TYPE])
                .concurrency(1)
                .grace_period(Duration::from_millis(200))
                .data(probe.clone())
                .data(closed),
        );
        // A short job first, so the worker knows its jobs are short; then one that holds
        // the only slot.
        Record::new("warm".into()).enqueue(&db.pool).await.unwrap();
        assert_eq!(recv(&mut rx, "the short job", T).await.label, "warm");
        let held = Gated::new("held".into()).enqueue(&db.pool).await.unwrap();
        assert_eq!(recv(&mut rx, "the job holding the slot", T).await.label, "held");
        // Lower numbers first: the last enqueued run first.
        let ids = Record::enqueue_many(
            &db.pool,
            (0..JOBS).map(|i| Record::new(i.to_string()).with_priority(-(i as i32))),
        )
        .await
        .unwrap();
        let locked = format!(
            "SELECT count(*) FROM sk_tasks_queue_t WHERE task_locked_by = '{}'",
            w.id
        );
        // How many it claims ahead follows the short job's measured run time (a loaded
        // machine may see more than a millisecond, and then fewer than all twenty).
        wait_until("the worker to claim jobs ahead of its slot", T, || async {
            (db.scalar(&locked, None).await > Some(1)).then_some(())
        })
        .await;
        assert!(rx.try_recv().is_err(), "a waiting job ran without a slot");
        let stop = std::time::Instant::now();
        w.stop().await;
        assert!(stop.elapsed() < Duration::from_secs(5), "{:?}", stop.elapsed());
        assert!(rx.try_recv().is_err(), "a waiting job ran during the stop");
        for id in ids.iter().copied().chain([held]) {
            let r = db.job(id).await;
            assert_eq!(
                (r.status(), r.attempt, r.error_count, r.locked_by.as_deref()),
                (JobStatus::Unprocessed, Some(0), 0, None),
                "given back unstarted: {r:?}"
            );
            assert!(r.locked_until.unwrap() <= Utc::now(), "claimable at once");
        }

        // Another worker, one slot, its jobs short from the start: all run once, in
        // claim order (priority).
        let (_open_tx, open) = gate(true);
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE, Gated::TASK_TYPE])
                .concurrency(1)
                .data(probe)
                .data(open),
        );
        let mut labels = Vec::new();
        for _ in 0..=JOBS {
            labels.push(recv(&mut rx, "a job given back", T).await.label);
        }
        w.stop().await;
        labels.retain(|l| l != "held");
        let expected: Vec<String> = (0..JOBS).rev().map(|i| i.to_string()).collect();
        assert_eq!(labels, expected, "the short jobs in priority order");
        for id in ids {
            assert_eq!(db.job(id).await.status(), JobStatus::Processed);
        }
        assert!(rx.try_recv().is_err(), "each ran once");
        db.drop().await;
    }
}

each_backend! {
    async fn heartbeats_keep_a_long_job_from_being_taken_over(db) {
        let (probe, mut rx) = probe();
        // A lease ten heartbeats long: a heartbeat held up for 900 ms (a loaded CI machine
        // has stalled one past 200 ms) still keeps it.
        let lease = Duration::from_millis(1000);
        let id = TakesAWhile::new(3000).enqueue(&db.pool).await.unwrap();
        let a = RunningWorker::start(
            worker(&db, &[TakesAWhile::TASK_TYPE])
                .lease(lease)
                .heartbeat_interval(Duration::from_millis(100))
                .data(probe.clone()),
        );
        assert_eq!(recv(&mut rx, "the job to start", T).await.label, "started");
        // B polls every 50 ms with free slots for the whole run: three leases long.
        let b = RunningWorker::start(
            worker(&db, &[TakesAWhile::TASK_TYPE])
                .lease(lease)
                .data(probe),
        );
        let done = recv(&mut rx, "the job to finish", T).await;
        assert_eq!(
            (done.id, done.label.as_str(), done.attempt),
            (id, "finished", 1),
            "no second start in between"
        );
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        a.stop().await;
        b.stop().await;
        assert!(rx.try_recv().is_err(), "the job ran once");
        assert_eq!(r.error_count, 0);
        assert!(r.processing_time_ms >= 1500, "{}", r.processing_time_ms);
        db.drop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_schema_and_a_queue_filter() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let schema = sk_runtime::Schema::new("jobs", "app_").unwrap();
    sk_runtime::migrate(&db.pool, &schema).await.unwrap();
    let enqueue = |label: &str, queue: &str| {
        sk_runtime::Enqueue::new(Record::new(label.into()))
            .with_queue(queue)
            .with_schema(&schema)
            .enqueue(&db.pool)
    };
    let mail = enqueue("mail", "mail").await.unwrap();
    let other = enqueue("other", "reports").await.unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(schema.clone())
            .queues(["mail"])
            .data(probe),
    );
    assert_eq!(recv(&mut rx, "the mail job", T).await.id, mail);
    let info = sk_runtime::QueueInfo::new(db.pool.clone()).schema(schema.clone());
    wait_until("the mail job's result", T, || async {
        info.job(mail)
            .await
            .ok()
            .flatten()
            .filter(|r| r.status() == JobStatus::Processed)
    })
    .await;
    w.stop().await;
    assert_eq!(
        info.job(other).await.unwrap().unwrap().status(),
        JobStatus::Unprocessed,
        "other queues untouched"
    );
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = 'jobs' AND table_name NOT LIKE 'app_task_results_p%' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "app_job_stats_t",
            "app_metrics_t",
            "app_queues_t",
            "app_schedules_t",
            "app_schema_migrations_t",
            "app_task_deps_t",
            "app_task_execution_time_stats_t",
            "app_task_results_default",
            "app_task_results_t",
            "app_tasks_queue_t",
            "app_workers_t"
        ]
    );
    assert!(
        db.info().job(mail).await.unwrap().is_none(),
        "nothing in the default schema"
    );
    db.drop().await;
}

/// SQLite: a schema other than `public` becomes part of the table names (a file has one
/// namespace), and what SQLite cannot do is refused with the reason: it has no schema to
/// archive results into. (Nor stored functions: the seed's `sk_try_dequeue_task` is
/// PostgreSQL's; docs/backends.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schemas_are_name_prefixes_and_an_archive_is_refused() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let schema = sk_runtime::Schema::new("jobs", "app_").unwrap();
    sk_runtime::migrate(&db.pool, &schema).await.unwrap();
    let id = sk_runtime::Enqueue::new(Record::new("prefixed".into()))
        .with_schema(&schema)
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(schema.clone())
            .data(probe),
    );
    assert_eq!(recv(&mut rx, "the job", T).await.id, id);
    let info = sk_runtime::QueueInfo::new(db.pool.clone()).schema(schema.clone());
    wait_until("the job's result", T, || async {
        info.job(id)
            .await
            .ok()
            .flatten()
            .filter(|r| r.status() == JobStatus::Processed)
    })
    .await;
    w.stop().await;
    let tables = db
        .texts("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'jobs\\_app\\_%' ESCAPE '\\' ORDER BY 1")
        .await;
    assert_eq!(
        tables,
        [
            "jobs_app_job_stats_t",
            "jobs_app_metrics_t",
            "jobs_app_queues_t",
            "jobs_app_schedules_t",
            "jobs_app_schema_migrations_t",
            "jobs_app_task_deps_t",
            "jobs_app_task_execution_time_stats_t",
            "jobs_app_task_results_t",
            "jobs_app_tasks_queue_t",
            "jobs_app_workers_t"
        ]
    );
    assert!(
        db.info().job(id).await.unwrap().is_none(),
        "nothing in the default tables"
    );
    let refused = Worker::builder(db.pool.clone())
        .archive_results_to("old_results")
        .build()
        .err()
        .expect("an archive schema is refused on SQLite");
    assert!(
        refused.to_string().contains("SQLite has no schemas"),
        "{refused}"
    );
    db.drop().await;
}

/// The next two jobs the probe saw run, as (id, label), sorted by id then label.
async fn two_runs(rx: &mut mpsc::UnboundedReceiver<Event>) -> [(Uuid, String); 2] {
    let mut ran = [recv(rx, "a job", T).await, recv(rx, "a job", T).await].map(|e| (e.id, e.label));
    ran.sort();
    ran
}

/// A worker on `schema` runs exactly the two jobs `want` (id, label), in any order; then
/// it stops and the database goes.
async fn two_run_on<B: TestBackend>(
    db: Db<B>,
    schema: &sk_runtime::Schema,
    (probe, mut rx): (Probe, mpsc::UnboundedReceiver<Event>),
    want: [(Uuid, &str); 2],
) where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(schema.clone())
            .data(probe),
    );
    let mut want = want.map(|(id, label)| (id, label.to_owned()));
    want.sort();
    assert_eq!(two_runs(&mut rx).await, want);
    w.stop().await;
    db.drop().await;
}

/// A queue row as another producer writes it on SQLite, `$1` to `$5`: id, priority,
/// posting time, not-before time, payload.
const SQLITE_HAND_ROW: &str = "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_payload,
    task_priority, task_posted_at_ts, task_locked_until_ts) VALUES ($1, 'record', $5, $2, $3, $4)";

/// SQLite keeps any value in any column of an ordinary table: one waiting row with a text
/// priority made every claim fail to decode it, for ever, and no job ran after it. The
/// queue table refuses such rows, naming what is wrong, and the queue goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_row_sk_could_not_read_is_refused_on_sqlite() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let now = "2026-11-26T00:00:00.000000Z";
    let payload = r#"{"label": "by hand"}"#;
    let id = || Uuid::now_v7().as_bytes().to_vec();
    // (A number for a text column is stored as its text, which sk can read.)
    let bad: [(&str, sqlx::query::Query<'_, sqlx::Sqlite, _>, &str); 5] = [
        (
            "a text priority",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(id())
                .bind("high")
                .bind(now)
                .bind(now)
                .bind(payload),
            "cannot store TEXT value in INTEGER column sk_tasks_queue_t.task_priority",
        ),
        (
            "an id of 15 bytes",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(vec![7u8; 15])
                .bind(0)
                .bind(now)
                .bind(now)
                .bind(payload),
            "CHECK constraint failed: task_id_is_a_uuid",
        ),
        (
            "an id as text",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(Uuid::now_v7().to_string())
                .bind(0)
                .bind(now)
                .bind(now)
                .bind(payload),
            "cannot store TEXT value in BLOB column sk_tasks_queue_t.task_id",
        ),
        (
            "a posting time that is not a time",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(id())
                .bind(0)
                .bind("yesterday")
                .bind(now)
                .bind(payload),
            "CHECK constraint failed: task_posted_at_ts_is_a_time",
        ),
        (
            "a not-before time in another form",
            sqlx::query(SQLITE_HAND_ROW)
                .bind(id())
                .bind(0)
                .bind(now)
                .bind("2026-11-26 23:00:00")
                .bind(payload),
            "CHECK constraint failed: task_locked_until_ts_is_a_time",
        ),
    ];
    for (what, query, error) in bad {
        let refused = query
            .execute(&db.pool)
            .await
            .err()
            .unwrap_or_else(|| panic!("{what} was stored"));
        assert!(refused.to_string().contains(error), "{what}: {refused}");
    }
    let refused = sqlx::query(
        "INSERT INTO sk_tasks_queue_t (task_id, task_type, task_metadata) VALUES ($1, 'record', 'not json')",
    )
    .bind(Uuid::now_v7())
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("CHECK constraint failed: task_metadata_is_json"),
        "{refused}"
    );
    // A good row by hand, then one changed into a bad one in place: the change is refused.
    let by_hand = Uuid::now_v7();
    sqlx::query(SQLITE_HAND_ROW)
        .bind(by_hand)
        .bind(0)
        .bind(now)
        .bind(now)
        .bind(payload)
        .execute(&db.pool)
        .await
        .unwrap();
    let refused = sqlx::query("UPDATE sk_tasks_queue_t SET task_priority = 'high'")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("task_priority"), "{refused}");
    let enqueued = Record::new("enqueued".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let ran = two_runs(&mut rx).await;
    let mut want = [
        (by_hand, "by hand".to_owned()),
        (enqueued, "enqueued".to_owned()),
    ];
    want.sort();
    assert_eq!(ran, want);
    w.stop().await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM sk_tasks_queue_t", None)
            .await,
        Some(0)
    );
    db.drop().await;
}

/// Another pool on `db`'s SQLite file whose every connection runs `sql` when it opens
/// (a temp trigger or a pragma lives with its connection).
async fn sqlite_pool_running(db: &Db<sqlx::Sqlite>, sql: String) -> sqlx::SqlitePool {
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .after_connect(move |conn, _| {
            let sql = sql.clone();
            Box::pin(async move {
                sqlx::Executor::execute(conn, sql.as_str()).await?;
                Ok(())
            })
        })
        .connect_with((*db.pool.connect_options()).clone())
        .await
        .unwrap()
}

/// A SQLite claim picks the due rows, then leases those still due in one `UPDATE`: a row
/// another writer leased between the two steps stays that writer's, and the claim goes on
/// to the next due row in the same call, not at the next poll. The other writer is a
/// trigger on the claim's temp table (sk's own name for it), which leases the first job
/// to a thief as the claim picks it and notes when. Without the check the thief's job
/// would run; without the claim's second round the other job would be claimed after the
/// steal, at the next poll, a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_goes_past_rows_another_writer_took_on_sqlite() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let (probe, mut rx) = probe();
    let stolen = Record::new("stolen".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let taken = Record::new("taken".into()).enqueue(&db.pool).await.unwrap();
    let handle = db
        .scalar(
            &format!(
                "SELECT task_lock_handle_id FROM sk_tasks_queue_t WHERE hex(task_id) = '{}'",
                stolen.simple().to_string().to_uppercase()
            ),
            None,
        )
        .await
        .expect("the job's lock handle");
    db.execute("CREATE TABLE thefts (at TEXT NOT NULL)").await;
    let thief = format!(
        "CREATE TEMP TABLE IF NOT EXISTS sk_claim (handle INTEGER PRIMARY KEY);
         CREATE TEMP TRIGGER IF NOT EXISTS thief AFTER INSERT ON sk_claim WHEN NEW.handle = {handle}
         BEGIN
            UPDATE sk_tasks_queue_t SET task_locked_by = 'thief',
                task_locked_until_ts = '9999-12-31T23:59:59.999999Z'
            WHERE task_lock_handle_id = NEW.handle;
            INSERT INTO thefts VALUES (strftime('%Y-%m-%dT%H:%M:%f', 'now'));
         END"
    );
    let pool = sqlite_pool_running(&db, thief).await;
    let w = RunningWorker::start(
        Worker::builder(pool.clone())
            .task_types([Record::TASK_TYPE])
            .concurrency(1)
            .prefetch(0)
            .poll_interval(Duration::from_secs(3600))
            .data(probe),
    );
    let ran = recv(&mut rx, "the job not stolen", T).await;
    assert_eq!((ran.id, ran.label.as_str()), (taken, "taken"));
    w.stop().await;
    assert!(rx.try_recv().is_err(), "the stolen job did not run");
    let thefts = db.texts("SELECT at FROM thefts").await;
    assert_eq!(thefts.len(), 1, "one theft: {thefts:?}");
    let stolen_at = chrono::NaiveDateTime::parse_from_str(&thefts[0], "%Y-%m-%dT%H:%M:%S%.f")
        .unwrap()
        .and_utc();
    // The claim's time is read before its first step; the theft's is cut to milliseconds.
    assert!(
        ran.attempted_at < stolen_at + chrono::Duration::milliseconds(1),
        "claimed in the same call as the theft: claimed at {}, stolen at {stolen_at}",
        ran.attempted_at
    );
    let thief_holds = db
        .texts(&format!(
            "SELECT task_locked_by || ' ' || task_attempt FROM sk_tasks_queue_t WHERE task_lock_handle_id = {handle}"
        ))
        .await;
    assert_eq!(thief_holds, ["thief 0"]);
    pool.close().await;
    db.drop().await;
}

/// A SQLite worker checkpoints the WAL itself after its completions, on another
/// connection: the commit that takes the WAL past `wal_autocheckpoint` pages then has
/// little left to copy back while it holds the worker's turn to write. With the automatic
/// checkpoint off everywhere, any checkpoint is the worker's. The WAL index in the `-shm`
/// file says whether one ran: its header's salt (byte 32) changes when the WAL starts
/// over after a full checkpoint, and `nBackfill` (byte 96, after the header's two
/// copies) counts the frames copied back since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_worker_checkpoints_the_wal_beside_its_writes() {
    const JOBS: u32 = 5_000;
    let db = Db::<sqlx::Sqlite>::new().await;
    Counted::enqueue_many(&db.pool, (0..JOBS).map(Counted::new))
        .await
        .unwrap();
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
    let mut shm = db
        .pool
        .connect_options()
        .get_filename()
        .as_os_str()
        .to_owned();
    shm.push("-shm");
    // (salt, frames copied back)
    let index = || {
        let index = std::fs::read(&shm).unwrap();
        let word = |at: usize| u32::from_ne_bytes(index[at..at + 4].try_into().unwrap());
        (word(32), word(96))
    };
    let pool = sqlite_pool_running(&db, "PRAGMA wal_autocheckpoint = 0".into()).await;
    sqlx::query("CREATE TABLE probe (n INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
    let (salt, backfilled) = index();
    assert_eq!(backfilled, 0);
    let tally = Tally {
        runs: Arc::default(),
        mine: Arc::default(),
    };
    let w = RunningWorker::start(
        Worker::builder(pool.clone())
            .task_types([Counted::TASK_TYPE])
            .data(tally.clone()),
    );
    wait_until("every job to finish", Duration::from_secs(60), || async {
        let left = db
            .scalar("SELECT count(*) FROM sk_tasks_queue_t", None)
            .await;
        (left == Some(0)).then_some(())
    })
    .await;
    w.stop().await;
    assert_eq!(tally.mine.load(Ordering::Relaxed), u64::from(JOBS));
    wait_until("a checkpoint of the worker's", T, || async {
        let (now, backfilled) = index();
        (now != salt || backfilled > 0).then_some(())
    })
    .await;
    pool.close().await;
    db.drop().await;
}

/// A SQLite queue of version 4 is copied into the checked table with its waiting jobs, and
/// its lock handles go on from its last; a row the new table would refuse fails the
/// migration, which then changes nothing and names the column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_queue_of_version_4_is_brought_forward_with_its_rows() {
    let db = Db::<sqlx::Sqlite>::new().await;
    let runs = probe();
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_sqlite_to(&db.pool, &old, 4)
        .await
        .unwrap();
    let enqueue = |label: &str| {
        sk_runtime::Enqueue::new(Record::new(label.into()))
            .with_schema(&old)
            .enqueue(&db.pool)
    };
    let kept = enqueue("kept").await.unwrap();
    let gone = enqueue("gone").await.unwrap();
    db.execute(&format!(
        "DELETE FROM old_sk_tasks_queue_t WHERE task_id = x'{}'",
        gone.simple()
    ))
    .await;
    let last = "SELECT seq FROM sqlite_sequence WHERE name = 'old_sk_tasks_queue_t'";
    let last_handle = db.scalar(last, None).await.unwrap();

    let bad = sk_runtime::Schema::new("bad", "sk_").unwrap();
    sk_runtime::__private::migrate_sqlite_to(&db.pool, &bad, 4)
        .await
        .unwrap();
    db.execute(&format!(
        "INSERT INTO bad_sk_tasks_queue_t (task_id, task_type, task_priority) VALUES (x'{}', 'record', 'high')",
        Uuid::now_v7().simple()
    ))
    .await;
    let refused = sk_runtime::migrate(&db.pool, &bad).await.unwrap_err();
    assert!(
        matches!(refused, Error::Migration { version: 5, .. })
            && refused.to_string().contains("task_priority"),
        "{refused}"
    );
    let versions = "SELECT max(version) FROM bad_sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(4));
    let rows = "SELECT count(*) FROM bad_sk_tasks_queue_t";
    assert_eq!(db.scalar(rows, None).await, Some(1), "the bad row is kept");

    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    let versions = "SELECT max(version) FROM old_sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(6));
    assert_eq!(db.scalar(last, None).await, Some(last_handle));
    let table = db
        .texts("SELECT sql FROM sqlite_master WHERE name = 'old_sk_tasks_queue_t'")
        .await;
    assert!(table[0].ends_with("STRICT"), "{table:?}");
    let indexes = "SELECT count(*) FROM sqlite_master WHERE tbl_name = 'old_sk_tasks_queue_t'
        AND type IN ('index', 'trigger') AND sql IS NOT NULL";
    assert_eq!(db.scalar(indexes, None).await, Some(4));
    let new = enqueue("new").await.unwrap();
    let handle = db
        .scalar(
            &format!(
                "SELECT task_lock_handle_id FROM old_sk_tasks_queue_t WHERE task_id = x'{}'",
                new.simple()
            ),
            None,
        )
        .await
        .unwrap();
    assert!(handle > last_handle, "{handle} after {last_handle}");
    two_run_on(db, &old, runs, [(kept, "kept"), (new, "new")]).await;
}

/// MariaDB's default SQL mode takes a zero date into a DATETIME column: one waiting row
/// with a zero posting time made every claim fail to decode it, for ever, and no job ran
/// after it. The queue table refuses such rows, and a queue that holds one fails the
/// migration that adds the check, which then changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_row_sk_could_not_read_is_refused_on_mysql() {
    let db = Db::<sqlx::MySql>::new().await;
    let (probe, mut rx) = probe();
    let hand_row = |table: &str, posted_at: &str| {
        format!(
            "INSERT INTO {table} (task_id, task_type, task_payload, task_posted_at_ts)
             VALUES (x'{}', 'record', '{{\"label\": \"by hand\"}}', '{posted_at}')",
            Uuid::now_v7().simple()
        )
    };
    for posted_at in [
        "0000-00-00 00:00:00",
        "2026-00-26 10:00:00",
        "2026-11-00 10:00:00",
    ] {
        let refused = sqlx::query(&hand_row("sk_tasks_queue_t", posted_at))
            .execute(&db.pool)
            .await
            .err()
            .unwrap_or_else(|| panic!("{posted_at} was stored"));
        assert!(
            refused.to_string().contains("sk_tasks_queue_posted_at"),
            "{posted_at}: {refused}"
        );
    }
    db.execute(&hand_row("sk_tasks_queue_t", "2026-11-26 10:00:00"))
        .await;
    let refused = sqlx::query("UPDATE sk_tasks_queue_t SET task_posted_at_ts = '0000-00-00'")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("sk_tasks_queue_posted_at"),
        "{refused}"
    );
    Record::new("enqueued".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).data(probe));
    let mut ran = two_runs(&mut rx).await.map(|(_, label)| label);
    ran.sort();
    assert_eq!(ran, ["by hand", "enqueued"]);
    w.stop().await;

    let older = sk_runtime::Schema::new("public", "older_").unwrap();
    sk_runtime::__private::migrate_mysql_to(&db.pool, &older, 5)
        .await
        .unwrap();
    db.execute(&hand_row("older_tasks_queue_t", "0000-00-00 00:00:00"))
        .await;
    let refused = sk_runtime::migrate(&db.pool, &older).await.unwrap_err();
    assert!(
        matches!(refused, Error::Migration { version: 6, .. }),
        "{refused}"
    );
    let versions = "SELECT max(version) FROM older_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(5));
    let rows = "SELECT count(*) FROM older_tasks_queue_t";
    assert_eq!(db.scalar(rows, None).await, Some(1), "the bad row is kept");
    db.drop().await;
}

/// A MySQL queue of version 6 holds a job its sk posted with both rows (version 5's trigger
/// wrote the results row). Version 7 drops that trigger and the queue's correlation-id
/// index, version 8 three more indexes; the old job and a new one (its queue row alone)
/// are each listed and counted once, and both run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_queue_of_version_6_is_brought_forward_with_its_jobs() {
    let db = Db::<sqlx::MySql>::new().await;
    let runs = probe();
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_mysql_to(&db.pool, &old, 6)
        .await
        .unwrap();
    let posted = Uuid::now_v7();
    db.execute(&format!(
        "INSERT INTO old_sk_tasks_queue_t (task_id, task_type, task_payload, task_has_result)
         VALUES (x'{}', 'record', '{{\"label\": \"posted\"}}', 2)",
        posted.simple()
    ))
    .await;
    let results = "SELECT count(*) FROM old_sk_task_results_t";
    assert_eq!(
        db.scalar(results, None).await,
        Some(1),
        "version 6 wrote both rows"
    );

    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    let versions = "SELECT max(version) FROM old_sk_schema_migrations_t";
    assert_eq!(db.scalar(versions, None).await, Some(8));
    let triggers = "SELECT count(*) FROM information_schema.TRIGGERS
        WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'old_sk_tasks_queue_t'
            AND EVENT_MANIPULATION = 'INSERT'";
    assert_eq!(
        db.scalar(triggers, None).await,
        Some(0),
        "no trigger runs on an insert"
    );
    let indexes = "SELECT count(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'old_sk_tasks_queue_t'";
    assert_eq!(
        db.scalar(indexes, None).await,
        Some(3),
        "the lock handle, the id and the claim order"
    );
    sk_runtime::migrate(&db.pool, &old).await.unwrap();

    let new = sk_runtime::Enqueue::new(Record::new("new".into()))
        .with_schema(&old)
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        db.scalar(results, None).await,
        Some(1),
        "the new job is its queue row"
    );
    let client = sk_runtime::Client::new(db.pool.clone()).schema(old.clone());
    let page = client
        .jobs(&sk_runtime::JobFilter::new(), None, 10)
        .await
        .unwrap();
    let listed: Vec<_> = page.jobs.iter().map(|j| (j.id, j.status())).collect();
    assert_eq!(
        listed,
        [
            (new, JobStatus::Unprocessed),
            (posted, JobStatus::Unprocessed)
        ]
    );
    let counts = sk_runtime::QueueInfo::new(db.pool.clone())
        .schema(old.clone())
        .counts()
        .await
        .unwrap();
    assert_eq!(counts.by_status, [(JobStatus::Unprocessed, 2)]);
    two_run_on(db, &old, runs, [(posted, "posted"), (new, "new")]).await;
}

/// A MySQL queue of version 7 holds a waiting job with a unique key and a leased one.
/// Version 8 moves the key and the lease into tables of their own: the key still refuses
/// a second job (mode skip) and stays with its job through a retry's update, the lease
/// is counted for the queue's limit, and both go when their jobs leave the queue (the
/// table's triggers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_queue_of_version_7_keeps_its_keys_and_leases() {
    let db = Db::<sqlx::MySql>::new().await;
    let old = sk_runtime::Schema::new("seven", "sk_").unwrap();
    sk_runtime::__private::migrate_mysql_to(&db.pool, &old, 7)
        .await
        .unwrap();
    let (keyed, leased) = (Uuid::now_v7(), Uuid::now_v7());
    db.execute(&format!(
        "INSERT INTO seven_sk_tasks_queue_t (task_id, task_type, task_payload, task_unique_key,
            task_unique_mode, task_queue, task_locked_until_ts, task_locked_by)
         VALUES (x'{}', 'record', '{{\"label\": \"keyed\"}}', 'doc:7', 1, 'default',
                UTC_TIMESTAMP(6), NULL),
            (x'{}', 'record', '{{\"label\": \"leased\"}}', NULL, NULL, 'limited',
                UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 'gone-worker')",
        keyed.simple(),
        leased.simple()
    ))
    .await;
    sk_runtime::migrate(&db.pool, &old).await.unwrap();
    let running = "SELECT count(*) FROM seven_sk_running_t WHERE task_queue = 'limited'";
    assert_eq!(
        db.scalar(running, None).await,
        Some(1),
        "the lease is counted"
    );
    let post = |label: &str| {
        sk_runtime::Enqueue::new(Record::new(label.into()))
            .with_unique_key("doc:7")
            .with_schema(&old)
            .enqueue(&db.pool)
    };
    assert_eq!(
        post("again").await.unwrap(),
        keyed,
        "the live job keeps its key"
    );

    // A lease given back leaves the count; the job's delete takes its key with it.
    db.execute("UPDATE seven_sk_tasks_queue_t SET task_locked_by = NULL")
        .await;
    assert_eq!(db.scalar(running, None).await, Some(0));
    db.execute("DELETE FROM seven_sk_tasks_queue_t").await;
    let keys = "SELECT count(*) FROM seven_sk_unique_keys_t";
    assert_eq!(db.scalar(keys, None).await, Some(0));
    let fresh = post("fresh").await.unwrap();
    assert_ne!(fresh, keyed, "a free key goes to the new job");
    assert_eq!(db.scalar(keys, None).await, Some(1));
    db.drop().await;
}

/// MariaDB's `utf8mb4_bin` pads: `"k"` and `"k "` are one unique key, as they were to the
/// queue table's unique index before migration 8. Every enqueue path gives the job that
/// holds it.
#[tokio::test]
async fn a_mysql_unique_key_compares_as_its_column_does() {
    let db = Db::<sqlx::MySql>::new().await;
    let post = |key: &str| {
        sk_runtime::Enqueue::new(Record::new(key.into()))
            .with_unique_key(key)
            .run_after(std::time::Duration::from_secs(3600))
    };
    let first = post("k").enqueue(&db.pool).await.unwrap();
    assert_eq!(post("k ").enqueue(&db.pool).await.unwrap(), first);
    let many =
        sk_runtime::Enqueue::enqueue_many(&db.pool, vec![post("k  "), post("j"), post("j ")])
            .await
            .unwrap();
    assert_eq!(many[0], first);
    assert_eq!(
        many[2], many[1],
        "the batch's first job with the key holds it"
    );
    db.drop().await;
}

#[tokio::test]
async fn worker_start_names_duplicate_task_types_and_missing_data() {
    let pool = sqlx::PgPool::connect_lazy(&sk_tests::database_url()).unwrap();
    let error = Worker::builder(pool.clone())
        .build()
        .err()
        .expect("two jobs share a name");
    let Error::DuplicateTaskType {
        task_type,
        first,
        second,
    } = &error
    else {
        panic!("{error}")
    };
    assert_eq!(task_type, "same_name");
    assert!(
        first.starts_with("tests/queue.rs:")
            && second.starts_with("tests/queue.rs:")
            && first != second,
        "{error}"
    );
    assert!(error
        .to_string()
        .contains("give one of them `name = \"...\"`"));

    let error = Worker::builder(pool.clone())
        .task_types([WantsData::TASK_TYPE])
        .build()
        .err()
        .expect("no data");
    assert_eq!(
        error.to_string(),
        "job `wants_data` takes `Data<alloc::string::String>`, but the worker has no such data; add it with `Worker::builder(..).data(..)`"
    );
    for (builder, what) in [
        (
            Worker::builder(pool.clone()).queues(Vec::<String>::new()),
            "queues",
        ),
        (
            Worker::builder(pool.clone()).task_types(Vec::<String>::new()),
            "task types",
        ),
    ] {
        let error = builder.build().err().expect("an empty list");
        assert_eq!(
            error.to_string(),
            format!("invalid {what}: the list is empty, so the worker would claim nothing; leave it unset to take every one")
        );
    }
    let error = Worker::builder(pool)
        .task_types(["not_linked"])
        .build()
        .err()
        .expect("unknown type");
    assert!(
        error
            .to_string()
            .contains("`not_linked` was asked for but no #[job] with that name is linked"),
        "{error}"
    );
}

#[tokio::test]
async fn bad_enqueue_input_is_refused_with_a_clear_error() {
    let pool = sqlx::PgPool::connect_lazy(&sk_tests::database_url()).unwrap();
    let error = Record::new("x".into())
        .with_queue("")
        .enqueue(&pool)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "invalid queue name: must not be empty");
    // PostgreSQL's jsonb refused it with its own error; SQLite and MySQL took it.
    for metadata in [
        serde_json::json!({"note": "a\u{0}b"}),
        serde_json::json!({"deep": [{"a\u{0}": 1}]}),
    ] {
        let error = Record::new("x".into())
            .with_metadata(metadata)
            .enqueue(&pool)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::Invalid {
                    what: "metadata",
                    ..
                }
            ) && error.to_string().contains("NUL character"),
            "{error}"
        );
    }
    let error = Record::new("x".into())
        .with_queue("q".repeat(256))
        .enqueue(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid queue name: is 256 bytes long, over the limit of 255"
    );
    let error = sk_runtime::Enqueue::new(Record::new("x".repeat(100)))
        .with_max_payload(64)
        .enqueue(&pool)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("job `record` has a payload of 112 bytes, over the limit of 64 bytes"),
        "{error}"
    );
}

each_backend! {
    async fn priorities_at_the_integer_limits(db) {
        let jobs = [
            ("max", i32::MAX),
            ("min", i32::MIN),
            ("zero", 0),
            ("minus one", -1),
        ];
        let order = run_one_at_a_time(&db, &jobs).await;
        assert_eq!(order, ["min", "minus one", "zero", "max"]);
        db.drop().await;
    }
}

each_backend! {
    async fn names_full_of_quotes_and_sql_are_stored_as_data(db) {
        let (probe, mut rx) = probe();
        let queue = "q'; DROP TABLE sk_tasks_queue_t; --";
        let source = "Robert'); DROP TABLE students;-- \\ \"x\" $1 $$";
        let id = sk_runtime::Enqueue::new(EvilName::new("it's \"quoted\"".into()))
            .with_queue(queue)
            .with_source(source)
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(
            worker(&db, &[EvilName::TASK_TYPE])
                .queues([queue])
                .data(probe),
        );
        let ran = recv(&mut rx, "the job", T).await;
        assert_eq!((ran.id, ran.label.as_str()), (id, "it's \"quoted\""));
        let r = db
            .wait_job(id, T, |r| r.status() == JobStatus::Processed)
            .await;
        w.stop().await;
        assert_eq!(
            (r.task_type.as_str(), r.queue.as_str(), r.source.as_str()),
            (EvilName::TASK_TYPE, queue, source)
        );
        assert_eq!(
            db.info()
                .counts()
                .await
                .unwrap()
                .status(JobStatus::Processed),
            1,
            "both tables intact"
        );
        db.drop().await;
    }
}

each_backend! {
    async fn run_time_schedules_parse_or_fail_with_a_clear_error(db) {
        let error = worker(&db, &[Record::TASK_TYPE])
            .data(probe_only())
            .periodic("61 * * * *", Record::new("never".into()))
            .build()
            .err()
            .expect("a bad expression");
        let text = error.to_string();
        assert!(text.starts_with("invalid cron schedule: periodic job `record`: \"61 * * * *\" does not parse: Minutes must be"), "{text}");
        assert!(text.ends_with("('61' specified.)"), "{text}");
        let error = worker(&db, &[Record::TASK_TYPE])
            .data(probe_only())
            .periodic("daily", Record::new("x".into()))
            .build()
            .err()
            .unwrap();
        assert!(
            error
                .to_string()
                .contains("\"daily\" has 1 fields; expected 5, 6 or 7"),
            "{error}"
        );

        // A good one runs with its payload, once per tick.
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(
            Utc::now().with_nanosecond(500_000_000).unwrap() + chrono::Duration::seconds(1),
        );
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .clock(clock.clone())
                .periodic("* * * * * *", Record::new("from the schedule".into()))
                .data(probe),
        );
        db.wait_worker_up(&w.id).await;
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            recv(&mut rx, "the periodic job", T).await.label,
            "from the schedule"
        );
        w.stop().await;
        db.drop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_an_older_version_is_brought_forward() {
    let db = TestDb::new().await;
    let (probe, mut rx) = probe();
    let old = sk_runtime::Schema::new("old", "sk_").unwrap();
    sk_runtime::__private::migrate_to(&db.pool, &old, 1)
        .await
        .unwrap();
    // A job as sk v1 wrote it: payload in both tables, NOT NULL in results.
    let id = Uuid::now_v7();
    sqlx::query(
        "WITH r AS (
            INSERT INTO old.sk_task_results_t (task_id, task_type, task_source, task_payload, task_queue,
                task_status, task_priority, task_posted_at_ts)
            VALUES ($1, 'record', 'v1', '{\"label\": \"queued under v1\"}', 'default', 1, 0, now()))
         INSERT INTO old.sk_tasks_queue_t (task_id, task_type, task_source, task_payload, task_priority,
             task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts)
         VALUES ($1, 'record', 'v1', '{\"label\": \"queued under v1\"}', 0, now(), now(), 'default', 25)",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .schema(old.clone())
            .data(probe),
    );
    assert_eq!(recv(&mut rx, "the v1 job", T).await.id, id);
    w.stop().await;
    let versions: Vec<i32> =
        sqlx::query_scalar("SELECT version FROM old.sk_schema_migrations_t ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    // The old results table became the default partition (migration 5), options and all.
    let options: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(reloptions) FROM pg_class WHERE oid = 'old.sk_task_results_default'::regclass ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        options,
        [
            "autovacuum_analyze_scale_factor=0.05",
            "autovacuum_vacuum_scale_factor=0.05"
        ]
    );

    // A schema newer than this build is refused, not touched.
    sqlx::query("INSERT INTO old.sk_schema_migrations_t (version, description) VALUES (99, 'from the future')")
        .execute(&db.pool)
        .await
        .unwrap();
    let worker = worker(&db, &[Record::TASK_TYPE])
        .schema(old)
        .data(probe_only())
        .build()
        .unwrap();
    let error = worker.run_until(std::future::pending()).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the database schema is at version 99, newer than this sk (11); upgrade sk"
    );
    db.drop().await;
}

fn probe_only() -> Probe {
    probe().0
}

each_backend! {
    async fn enqueue_many_keeps_per_job_options_and_skips_known_unique_keys(db) {
        let (probe, mut rx) = probe();
        let mixed = vec![
            sk_runtime::Enqueue::new(Record::new("b".into())).with_priority(2),
            sk_runtime::Enqueue::new(Record::new("a".into()))
                .with_priority(1)
                .with_queue("other"),
            sk_runtime::Enqueue::new(Record::new("c".into())).with_priority(2),
        ];
        let ids = Record::enqueue_many(&db.pool, mixed).await.unwrap();
        let keyed = vec![
            sk_runtime::Enqueue::new(Record::new("d".into()))
                .with_priority(3)
                .with_unique_key("k1"),
            sk_runtime::Enqueue::new(Record::new("e".into()))
                .with_priority(3)
                .with_unique_key("k2"),
        ];
        Record::enqueue_many(&db.pool, keyed).await.unwrap();
        let again = vec![sk_runtime::Enqueue::new(Record::new("d again".into())).with_unique_key("k1")];
        Record::enqueue_many(&db.pool, again).await.unwrap();
        let record = db.job(ids[1]).await;
        assert_eq!((record.queue.as_str(), record.priority), ("other", 1));

        let w = RunningWorker::start(worker(&db, &[Record::TASK_TYPE]).concurrency(1).data(probe));
        let mut order = Vec::new();
        for _ in 0..5 {
            order.push(recv(&mut rx, "a job", T).await.label);
        }
        w.stop().await;
        assert_eq!(
            order,
            ["a", "b", "c", "d", "e"],
            "priority, then the caller's order"
        );
        assert!(rx.try_recv().is_err(), "the duplicate key was skipped");
        db.drop().await;
    }
}

each_backend! {
    /// A large batch keeps every job's fields, text with tabs, newlines and backslashes
    /// included, keeps the caller's order, and is stored with the caller's transaction
    /// or not at all; so does a batch of jobs alike but for their payloads (which a store
    /// may send apart).
    async fn a_large_batch_keeps_its_fields_order_and_transaction(db) {
        const JOBS: usize = 1500;
        const ODD: &str = "tab\there, line\nbreak, back\\slash \\N, cr\r and ünïcödé";
        let batch = |salt: &'static str| {
            (0..JOBS).map(move |i| {
                let job = sk_runtime::Enqueue::new(Record::new(format!("{i} {ODD} {salt}")));
                if i % 2 == 1 {
                    return job;
                }
                job.with_tenant(format!("tenant {ODD}"))
                    .with_correlation_id(format!("corr\t{i}"))
                    .with_metadata(serde_json::json!({ "k": ODD, "i": i }))
                    .with_queue("other")
            })
        };
        let counts = || async {
            (
                db.scalar("SELECT count(*) FROM sk_tasks_queue_t", None).await,
                db.scalar("SELECT count(*) FROM sk_task_results_t", None).await,
            )
        };
        let mut tx = db.pool.begin().await.unwrap();
        Record::enqueue_many(&mut *tx, batch("rolled back")).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(counts().await, (Some(0), Some(0)), "rolled back with the caller's transaction");

        let mut tx = db.pool.begin().await.unwrap();
        let ids = Record::enqueue_many(&mut *tx, batch("kept")).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(ids.len(), JOBS);
        let n = Some(JOBS as i64);
        // A job without a unique key has no results row until its first outcome (one
        // row per job at enqueue).
        assert_eq!(counts().await, (n, Some(0)), "a queue row each");
        let by_status = db.info().counts().await.unwrap().by_status;
        assert_eq!(by_status, [(JobStatus::Unprocessed, JOBS as i64)], "every job counted once");
        let client = sk_runtime::Client::new(db.pool.clone());
        let (mut listed, mut after) = (Vec::new(), None);
        loop {
            let page = client.jobs(&sk_runtime::JobFilter::new(), after, 1000).await.unwrap();
            listed.extend(page.jobs.iter().map(|j| (j.id, j.status())));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let mut expected: Vec<_> = ids.iter().map(|id| (*id, JobStatus::Unprocessed)).collect();
        expected.sort_unstable_by_key(|j| std::cmp::Reverse(j.0));
        assert_eq!(listed, expected, "every job listed once, newest first");
        let even = db.job(ids[0]).await;
        let expected = format!("tenant {ODD}");
        assert_eq!(
            (even.queue.as_str(), even.tenant.as_deref(), even.correlation_id.as_deref()),
            ("other", Some(expected.as_str()), Some("corr\t0"))
        );
        let metadata: serde_json::Value =
            serde_json::from_str(even.metadata.as_deref().unwrap()).unwrap();
        assert_eq!(metadata, serde_json::json!({ "k": ODD, "i": 0 }));
        let odd = db.job(ids[1]).await;
        assert_eq!(
            (odd.queue.as_str(), odd.tenant, odd.correlation_id, odd.metadata),
            ("default", None, None, None)
        );
        let alike = Record::enqueue_many(
            &db.pool,
            (0..JOBS).map(|i| {
                sk_runtime::Enqueue::new(Record::new(format!("{i} {ODD} alike")))
                    .with_tenant(format!("tenant {ODD}"))
                    .with_metadata(serde_json::json!({ "k": ODD }))
                    .with_priority(1)
            }),
        )
        .await
        .unwrap();
        let last = db.job(alike[JOBS - 1]).await;
        assert_eq!(
            (last.priority, last.tenant.as_deref(), last.metadata.as_deref().map(|m| {
                serde_json::from_str::<serde_json::Value>(m).unwrap()
            })),
            (1, Some(expected.as_str()), Some(serde_json::json!({ "k": ODD })))
        );

        // One job a claim: they start in the queue's own order, the caller's.
        let (probe, mut rx) = probe();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE]).concurrency(1).prefetch(0).data(probe),
        );
        for (i, id) in ids.iter().enumerate() {
            let seen = recv(&mut rx, "a job of the batch", T).await;
            assert_eq!((seen.id, seen.label), (*id, format!("{i} {ODD} kept")));
        }
        for (i, id) in alike.iter().enumerate() {
            let seen = recv(&mut rx, "a job of the batch alike", T).await;
            assert_eq!((seen.id, seen.label), (*id, format!("{i} {ODD} alike")));
        }
        w.stop().await;
        db.drop().await;
    }
}

each_backend! {
    async fn finished_results_are_pruned_after_the_retention_period(db) {
        let (probe, mut rx) = probe();
        let clock = ManualClock::new(Utc::now() + chrono::Duration::seconds(1));
        let done = Record::new("done".into()).enqueue(&db.pool).await.unwrap();
        let waiting = Record::new("later".into())
            .run_at(clock.now() + chrono::Duration::days(30))
            .enqueue(&db.pool)
            .await
            .unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Record::TASK_TYPE])
                .clock(clock.clone())
                .result_retention(Duration::from_secs(7 * 24 * 3600))
                .maintenance_interval(Duration::from_millis(100))
                .data(probe),
        );
        assert_eq!(recv(&mut rx, "the job", T).await.id, done);
        db.wait_job(done, T, |r| r.status() == JobStatus::Processed)
            .await;
        clock.advance(Duration::from_secs(6 * 24 * 3600));
        // A maintenance pass prunes, then stamps the metrics with the clock: once the stamp
        // shows the advanced time, a prune at that time has run, and the result is still kept.
        let six_days_on = clock.now();
        wait_until("a maintenance pass at the advanced clock", T, || async {
            let stamp = db
                .time(
                    "SELECT max(metric_last_updated) FROM sk_metrics_t WHERE metric_owner_process_id = $1",
                    Some(&w.id),
                )
                .await;
            (stamp >= Some(six_days_on)).then_some(())
        })
        .await;
        assert!(
            db.info().job(done).await.unwrap().is_some(),
            "kept until the retention runs out"
        );
        clock.advance(Duration::from_secs(2 * 24 * 3600));
        let info = db.info();
        wait_until("the finished result to be pruned", T, || async {
            info.job(done).await.unwrap().is_none().then_some(())
        })
        .await;
        w.stop().await;
        assert_eq!(
            db.job(waiting).await.status(),
            JobStatus::Unprocessed,
            "live jobs are never pruned"
        );
        db.drop().await;
    }
}

#[job]
async fn logs_inside(word: String) -> Result<(), JobError> {
    tracing::info!(word = %word, "inside the handler");
    Ok(())
}

/// Everything a subscriber writes, to read back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends this thread's INFO lines (and, on a one-thread runtime, every task's) to
/// `writer`, until the guard drops.
fn log_to<W>(writer: W) -> tracing::subscriber::DefaultGuard
where
    W: std::io::Write + Clone + Send + Sync + 'static,
{
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::set_default(subscriber)
}

/// Each failed attempt of a job's record, with how it ended.
fn failed_attempts(record: &sk_runtime::JobRecord) -> Vec<(i32, AttemptOutcome)> {
    record
        .failed_attempts
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect()
}

/// A handler's own log line carries its job's id, type, queue and attempt (the job's
/// span). The test's runtime runs every task on this thread, where the subscriber is set.
#[tokio::test]
async fn a_jobs_own_log_lines_carry_its_id() {
    let db = TestDb::new().await;
    let captured = Captured::default();
    let writer = captured.clone();
    let _guard = log_to(writer);
    let id = LogsInside::new("marmalade".into())
        .with_queue("logs")
        .enqueue(&db.pool)
        .await
        .unwrap();
    let w = RunningWorker::start(worker(&db, &[LogsInside::TASK_TYPE]).queues(["logs"]));
    db.wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let text = captured.text();
    let line = text
        .lines()
        .find(|l| l.contains("inside the handler"))
        .unwrap_or_else(|| panic!("the handler's line is missing:\n{text}"));
    for field in [
        format!("id={id}"),
        "task_type=logs_inside".to_owned(),
        "queue=logs".to_owned(),
        "attempt=1".to_owned(),
        "word=marmalade".to_owned(),
    ] {
        assert!(line.contains(&field), "{field} is missing from: {line}");
    }
    db.drop().await;
}

#[job(max_attempts = 3)]
async fn fails_first_with(marker: String, ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() == 1 {
        return Err(JobError::new(marker));
    }
    Ok(())
}

/// A log writer that panics, once, on the first line that holds its marker: the panic
/// then happens in whichever of the worker's tasks logs that line.
#[derive(Clone)]
struct BreaksOnce {
    marker: &'static str,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl std::io::Write for BreaksOnce {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if String::from_utf8_lossy(bytes).contains(self.marker)
            && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("the log writer broke on {}", self.marker);
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A panic in the worker's completer (here in the log writer, while it logs a failure)
/// stops the worker with an error naming it, instead of leaving the worker up with its
/// jobs leased for ever; the lease runs out and another worker runs the job.
#[tokio::test]
async fn a_worker_whose_completer_panics_stops_and_its_jobs_run_elsewhere() {
    let db = TestDb::new().await;
    let writer = BreaksOnce {
        marker: "the-completer-breaks-here",
        armed: Arc::new(true.into()),
    };
    // The test's runtime runs every task on this thread, where the subscriber is set.
    let _guard = log_to(writer);
    let id = FailsFirstWith::new("the-completer-breaks-here".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let lease = Duration::from_secs(1);
    let first = worker(&db, &[FailsFirstWith::TASK_TYPE])
        .lease(lease)
        .build()
        .unwrap();
    let ended = tokio::time::timeout(T, first.run_until(std::future::pending()))
        .await
        .expect("the worker stops once its completer is gone");
    let error = ended.expect_err("a worker without its completer ends with an error");
    assert!(
        matches!(&error, sk_runtime::Error::WorkerTask { task: "completer", cause } if cause.contains("the log writer broke")),
        "{error}"
    );
    assert!(
        error.to_string().starts_with("the worker's completer stopped unexpectedly (the log writer broke on the-completer-breaks-here)"),
        "{error}"
    );
    // The first attempt's outcome was never written; its lease runs out, no heartbeat
    // extends it, and a second worker runs the job again.
    let second = RunningWorker::start(worker(&db, &[FailsFirstWith::TASK_TYPE]).lease(lease));
    let record = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    second.stop().await;
    assert_eq!(
        failed_attempts(&record),
        [(1, AttemptOutcome::Lost)],
        "{record:?}"
    );
    db.drop().await;
}

/// A metrics recorder whose first wait-time histogram panics, and which records
/// nothing.
struct BreaksOnWait(std::sync::atomic::AtomicBool);

impl metrics::Recorder for BreaksOnWait {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        if key.name() == "sk_job_queue_wait_seconds"
            && self.0.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("the recorder broke");
        }
        metrics::Histogram::noop()
    }
}

/// A panic in a job's task outside its handler (here in the metrics recorder, as the
/// job starts) does not leave the job leased for ever by a worker that still runs: its
/// lease runs out and the job runs again, and the worker goes on. (Backend-independent:
/// the executor's.)
#[tokio::test]
async fn a_panic_around_a_handler_loses_the_attempt_not_the_job() {
    let db = TestDb::new().await;
    let recorder = BreaksOnWait(true.into());
    // The test's runtime runs every task on this thread, where the recorder is set.
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let (probe, mut events) = probe();
    let id = Record::new("once".into()).enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(
        worker(&db, &[Record::TASK_TYPE])
            .lease(Duration::from_secs(1))
            .data(probe.clone()),
    );
    let record = db
        .wait_job(id, T, |r| r.status() == JobStatus::Processed)
        .await;
    let later = Record::new("later".into()).enqueue(&db.pool).await.unwrap();
    db.wait_job(later, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    assert_eq!(
        failed_attempts(&record),
        [(1, AttemptOutcome::Lost)],
        "{record:?}"
    );
    let mut runs = Vec::new();
    while let Ok(event) = events.try_recv() {
        runs.push((event.label, event.attempt));
    }
    assert_eq!(
        runs,
        [("once".to_owned(), 2), ("later".to_owned(), 1)],
        "the first run never reached its handler"
    );
    db.drop().await;
}

#[job(max_attempts = 1)]
async fn fails_at_length(bytes: usize) -> Result<(), JobError> {
    // Two-byte characters, so the cut has to find a character boundary.
    Err(JobError::new("é".repeat(bytes / 2))
        .with_kind("k".repeat(300))
        .with_detail("d".repeat(100_000)))
}

/// `stored` is the start of `whole`, at most `limit` bytes with its marker, and the
/// marker counts the bytes left out.
fn assert_cut(stored: &str, whole: &str, limit: usize) {
    assert!(stored.len() <= limit, "{} > {limit}", stored.len());
    let (kept, more) = stored.split_once("… [").expect("a marker");
    assert!(
        kept.len() + 32 > limit,
        "kept only {} of {limit}",
        kept.len()
    );
    assert!(whole.starts_with(kept));
    let more = more.strip_suffix(" bytes more]").expect("the marker's end");
    assert_eq!(more.parse::<usize>().unwrap(), whole.len() - kept.len());
}

each_backend! {
    /// A long error is stored cut, with a marker saying how much was left out, and the
    /// job still reaches its final state.
    async fn a_long_error_is_stored_cut_and_marked(db) {
        let id = FailsAtLength::new(70_000).enqueue(&db.pool).await.unwrap();
        let short = FailsAtLength::new(100).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[FailsAtLength::TASK_TYPE]));
        let record = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
        let whole = db.wait_job(short, T, |r| r.status() == JobStatus::Fatal).await;
        w.stop().await;
        let message = record.last_error_message.clone().unwrap();
        assert_cut(&message, &"é".repeat(35_000), 8 * 1024);
        assert_cut(&record.last_error_detail.unwrap(), &"d".repeat(100_000), 32 * 1024);
        assert_cut(&record.last_error_type.unwrap(), &"k".repeat(300), 255);
        let attempt = &db.info().job(id).await.unwrap().unwrap().failed_attempts[0];
        assert_eq!(attempt.message.as_deref(), Some(message.as_str()));
        assert_eq!(whole.last_error_message, Some("é".repeat(50)));
        db.drop().await;
    }
}

#[job(max_attempts = 1)]
async fn fails_with_context() -> anyhow::Result<()> {
    let cause = std::io::Error::new(std::io::ErrorKind::NotFound, "config.toml is missing");
    Err(anyhow::Error::new(cause).context("cannot load the settings"))
}

/// A handler returning `anyhow::Result` records the error's message, type and causes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anyhow_error_is_recorded_with_its_causes() {
    let db = TestDb::new().await;
    let id = FailsWithContext::new().enqueue(&db.pool).await.unwrap();
    let w = RunningWorker::start(worker(&db, &[FailsWithContext::TASK_TYPE]));
    let record = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
    w.stop().await;
    assert_eq!(
        record.last_error_message.as_deref(),
        Some("cannot load the settings")
    );
    assert_eq!(record.last_error_type.as_deref(), Some("anyhow::Error"));
    let detail = record.last_error_detail.unwrap_or_default();
    assert!(detail.contains("config.toml is missing"), "{detail}");
    db.drop().await;
}

#[job(max_attempts = 1)]
async fn fails_with_nul() -> Result<(), JobError> {
    Err(JobError::new("bad\0byte")
        .with_kind("k\0")
        .with_detail("d\0d"))
}

#[job]
async fn outputs(word: String) -> Result<String, JobError> {
    Ok(word)
}

each_backend! {
    /// A NUL in a job's error is stored as U+FFFD on every backend (PostgreSQL's text
    /// cannot hold one: it refused the whole batch, retried for ever, and the worker's
    /// other jobs waited with it); a NUL in its output is JSON's `\u0000`, kept as it is.
    async fn a_nul_in_an_error_or_an_output_is_stored(db) {
        let failed = FailsWithNul::new().enqueue(&db.pool).await.unwrap();
        let output = Outputs::new("out\0put".into()).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(worker(&db, &[FailsWithNul::TASK_TYPE, Outputs::TASK_TYPE]));
        let failed = db.wait_job(failed, T, |r| r.status() == JobStatus::Fatal).await;
        let output = db.wait_job(output, T, |r| r.status() == JobStatus::Processed).await;
        w.stop().await;
        assert_eq!(failed.last_error_message.as_deref(), Some("bad\u{FFFD}byte"));
        assert_eq!(failed.last_error_type.as_deref(), Some("k\u{FFFD}"));
        assert_eq!(failed.last_error_detail.as_deref(), Some("d\u{FFFD}d"));
        assert_eq!(failed_attempts(&failed), [(1, AttemptOutcome::Fatal)]);
        assert_eq!(output.output_json.as_deref(), Some(r#""out\u0000put""#));
        db.drop().await;
    }
}

#[job(max_attempts = 1)]
async fn fails_saying(word: String) -> Result<(), JobError> {
    Err(JobError::new(word))
}

#[job]
async fn never_recorded() {}

/// A trigger on the results table that refuses rows as a database refuses a value it
/// cannot store: an output or an error holding `xyzzy`, and any success of
/// `never_recorded`.
fn refusing_trigger(backend: &str) -> Vec<String> {
    const WHEN: &str = "NEW.task_output LIKE '%xyzzy%' OR NEW.task_errors LIKE '%xyzzy%'
        OR (NEW.task_type = 'never_recorded' AND NEW.task_status = 3)";
    match backend {
        "PostgreSQL" => vec![
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                IF NEW.task_output LIKE '%xyzzy%' OR NEW.task_errors::text LIKE '%xyzzy%'
                    OR (NEW.task_type = 'never_recorded' AND NEW.task_status = 3) THEN
                    RAISE EXCEPTION 'this row is refused' USING ERRCODE = '22023';
                END IF;
                RETURN NEW;
            END $$"
                .into(),
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON sk_task_results_t
                FOR EACH ROW EXECUTE FUNCTION refuse()"
                .into(),
        ],
        "MySQL" => ["INSERT", "UPDATE"]
            .map(|event| {
                format!(
                    "CREATE TRIGGER refuse_{event} BEFORE {event} ON sk_task_results_t FOR EACH ROW
                    BEGIN IF {WHEN} THEN SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'this row is refused'; END IF; END"
                )
            })
            .to_vec(),
        _ => ["INSERT", "UPDATE"]
            .map(|event| {
                format!(
                    "CREATE TRIGGER refuse_{event} BEFORE {event} ON sk_task_results_t WHEN {WHEN}
                    BEGIN SELECT RAISE(ABORT, 'this row is refused'); END"
                )
            })
            .to_vec(),
    }
}

/// The database refuses the rows of some outcomes in a batch for what they hold (here a
/// trigger; in life a value its column cannot take). The batch is halved until each
/// refused outcome is alone: the others are recorded as they are, a refused success
/// without its output, a refused failure with a message saying its error was refused,
/// and one refused even so is not recorded (its lease runs out). The worker goes on.
/// Before, the batch was retried for ever and the worker held all its jobs. On a
/// runtime of one thread, so the outcomes of a claim reach the completer together.
async fn outcomes_the_database_refuses_are_recorded_without_what_it_refuses<B: TestBackend>()
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    let db = Db::<B>::new().await;
    for sql in refusing_trigger(B::BACKEND) {
        db.execute(&sql).await;
    }
    let captured = Captured::default();
    let _guard = log_to(captured.clone());
    let mut fine = Vec::new();
    for n in 0..5 {
        fine.push(
            Outputs::new(format!("fine {n}"))
                .enqueue(&db.pool)
                .await
                .unwrap(),
        );
    }
    let refused_output = Outputs::new("xyzzy".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let mut failed = Vec::new();
    for n in 0..5 {
        failed.push(
            FailsSaying::new(format!("plain {n}"))
                .enqueue(&db.pool)
                .await
                .unwrap(),
        );
    }
    let refused_error = FailsSaying::new("xyzzy".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let never = NeverRecorded::new().enqueue(&db.pool).await.unwrap();
    let types = [
        Outputs::TASK_TYPE,
        FailsSaying::TASK_TYPE,
        NeverRecorded::TASK_TYPE,
    ];
    let w = RunningWorker::start(
        worker(&db, &types)
            .concurrency(20)
            .lease(Duration::from_secs(3600)),
    );
    for (n, id) in fine.iter().enumerate() {
        let r = db
            .wait_job(*id, T, |r| r.status() == JobStatus::Processed)
            .await;
        assert_eq!(r.output_json, Some(format!("\"fine {n}\"")));
    }
    let r = db
        .wait_job(refused_output, T, |r| r.status() == JobStatus::Processed)
        .await;
    assert_eq!(r.output_json, None, "recorded without its output");
    for (n, id) in failed.iter().enumerate() {
        let r = db
            .wait_job(*id, T, |r| r.status() == JobStatus::Fatal)
            .await;
        assert_eq!(r.last_error_message, Some(format!("plain {n}")));
    }
    let r = db
        .wait_job(refused_error, T, |r| r.status() == JobStatus::Fatal)
        .await;
    let message = r.last_error_message.unwrap_or_default();
    assert!(
        message.starts_with("the database refused to store this run's error")
            && message.contains("this row is refused"),
        "{message}"
    );
    assert_eq!(r.last_error_type.as_deref(), Some("sk::unstorable"));
    // The worker goes on.
    let later = Outputs::new("later".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    db.wait_job(later, T, |r| r.status() == JobStatus::Processed)
        .await;
    w.stop().await;
    let r = db.job(never).await;
    assert_ne!(r.status(), JobStatus::Processed, "{r:?}");
    let log = captured.text();
    assert!(log.contains("writing them in halves"), "{log}");
    assert!(
        log.contains("even without its output; not recorded"),
        "{log}"
    );
    db.drop().await;
}

#[tokio::test]
async fn outcomes_the_database_refuses_are_recorded_without_what_it_refuses_on_postgres() {
    outcomes_the_database_refuses_are_recorded_without_what_it_refuses::<sqlx::Postgres>().await;
}

#[tokio::test]
async fn outcomes_the_database_refuses_are_recorded_without_what_it_refuses_on_mysql() {
    outcomes_the_database_refuses_are_recorded_without_what_it_refuses::<sqlx::MySql>().await;
}

#[tokio::test]
async fn outcomes_the_database_refuses_are_recorded_without_what_it_refuses_on_sqlite() {
    outcomes_the_database_refuses_are_recorded_without_what_it_refuses::<sqlx::Sqlite>().await;
}

#[job]
async fn repeats(bytes: usize) -> Result<String, JobError> {
    Ok("x".repeat(bytes))
}

#[job(max_attempts = 1)]
async fn fails_carrying(blob: String) -> Result<(), JobError> {
    Err(JobError::new(format!("failed with {} bytes", blob.len())))
}

each_backend! {
    /// Large outputs and large payloads of jobs that fail for good (kept to inspect or
    /// re-post), all in one batch: each store call and statement stays within what the
    /// database takes (MariaDB closed the connection on a statement over its 16 MiB
    /// `max_allowed_packet`, and the batch was retried for ever), and an output over
    /// 1 MiB is recorded without it.
    async fn a_batch_of_large_outcomes_is_recorded(db) {
        let mut outputs = Vec::new();
        let mut failed = Vec::new();
        for _ in 0..30 {
            outputs.push(Repeats::new(1_000_000).enqueue(&db.pool).await.unwrap());
            failed.push(FailsCarrying::new("y".repeat(1_000_000)).enqueue(&db.pool).await.unwrap());
        }
        let too_large = Repeats::new(1_100_000).enqueue(&db.pool).await.unwrap();
        let w = RunningWorker::start(
            worker(&db, &[Repeats::TASK_TYPE, FailsCarrying::TASK_TYPE]).concurrency(100),
        );
        for id in outputs {
            let r = db.wait_job(id, T, |r| r.status() == JobStatus::Processed).await;
            assert_eq!(r.output_json.map(|o| o.len()), Some(1_000_002));
        }
        for id in failed {
            let r = db.wait_job(id, T, |r| r.status() == JobStatus::Fatal).await;
            assert_eq!(r.last_error_message.as_deref(), Some("failed with 1000000 bytes"));
            assert!(r.payload.is_some_and(|p| p.len() > 1_000_000));
        }
        let r = db.wait_job(too_large, T, |r| r.status() == JobStatus::Processed).await;
        assert_eq!(r.output_json, None);
        w.stop().await;
        db.drop().await;
    }
}
