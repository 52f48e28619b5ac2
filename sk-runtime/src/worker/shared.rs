//! What the worker's tasks share: the store, the registry, the slots and the running
//! jobs with their leases, the queue controls, the metrics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::SharedClock;
use crate::registry::{DataMap, Registry};
use crate::store::{Lease, Store};

use super::{completer, executor, local, Config};

/// State shared by the pipeline's tasks.
pub(crate) struct Shared {
    pub(crate) store: Store,
    /// The pool and schema, for the enqueues and transactions of jobs.
    pub(crate) runtime: Arc<crate::job::Runtime>,
    pub(crate) registry: Registry,
    /// The layers of each job type with any (`WorkerBuilder::layer`), outermost first.
    pub(crate) stacks: HashMap<&'static str, crate::layer::Stack>,
    /// Its job events' subscribers (`Worker::subscribe`).
    pub(crate) events: super::events::Sender,
    pub(crate) schedules: crate::worker::schedule::Schedules,
    pub(crate) task_types: Vec<String>,
    pub(crate) queues: Option<Vec<String>>,
    pub(crate) tenants: Option<Vec<String>>,
    pub(crate) data: Arc<DataMap>,
    pub(crate) clock: SharedClock,
    pub(crate) config: Config,
    /// Handlers running (the concurrency), taken when a job starts and freed when its
    /// handler returns.
    pub(crate) slots: Arc<Semaphore>,
    /// Jobs started and not yet written: the slots plus the results waiting for the
    /// completer; taken when a job starts, freed once its outcome is written.
    pub(crate) held: Arc<Semaphore>,
    /// Claimed jobs waiting for a slot (`WorkerBuilder::prefetch`).
    pub(crate) waiting: Mutex<local::LocalQueue>,
    /// The handlers' mean run time in nanoseconds (a moving average; `u64::MAX` until
    /// one ran), which bounds the prefetch.
    pub(crate) run_nanos: AtomicU64,
    /// The paused queues and those with a global limit, as last read
    /// (`producer::Controls`).
    pub(crate) controls: std::sync::RwLock<crate::store::QueueControls>,
    /// This worker's runs per minute and task type, until written (`flush_job_stats`).
    pub(crate) job_stats:
        Mutex<HashMap<(chrono::DateTime<chrono::Utc>, &'static str), crate::model::StatBucket>>,
    /// Set when PostgreSQL says another process paused or resumed a queue or set its
    /// global limit.
    pub(crate) pauses_stale: AtomicBool,
    /// Queues with a concurrency of their own in this worker (`WorkerBuilder::queue`).
    pub(crate) queue_limits: HashMap<String, Arc<Semaphore>>,
    /// Wakes the producer: a notification, a freed slot after a full claim, a reconnect.
    pub(crate) wake: Notify,
    /// The last claim filled every free slot, so more jobs may be waiting.
    pub(crate) maybe_more: AtomicBool,
    /// Jobs were posted (or a queue's controls changed) since the producer last looked:
    /// its claim of the queues claimed together runs again even if it last found none.
    pub(crate) posted: AtomicBool,
    /// Jobs claimed and not yet finalized, by id.
    pub(crate) running: Mutex<HashMap<Lease, Running>>,
    /// The failures logged one by one this second (`completer::FailureLog`).
    pub(crate) failure_log: Mutex<completer::FailureLog>,
    /// Cancelled when a graceful stop begins.
    pub(crate) stopping: CancellationToken,
    /// Cancelled when the worker stops its jobs; then so is every job's own token
    /// (`cancel_jobs`). Not their parent: a child token costs a lock of the parent's
    /// list at its start and its end, per job.
    pub(crate) jobs_cancel: CancellationToken,
    pub(crate) metrics: Metrics,
    /// The span the worker runs in (`Worker::run` instrumented by the application), the
    /// parent of each job's span.
    pub(crate) span: std::sync::OnceLock<tracing::Span>,
}

/// Finished jobs that may wait for their results to be written, beyond the concurrency
/// (at least; a larger concurrency allows as many): two of the completer's batches, one
/// being written and the next filling meanwhile. With one batch (1,000), a worker of
/// concurrency 16 and short jobs stopped its handlers while a batch was written, and
/// burned 0.57–0.68 of raw SQL against 0.69–0.83 with two (docs/performance.md); with 256,
/// 0.61.
pub(super) const RESULTS_WAITING: usize = 2 * completer::MAX_BATCH;

/// The work, at the handlers' mean run time, that may wait in a worker for a slot.
pub(super) const PREFETCH_HORIZON: Duration = Duration::from_millis(25);

/// A claimed job's hold on the worker: on its concurrency (and its queue's, if limited)
/// until the handler returns, and on the leases it holds until its outcome is written.
pub(crate) struct Slot {
    pub(crate) run: Option<(
        tokio::sync::OwnedSemaphorePermit,
        Option<tokio::sync::OwnedSemaphorePermit>,
    )>,
    pub(crate) _held: tokio::sync::OwnedSemaphorePermit,
}

impl Slot {
    /// The handler returned: its concurrency slot goes to the next waiting job, and the
    /// producer is woken if the last claim was full (more jobs may be due) and the local
    /// queue is down to half its bound.
    pub(crate) fn handler_done(
        &mut self,
        shared: &Arc<Shared>,
        completions: &mpsc::UnboundedSender<completer::Completion>,
    ) {
        self.run = None;
        executor::dispatch(shared, completions);
        if shared.maybe_more.load(Ordering::Relaxed)
            && shared.waiting().len() <= shared.prefetch() / 2
        {
            shared.wake.notify_one();
        }
    }
}

/// One claimed job's state; decisions about it are taken under the `running` lock so a
/// job is either finalized by its run or given back by the stop, never both.
pub(crate) struct Running {
    pub(crate) cancel: CancellationToken,
    /// Why `cancel` was cancelled, when not for a shutdown (shared with the job's context).
    pub(crate) stop: Arc<std::sync::OnceLock<crate::job::StopReason>>,
    pub(crate) state: RunState,
    pub(crate) abort: Option<tokio::task::AbortHandle>,
    /// Until when the lease is known to be held: the claim's lease, then each heartbeat's
    /// that the store answered as held (by this worker's clock). A job whose lease is
    /// running out by the time a slot frees is not started (`Shared::lapsing`).
    pub(crate) lease_until: chrono::DateTime<chrono::Utc>,
    /// Of a job claimed under a rate limit: the latest its handler may start, its start's
    /// time in the limit's log and the allowance after it (`model::START_ALLOWANCE`).
    pub(crate) start_by: Option<chrono::DateTime<chrono::Utc>>,
    /// Of a job in its own transaction: when it began, and on which host.
    pub(crate) transaction: Option<(std::time::Instant, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunState {
    Claimed,
    Started,
    /// The run is over; its outcome is with the completer.
    Finished,
    /// Interrupted or never started; its lease is being given back.
    GivenBack,
}

impl crate::transaction::RunsUnder for Shared {
    fn may_start(&self, lease: &Lease) -> bool {
        Shared::may_start(self, lease)
    }
    fn began_transaction(&self, lease: &Lease, host: String) {
        if let Some(entry) = self.running().get_mut(lease) {
            entry.transaction = Some((std::time::Instant::now(), host));
        }
    }
    fn store(&self) -> &Store {
        &self.store
    }
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        Shared::now(self)
    }
}

impl Shared {
    /// Wakes the producer for jobs posted or controls changed (`posted`).
    pub(crate) fn posted_wake(&self) {
        self.posted.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    pub(crate) fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// Whether a claim that leased its jobs until `lease_until` came back too late to
    /// start them: with less of the lease left than one heartbeat interval, the lease may
    /// run out before the heartbeat extends it, and another worker may then claim the
    /// jobs while they run here. A claim is held up that long by a partition, a stopped
    /// process or a database that stalls; the time is the worker's own clock, as the
    /// lease's was.
    pub(crate) fn late(&self, lease_until: chrono::DateTime<chrono::Utc>) -> bool {
        self.now() + self.heartbeat() > lease_until
    }

    /// Whether the run under `lease`, which waited since its start (for its
    /// transaction's `BEGIN`, which on SQLite waits for the write lock), may still run its
    /// handler: its lease is neither lost, cancelled nor running out. One that may not is
    /// marked lost, so its run ends by giving the lease back, unstarted.
    pub(crate) fn may_start(&self, lease: &Lease) -> bool {
        let mut running = self.running();
        let Some(entry) = running.get_mut(lease) else {
            return false;
        };
        if entry.stop.get().is_some() {
            return false;
        }
        if self.lapsing(entry.lease_until) {
            let _ = entry.stop.set(crate::job::StopReason::LeaseLost);
            tracing::warn!(id = %lease.id, attempt = lease.attempt, "sk: a job waited for its transaction past its last extended lease (heartbeats were not written meanwhile); handed back unstarted");
            return false;
        }
        executor::in_time(entry.start_by, &entry.stop, lease, self.now())
    }

    /// Whether a job that waited for a slot, leased until `lease_until`, is too late to
    /// start: the heartbeats that keep its lease could not be written (a stalled
    /// database, SQLite's writer taken by others), so less is left than half of what a
    /// heartbeat leaves before the next (`(lease - heartbeat) / 2`, one heartbeat interval
    /// with the default third of the lease). A heartbeat interval close to the lease
    /// leaves little, and `late`'s margin would then hand back jobs whose beats are on
    /// time.
    pub(crate) fn lapsing(&self, lease_until: chrono::DateTime<chrono::Utc>) -> bool {
        let margin = self.config.lease.saturating_sub(self.heartbeat()) / 2;
        self.now() + margin > lease_until
    }

    fn heartbeat(&self) -> Duration {
        self.config
            .heartbeat
            .expect("build() sets the heartbeat interval")
    }

    pub(crate) fn failure_log(&self) -> MutexGuard<'_, completer::FailureLog> {
        self.failure_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The local queue (lock order: `waiting` before `running`).
    pub(crate) fn waiting(&self) -> MutexGuard<'_, local::LocalQueue> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many claimed jobs may wait for a slot now: what the handlers get through in
    /// [`PREFETCH_HORIZON`] at their mean run time, at most the configured prefetch; none
    /// before a first job ran.
    pub(crate) fn prefetch(&self) -> usize {
        let nanos = self.run_nanos.load(Ordering::Relaxed);
        if nanos == u64::MAX {
            return 0;
        }
        let through = PREFETCH_HORIZON.as_nanos() * self.config.concurrency as u128
            / u128::from(nanos.max(1_000));
        usize::try_from(through).map_or(self.config.prefetch, |n| n.min(self.config.prefetch))
    }

    /// Adds a handler's run time to the mean the prefetch follows.
    pub(crate) fn ran(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX - 1);
        let mean = self.run_nanos.load(Ordering::Relaxed);
        // An exponential moving average over about the last 8 runs; a lost update
        // between two handlers ending at once only drops one sample.
        let next = if mean == u64::MAX {
            took
        } else {
            mean - mean / 8 + took / 8
        };
        self.run_nanos.store(next, Ordering::Relaxed);
    }

