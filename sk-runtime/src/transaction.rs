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
            let tx = begin.await.map_err(|e| {
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
                if !shared.may_start(lease) {
                    let _ = tx.rollback().await;
                    return Err(JobError::interrupted());
                }
            }
            Ok(tx)
        })
    }

    fn finish(mut self, source: TxSource, outcome: JobOutcome) -> BoxFuture<'static, JobOutcome> {
        Box::pin(async move {
            let output = match outcome {
                Ok(output) => output,
                Err(error) => {
                    // Its writes go; the failure is recorded outside it.
                    let _ = self.rollback().await;
                    return Err(error);
                }
            };
            if let End::Worker { shared, lease } = &source.end {
                let done = Success {
                    lease: *lease,
                    millis: i64::try_from(source.started.elapsed().as_millis()).unwrap_or(i64::MAX),
                    output: output.clone(),
                    // Its own transaction's commit is known after a lost reply only by
                    // its results row.
                    keep: true,
                };
                match DB::complete_in(shared.store(), &mut *self, &done, shared.now()).await {
                    Ok(true) => {}
                    Ok(false) => {
                        let _ = self.rollback().await;
                        return Err(JobError::new(
                            "the job's lease was lost (it ran past its lease, or was cancelled) before its transaction committed; its writes were rolled back",
                        )
                        .with_kind("lease_lost"));
                    }
                    Err(e) if crate::store::lock_wait(&e) => {
                        let _ = self.rollback().await;
                        return Err(contended("record its completion in", &e));
                    }
                    Err(e) => {
                        let _ = self.rollback().await;
                        return Err(JobError::new(format!(
                            "cannot record the job's completion in its transaction, so its writes were rolled back: {e}"
                        ))
                        .with_kind("transaction"));
                    }
                }
            }
            match self.commit().await {
                Ok(()) => Ok(output),
                Err(e) if crate::store::sqlx_lock_wait(&e) => Err(contended("commit", &e)),
                Err(e) => Err(
                    JobError::new(format!("the job's transaction did not commit: {e}"))
                        .with_kind("transaction"),
                ),
            }
        })
    }

    fn requirement() -> Option<Requirement> {
        Some(Requirement::backend::<DB>())
    }
}
