//! Finalizes runs in batches: one statement for all successes of a batch (results and
//! stats included), one for its failures on PostgreSQL (one transaction on the other
//! backends), one for all given-back leases and one per distinct snooze time. A batch
//! of large outputs or errors is written in several calls, and one the database refuses
//! for what a row holds in halves, down to the refused outcome (`write_batch`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use tokio::sync::mpsc::UnboundedReceiver;

mod write;

use super::events::JobEventKind;
use super::{Metrics, Shared, Slot};
use crate::error::JobError;
use crate::job::StopReason;
use crate::model::JobStatus;
use crate::registry::Registration;
use crate::store::{Failure, Lease, Success};
use crate::telemetry::{self, Outcome};
use write::{
    persist_for_a_lease, storable, write_batch, MAX_DETAIL_BYTES, MAX_KIND_BYTES, MAX_MESSAGE_BYTES,
};

/// The most outcomes one finalization writes.
pub(super) const MAX_BATCH: usize = 1000;

pub(crate) enum Completion {
    Finished {
        lease: Lease,
        max_attempts: i32,
        registration: &'static Registration,
        result: crate::job::JobOutcome,
        /// The success is recorded already, in the job's own transaction.
        committed: bool,
        millis: i64,
        /// The job's queue (a metrics label).
        queue: std::sync::Arc<str>,
        /// The job's tenant.
        tenant: Option<std::sync::Arc<str>>,
        /// The job's hold on its lease (its handler's slot is free already), freed once
        /// the outcome is written.
        slot: Slot,
    },
    GiveBack {
        lease: Lease,
        slot: Option<Slot>,
    },
}

pub(super) async fn run(shared: Arc<Shared>, mut completions: UnboundedReceiver<Completion>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // Failures logged at DEBUG only are counted when their second ends, even when no
        // completion follows them then.
        let counted_at = shared.failure_log().quiet_until();
        let received = match counted_at {
            Some(at) => {
                let at = tokio::time::Instant::from_std(at);
                match tokio::time::timeout_at(at, completions.recv_many(&mut batch, MAX_BATCH))
                    .await
                {
                    Ok(n) => n,
                    Err(_) => {
                        shared.failure_log().next_second();
                        continue;
                    }
                }
            }
            None => completions.recv_many(&mut batch, MAX_BATCH).await,
        };
        if received == 0 {
            break;
        }
        finalize(&shared, std::mem::take(&mut batch)).await;
    }
    shared.failure_log().count_quiet();
}

/// How many failed runs a worker logs one by one each second, at WARN (to retry) or
/// ERROR (for good). Past it, each goes to DEBUG and their count follows at WARN once the
/// second is over: a storm of failures (a downstream outage) neither floods the log nor
/// slows the worker (formatting a line per failure cost a third of its throughput).
const FAILURES_LOGGED_PER_SECOND: u32 = 20;

/// The failures logged in the current second, and those logged at DEBUG only.
#[derive(Default)]
pub(crate) struct FailureLog {
    since: Option<Instant>,
    logged: u32,
    quiet: u64,
}

impl FailureLog {
    /// Whether the next failure is logged at its own level (else at DEBUG).
    fn admit(&mut self) -> bool {
        self.next_second();
        if self.logged < FAILURES_LOGGED_PER_SECOND {
            self.logged += 1;
            true
        } else {
            self.quiet += 1;
            false
        }
    }

    /// Starts a new second once the current one is over, counting its quiet failures.
    fn next_second(&mut self) {
        let now = Instant::now();
        if self
            .since
            .is_none_or(|since| now.duration_since(since) >= Duration::from_secs(1))
        {
            self.count_quiet();
            self.since = Some(now);
            self.logged = 0;
        }
    }

    /// When the current second ends, if failures were logged at DEBUG only in it.
    fn quiet_until(&self) -> Option<Instant> {
        (self.quiet > 0)
            .then(|| self.since.map(|since| since + Duration::from_secs(1)))
            .flatten()
    }

