//! Runs one claimed job in its own tokio task, with its timeout, catching panics.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures_util::FutureExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::completer::Completion;
use super::events::JobEventKind;
use super::local::Waiting;
use super::{RunState, Running, Shared, Slot};
use crate::clock::SharedClock;
use crate::error::{panic_error, panic_message, JobError};
use crate::job::JobOutcome;
use crate::job::{JobContext, RunWrites, Scope, StopReason};
use crate::registry::{HandlerInput, Registration};
use crate::store::{ClaimedJob, Lease};
use crate::transaction::TxSource;

/// Takes claimed jobs (each with its queue's slot, if its queue is limited in this
/// worker) into the local queue, behind those waiting already, and starts what the free
/// slots allow. Their leases (held until `lease_until`) join the running map first, so
/// heartbeats keep them and a stop gives them back. `fair`: they are of a fair queue's
/// claim, and wait their tenant's turn here too.
pub(crate) fn admit(
    shared: &Arc<Shared>,
    jobs: Vec<(ClaimedJob, Option<OwnedSemaphorePermit>)>,
    (lease_until, start_by): (
        chrono::DateTime<chrono::Utc>,
        Option<chrono::DateTime<chrono::Utc>>,
    ),
    fair: bool,
    completions: &UnboundedSender<Completion>,
) {
    {
        let mut running = shared.running();
        for (job, _) in &jobs {
            running.insert(
                Lease {
                    id: job.task_id,
                    attempt: job.task_attempt,
                },
                Running {
                    cancel: shared.job_token(),
                    stop: Arc::default(),
                    state: RunState::Claimed,
                    abort: None,
                    lease_until,
                    start_by,
                    transaction: None,
                },
            );
        }
    }
    {
        let mut waiting = shared.waiting();
        for (job, queue) in jobs {
            waiting.push(job, queue, fair);
        }
    }
    dispatch(shared, completions);
}

/// Starts waiting jobs by priority while a handler slot and room for one more
/// result are free. Called by whoever may have freed either: a claim, a handler that
/// returned, the producer after results were written.
pub(crate) fn dispatch(shared: &Arc<Shared>, completions: &UnboundedSender<Completion>) {
    let mut waiting = shared.waiting();
    while !waiting.is_empty() {
        let Ok(held) = Arc::clone(&shared.held).try_acquire_owned() else {
            return;
        };
        let Ok(slot) = Arc::clone(&shared.slots).try_acquire_owned() else {
            return;
        };
        let Waiting { job, queue, .. } = waiting.pop().expect("the queue is not empty");
        start(
            shared,
            job,
            Slot {
                run: Some((slot, queue)),
                _held: held,
            },
            completions,
        );
    }
}

/// The stop: jobs still waiting for a slot are handed back at once, unstarted.
fn give_back_waiting(shared: &Shared, completions: &UnboundedSender<Completion>) {
    let queued = shared.waiting().take_all();
    if queued.is_empty() {
        return;
    }
    let mut running = shared.running();
    for Waiting { job, .. } in queued {
        let lease = Lease {
            id: job.task_id,
            attempt: job.task_attempt,
        };
        if let Some(entry) = running.get_mut(&lease) {
            entry.state = RunState::GivenBack;
        }
        let _ = completions.send(Completion::GiveBack { lease, slot: None });
    }
}

