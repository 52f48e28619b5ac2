//! A job's own transaction: the handler writes through it, and its success is recorded
//! in it, so the application's writes and the job's completion commit together.

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use crate::error::JobError;
use crate::job::{JobOutcome, Requirement};
use crate::store::{Backend, Lease, Store, Success};
use crate::Pool;

/// Where a job's transaction comes from and how it ends; made by the worker (or the test
/// runner) for each run of a job that takes one.
#[derive(Clone)]
pub struct TxSource {
    pool: Pool,
    end: End,
    started: Instant,
}

/// What a worker's run needs of its worker: whether the lease still lets the handler
/// start, and where and when to record the completion. The worker's shared state.
pub(crate) trait RunsUnder: Send + Sync {
    /// Whether the run may still start under `lease`.
    fn may_start(&self, lease: &Lease) -> bool;
    /// The run's transaction began, on `host`.
    fn began_transaction(&self, lease: &Lease, host: String);
    /// The worker's store.
    fn store(&self) -> &Store;
    /// The worker's clock.
    fn now(&self) -> DateTime<Utc>;
}

#[derive(Clone)]
enum End {
    /// A worker's run: the completion is written in the transaction, fenced by the lease.
    Worker {
        shared: Arc<dyn RunsUnder>,
        lease: Lease,
    },
    /// A test runner's run of a job value that is not in the queue: just commit.
    Commit,
}

impl TxSource {
    pub(crate) fn worker(shared: Arc<dyn RunsUnder>, pool: Pool, lease: Lease) -> Self {
        TxSource {
            pool,
            end: End::Worker { shared, lease },
            started: Instant::now(),
        }
    }

    pub(crate) fn commit_only(pool: Pool) -> Self {
        TxSource {
            pool,
            end: End::Commit,
            started: Instant::now(),
        }
    }
}

/// The transaction argument of a job fn (`tx: &mut sqlx::Transaction<'_, DB>`): used by the
/// code `#[job]` generates.
pub trait JobTransaction: Sized + Send + 'static {
    /// Opens the run's transaction.
    ///
    /// # Errors
    /// The database fails (a recoverable failure), or the worker runs on another backend.
    fn begin(source: &TxSource) -> BoxFuture<'_, Result<Self, JobError>>;

    /// Ends the run: on success records the completion in the transaction and commits
    /// (so a success it returns is committed, which the worker relies on);
    /// on failure rolls back, and the failure is recorded as any other.
    fn finish(self, source: TxSource, outcome: JobOutcome) -> BoxFuture<'static, JobOutcome>;

    /// The backend the worker must run on.
    fn requirement() -> Option<Requirement>;
}

/// The kind of `contended`'s snooze.
pub(crate) const LOCK_WAIT: &str = "lock_wait";

/// The run's end when its transaction waited for a lock another connection holds, past
/// the busy timeout or the lock wait's (SQLite's one writer at a time, above all): the
/// job runs again shortly without using an attempt, as a snooze. Lock contention charged
/// attempts (153 in one run of transaction jobs in three processes on one SQLite file).
fn contended(what: &str, error: &dyn std::fmt::Display) -> JobError {
    let delay = crate::retry::database_backoff(3);
    JobError {
        message: format!(
            "could not {what} the job's transaction, waiting for a lock another connection holds; it runs again in {} without using an attempt: {error}",
            crate::clock::shown(delay)
        ),
        ..JobError::snooze(delay).with_kind(LOCK_WAIT)
    }
}

impl TxSource {
    /// The bound of the run's calls: its worker's (`WorkerBuilder::call_timeout`).
    fn bound(&self) -> std::time::Duration {
        match &self.end {
            End::Worker { shared, .. } => shared.store().bounds().call,
            End::Commit => crate::bounds::CALL_TIMEOUT,
        }
    }

    /// `task` under the run's bound, as the call `call`, let finish past it
    /// (`bound::detached`).
    async fn detached<T: Send + 'static>(
        &self,
        call: &'static str,
        task: impl std::future::Future<Output = crate::Result<T>> + Send + 'static,
    ) -> crate::Result<T> {
        let pool = &self.pool;
        crate::store::bound::detached(call, self.bound(), || pool.address(), task).await
    }
}

/// Rolls `tx` back within the run's bound; past it, the rollback goes on on its own task.
async fn roll_back<DB: Backend>(tx: sqlx::Transaction<'static, DB>, source: &TxSource) {
    let _ = source
        .detached("rollback", async { Ok(tx.rollback().await?) })
        .await;
}