    /// Logs the count of failures logged at DEBUG only, if any.
    fn count_quiet(&mut self) {
        if self.quiet > 0 {
            tracing::warn!(
                failures = self.quiet,
                "sk: {} more jobs failed, logged at DEBUG only (each second the first {FAILURES_LOGGED_PER_SECOND} are logged one by one); every failure is in its job's record",
                self.quiet
            );
            self.quiet = 0;
        }
    }
}

pub(crate) async fn finalize(shared: &Shared, batch: Vec<Completion>) {
    let now = shared.now();
    let mut successes = Vec::new();
    let mut failures = Vec::new();
    let mut give_back = Vec::new();
    let mut snoozed = Vec::new();
    // Queues (and tenants) whose rate limits a handler held (`JobError::rate_limited`),
    // until when.
    let mut holds: Vec<Hold> = Vec::new();
    // Successes recorded in their jobs' own transactions.
    let mut committed = Vec::new();
    // The task type, run time and queue of each of `successes` and `failures`, in their
    // order, for the statistics and metrics of those recorded.
    let mut success_runs = Vec::new();
    let mut failure_runs = Vec::new();
    let mut slots = Vec::with_capacity(batch.len());
    // Runs of a job that this worker claimed again (its own lease ran out: it stalled, or
    // its clock moved ahead) and that end in one batch: only the latest claim can hold
    // the job, and the stores take a batch keyed by job id, so the older runs are
    // refused here. (SQLite's completion failed on the duplicate id, and retried for
    // ever while the heartbeat kept the batch's other leases.)
    let mut stale = Vec::new();
    let mut latest: std::collections::HashMap<uuid::Uuid, i32> =
        std::collections::HashMap::with_capacity(batch.len());
    for completion in &batch {
        if let Completion::Finished { lease, .. } = completion {
            let attempt = latest.entry(lease.id).or_insert(lease.attempt);
            *attempt = (*attempt).max(lease.attempt);
        }
    }
    for completion in batch {
        match completion {
            Completion::Finished {
                lease,
                slot,
                result,
                committed: false,
                ..
            } if latest.get(&lease.id).is_some_and(|a| *a > lease.attempt) => {
                slots.push(slot);
                stale.push((lease, if result.is_ok() { "result" } else { "failure" }));
            }
            Completion::Finished {
                lease,
                result: Ok(_),
                committed: true,
                millis,
                registration,
                slot,
                queue,
                ..
            } => {
                slots.push(slot);
                tracing::debug!(id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, millis, "sk: job succeeded in its transaction");
                committed.push((lease, registration.task_type, millis, queue));
            }
            Completion::Finished {
                lease,
                result: Ok(output),
                millis,
                registration,
                slot,
                queue,
                ..
            } => {
                slots.push(slot);
                success_runs.push((registration.task_type, millis, queue));
                tracing::debug!(id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, millis, "sk: job succeeded");
                successes.push(Success {
                    lease,
                    millis,
                    output,
                    keep: !shared.config.result_retention.is_zero(),
                });
            }
            Completion::Finished {
                lease,
                result:
                    Err(JobError {
                        snooze: Some(delay),
                        hold,
                        kind,
                        message,
                        ..
                    }),
                registration,
                slot,
                queue,
                tenant,
                ..
            } => {
                slots.push(slot);
                if kind == crate::transaction::LOCK_WAIT {
                    // sk's own snooze: the job's transaction waited for a lock.
                    tracing::info!(id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, "sk: {message}");
                } else {
                    tracing::debug!(id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, "sk: job snoozed for {}", crate::clock::shown(delay));
                }
                let until = crate::clock::add(now, delay);
                snoozed.push((lease, until, registration.task_type, queue.clone()));
                if hold {
                    holds.push((queue, tenant, until));
                }
            }
            Completion::Finished {
                lease,
                max_attempts,
                registration,
                result: Err(error),
                millis,
                slot,
                queue,
                ..
            } => {
                slots.push(slot);
                failure_runs.push((registration.task_type, millis, queue));
                failures.push(failure(
                    (lease, max_attempts),
                    registration,
                    error,
                    millis,
                    (now, shared.config.retry_jitter),
                    shared.failure_log().admit(),
                ));
            }
            Completion::GiveBack { lease, slot } => {
                slots.extend(slot);
                give_back.push(lease);
            }
        }
    }
    // A second with quiet failures is counted even when no failure follows it.
    shared.failure_log().next_second();
    let mut leases: Vec<Lease> = Vec::new();
    // (task type, success, millis) of each run recorded, for this minute's statistics.
    let mut counted = Vec::new();
    if !stale.is_empty() {
        Metrics::add(&shared.metrics.fenced, stale.len() as u64);
        for (lease, what) in stale {
            refused(shared, &lease, what);
            leases.push(lease);
        }
    }
    if !committed.is_empty() {
        for (lease, task_type, millis, queue) in &committed {
            counted.push((*task_type, true, *millis));
            telemetry::finished(Outcome::Completed, task_type, queue, *millis);
            let of = (*task_type, queue);
            let kind = JobEventKind::Succeeded;
            shared
                .events
                .of_run(kind, lease, of, Some(*millis), None, now);
            leases.push(*lease);
        }
        Metrics::add(&shared.metrics.succeeded, committed.len() as u64);
        crate::bus::jobs_finished();
    }
    // Outcomes not written at all (given up while stopping, or refused by the database
    // even without their output or error text): their leases run out, they run again.
    let mut unrecorded = HashSet::new();
    if !successes.is_empty() {
        let done = write_batch(shared, "record successes", &successes, now, &mut unrecorded).await;
        // A set: a batch holds up to MAX_BATCH ids, and a list's `contains` per success
        // would scan it once per success.
        let done: HashSet<uuid::Uuid> = done.into_iter().collect();
        for (s, (task_type, millis, queue)) in successes.iter().zip(&success_runs) {
            if done.contains(&s.lease.id) {
                counted.push((*task_type, true, *millis));
                telemetry::finished(Outcome::Completed, task_type, queue, *millis);
                let (of, kind) = ((*task_type, queue), JobEventKind::Succeeded);
                shared
                    .events
                    .of_run(kind, &s.lease, of, Some(*millis), None, now);
            }
        }
        if !done.is_empty() {
            crate::bus::jobs_finished();
        }
        Metrics::add(&shared.metrics.succeeded, done.len() as u64);
        for s in &successes {
            if !done.contains(&s.lease.id) && !unrecorded.contains(&s.lease) {
                Metrics::add(&shared.metrics.fenced, 1);
                refused(shared, &s.lease, "result");
            }
        }
        leases.extend(successes.iter().map(|s| s.lease));
    }
    if !failures.is_empty() {
        let recorded =
            write_batch(shared, "record failures", &failures, now, &mut unrecorded).await;
        for ((f, held), (task_type, millis, queue)) in
            failures.iter().zip(recorded).zip(&failure_runs)
        {
            if !held {
                if !unrecorded.contains(&f.lease) {
                    Metrics::add(&shared.metrics.fenced, 1);
                    refused(shared, &f.lease, "failure");
                }
            } else {
                let (outcome, kind) = if let Some(at) = f.retry_at {
                    Metrics::add(&shared.metrics.retried, 1);
                    (Outcome::Retried, JobEventKind::Retried { at })
                } else {
                    Metrics::add(&shared.metrics.failed, 1);
                    (Outcome::Failed, JobEventKind::Failed)
                };
                counted.push((*task_type, false, *millis));
                telemetry::finished(outcome, task_type, queue, *millis);
                let (of, error) = ((*task_type, queue), Some(f.message.as_str()));
                shared
                    .events
                    .of_run(kind, &f.lease, of, Some(*millis), error, now);
            }
            if held && f.retry_at.is_none() {
                crate::bus::jobs_finished();
            }
        }
        leases.extend(failures.iter().map(|f| f.lease));
    }
    shared.count_runs(&counted);
    if !give_back.is_empty() {
        if let Some(n) = persist_for_a_lease(shared, "give leases back", || {
            shared.store.give_back(&give_back, now)
        })
        .await
        {
            Metrics::add(&shared.metrics.given_back, n);
            tracing::info!(jobs = n, "sk: gave leases back for another worker");
        }
        leases.extend(give_back);
    }
    // A snooze hands the job back like a stop does, with a later not-before time: one
    // statement per distinct time (a storm of snoozes with one delay is one statement).
    snoozed.sort_unstable_by_key(|(_, at, _, _)| *at);
    for runs in snoozed.chunk_by(|a, b| a.1 == b.1) {
        let at = runs[0].1;
        let group: Vec<Lease> = runs.iter().map(|(lease, ..)| *lease).collect();
        if let Some(n) =
            persist_for_a_lease(shared, "snooze jobs", || shared.store.give_back(&group, at)).await
        {
            Metrics::add(&shared.metrics.snoozed, n);
            let refused_n = group.len().saturating_sub(n as usize);
            if refused_n > 0 {
                refused_among(shared, &group, refused_n, "snooze");
            } else {
                for (lease, until, task_type, queue) in runs {
                    let kind = JobEventKind::Snoozed { until: *until };
                    shared
                        .events
                        .of_run(kind, lease, (task_type, queue), None, None, now);
                }
            }
        }
        leases.extend(group);
    }
    hold_rate_limits(shared, holds).await;
    {
        let mut running = shared.running();
        for lease in leases {
            running.remove(&lease);
        }
    }
    // Free the holds only now, and wake the producer if the last claim was full or jobs
    // wait for room that the written results leave.
    drop(slots);
    if shared.maybe_more.load(Ordering::Relaxed) || !shared.waiting().is_empty() {
        shared.wake.notify_one();
    }
}