/// Runs a job in its own task, holding `slot`.
fn start(
    shared: &Arc<Shared>,
    job: Box<ClaimedJob>,
    slot: Slot,
    completions: &UnboundedSender<Completion>,
) {
    let lease = Lease {
        id: job.task_id,
        attempt: job.task_attempt,
    };
    let Some((cancel, stop)) = shared
        .running()
        .get(&lease)
        .map(|entry| (entry.cancel.clone(), Arc::clone(&entry.stop)))
    else {
        return;
    };
    // The handler's own log lines carry the job's id, type, queue, attempt, tenant and
    // correlation id. Its parent is the worker's span, not the current one: a job
    // started in the slot another job's end freed would nest in that job's span, and its
    // lines would name every job before it.
    let span = tracing::info_span!(
        parent: shared.span.get().and_then(tracing::Span::id),
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
    let run = run_one(
        shared.clone(),
        job,
        (cancel, stop),
        completions.clone(),
        slot,
    );
    let task = tokio::spawn(tracing::Instrument::instrument(
        guarded(shared.clone(), lease, run),
        span,
    ));
    if let Some(entry) = shared.running().get_mut(&lease) {
        entry.abort = Some(task.abort_handle());
    }
}

/// Runs a job's task; a panic in sk's code around the handler (the handler's own is
/// caught as its failure), or in what that code calls (a metrics recorder, a `tracing`
/// layer), drops the job from the running map, so no heartbeat keeps a lease that no
/// outcome will end: it runs out, and the job runs again. Its slot is freed as the panic
/// unwinds. (A combinator, not an `async fn`, which would hold `run` twice.)
fn guarded(
    shared: Arc<Shared>,
    lease: Lease,
    run: impl std::future::Future<Output = ()>,
) -> impl std::future::Future<Output = ()> {
    AssertUnwindSafe(run).catch_unwind().map(move |ended| {
        if let Err(panic) = ended {
            shared.running().remove(&lease);
            tracing::error!(id = %lease.id, attempt = lease.attempt, "sk: the job's run panicked outside its handler ({}); its outcome is not recorded, and it runs again once its lease runs out", panic_message(&*panic));
        }
    })
}

/// A job's run. Everything around the handler is synchronous ([`begin`], [`Run::end`]),
/// so what the task holds while the handler runs is the handler's future and the little
/// its end needs: a few hundred bytes (the task, 768). Written as nested `async fn`s,
/// each keeping its own copy of the job, it was ~3 KB, past glibc's 1 KB line, over
/// which each allocation first consolidates the allocator's fast bins.
async fn run_one(
    shared: Arc<Shared>,
    job: Box<ClaimedJob>,
    (cancel, stop): (CancellationToken, Arc<OnceLock<StopReason>>),
    completions: UnboundedSender<Completion>,
    permit: Slot,
) {
    let Some((mut run, body)) = begin(shared, job, cancel, stop, completions, permit) else {
        return;
    };
    let (result, committed) = if let Some(layered) = run.layered.take() {
        // Boxed: a run without layers keeps its small future.
        Box::pin(through_layers(&run, &layered, body)).await
    } else {
        let result = match body {
            _ if !run.starts() => Err(JobError::interrupted()),
            Body::Decided(result) => result,
            Body::Handler(future, limit) => await_handler(future, limit).await,
            // Rare: its inputs are read first, in a future of its own.
            Body::Inputs(input, limit) => Box::pin(with_inputs(&run, *input, limit)).await,
        };
        // A transaction job's success is returned only once it committed with its
        // completion.
        let committed = run.registration.transaction && result.is_ok();
        (result, committed)
    };
    if let Some(writes) = run.writes.take().filter(|w| w.progress_pending()) {
        // Its last progress, before its outcome moves the row (rare: boxed).
        let (runtime, lease) = (&run.shared.runtime, run.lease);
        let flush = crate::progress::flush(runtime, (lease.id, lease.attempt), &writes);
        Box::pin(flush).await;
    }
    run.end(result, committed);
}

/// What a job's end needs, from its start.
struct Run {
    shared: Arc<Shared>,
    lease: Lease,
    registration: &'static Registration,
    max_attempts: i32,
    /// Shared by the job's context and its outcome (its metrics' label).
    queue: Arc<str>,
    /// The job's tenant (whose rate limit a handler's `JobError::rate_limited` holds).
    tenant: Option<Arc<str>>,
    stopped: Arc<OnceLock<StopReason>>,
    /// Of a job claimed under a rate limit, the latest its handler may start
    /// (`Running::start_by`).
    start_by: Option<chrono::DateTime<chrono::Utc>>,
    completions: UnboundedSender<Completion>,
    permit: Slot,
    started: Instant,
    /// The job type's layers (`WorkerBuilder::layer`) and the run's context, if it has
    /// any.
    layered: Option<Box<(crate::layer::Stack, JobContext)>>,
    /// The run's own writes, of which the last progress may still wait when it returns.
    writes: Option<Arc<crate::job::RunWrites>>,
}

/// A run through its job type's layers: its outcome, and whether that is a success the
/// handler committed with its job's transaction. A layer cannot undo such a success: a
/// failure it returns over one is logged and the success kept. A layer's panic is the
/// run's failure.
async fn through_layers(
    run: &Run,
    layered: &(crate::layer::Stack, JobContext),
    body: Body,
) -> (JobOutcome, bool) {
    let (stack, ctx) = layered;
    let transaction = run.registration.transaction;
    let committed: OnceLock<Option<String>> = OnceLock::new();
    let handler = async {
        // Only once the layers let the run through: one that refuses it started nothing.
        let result = match body {
            _ if !run.starts() => Err(JobError::interrupted()),
            Body::Decided(result) => result,
            Body::Handler(future, limit) => await_handler(future, limit).await,
            Body::Inputs(input, limit) => with_inputs(run, *input, limit).await,
        };
        if let (true, Ok(output)) = (transaction, &result) {
            let _ = committed.set(output.clone());
        }
        result
    };
    let outcome = crate::layer::run(stack, ctx, Box::pin(handler)).await;
    match (committed.into_inner(), outcome) {
        (Some(output), Err(error)) => {
            tracing::warn!(id = %run.lease.id, attempt = run.lease.attempt, "sk: a layer returned a failure ({error}) over the success the job committed with its transaction; the success stands");
            (Ok(output), true)
        }
        (Some(_), Ok(output)) => (Ok(output), true),
        (None, outcome) => (outcome, false),
    }
}

/// How a started job gets its outcome.
enum Body {
    /// Without running its handler.
    Decided(JobOutcome),
    /// Its handler's future, under the time limit.
    Handler(HandlerRun, Option<std::time::Duration>),
    /// A job that waited on others: its input, once their outputs are read.
    Inputs(Box<HandlerInput>, Option<std::time::Duration>),
}

/// Starts a claimed job, or hands it back unstarted (`None`): one that the stop began
/// with, whose lease was lost or cancelled while it waited for a slot, or whose lease is
/// running out.
fn begin(
    shared: Arc<Shared>,
    mut job: Box<ClaimedJob>,
    cancel: CancellationToken,
    stop: Arc<OnceLock<StopReason>>,
    completions: UnboundedSender<Completion>,
    permit: Slot,
) -> Option<(Run, Body)> {
    let lease = Lease {
        id: job.task_id,
        attempt: job.task_attempt,
    };
    let start_by = {
        let mut running = shared.running();
        let entry = running.get_mut(&lease)?;
        if entry.state != RunState::Claimed {
            // The stop already gave it back.
            return None;
        }
        if shared.stopping.is_cancelled() {
            // Claimed but not started when the stop began: hand it back untouched.
            entry.state = RunState::GivenBack;
            drop(running);
            let _ = completions.send(Completion::GiveBack {
                lease,
                slot: Some(permit),
            });
            return None;
        }
        let late = shared.lapsing(entry.lease_until);
        if stop.get().is_some() || late {
            // Its lease was lost, or it was cancelled, while it waited for a slot; or the
            // heartbeats that would have kept its lease could not be written meanwhile,
            // so another worker may hold the job by now. It does not run (the give back
            // is fenced, so it changes nothing another holds).
            entry.state = RunState::GivenBack;
            drop(running);
            if late {
                tracing::warn!(id = %lease.id, attempt = lease.attempt, "sk: a job waited for a slot past its last extended lease (heartbeats were not written); handed back unstarted");
            }
            let _ = completions.send(Completion::GiveBack {
                lease,
                slot: Some(permit),
            });
            return None;
        }
        entry.state = RunState::Started;
        entry.start_by
    };
    let registration = shared
        .registry
        .jobs
        .get(job.task_type.as_str())
        .copied()
        .expect("the claim selects only task types in the registry");
    let max_attempts = job.task_max_attempts;
    let queue: Arc<str> = Arc::from(std::mem::take(&mut job.task_queue));
    let tenant: Option<Arc<str>> = job.task_tenant.as_deref().map(Arc::from);
    if job.task_attempt == 1 && job.unreadable.is_none() {
        let waited = (shared.now() - job.task_posted_at_ts).as_seconds_f64();
        crate::telemetry::waited(registration.task_type, &queue, waited);
    }
    let started = Instant::now();
    let (mut layered, mut writes) = (None, None);
    let body = if let Some(reason) = job.unreadable.take() {
        // Only a producer outside sk can post this, past every check: the job alone
        // ends, as a bad payload does, and the rest of its claim runs.
        Body::Decided(Err(JobError::fatal(format!(
            "sk cannot read the job's queue row: {reason}"
        ))
        .with_kind("payload")))
    } else if max_attempts < 1 {
        // Only a producer outside sk can post this (`#[job]` refuses `max_attempts = 0`).
        Body::Decided(Err(JobError::fatal(format!(
            "task_max_attempts is {max_attempts}, so the job may not run at all; post it with task_max_attempts of at least 1"
        ))
        .with_kind("max_attempts")))
    } else if job.task_attempt > max_attempts {
        // Only a lease that ran out (a crashed or stalled worker) gets a job here.
        Body::Decided(Err(JobError::fatal(format!(
            "attempt {} exceeds max_attempts {max_attempts}: earlier attempts lost their lease (worker crash or stall)",
            job.task_attempt
        ))
        .with_kind("lease_expired")))
    } else if let Err(error) = open_payload(&shared, registration, &mut job.task_payload) {
        Body::Decided(Err(error))
    } else {
        let limit = job
            .task_timeout_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map(std::time::Duration::from_millis)
            .or(registration.options.timeout)
            .or(shared.config.default_timeout);
        let waited_on = job.task_waiting_on.is_some();
        let input = handler_input(
            &shared,
            registration,
            *job,
            queue.clone(),
            cancel,
            stop.clone(),
        );
        layered = shared
            .stacks
            .get(registration.task_type)
            .map(|stack| Box::new((stack.clone(), input.ctx.clone())));
        writes = Some(Arc::clone(&input.ctx.writes));
        if waited_on {
            Body::Inputs(Box::new(input), limit)
        } else {
            match handler_run(registration, input, shared.clock.clone()) {
                Ok(future) => Body::Handler(future, limit),
                Err(error) => Body::Decided(Err(error)),
            }
        }
    };
    Some((
        Run {
            shared,
            lease,
            registration,
            max_attempts,
            queue,
            tenant,
            stopped: stop,
            start_by,
            completions,
            permit,
            started,
            layered,
            writes,
        },
        body,
    ))
}

/// Whether the handler of the job under `lease` may start at `now` as its rate limit
/// counted it (`Running::start_by`). One that may not is asked to stop (`stop`), so its
/// run ends by giving its lease back unstarted, its attempt kept, and it runs on a later
/// claim, counted again then.
pub(super) fn in_time(
    start_by: Option<chrono::DateTime<chrono::Utc>>,
    stop: &std::sync::OnceLock<crate::job::StopReason>,
    lease: &Lease,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    match start_by {
        Some(by) if now > by => {
            let _ = stop.set(StopReason::LeaseLost);
            tracing::warn!(id = %lease.id, attempt = lease.attempt, late_ms = (now - by).num_milliseconds(), "sk: a rate-limited job would start after the time its limit counted it; handed back unstarted");
            false
        }
        _ => true,
    }
}

impl Run {
    /// Whether the job's handler starts now: not if its rate limit counted its start
    /// earlier than its allowance (`in_time`). If it does, the worker's events
    /// hear of it.
    fn starts(&self) -> bool {
        let shared = &self.shared;
        if !in_time(self.start_by, &self.stopped, &self.lease, shared.now()) {
            return false;
        }
        let (kind, of) = (
            JobEventKind::Started,
            (self.registration.task_type, &self.queue),
        );
        shared
            .events
            .of_run(kind, &self.lease, of, None, None, shared.now());
        true
    }

    /// Records the run's end and sends its outcome to be written (or its lease to be
    /// given back, for a job that stopped when asked).
    fn end(mut self, result: JobOutcome, committed: bool) {
        let (shared, lease) = (&self.shared, self.lease);
        let ran = self.started.elapsed();
        shared.ran(ran);
        let millis = i64::try_from(ran.as_millis()).unwrap_or(i64::MAX);
        let result = match result {
            Err(e) if e.interrupted && !shared.asked_to_stop(&self.stopped) => Err(JobError::new(
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
            let _ = self.completions.send(Completion::GiveBack {
                lease,
                slot: Some(self.permit),
            });
            return;
        }
        // The handler's slot is free for the next job; its hold on the lease goes with the
        // outcome and is freed once the result is written.
        self.permit.handler_done(shared, &self.completions);
        if matches!(self.stopped.get(), Some(StopReason::Cancelled)) {
            let task_type = self.registration.task_type;
            let cancelled = crate::telemetry::Outcome::Cancelled;
            crate::telemetry::finished(cancelled, task_type, &self.queue, millis);
            let (kind, of) = (JobEventKind::Cancelled, (task_type, &self.queue));
            shared
                .events
                .of_run(kind, &lease, of, Some(millis), None, shared.now());
        }
        let _ = self.completions.send(Completion::Finished {
            lease,
            max_attempts: self.max_attempts,
            registration: self.registration,
            result,
            committed,
            millis,
            queue: self.queue,
            tenant: self.tenant,
            slot: self.permit,
        });
    }
}

/// Opens a claimed job's sealed arguments (`#[job(encrypted)]`) with the worker's keys.
/// Only a sealed type's: any other payload is read by serde as it is, so a plain type's
/// arguments never depend on what they look like.
fn open_payload(
    shared: &Shared,
    registration: &Registration,
    payload: &mut Option<String>,
) -> Result<(), JobError> {
    if !registration.options.encrypted {
        return Ok(());
    }
    let keys = shared
        .config
        .payload_keys
        .clone()
        .or_else(crate::sealed::process_keys);
    crate::sealed::open_claimed(keys.as_deref(), registration.task_type, payload)
}

/// The input of a claimed job's handler (without the outputs of the jobs it waited on).
fn handler_input(
    shared: &Arc<Shared>,
    registration: &'static Registration,
    job: ClaimedJob,
    queue: Arc<str>,
    cancel: CancellationToken,
    stop: Arc<OnceLock<StopReason>>,
) -> HandlerInput {
    let lease = Lease {
        id: job.task_id,
        attempt: job.task_attempt,
    };
    let ctx = JobContext {
        id: job.task_id,
        task_type: job.task_type.into(),
        queue,
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
        writes: Arc::new(RunWrites::leased(registration.transaction)),
    };
    // Only a job that takes a transaction needs its source.
    let transaction = registration
        .transaction
        .then(|| TxSource::worker(shared.clone(), shared.runtime.pool.clone(), lease));
    HandlerInput {
        payload: job.task_payload,
        ctx,
        data: shared.data.clone(),
        transaction,
        inputs: None,
    }
}

/// Runs a job that waited on others, with their outputs as its inputs.
async fn with_inputs(
    run: &Run,
    mut input: HandlerInput,
    limit: Option<std::time::Duration>,
) -> JobOutcome {
    input.inputs = Some(load_inputs(&run.shared, run.lease.id).await?);
    run_handler(run.registration, input, limit, run.shared.clock.clone()).await
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
                    "its dependency {} has not succeeded, so it has no input to run with; retry that job (Client::retry brings this one back with it)",
                    i + 1
                ))
                .with_kind("dependency")
            })
        })
        .collect()
}

