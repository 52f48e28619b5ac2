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

mod backends;
mod claims;
mod cli;
mod clients;
mod control;
mod devkit;
mod flow;
mod leases;
mod lifecycle;
mod observed;
mod operators;
mod partitions;
mod route;
mod runs;
mod seeds;
mod start;
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

/// Each failed attempt of a job's record, with how it ended.
fn failed_attempts(record: &sk_runtime::JobRecord) -> Vec<(i32, AttemptOutcome)> {
    record
        .failed_attempts
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect()
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
