//! The application developer's kit: the testing module, enqueue from a job, and jobs
//! that complete in their own transaction, on every backend.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sk_runtime::testing::{self, Outcome, Runner};
use sk_runtime::{job, Client, Data, Job, JobContext, JobError, JobStatus, ManualClock, Worker};
use sk_tests::{each_backend, Db, RunningWorker, TestBackend};

use crate::T;

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Quote {
    cents: i64,
    currency: String,
}

struct Rates {
    eur: f64,
}

#[job(
    max_attempts = 3,
    backoff = "linear",
    backoff_base = "10s",
    timeout = "200ms"
)]
async fn price(cents: i64, mode: String, rates: Data<Rates>) -> Result<Quote, JobError> {
    match mode.as_str() {
        "fatal" => Err(JobError::fatal("no such product")),
        "error" => Err(JobError::new("the rates service is down")),
        "panic" => panic!("a bug in pricing"),
        "slow" => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        "snooze" => Err(JobError::snooze(Duration::from_secs(30))),
        _ => Ok(Quote {
            cents: (cents as f64 * rates.eur) as i64,
            currency: "EUR".into(),
        }),
    }
}

/// `Runner::perform` runs a job value as a worker would and says what comes next.
#[tokio::test]
async fn a_job_runs_inline_through_its_handler() {
    let runner = Runner::new().data(Rates { eur: 0.5 });
    let ok = runner.perform(Price::new(300, "ok".into())).await;
    assert!(ok.is_success(), "{ok:?}");
    assert_eq!(
        ok.output::<Quote>(),
        Some(Quote {
            cents: 150,
            currency: "EUR".into()
        })
    );

    let fatal = runner.perform(Price::new(1, "fatal".into())).await;
    assert!(
        matches!(&fatal, Outcome::Failed { error } if error.message() == "no such product"),
        "{fatal:?}"
    );

    // A recoverable error retries at the job's backoff until its last attempt.
    let first = runner.perform(Price::new(1, "error".into())).await;
    assert!(
        matches!(&first, Outcome::Retry { after, .. } if *after == Duration::from_secs(10)),
        "{first:?}"
    );
    let second = Runner::new()
        .data(Rates { eur: 0.5 })
        .attempt(2)
        .perform(Price::new(1, "error".into()))
        .await;
    assert!(
        matches!(&second, Outcome::Retry { after, .. } if *after == Duration::from_secs(20)),
        "{second:?}"
    );
    let last = Runner::new()
        .data(Rates { eur: 0.5 })
        .attempt(3)
        .perform(Price::new(1, "error".into()))
        .await;
    assert!(matches!(last, Outcome::Failed { .. }), "{last:?}");

    // Panics and timeouts are caught as the worker catches them.
    let panicked = runner.perform(Price::new(1, "panic".into())).await;
    let error = panicked.error().expect("a failure");
    assert_eq!(error.kind(), "panic");
    assert!(error.message().contains("a bug in pricing"), "{error:?}");
    let slow = runner.perform(Price::new(1, "slow".into())).await;
    assert_eq!(
        slow.error().map(JobError::kind),
        Some("timeout"),
        "{slow:?}"
    );
    let snoozed = runner.perform(Price::new(1, "snooze".into())).await;
    assert!(
        matches!(snoozed, Outcome::Snoozed { after } if after == Duration::from_secs(30)),
        "{snoozed:?}"
    );

    // Missing data is named, not a panic.
    let missing = Runner::new().perform(Price::new(1, "ok".into())).await;
    let error = missing.error().expect("a failure");
    assert!(error.message().contains("Rates"), "{error:?}");

    // The fn itself, with a context and data built for the test.
    let direct = price(10, "ok".into(), Data::new(Rates { eur: 2.0 })).await;
    assert_eq!(direct.unwrap().cents, 20);
}

#[job]
async fn describe(ctx: JobContext) -> Result<String, JobError> {
    Ok(format!(
        "{} attempt {} of {} tenant {:?} correlation {:?}",
        ctx.task_type(),
        ctx.attempt(),
        ctx.max_attempts(),
        ctx.tenant(),
        ctx.correlation_id()
    ))
}

/// A job whose tenant is its argument `account`.
#[job(tenant = account)]
async fn for_account(account: u64, ctx: JobContext) -> Result<Option<String>, JobError> {
    let _ = account;
    Ok(ctx.tenant().map(str::to_owned))
}

