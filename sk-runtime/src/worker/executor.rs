//! Runs one claimed job in its own tokio task, with its timeout, catching panics.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures_util::FutureExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::completer::Completion;
use super::{RunState, Running, Shared, Slot};
use crate::clock::SharedClock;
use crate::error::JobError;
use crate::job::{JobContext, Scope, StopReason};
use crate::registry::{HandlerInput, JobOutcome, Registration};
use crate::store::{ClaimedJob, Lease};
use crate::transaction::TxSource;

pub(crate) fn spawn(
    shared: &Arc<Shared>,
    job: ClaimedJob,
    completions: &UnboundedSender<Completion>,
) {
    const CLAIMED: &str =
        "the producer claims no more jobs than free slots, and only it takes slots";
    let permit = Slot {
        run: Some((
            Arc::clone(&shared.slots)
                .try_acquire_owned()
                .expect(CLAIMED),
            shared
                .queue_limits
                .get(job.task_queue.as_str())
                .map(|limit| Arc::clone(limit).try_acquire_owned().expect(CLAIMED)),
        )),
        _held: Arc::clone(&shared.held).try_acquire_owned().expect(CLAIMED),
    };
    let lease = Lease {
        id: job.task_id,
        attempt: job.task_attempt,
    };
    let cancel = shared.jobs_cancel.child_token();
    let stop = Arc::default();
    shared.running().insert(
        lease,
        Running {
            cancel: cancel.clone(),
            stop: Arc::clone(&stop),
            state: RunState::Claimed,
            abort: None,
        },
    );
    // The handler's own log lines carry the job's id, type, queue, attempt, tenant and
    // correlation id.
    let span = tracing::info_span!(
        "sk.job",
        id = %job.task_id,
        task_type = %job.task_type,
        queue = %job.task_queue,
        attempt = job.task_attempt,
        tenant = job.task_tenant.as_deref(),
        correlation_id = job.task_correlation_id.as_deref(),
    );
    #[cfg(feature = "opentelemetry")]
    crate::telemetry::continue_trace(&span, job.task_metadata.as_deref());
    let task = tokio::spawn(tracing::Instrument::instrument(
        run_one(
            shared.clone(),
            job,
            (cancel, stop),
            completions.clone(),
            permit,
        ),
        span,
    ));
    if let Some(entry) = shared.running().get_mut(&lease) {
        entry.abort = Some(task.abort_handle());
    }
}