/// A handler's future with the job's scope set (for the enqueues it makes), catching
/// its panics.
pub(crate) type HandlerRun = tokio::task::futures::TaskLocalFuture<
    Scope,
    futures_util::future::CatchUnwind<AssertUnwindSafe<crate::registry::HandlerFuture>>,
>;

/// Builds a job's handler future from its input: a bad payload (or a panic building
/// it) is the run's error.
fn handler_run(
    registration: &Registration,
    input: HandlerInput,
    clock: SharedClock,
) -> Result<HandlerRun, JobError> {
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
    Ok(crate::job::CURRENT.scope(scope, AssertUnwindSafe(future).catch_unwind()))
}

/// Runs a handler's future under its time limit.
async fn await_handler(future: HandlerRun, limit: Option<std::time::Duration>) -> JobOutcome {
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

/// Runs a job's handler under its time limit, catching panics, with the job's scope set
/// for the enqueues it makes: the test runner's run. A worker takes the same two steps
/// ([`handler_run`], [`await_handler`]) with its own between them.
pub(crate) async fn run_handler(
    registration: &Registration,
    input: HandlerInput,
    limit: Option<std::time::Duration>,
    clock: SharedClock,
) -> JobOutcome {
    await_handler(handler_run(registration, input, clock)?, limit).await
}

/// The stop: running jobs get the grace period (cut short by `force`); what still runs
/// after it is interrupted and its lease given back, so another worker takes it at once.
pub(super) async fn drain(
    shared: &Shared,
    completions: &UnboundedSender<Completion>,
    force: impl std::future::Future<Output = ()>,
) {
    give_back_waiting(shared, completions);
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