/// A test builds the context a job sees; without a pool, enqueueing from it says why not.
#[tokio::test]
async fn a_test_builds_the_context_a_job_sees() {
    let runner = Runner::new()
        .attempt(2)
        .max_attempts(5)
        .tenant("acme")
        .correlation_id("order-7");
    let ctx = runner.context::<Describe>();
    assert_eq!(
        describe(ctx.clone()).await.unwrap(),
        r#"describe attempt 2 of 5 tenant Some("acme") correlation Some("order-7")"#
    );
    let through = runner.perform(Describe::new()).await;
    assert_eq!(
        through.output::<String>().as_deref(),
        Some(r#"describe attempt 2 of 5 tenant Some("acme") correlation Some("order-7")"#)
    );
    let error = ctx.enqueue(Describe::new()).await.unwrap_err();
    assert!(error.to_string().contains("Runner::pool"), "{error}");
    // A job run by the runner has the tenant its arguments give it, unless told one.
    let derived = Runner::new().perform(ForAccount::new(42)).await;
    assert_eq!(
        derived.output::<Option<String>>(),
        Some(Some("42".to_owned()))
    );
    let told = runner.perform(ForAccount::new(42)).await;
    assert_eq!(
        told.output::<Option<String>>(),
        Some(Some("acme".to_owned()))
    );
}

/// Refuses the jobs of tenant "closed", and panics for tenant "boom".
struct Gate;

impl sk_runtime::Layer for Gate {
    fn around<'a>(
        &'a self,
        ctx: &'a JobContext,
        next: sk_runtime::Next<'a>,
    ) -> sk_runtime::LayerFuture<'a> {
        Box::pin(async move {
            match ctx.tenant() {
                Some("closed") => Err(JobError::fatal("closed").with_kind("refused")),
                Some("boom") => panic!("the gate broke"),
                _ => next.run().await,
            }
        })
    }
}

/// The runner runs a job through its layers as a worker does: a refusal is the run's
/// outcome, and a layer's panic its failure.
#[tokio::test]
async fn the_runner_runs_layers() {
    let through = Runner::new().layer(Gate).perform(ForAccount::new(7)).await;
    assert_eq!(
        through.output::<Option<String>>(),
        Some(Some("7".to_owned()))
    );
    let refused = Runner::new()
        .layer(Gate)
        .tenant("closed")
        .perform(ForAccount::new(7))
        .await;
    assert!(matches!(refused, Outcome::Failed { .. }), "{refused:?}");
    assert_eq!(refused.error().map(JobError::kind), Some("refused"));
    let broke = Runner::new()
        .layer(Gate)
        .tenant("boom")
        .perform(ForAccount::new(7))
        .await;
    let error = broke.error().expect("a failure");
    assert_eq!(error.kind(), "panic");
    assert!(error.message().contains("the gate broke"), "{error:?}");
}

/// Where the children of `fan_out` report.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

#[job]
async fn fan_out(n: u32, ctx: JobContext) -> Result<(), JobError> {
    for i in 0..n {
        ctx.enqueue(Leaf::new(i)).await?;
    }
    Ok(())
}

#[job(max_attempts = 2, backoff = "constant", backoff_base = "1m")]
async fn leaf(i: u32, ctx: JobContext, seen: Data<Seen>) -> Result<(), JobError> {
    seen.0.lock().unwrap().push(format!(
        "{i} attempt {} tenant {:?} correlation {:?}",
        ctx.attempt(),
        ctx.tenant(),
        ctx.correlation_id()
    ));
    if i == 1 && ctx.attempt() == 1 {
        return Err(JobError::new("flaky"));
    }
    Ok(())
}

fn drain_worker<B: TestBackend>(db: &Db<B>, clock: &ManualClock, seen: &Seen) -> Worker
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    Worker::builder(db.pool.clone())
        .task_types([FanOut::TASK_TYPE, Leaf::TASK_TYPE])
        .clock(clock.clone())
        .data(seen.clone())
        .build()
        .unwrap()
}