async fn run_one(
    shared: Arc<Shared>,
    job: ClaimedJob,
    (cancel, stop): (CancellationToken, Arc<OnceLock<StopReason>>),
    completions: UnboundedSender<Completion>,
    mut permit: Slot,
) {
    let lease = Lease {
        id: job.task_id,
        attempt: job.task_attempt,
    };
    {
        let mut running = shared.running();
        let Some(entry) = running.get_mut(&lease) else {
            return;
        };
        if entry.state != RunState::Claimed {
            // The stop already gave it back.
            return;
        }
        if shared.stopping.is_cancelled() {
            // Claimed but not started when the stop began: hand it back untouched.
            entry.state = RunState::GivenBack;
            drop(running);
            let _ = completions.send(Completion::GiveBack {
                lease,
                slot: Some(permit),
            });
            return;
        }
        entry.state = RunState::Started;
    }
    let registration = shared
        .registry
        .jobs
        .get(job.task_type.as_str())
        .copied()
        .expect("the claim selects only task types in the registry");
    let max_attempts = job.task_max_attempts;
    let queue = job.task_queue.clone();
    let stopped = stop.clone();
    if job.task_attempt == 1 {
        let waited = (shared.now() - job.task_posted_at_ts).as_seconds_f64();
        crate::telemetry::waited(registration.task_type, &queue, waited);
    }
    let started = Instant::now();
    let result = if max_attempts < 1 {
        // Only a producer outside sk can post this (`#[job]` refuses `max_attempts = 0`).
        (
            Err(JobError::fatal(format!(
                "task_max_attempts is {max_attempts}, so the job may not run at all; post it with task_max_attempts of at least 1"
            ))
            .with_kind("max_attempts")),
            false,
        )
    } else if job.task_attempt > max_attempts {
        // Only a lease that ran out (a crashed or stalled worker) gets a job here.
        (
            Err(JobError::fatal(format!(
                "attempt {} exceeds max_attempts {max_attempts}: earlier attempts lost their lease (worker crash or stall)",
                job.task_attempt
            ))
            .with_kind("lease_expired")),
            false,
        )
    } else {
        execute(&shared, registration, job, cancel.clone(), stop).await
    };
    let (result, committed) = result;
    let millis = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let result = match result {
        Err(e) if e.interrupted && !cancel.is_cancelled() => Err(JobError::new(
            "the job returned JobError::interrupted() but the worker had not asked it to stop",
        )
        .with_kind("interrupted")),
        other => other,
    };
    let give_back = matches!(&result, Err(e) if e.interrupted);
    {
        let mut running = shared.running();
        match running.get_mut(&lease) {
            Some(entry) if entry.state == RunState::Started => {
                entry.state = if give_back {
                    RunState::GivenBack
                } else {
                    RunState::Finished
                };
            }
            // The stop interrupted it and gives its lease back.
            _ => return,
        }
    }
    if give_back {
        // It stopped because it was asked to: handed back like a job the stop aborted,
        // keeping its attempt.
        tracing::debug!(id = %lease.id, attempt = lease.attempt, "sk: job stopped when asked; giving its lease back");
        let _ = completions.send(Completion::GiveBack {
            lease,
            slot: Some(permit),
        });
        return;
    }
    // The handler's slot is free for the next job; its hold on the lease goes with the
    // outcome and is freed once the result is written.
    permit.handler_done(&shared);
    if matches!(stopped.get(), Some(StopReason::Cancelled)) {
        crate::telemetry::finished(
            crate::telemetry::Outcome::Cancelled,
            registration.task_type,
            &queue,
            millis,
        );
    }
    let _ = completions.send(Completion::Finished {
        lease,
        max_attempts,
        registration,
        result,
        committed,
        millis,
        queue,
        slot: permit,
    });
}

/// Runs the claimed job; whether its success was committed in its own transaction.
async fn execute(
    shared: &Arc<Shared>,
    registration: &'static Registration,
    job: ClaimedJob,
    cancel: CancellationToken,
    stop: Arc<OnceLock<StopReason>>,
) -> (JobOutcome, bool) {
    let timeout = job
        .task_timeout_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map(std::time::Duration::from_millis);
    let lease = Lease {
        id: job.task_id,
        attempt: job.task_attempt,
    };
    let ctx = JobContext {
        id: job.task_id,
        task_type: job.task_type.into(),
        queue: job.task_queue.into(),
        attempt: job.task_attempt,
        max_attempts: job.task_max_attempts,
        priority: job.task_priority,
        posted_at: job.task_posted_at_ts,
        attempted_at: job.claimed_at.unwrap_or_else(|| shared.now()),
        tenant: job.task_tenant.map(Into::into),
        correlation_id: job.task_correlation_id.map(Into::into),
        // Written by sk as a JSON object; anything else another producer wrote is shown
        // as it is.
        metadata: job
            .task_metadata
            .map(|m| Arc::new(serde_json::from_str(&m).unwrap_or(serde_json::Value::String(m)))),
        cancel,
        stop,
        runtime: Some(shared.runtime.clone()),
    };
    // Only a job that takes a transaction needs its source.
    let transaction = registration
        .transaction
        .then(|| TxSource::worker(shared.clone(), shared.runtime.pool.clone(), lease));
    // A job that waited on others gets their outputs.
    let inputs = match job.task_waiting_on {
        None => None,
        Some(_) => match load_inputs(shared, job.task_id).await {
            Ok(inputs) => Some(inputs),
            Err(error) => return (Err(error), false),
        },
    };
    let input = HandlerInput {
        payload: job.task_payload,
        ctx,
        data: shared.data.clone(),
        transaction,
        inputs,
    };
    let limit = timeout
        .or(registration.options.timeout)
        .or(shared.config.default_timeout);
    let outcome = run_handler(registration, input, limit, shared.clock.clone()).await;
    // A transaction job's success is returned only once it committed with its completion.
    let committed = registration.transaction && outcome.is_ok();
    (outcome, committed)
}