/// A handler's "too many requests": its job's queue and tenant, and until when.
type Hold = (Arc<str>, Option<Arc<str>>, DateTime<Utc>);

/// Holds each queue's rate limit, and each tenant's of a queue with a rate limit per
/// tenant, shut until the latest time a handler asked of it (`JobError::rate_limited`).
/// A hold that cannot be written is named in the log: the jobs that asked for it wait
/// all the same (they were snoozed), only the queue's (or tenant's) others may start
/// sooner.
async fn hold_rate_limits(shared: &Shared, mut holds: Vec<Hold>) {
    // The latest time of each queue and of each tenant.
    holds.sort_unstable_by_key(|h| std::cmp::Reverse(h.2));
    let mut queues: Vec<(Arc<str>, DateTime<Utc>)> = Vec::new();
    let mut tenants: Vec<(Arc<str>, Arc<str>, DateTime<Utc>)> = Vec::new();
    for (queue, tenant, until) in holds {
        if !queues.iter().any(|q| q.0 == queue) {
            queues.push((queue.clone(), until));
        }
        if let Some(tenant) = tenant {
            if !tenants.iter().any(|t| t.0 == queue && t.1 == tenant) {
                tenants.push((queue, tenant, until));
            }
        }
    }
    let runtime = &shared.runtime;
    for (queue, until) in queues {
        match runtime
            .pool
            .hold_rate_limit(&runtime.schema, &queue, until)
            .await
        {
            Ok(true) => {
                tracing::info!(%queue, %until, "sk: a handler was rate limited downstream; the queue's rate limit holds until then")
            }
            Ok(false) => {
                tracing::debug!(%queue, "sk: a handler was rate limited downstream; its queue has no rate limit to hold")
            }
            Err(e) => {
                tracing::warn!(%queue, "sk: cannot hold the queue's rate limit after a handler was rate limited downstream: {e}")
            }
        }
    }
    for (queue, tenant, until) in tenants {
        match runtime
            .pool
            .hold_tenant_rate_limit(&runtime.schema, &queue, &tenant, until)
            .await
        {
            Ok(true) => {
                tracing::info!(%queue, %tenant, %until, "sk: a handler was rate limited downstream; its tenant's rate limit holds until then")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(%queue, %tenant, "sk: cannot hold the tenant's rate limit after a handler was rate limited downstream: {e}")
            }
        }
    }
}