/// A worker's end of a successful run: its completion recorded in its transaction, then
/// the commit (or, refused, a rollback); the run's outcome.
async fn complete_and_commit<DB: Backend>(
    mut tx: sqlx::Transaction<'static, DB>,
    source: TxSource,
    output: Option<String>,
) -> crate::Result<JobOutcome> {
    let End::Worker { shared, lease } = &source.end else {
        unreachable!("a worker's run");
    };
    let done = Success {
        lease: *lease,
        millis: i64::try_from(source.started.elapsed().as_millis()).unwrap_or(i64::MAX),
        output: output.clone(),
        // Its own transaction's commit is known after a lost reply only by its results
        // row.
        keep: true,
    };
    match DB::complete_in(shared.store(), &mut *tx, &done, shared.now()).await {
        Ok(true) => {}
        Ok(false) => {
            let _ = tx.rollback().await;
            return Ok(Err(JobError::new(
                "the job's lease was lost (it ran past its lease, or was cancelled) before its transaction committed; its writes were rolled back",
            )
            .with_kind("lease_lost")));
        }
        Err(e) if crate::store::lock_wait(&e) => {
            let _ = tx.rollback().await;
            return Ok(Err(contended("record its completion in", &e)));
        }
        Err(e) => {
            let _ = tx.rollback().await;
            return Ok(Err(JobError::new(format!(
                "cannot record the job's completion in its transaction, so its writes were rolled back: {e}"
            ))
            .with_kind("transaction")));
        }
    }
    Ok(committed(tx.commit().await, output))
}

/// The run's outcome from its commit's.
fn committed(commit: sqlx::Result<()>, output: Option<String>) -> JobOutcome {
    match commit {
        Ok(()) => Ok(output),
        Err(e) if crate::store::sqlx_lock_wait(&e) => Err(contended("commit", &e)),
        Err(e) => Err(
            JobError::new(format!("the job's transaction did not commit: {e}"))
                .with_kind("transaction"),
        ),
    }
}

impl<DB: Backend> JobTransaction for sqlx::Transaction<'static, DB> {
    fn begin(source: &TxSource) -> BoxFuture<'_, Result<Self, JobError>> {
        Box::pin(async move {
            let Some(begin) = DB::begin_job(&source.pool) else {
                return Err(JobError::fatal(format!(
                    "the job takes a {} transaction, but the worker runs on {}",
                    <DB as Backend>::NAME,
                    source.pool.backend_name()
                ))
                .with_kind("transaction"));
            };
            // Let finish if cut by its bound (`bound::detached`): a late transaction is
            // dropped, and rolls back, on its own task.
            let tx = source.detached("begin", begin).await.map_err(|e| {
                if crate::store::lock_wait(&e) {
                    return contended("begin", &e);
                }
                JobError::new(format!("cannot begin the job's transaction: {e}"))
                    .with_kind("transaction")
            })?;
            // Its `BEGIN` may have waited (for a pooled connection; on SQLite for the write
            // lock, up to the busy timeout) past the lease, and another worker may have
            // run the job meanwhile: the handler starts only on a lease still held.
            if let End::Worker { shared, lease } = &source.end {
                shared.began_transaction(lease, source.pool.address());
                if !shared.may_start(lease) {
                    roll_back(tx, source).await;
                    return Err(JobError::interrupted());
                }
            }
            Ok(tx)
        })
    }

    fn finish(self, source: TxSource, outcome: JobOutcome) -> BoxFuture<'static, JobOutcome> {
        Box::pin(async move {
            let output = match outcome {
                Ok(output) => output,
                Err(error) => {
                    // Its writes go; the failure is recorded outside it.
                    roll_back(self, &source).await;
                    return Err(error);
                }
            };
            let End::Worker { .. } = &source.end else {
                return committed(self.commit().await, output);
            };
            // The completion and the commit on a task of their own, let finish if they
            // pass the bound (twice the call bound: two calls) rather than cut midway
            // (`bound::detached`): the lease decides then, and a late commit ends the job
            // while the failure reported here is refused.
            let bound = source.bound() * 2;
            let (pool, task_source) = (source.pool.clone(), source.clone());
            let ended = crate::store::bound::detached(
                "complete and commit",
                bound,
                || pool.address(),
                complete_and_commit(self, task_source, output),
            )
            .await;
            match ended {
                Ok(outcome) => outcome,
                Err(e) => Err(JobError::new(format!(
                    "the job's transaction did not end in time, so whether it committed is unknown; the job's lease decides: if it did, the job has ended and this failure is not recorded: {e}"
                ))
                .with_kind("transaction")),
            }
        })
    }

    fn requirement() -> Option<Requirement> {
        Some(Requirement::backend::<DB>())
    }
}