    pub(crate) fn running(&self) -> MutexGuard<'_, HashMap<Lease, Running>> {
        // The map stays consistent even if a holder panicked: every update is one insert,
        // remove or field store.
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the running job `id` to stop, for `reason`; whether this worker runs it.
    pub(crate) fn signal(&self, id: Uuid, reason: crate::job::StopReason) -> bool {
        let running = self.running();
        let mut found = false;
        for (_, entry) in running.iter().filter(|(lease, _)| lease.id == id) {
            found = true;
            let _ = entry.stop.set(reason);
            entry.cancel.cancel();
        }
        found
    }

    /// A new job's cancellation token, cancelled already if the worker stopped its jobs.
    /// Made under the running map's lock, which `cancel_jobs` takes after it cancels
    /// `jobs_cancel`: a job admitted meanwhile is cancelled one way or the other.
    pub(crate) fn job_token(&self) -> CancellationToken {
        let token = CancellationToken::new();
        if self.jobs_cancel.is_cancelled() {
            token.cancel();
        }
        token
    }

    /// Asks every job to stop (their `JobContext::is_cancelled`): the worker is stopping.
    pub(crate) fn cancel_jobs(&self) {
        self.jobs_cancel.cancel();
        for entry in self.running().values() {
            entry.cancel.cancel();
        }
    }