/// What the log says of a lease a fenced write found gone: the write cannot tell who
/// took it. (It said "to another worker" when only one worker ran, and its own heartbeat
/// had come late.)
const LEASE_GONE: &str = "its lease ran out before a heartbeat extended it (this worker or the database stalled) and another claim may have taken the job, or an operator cancelled, retried or deleted it";

/// Logs an outcome the store refused: the job's lease was lost, or it was cancelled.
fn refused(shared: &Shared, lease: &Lease, what: &str) {
    match shared.stop_reason(lease) {
        Some(StopReason::Cancelled) => {
            tracing::info!(id = %lease.id, attempt = lease.attempt, "sk: {what} not recorded: the job was cancelled while it ran")
        }
        _ => {
            tracing::warn!(id = %lease.id, attempt = lease.attempt, "sk: {what} refused: this worker no longer holds the job's lease: {LEASE_GONE}")
        }
    }
}

/// Logs `n` outcomes of `leases` the store refused, not knowing which (a statement that
/// counts the rows it changed): the cancelled ones as `refused` does, the rest as lost.
fn refused_among(shared: &Shared, leases: &[Lease], n: usize, what: &str) {
    if leases.len() == 1 {
        return refused(shared, &leases[0], what);
    }
    let cancelled: Vec<&Lease> = leases
        .iter()
        .filter(|l| matches!(shared.stop_reason(l), Some(StopReason::Cancelled)))
        .collect();
    for lease in &cancelled {
        tracing::info!(id = %lease.id, attempt = lease.attempt, "sk: {what} not recorded: the job was cancelled while it ran");
    }
    if n > cancelled.len() {
        let ids: Vec<String> = leases
            .iter()
            .filter(|l| !matches!(shared.stop_reason(l), Some(StopReason::Cancelled)))
            .map(|l| l.id.to_string())
            .collect();
        tracing::warn!(
            "sk: {} of these {what}s refused: this worker no longer holds those jobs' leases ({LEASE_GONE}): {}",
            n - cancelled.len(),
            ids.join(", ")
        );
    }
}