/// The outputs of the jobs job `id` waited on: a fatal error if one has not succeeded
/// (a retry of a job whose dependency failed), a recoverable one if the database fails.
async fn load_inputs(shared: &Shared, id: uuid::Uuid) -> Result<Vec<Option<String>>, JobError> {
    let inputs = shared.store.inputs(id).await.map_err(|e| {
        JobError::new(format!(
            "could not read the outputs of the jobs it waited on: {e}"
        ))
        .with_kind("dependency")
    })?;
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, output)| {
            output.ok_or_else(|| {
                JobError::fatal(format!(
                    "its dependency {} has not succeeded, so it has no input to run with; retry that job, then this one",
                    i + 1
                ))
                .with_kind("dependency")
            })
        })
        .collect()
}

/// Runs a job's handler under its time limit, catching panics, with the job's scope set
/// for the enqueues it makes: the one way both a worker and a test runner run a job.
pub(crate) async fn run_handler(
    registration: &Registration,
    input: HandlerInput,
    limit: Option<std::time::Duration>,
    clock: SharedClock,
) -> JobOutcome {
    let scope = Scope {
        correlation_id: input.ctx.correlation_id.clone(),
        clock,
    };
    let future = match std::panic::catch_unwind(AssertUnwindSafe(|| (registration.handler)(input)))
    {
        Ok(Ok(future)) => future,
        Ok(Err(error)) => return Err(error),
        Err(panic) => return Err(panic_error(&*panic)),
    };
    let future = crate::job::CURRENT.scope(scope, AssertUnwindSafe(future).catch_unwind());
    let outcome = match limit {
        Some(limit) => match tokio::time::timeout(limit, future).await {
            Ok(outcome) => outcome,
            Err(_) => {
                return Err(JobError::new(format!(
                    "timed out after {}",
                    humantime::format_duration(limit)
                ))
                .with_kind("timeout"));
            }
        },
        None => future.await,
    };
    outcome.unwrap_or_else(|panic| Err(panic_error(&*panic)))
}

fn panic_error(panic: &(dyn std::any::Any + Send)) -> JobError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned());
    JobError::new(format!("panicked: {message}")).with_kind("panic")
}

/// The stop: running jobs get the grace period (cut short by `force`); what still runs
/// after it is interrupted and its lease given back, so another worker takes it at once.
pub(super) async fn drain(
    shared: &Shared,
    completions: &UnboundedSender<Completion>,
    force: impl std::future::Future<Output = ()>,
) {
    let all = u32::try_from(shared.config.concurrency).unwrap_or(u32::MAX);
    let grace = tokio::time::timeout(shared.config.grace_period, shared.slots.acquire_many(all));
    tokio::select! {
        finished = grace => if let Ok(Ok(_all_slots)) = finished {
            return;
        },
        () = force => {}
    }
    let mut interrupted = Vec::new();
    {
        let mut running = shared.running();
        for (lease, entry) in running.iter_mut() {
            if matches!(entry.state, RunState::Claimed | RunState::Started) {
                entry.state = RunState::GivenBack;
                if let Some(abort) = &entry.abort {
                    abort.abort();
                }
                interrupted.push(*lease);
            }
        }
    }
    tracing::warn!(
        jobs = interrupted.len(),
        "sk: interrupting running jobs and giving their leases back"
    );
    for lease in interrupted {
        let _ = completions.send(Completion::GiveBack { lease, slot: None });
    }
}