each_backend! {
    /// `drain` runs every due job in order, the jobs they enqueue included; a retry waits
    /// for the manual clock; `enqueued` lists what waits, typed.
    async fn a_drain_runs_due_jobs_and_their_children_in_order(db) {
        FanOut::new(3)
            .with_tenant("acme")
            .with_correlation_id("import-9")
            .enqueue(&db.pool)
            .await
            .unwrap();
        // The test's own enqueue took the system time: the clock starts after it.
        let clock = ManualClock::new(chrono::Utc::now());
        let seen = Seen::default();
        let worker = drain_worker(&db, &clock, &seen);
        let waiting = testing::enqueued::<FanOut>(db.pool.clone()).await.unwrap();
        assert_eq!(waiting.iter().map(|j| j.n).collect::<Vec<_>>(), [3]);

        let drained = testing::drain(&worker).await.unwrap();
        let order: Vec<&str> = drained.runs.iter().map(|r| r.task_type.as_str()).collect();
        assert_eq!(order, ["fan_out", "leaf", "leaf", "leaf"]);
        assert_eq!((drained.succeeded(), drained.retried(), drained.failed()), (3, 1, 0));
        assert_eq!(
            *seen.0.lock().unwrap(),
            [
                r#"0 attempt 1 tenant Some("acme") correlation Some("import-9")"#,
                r#"1 attempt 1 tenant Some("acme") correlation Some("import-9")"#,
                r#"2 attempt 1 tenant Some("acme") correlation Some("import-9")"#,
            ]
        );
        // Leaf 1 waits for its retry a minute later, on the worker's clock.
        let left = testing::enqueued::<Leaf>(db.pool.clone()).await.unwrap();
        assert_eq!(left.iter().map(|j| j.i).collect::<Vec<_>>(), [1]);
        assert!(testing::drain(&worker).await.unwrap().runs.is_empty());
        clock.advance(Duration::from_secs(2 * 60)); // past the retry and its jitter
        let again = testing::drain(&worker).await.unwrap();
        assert_eq!(again.runs.len(), 1);
        assert_eq!((again.runs[0].attempt, again.succeeded()), (2, 1));
        assert!(testing::enqueued::<Leaf>(db.pool.clone()).await.unwrap().is_empty());
        db.drop().await;
    }
}

/// The application's table a transaction job writes to, per backend.
const APP_TABLE: &str = "CREATE TABLE app_writes (k BIGINT NOT NULL, job TEXT NOT NULL)";

/// A follow-up a transaction job enqueues in its transaction.
#[job]
async fn follow_up(k: i64) {
    let _ = k;
}

/// Jobs writing through their own transaction on one backend: `$write` writes `k` and
/// enqueues a follow-up in the transaction, then fails if asked; `$hold` also writes, then
/// waits until its job is cancelled and returns success anyway.
macro_rules! transaction_jobs {
    ($db:ty, $write:ident, $hold:ident, $insert:literal) => {
        #[job(max_attempts = 2, backoff = "constant", backoff_base = "1ms")]
        async fn $write(
            k: i64,
            fail: bool,
            ctx: JobContext,
            tx: &mut sqlx::Transaction<'_, $db>,
        ) -> Result<i64, JobError> {
            // Unnamed, as an application's statements must be behind a transaction
            // pooler (the `pgbouncer` variant of these tests).
            sqlx::query($insert)
                .persistent(false)
                .bind(k)
                .bind(ctx.task_type())
                .execute(&mut **tx)
                .await?;
            ctx.job(FollowUp::new(k)).enqueue(&mut **tx).await?;
            if fail && ctx.attempt() == 1 {
                return Err(JobError::new("failed after writing"));
            }
            Ok(k * 10)
        }

        #[job(max_attempts = 1)]
        async fn $hold(
            k: i64,
            ctx: JobContext,
            tx: &mut sqlx::Transaction<'_, $db>,
            started: Data<tokio::sync::mpsc::UnboundedSender<()>>,
        ) -> Result<(), JobError> {
            // Unnamed, as an application's statements must be behind a transaction
            // pooler (the `pgbouncer` variant of these tests).
            sqlx::query($insert)
                .persistent(false)
                .bind(k)
                .bind(ctx.task_type())
                .execute(&mut **tx)
                .await?;
            let _ = started.send(());
            ctx.cancelled().await;
            Ok(())
        }
    };
}

transaction_jobs!(
    sqlx::Postgres,
    pg_write,
    pg_hold,
    "INSERT INTO app_writes (k, job) VALUES ($1, $2)"
);
transaction_jobs!(
    sqlx::Sqlite,
    sqlite_write,
    sqlite_hold,
    "INSERT INTO app_writes (k, job) VALUES ($1, $2)"
);
transaction_jobs!(
    sqlx::MySql,
    mysql_write,
    mysql_hold,
    "INSERT INTO app_writes (k, job) VALUES (?, ?)"
);

/// The task types of a backend's transaction jobs.
trait TransactionJobs {
    const WRITE: &'static str;
    const HOLD: &'static str;
}

impl TransactionJobs for sqlx::Postgres {
    const WRITE: &'static str = PgWrite::TASK_TYPE;
    const HOLD: &'static str = PgHold::TASK_TYPE;
}

impl TransactionJobs for sqlx::Sqlite {
    const WRITE: &'static str = SqliteWrite::TASK_TYPE;
    const HOLD: &'static str = SqliteHold::TASK_TYPE;
}

impl TransactionJobs for sqlx::MySql {
    const WRITE: &'static str = MysqlWrite::TASK_TYPE;
    const HOLD: &'static str = MysqlHold::TASK_TYPE;
}