/// `delay` moved by up to `jitter` of itself either way (`WorkerBuilder::retry_jitter`).
pub(crate) fn jittered(delay: Duration, jitter: f64) -> Duration {
    if jitter <= 0.0 || delay.is_zero() {
        return delay;
    }
    // The first 48 bits of a v4 UUID (the OS's generator; its version bits come after
    // them), as a fraction in [0, 1).
    let bits = (uuid::Uuid::new_v4().as_u128() >> 80) as u64;
    let unit = bits as f64 / (1u64 << 48) as f64;
    delay.mul_f64((1.0 + jitter * (2.0 * unit - 1.0)).max(0.0))
}

fn failure(
    (lease, max_attempts): (Lease, i32),
    registration: &Registration,
    error: JobError,
    millis: i64,
    (now, jitter): (chrono::DateTime<chrono::Utc>, f64),
    logged: bool,
) -> Failure {
    let (status, retry_at) = if !crate::retry::retries(&error, lease.attempt, max_attempts) {
        (JobStatus::Fatal, None)
    } else {
        let delay = jittered(
            registration
                .options
                .backoff
                .delay(u32::try_from(lease.attempt).unwrap_or(1)),
            jitter,
        );
        let status = if lease.attempt + 1 >= max_attempts {
            JobStatus::Faulted
        } else {
            JobStatus::Error
        };
        (status, Some(crate::clock::add(now, delay)))
    };
    match (retry_at, logged) {
        (Some(at), true) => tracing::warn!(
            id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, max_attempts,
            retry_at = %at, kind = %error.kind, "sk: job failed, will retry: {}", error.message
        ),
        (Some(at), false) => tracing::debug!(
            id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, max_attempts,
            retry_at = %at, kind = %error.kind, "sk: job failed, will retry: {}", error.message
        ),
        (None, true) => tracing::error!(
            id = %lease.id, task_type = registration.task_type, attempt = lease.attempt, max_attempts,
            fatal = error.fatal, kind = %error.kind, "sk: job failed for good: {}", error.message
        ),
        (None, false) => tracing::debug!(
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
        kind: storable(error.kind, MAX_KIND_BYTES),
        message: storable(error.message, MAX_MESSAGE_BYTES),
        detail: error.detail.map(|d| storable(d, MAX_DETAIL_BYTES)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::write::clip;
    use super::{jittered, FailureLog, FAILURES_LOGGED_PER_SECOND};

    #[test]
    fn failures_past_the_budget_of_a_second_are_counted_not_logged() {
        let mut log = FailureLog::default();
        let admitted = (0..FAILURES_LOGGED_PER_SECOND + 5)
            .filter(|_| log.admit())
            .count();
        assert_eq!(admitted, FAILURES_LOGGED_PER_SECOND as usize);
        assert_eq!(log.quiet, 5);
        let counted_at = log
            .quiet_until()
            .expect("quiet failures are counted at the second's end");
        assert!(
            counted_at > Instant::now() && counted_at <= Instant::now() + Duration::from_secs(1)
        );
        // A second later the budget is whole again and the quiet ones were counted.
        log.since = log.since.map(|s| s - Duration::from_secs(1));
        assert!(log.admit());
        assert_eq!((log.logged, log.quiet), (1, 0));
    }

    #[test]
    fn clip_cuts_at_a_character_boundary_and_says_how_much_is_left_out() {
        assert_eq!(clip("short".into(), 5), "short");
        let long = "abcdefghijklmnopqrstuvwxyz".repeat(2);
        assert_eq!(clip(long.clone(), 30), "abcdefghijk… [41 bytes more]");
        assert_eq!(clip(long, 29).len(), 29);
        // "é" is two bytes: a cut inside it moves back before it.
        let e = "é".repeat(30);
        assert_eq!(clip(e, 40), format!("{}… [40 bytes more]", "é".repeat(10)));
        for limit in [22, 255, 8 * 1024] {
            let clipped = clip("ü".repeat(10_000), limit);
            assert!(clipped.len() <= limit, "{limit}: {}", clipped.len());
            let (kept, more) = clipped.split_once("… [").unwrap();
            let more: usize = more.strip_suffix(" bytes more]").unwrap().parse().unwrap();
            assert_eq!(kept.len() + more, 20_000, "{limit}");
        }
    }

    #[test]
    fn a_batch_is_cut_into_parts_of_at_most_the_budget() {
        let parts = |sizes: &[usize], max_items: usize, max_bytes: usize| -> Vec<(usize, usize)> {
            crate::store::parts(sizes, max_items, max_bytes, |n| *n)
                .into_iter()
                .map(|r| (r.start, r.end))
                .collect()
        };
        assert!(parts(&[], 5, 10).is_empty());
        assert_eq!(parts(&[3, 3, 3], 5, 10), [(0, 3)]);
        assert_eq!(parts(&[3, 3, 3, 3], 5, 10), [(0, 3), (3, 4)]);
        assert_eq!(parts(&[4, 6, 1], 5, 10), [(0, 2), (2, 3)]);
        // One over the budget is a part of its own.
        assert_eq!(parts(&[1, 20, 1, 1], 5, 10), [(0, 1), (1, 2), (2, 4)]);
        assert_eq!(parts(&[20], 5, 10), [(0, 1)]);
        // At most `max_items` to a part, whatever their bytes.
        assert_eq!(parts(&[0; 5], 2, 10), [(0, 2), (2, 4), (4, 5)]);
    }

    #[test]
    fn jitter_stays_within_its_bounds_and_varies() {
        let base = Duration::from_secs(10);
        let delays: Vec<Duration> = (0..2000).map(|_| jittered(base, 0.1)).collect();
        for d in &delays {
            assert!(
                *d >= Duration::from_secs(9) && *d <= Duration::from_secs(11),
                "{d:?}"
            );
        }
        let below = delays.iter().filter(|d| **d < base).count();
        assert!(
            (700..1300).contains(&below),
            "{below} of 2000 below the base"
        );
        let spread =
            delays.iter().max().unwrap().as_secs_f64() - delays.iter().min().unwrap().as_secs_f64();
        assert!(spread > 1.8, "spread {spread}");
        assert_eq!(jittered(base, 0.0), base, "off: the exact curve");
        assert_eq!(jittered(Duration::ZERO, 0.5), Duration::ZERO);
        assert!(jittered(base, 1.0) <= Duration::from_secs(20));
    }
}
