//! Finalizes runs in batches: one statement for all successes of a batch (results and
//! stats included), one per failure, one for all given-back leases.

use std::sync::Arc;
use std::time::Instant;

use std::sync::atomic::Ordering;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::OwnedSemaphorePermit;

use super::{producer, Metrics, Shared};
use crate::error::{JobError, Result};
use crate::info::JobStatus;
use crate::registry::Registration;
use crate::store::{Failure, Lease, Success};

const MAX_BATCH: usize = 1000;

pub(super) enum Completion {
    Finished {
        lease: Lease,
        max_attempts: i32,
        registration: &'static Registration,
        result: crate::registry::JobOutcome,
        millis: i64,
        /// The job's concurrency slot, freed once the outcome is written.
        slot: OwnedSemaphorePermit,
    },
    GiveBack {
        lease: Lease,
        slot: Option<OwnedSemaphorePermit>,
    },
}

pub(super) async fn run(shared: Arc<Shared>, mut completions: UnboundedReceiver<Completion>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while completions.recv_many(&mut batch, MAX_BATCH).await > 0 {
        finalize(&shared, std::mem::take(&mut batch)).await;
    }
}

async fn finalize(shared: &Shared, batch: Vec<Completion>) {
    let now = shared.now();
    let mut successes = Vec::new();
    let mut failures = Vec::new();
    let mut give_back = Vec::new();
    let mut slots = Vec::with_capacity(batch.len());
    for completion in batch {
        match completion {
            Completion::Finished {
                lease,
                result: Ok(output),
                millis,
                registration,
                slot,
                ..
            } => {
                slots.push(slot);
                tracing::debug!(id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, millis, "sk: job succeeded");
                successes.push(Success {
                    lease,
                    millis,
                    output,
                });
            }
            Completion::Finished {
                lease,
                max_attempts,
                registration,
                result: Err(error),
                millis,
                slot,
            } => {
                slots.push(slot);
                failures.push(failure(
                    lease,
                    max_attempts,
                    registration,
                    error,
                    millis,
                    now,
                ));
            }
            Completion::GiveBack { lease, slot } => {
                slots.extend(slot);
                give_back.push(lease);
            }
        }
    }
    let mut leases: Vec<Lease> = Vec::new();
    if !successes.is_empty() {
        if let Some(done) = persist(shared, "record successes", || {
            shared.store.complete(&successes, now)
        })
        .await
        {
            let fenced = successes.len() - done.len();
            Metrics::add(&shared.metrics.succeeded, done.len() as u64);
            if fenced > 0 {
                Metrics::add(&shared.metrics.fenced, fenced as u64);
                for s in successes.iter().filter(|s| !done.contains(&s.lease.id)) {
                    tracing::warn!(id = %s.lease.id, attempt = s.lease.attempt, "sk: result refused: this worker lost the job's lease to another worker");
                }
            }
        }
        leases.extend(successes.iter().map(|s| s.lease));
    }
    for f in &failures {
        if let Some(held) = persist(shared, "record a failure", || shared.store.fail(f, now)).await
        {
            if !held {
                Metrics::add(&shared.metrics.fenced, 1);
                tracing::warn!(id = %f.lease.id, attempt = f.lease.attempt, "sk: failure refused: this worker lost the job's lease to another worker");
            } else if f.retry_at.is_some() {
                Metrics::add(&shared.metrics.retried, 1);
            } else {
                Metrics::add(&shared.metrics.failed, 1);
            }
        }
        leases.push(f.lease);
    }
    if !give_back.is_empty() {
        if let Some(n) = persist(shared, "give leases back", || {
            shared.store.give_back(&give_back, now)
        })
        .await
        {
            Metrics::add(&shared.metrics.given_back, n);
            tracing::info!(jobs = n, "sk: gave leases back for another worker");
        }
        leases.extend(give_back);
    }
    {
        let mut running = shared.running();
        for lease in leases {
            running.remove(&lease);
        }
    }
    // Free the slots only now, and wake the producer if the last claim was full.
    drop(slots);
    if shared.maybe_more.load(Ordering::Relaxed) {
        shared.wake.notify_one();
    }
}

fn failure(
    lease: Lease,
    max_attempts: i32,
    registration: &Registration,
    error: JobError,
    millis: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> Failure {
    let (status, retry_at) = if error.fatal || lease.attempt >= max_attempts {
        (JobStatus::Fatal, None)
    } else {
        let delay = registration
            .options
            .backoff
            .delay(u32::try_from(lease.attempt).unwrap_or(1));
        let status = if lease.attempt + 1 >= max_attempts {
            JobStatus::Faulted
        } else {
            JobStatus::Error
        };
        (status, Some(crate::clock::add(now, delay)))
    };
    match retry_at {
        Some(at) => tracing::warn!(
            id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, max_attempts,
            retry_at = %at, kind = %error.kind, "sk: job failed, will retry: {}", error.message
        ),
        None => tracing::error!(
            id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, max_attempts,
            fatal = error.fatal, kind = %error.kind, "sk: job failed for good: {}", error.message
        ),
    }
    Failure {
        lease,
        millis,
        status,
        retry_at,
        recoverable: !error.fatal,
        kind: error.kind,
        message: error.message,
        detail: error.detail,
    }
}

/// Retries a store call until it succeeds. Once the worker is stopping it gives up after
/// the grace period; the jobs' leases then run out and they run again elsewhere
/// (at-least-once), which is the only safe outcome without a database.
async fn persist<T, F, Fut>(shared: &Shared, what: &str, mut call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut failures = 0;
    let mut stopping_since: Option<Instant> = None;
    loop {
        match call().await {
            Ok(value) => {
                if failures > 0 {
                    tracing::info!("sk: could {what} again after {failures} failed attempts");
                }
                return Some(value);
            }
            Err(e) => {
                failures += 1;
                let wait = producer::backoff(failures);
                tracing::warn!("sk: cannot {what} (attempt {failures}), retrying in {wait:?}: {e}");
                if shared.stopping.is_cancelled() {
                    let since = *stopping_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > shared.config.grace_period {
                        tracing::error!("sk: giving up to {what} while stopping; those jobs run again once their lease runs out");
                        return None;
                    }
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}