fn is_sqlite<B: TestBackend>(_: &Db<B>) -> bool {
    B::BACKEND == "SQLite"
}

fn names<B: TransactionJobs + TestBackend>(_: &Db<B>) -> (&'static str, &'static str) {
    (B::WRITE, B::HOLD)
}

each_backend! {
    /// A job's writes and its completion commit together: a success keeps both (and the
    /// follow-up it enqueued in the transaction), a failure rolls its writes and its
    /// follow-up back before the retry, a cancelled run's writes never commit.
    async fn a_job_completes_in_its_own_transaction(db) {
        let (write, hold) = names(&db);
        db.execute(APP_TABLE).await;
        let client = Client::new(db.pool.clone());
        let ok = client.enqueue_json(write, serde_json::json!({"k": 1, "fail": false})).await.unwrap();
        let retried = client.enqueue_json(write, serde_json::json!({"k": 2, "fail": true})).await.unwrap();
        let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
        let w = RunningWorker::start(
            Worker::builder(db.pool.clone())
                .task_types([write, hold])
                .concurrency(4)
                .data(started_tx),
        );
        let record = db.wait_job(ok, T, |r| r.status() == JobStatus::Processed).await;
        assert_eq!(record.output::<i64>().unwrap(), Some(10));
        let record = db.wait_job(retried, T, |r| r.status() == JobStatus::Processed).await;
        assert_eq!(record.error_count, 1, "the first run failed after writing");
        assert_eq!(record.last_error_message.as_deref(), Some("failed after writing"));

        // Cancelled while it holds its writes: the run ends in success, which must not
        // commit. (Not on SQLite: there the job's transaction holds the database's one
        // write lock until it ends, so the cancel would wait for it; docs/backends.md.)
        if !is_sqlite(&db) {
            let held = client.enqueue_json(hold, serde_json::json!({"k": 3})).await.unwrap();
            sk_tests::recv(&mut started, "the holding job to write", T).await;
            client.cancel(held).await.unwrap();
            let record = db.wait_job(held, T, |r| r.status() == JobStatus::Cancelled).await;
            assert_eq!(record.status(), JobStatus::Cancelled);
        }
        w.stop().await;

        // One write of 1 and of 2 (the failed run's rolled back), none of 3; one
        // follow-up per committed run.
        assert_eq!(db.scalar("SELECT count(*) FROM app_writes", None).await, Some(2));
        assert_eq!(db.scalar("SELECT count(*) FROM app_writes WHERE k IN (1, 2)", None).await, Some(2));
        assert_eq!(db.scalar("SELECT count(DISTINCT k) FROM app_writes", None).await, Some(2));
        let follow_ups = db
            .scalar(
                "SELECT count(*) FROM sk_tasks_queue_t WHERE task_type = $1",
                Some(FollowUp::TASK_TYPE),
            )
            .await;
        assert_eq!(follow_ups, Some(2));
        db.drop().await;
    }
}

each_backend! {
    /// A worker refuses at build a job whose transaction is of another backend.
    async fn a_transaction_of_another_backend_is_refused_at_build(db) {
        let (write, _) = names(&db);
        let other = [PgWrite::TASK_TYPE, SqliteWrite::TASK_TYPE, MysqlWrite::TASK_TYPE]
            .into_iter()
            .find(|t| *t != write)
            .unwrap();
        let error = Worker::builder(db.pool.clone()).task_types([other]).build().err().unwrap();
        assert!(error.to_string().contains("transaction, but this worker runs on"), "{error}");
        db.drop().await;
    }
}

/// The test runner commits a transaction job's writes when it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_gives_a_job_its_transaction() {
    let db = sk_tests::TestDb::new().await;
    db.execute(APP_TABLE).await;
    let runner = Runner::new().pool(db.pool.clone());
    let outcome = runner.perform(PgWrite::new(5, false)).await;
    assert_eq!(outcome.output::<i64>(), Some(50), "{outcome:?}");
    assert_eq!(
        db.scalar("SELECT count(*) FROM app_writes WHERE k = 5", None)
            .await,
        Some(1)
    );
    let waiting = testing::enqueued::<FollowUp>(db.pool.clone())
        .await
        .unwrap();
    assert_eq!(waiting.iter().map(|j| j.k).collect::<Vec<_>>(), [5]);
    // Without a pool it says what is missing.
    let outcome = Runner::new().perform(PgWrite::new(6, false)).await;
    assert!(
        outcome.error().unwrap().message().contains("Runner::pool"),
        "{outcome:?}"
    );
    db.drop().await;
}