    /// Whether a job whose stop reason is `stop` was asked to stop: its token is
    /// cancelled (read without a clone of it, which takes its lock).
    pub(crate) fn asked_to_stop(&self, stop: &std::sync::OnceLock<crate::job::StopReason>) -> bool {
        stop.get().is_some() || self.jobs_cancel.is_cancelled()
    }

    /// Why the job under `lease` was asked to stop, if it was and not for a shutdown.
    pub(crate) fn stop_reason(&self, lease: &Lease) -> Option<crate::job::StopReason> {
        self.running()
            .get(lease)
            .and_then(|entry| entry.stop.get().copied())
    }

    /// Counts finished runs, (task type, success, millis), in this minute's statistics.
    pub(crate) fn count_runs(&self, runs: &[(&'static str, bool, i64)]) {
        use chrono::DurationRound;
        if runs.is_empty() {
            return;
        }
        let now = self.now();
        let minute = now
            .duration_trunc(chrono::TimeDelta::minutes(1))
            .unwrap_or(now);
        let mut stats = self
            .job_stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for &(task_type, ok, millis) in runs {
            stats
                .entry((minute, task_type))
                .or_default()
                .add(ok, millis);
        }
    }

    /// Writes the run statistics (`Client::throughput`); minutes before this one are
    /// final once written and leave memory.
    pub(crate) async fn flush_job_stats(&self) {
        use chrono::DurationRound;
        let buckets: Vec<_> = {
            let stats = self
                .job_stats
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            stats
                .iter()
                .map(|((minute, task_type), b)| (*minute, (*task_type).to_owned(), b.clone()))
                .collect()
        };
        if buckets.is_empty() {
            return;
        }
        match self.store.write_job_stats(&buckets).await {
            Ok(()) => {
                let now = self.now();
                let current = now
                    .duration_trunc(chrono::TimeDelta::minutes(1))
                    .unwrap_or(now);
                let mut stats = self
                    .job_stats
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for (minute, task_type, written) in buckets {
                    let key = (minute, task_type.as_str());
                    // Done with a minute once it is past and nothing came in since.
                    if minute < current
                        && stats
                            .iter()
                            .any(|(k, b)| (k.0, k.1) == key && *b == written)
                    {
                        stats.retain(|k, _| (k.0, k.1) != key);
                    }
                }
            }
            Err(e) => tracing::debug!("sk: cannot write run statistics yet: {e}"),
        }
    }

    /// Sleeps for `d` unless the worker is stopping (or a pool of the process moved to a
    /// new primary: `bus::backoff`); returns false when stopping.
    pub(crate) async fn pause(&self, d: Duration) -> bool {
        // A pool that moves to a new primary (a failover) ends the wait early: what
        // failed on the old host may work on the new one now.
        tokio::select! {
            () = self.stopping.cancelled() => false,
            () = crate::bus::backoff(d) => true,
        }
    }
}

/// Counters written to `sk_metrics_t` by the maintenance task.
#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) claimed: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) fenced: AtomicU64,
    pub(crate) given_back: AtomicU64,
    pub(crate) snoozed: AtomicU64,
    pub(crate) claim_errors: AtomicU64,
    /// Claims a rate limit held back (it let fewer jobs start than were due and wanted).
    pub(crate) rate_held: AtomicU64,
    /// Tenants with due jobs that claims passed over at their limit per tenant.
    pub(crate) tenant_held: AtomicU64,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Vec<(&'static str, i64)> {
        let get = |c: &AtomicU64| i64::try_from(c.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        vec![
            ("jobs_claimed", get(&self.claimed)),
            ("jobs_succeeded", get(&self.succeeded)),
            ("jobs_retried", get(&self.retried)),
            ("jobs_failed", get(&self.failed)),
            ("jobs_fenced", get(&self.fenced)),
            ("jobs_given_back", get(&self.given_back)),
            ("jobs_snoozed", get(&self.snoozed)),
            ("claim_errors", get(&self.claim_errors)),
            ("claims_held_by_rate_limit", get(&self.rate_held)),
            ("tenants_held_by_limit", get(&self.tenant_held)),
        ]
    }
}
