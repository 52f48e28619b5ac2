//! The worker: a builder, and the pipeline of DESIGN.md (listener + poll -> producer ->
//! executor -> completer; heartbeat, scheduler and maintenance beside them).

pub(crate) mod completer;
pub(crate) mod executor;
mod heartbeat;
mod listener;
pub(crate) mod maintenance;
mod producer;
pub(crate) mod run;
pub(crate) mod schedule;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::{Clock, SharedClock, SystemClock};
use crate::error::{Error, Result};
use crate::registry::{DataMap, Registry};
use crate::store::{Lease, Schema};
use crate::store::{ProbeFailure, Store};

/// Builds a [`Worker`]; every setting has a documented default.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
/// use std::time::Duration;
///
/// struct AppState { greeting: String }
///
/// sk_runtime::Worker::builder(pool)
///     .concurrency(32)
///     .queues(["default", "mail"])
///     .data(AppState { greeting: "hello".into() })
///     .grace_period(Duration::from_secs(10))
///     .build()?
///     .run() // until Ctrl-C or SIGTERM, then a graceful stop
///     .await
/// # }
/// ```
#[must_use]
pub struct WorkerBuilder {
    pool: crate::Pool,
    config: Config,
    queues: Option<Vec<String>>,
    queue_limits: Vec<(String, usize)>,
    tenants: Option<Vec<String>>,
    only: Option<Vec<String>>,
    data: DataMap,
    schema: Schema,
    clock: SharedClock,
    id: Option<String>,
    periodic: Vec<crate::worker::schedule::Periodic>,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) concurrency: usize,
    pub(crate) lease: Duration,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) grace_period: Duration,
    pub(crate) auto_migrate: bool,
    pub(crate) result_retention: Duration,
    pub(crate) results_partition: Duration,
    pub(crate) archive_results_to: Option<String>,
    pub(crate) maintenance_interval: Duration,
    pub(crate) vacuum: bool,
    pub(crate) start_timeout: Option<Duration>,
    pub(crate) default_timeout: Option<Duration>,
    pub(crate) retry_jitter: f64,
    pub(crate) queue_depth_every: Option<Duration>,
    pub(crate) prefetch: usize,
}

impl WorkerBuilder {
    /// Handlers run at once (default 10): a slot is taken when a job starts and freed
    /// when its handler returns. Results are written in batches behind the handlers: up
    /// to `max(concurrency, 2000)` finished jobs may wait for theirs; the jobs claimed
    /// ahead of a slot are bounded by [`prefetch`](Self::prefetch).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// Jobs a claim may take beyond the free slots, to wait in this worker for one
    /// (default 2000; 0 claims for free slots only). With short jobs a small concurrency
    /// then still claims in large batches, one round trip for hundreds of jobs; with every
    /// slot busy, the next claim waits until half the bound is left, so the default
    /// refills with a full claim (1,000 jobs) while a full claim's worth still waits. The bound
    /// follows the handlers' mean run time: no more jobs wait than the handlers get
    /// through in about 25 ms, so jobs of a second or more are never held back from
    /// other workers, and no more than `max`. Waiting jobs start by priority, then post
    /// time (a later claim's more urgent job goes first); their leases are kept by the
    /// heartbeat and handed back, attempts intact, when the worker stops. A queue with a
    /// global limit (`Client::set_global_limit`) is never prefetched.
    pub fn prefetch(mut self, max: usize) -> Self {
        self.config.prefetch = max;
        self
    }

    /// Only take jobs from these queues (default: every queue). An empty list is refused
    /// by [`WorkerBuilder::build`].
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// Takes jobs from `queue` too, at most `concurrency` of them at once in this worker
    /// (within the worker's own [`concurrency`](Self::concurrency)), so a slow queue cannot
    /// take every slot: `.queue("mail", 5).queue("billing", 2)`. A worker given queues
    /// this way (or with [`queues`](Self::queues)) takes jobs from those queues only; the
    /// ones given with `queues` share the rest of the worker's slots.
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.queue_limits.push((queue.into(), concurrency));
        self
    }

    /// Only take jobs of these tenants (default: every job, with a tenant or without).
    /// An empty list is refused by [`WorkerBuilder::build`].
    pub fn tenants<I, S>(mut self, tenants: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tenants = Some(tenants.into_iter().map(Into::into).collect());
        self
    }

    /// Only run these task types (default: every `#[job]` linked into the binary). An
    /// empty list, or a name no linked `#[job]` has, is refused by [`WorkerBuilder::build`].
    pub fn task_types<I, S>(mut self, types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.only = Some(types.into_iter().map(Into::into).collect());
        self
    }

    /// Shares `value` with jobs that take a `Data<T>` argument.
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// How long a claim holds a job before another worker may take it (default 30 s).
    /// Running jobs extend it by heartbeat, so it bounds how long a crashed worker's jobs
    /// wait, not how long a job may run.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Reads the jobs of every queue by state this often (at the first heartbeat after
    /// each interval) and records them as the `sk_queue_jobs` gauge
    /// ([`crate::telemetry`]); off by default. One worker of a deployment is enough.
    pub fn queue_depth_metrics(mut self, every: Duration) -> Self {
        self.config.queue_depth_every = Some(every);
        self
    }

    /// How often running leases are extended (default: a third of the lease).
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.config.heartbeat = Some(every);
        self
    }

    /// How often the worker looks for jobs without a notification (default 1 s; 200 ms
    /// on MySQL, which has no notifications: there it is how soon a job enqueued by
    /// another process starts). A lost notification costs at most this much latency.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.config.poll_interval = every;
        self
    }

    /// How long running jobs may take to finish after a stop is asked (default 30 s);
    /// jobs still running then are interrupted and given back for another worker.
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.config.grace_period = grace;
        self
    }

    /// Where the tables live (default `public`, prefix `sk_`).
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = schema;
        self
    }

    /// The clock every query takes `now` from (default: the system clock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Whether to create or upgrade the schema at start (default true). When off, run
    /// [`migrate`](crate::migrate) yourself.
    pub fn auto_migrate(mut self, on: bool) -> Self {
        self.config.auto_migrate = on;
        self
    }

    /// How long finished jobs' results are kept (default 7 days). The results table is
    /// partitioned by posting time ([`results_partition`](Self::results_partition)): a
    /// partition goes whole once every job in it was posted this long ago and finished
    /// (a partition with live jobs stays, and loses only its rows finished this long ago).
    /// A retention shorter than the span prunes rows inside the partition the cutoff falls
    /// in, one by one.
    pub fn result_retention(mut self, keep: Duration) -> Self {
        self.config.result_retention = keep;
        self
    }

    /// The span of posting time each results partition covers (default 1 day; whole
    /// minutes from 1 hour to 366 days), aligned to whole spans since the Unix epoch in
    /// UTC. Maintenance keeps partitions two spans ahead; a change applies to the
    /// partitions created from then on.
    pub fn results_partition(mut self, span: Duration) -> Self {
        self.config.results_partition = span;
        self
    }

    /// Retired results partitions are detached and moved to this schema (created if
    /// missing) instead of dropped, to be dumped or queried there (seed 002's archiving).
    pub fn archive_results_to(mut self, schema: &str) -> Self {
        self.config.archive_results_to = Some(schema.to_owned());
        self
    }

    /// How often results are pruned and metrics written (default 60 s).
    pub fn maintenance_interval(mut self, every: Duration) -> Self {
        self.config.maintenance_interval = every;
        self
    }

    /// Enqueues `job` at every tick of `cron` (5 fields, or 6/7 with seconds first; UTC
    /// unless it starts with `CRON_TZ=<IANA zone> `, as `CRON_TZ=Europe/Paris 0 8 * * *`),
    /// once per tick however many workers run the same schedule. For schedules known only
    /// at run time; `#[job(schedule = "...")]` covers the static case.
    ///
    /// ```no_run
    /// # use sk_runtime::{job, Worker};
    /// #[job]
    /// async fn send_digest(kind: String) {}
    ///
    /// # fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
    /// let cron = std::env::var("DIGEST_CRON").unwrap_or_else(|_| "0 8 * * MON".into());
    /// let worker = Worker::builder(pool).periodic(&cron, SendDigest::new("weekly".into())).build()?;
    /// # Ok(()) }
    /// ```
    /// An expression that does not parse makes [`WorkerBuilder::build`] fail, naming it.
    pub fn periodic<J: crate::Job>(mut self, cron: &str, job: J) -> Self {
        self.periodic.push(crate::worker::schedule::Periodic {
            cron: cron.to_owned(),
            task_type: J::TASK_TYPE,
            payload: serde_json::to_string(&job),
            options: J::OPTIONS,
        });
        self
    }

    /// Whether workers vacuum the queue and results tables themselves once dead rows
    /// outnumber live ones (default true). Turn it off only when autovacuum is on and
    /// tuned for these tables; see `docs/reliability.md`.
    pub fn vacuum(mut self, on: bool) -> Self {
        self.config.vacuum = on;
        self
    }

    /// The longest a run of a job without its own `timeout` may take before it counts as a
    /// (recoverable) failure, so a hung handler in a live worker is rescued (seed 003's
    /// hung tasks; a dead worker's jobs come back by their lease). Default: none.
    pub fn default_timeout(mut self, limit: Duration) -> Self {
        self.config.default_timeout = Some(limit);
        self
    }

    /// How far retry delays are spread at random (default 0.1): each delay of the job's
    /// backoff is moved by up to this fraction of itself, either way, so jobs that failed
    /// together (a downstream outage) do not all come back in the same instant. `0.0`
    /// gives the exact curve (tests that assert spacing); at most `1.0`.
    pub fn retry_jitter(mut self, fraction: f64) -> Self {
        self.config.retry_jitter = fraction;
        self
    }

    /// How long [`Worker::run`] waits at start for a database it cannot reach (refused,
    /// timed out, starting up) before it fails with [`Error::Connect`]. Default: it keeps
    /// waiting, logging each attempt with the address and the cause, as it does when the
    /// database goes away later. Causes that waiting cannot cure (authentication, an
    /// unknown database) fail at once.
    pub fn start_timeout(mut self, limit: Duration) -> Self {
        self.config.start_timeout = Some(limit);
        self
    }

    /// This worker's id in `task_locked_by` and `sk_metrics_t` (default: `sk-<pid>-<random>`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Checks the settings and the registered jobs.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a setting out of range, an empty `queues` or `task_types`
    /// list, or a cron expression that does not parse, [`Error::DuplicateTaskType`] when two
    /// jobs share a name, [`Error::MissingData`] when a job takes `Data<T>` that was not
    /// given.
    pub fn build(self) -> Result<Worker> {
        let c = &self.config;
        if c.concurrency == 0 {
            return Err(Error::invalid("concurrency", "must be at least 1"));
        }
        if c.lease < Duration::from_millis(100) {
            return Err(Error::invalid("lease", "must be at least 100 ms"));
        }
        if c.default_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(
                "default timeout",
                "must be longer than zero",
            ));
        }
        if !(0.0..=1.0).contains(&c.retry_jitter) {
            return Err(Error::invalid(
                "retry jitter",
                format!("{} must be from 0.0 to 1.0", c.retry_jitter),
            ));
        }
        crate::store::check_period(c.results_partition)?;
        if let Some(archive) = &c.archive_results_to {
            crate::store::check_identifier("archive schema", archive, false)?;
            #[cfg(feature = "sqlite")]
            if matches!(self.pool, crate::Pool::Sqlite(_)) {
                return Err(Error::invalid(
                    "archive schema",
                    "SQLite has no schemas to archive results into; past the retention they are deleted",
                ));
            }
        }
        if c.poll_interval.is_zero() || c.maintenance_interval.is_zero() {
            return Err(Error::invalid(
                "interval",
                "poll and maintenance intervals must be longer than zero",
            ));
        }
        let heartbeat = c.heartbeat.unwrap_or(c.lease / 3);
        if heartbeat.is_zero() || heartbeat >= c.lease {
            return Err(Error::invalid(
                "heartbeat interval",
                "must be longer than zero and shorter than the lease",
            ));
        }
        for (what, list) in [
            ("queues", &self.queues),
            ("tenants", &self.tenants),
            ("task types", &self.only),
        ] {
            if list.as_ref().is_some_and(Vec::is_empty) {
                return Err(Error::invalid(
                    what,
                    "the list is empty, so the worker would claim nothing; leave it unset to take every one",
                ));
            }
        }
        for queue in self.queues.iter().flatten() {
            crate::model::check_name("queue name", queue)?;
        }
        let mut queue_limits = HashMap::new();
        for (queue, limit) in &self.queue_limits {
            crate::model::check_name("queue name", queue)?;
            if *limit == 0 {
                return Err(Error::invalid(
                    "queue concurrency",
                    format!("queue {queue:?} must take at least 1 job at a time"),
                ));
            }
            if queue_limits
                .insert(queue.clone(), Arc::new(Semaphore::new(*limit)))
                .is_some()
            {
                return Err(Error::invalid(
                    "queue concurrency",
                    format!("queue {queue:?} is given twice"),
                ));
            }
        }
        let queues = match (self.queues, queue_limits.is_empty()) {
            (queues, true) => queues,
            (queues, false) => {
                let mut all = queues.unwrap_or_default();
                all.retain(|q| !queue_limits.contains_key(q));
                let mut limited: Vec<String> = queue_limits.keys().cloned().collect();
                limited.sort();
                all.extend(limited);
                Some(all)
            }
        };
        for tenant in self.tenants.iter().flatten() {
            crate::model::check_name("tenant", tenant)?;
        }
        let registry =
            Registry::collect(self.only.as_deref(), &self.data, self.pool.backend_name())?;
        if registry.jobs.is_empty() {
            tracing::warn!(
                "sk: no #[job] fn is linked into this binary, so this worker will claim nothing. \
                 Jobs defined in a library crate register only if the binary links that crate: \
                 reference it from the binary (`use my_jobs as _;`) or name one of its job types"
            );
        }
        let schedules = crate::worker::schedule::Schedules::new(&registry, self.periodic)?;
        let id = self.id.unwrap_or_else(|| {
            format!(
                "sk-{}-{}",
                std::process::id(),
                &Uuid::new_v4().simple().to_string()[..8]
            )
        });
        crate::model::check_name("worker id", &id)?;
        let mut config = self.config;
        config.heartbeat = Some(heartbeat);
        let runtime = Arc::new(crate::job::Runtime {
            pool: self.pool.clone(),
            schema: self.schema.clone(),
        });
        Ok(Worker {
            shared: Arc::new(Shared {
                runtime,
                store: self.pool.store(self.schema, id),
                task_types: registry.task_types(),
                registry,
                schedules,
                queues,
                queue_limits,
                controls: std::sync::RwLock::default(),
                job_stats: Mutex::default(),
                pauses_stale: AtomicBool::new(false),
                tenants: self.tenants,
                data: Arc::new(self.data),
                clock: self.clock,
                slots: Arc::new(Semaphore::new(config.concurrency)),
                held: Arc::new(Semaphore::new(
                    config.concurrency + config.concurrency.max(RESULTS_WAITING),
                )),
                waiting: Mutex::default(),
                run_nanos: AtomicU64::new(u64::MAX),
                config,
                wake: Notify::new(),
                maybe_more: AtomicBool::new(false),
                running: Mutex::new(HashMap::new()),
                failure_log: Mutex::default(),
                stopping: CancellationToken::new(),
                jobs_cancel: CancellationToken::new(),
                metrics: Metrics::default(),
            }),
        })
    }
}

/// Runs jobs of the task types linked into this binary.
pub struct Worker {
    shared: Arc<Shared>,
}

/// State shared by the pipeline's tasks.
pub(crate) struct Shared {
    pub(crate) store: Store,
    /// The pool and schema, for the enqueues and transactions of jobs.
    pub(crate) runtime: Arc<crate::job::Runtime>,
    pub(crate) registry: Registry,
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
    pub(crate) waiting: Mutex<executor::LocalQueue>,
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
}

/// Finished jobs that may wait for their results to be written, beyond the concurrency
/// (at least; a larger concurrency allows as many): two of the completer's batches, one
/// being written and the next filling meanwhile. With one batch (1,000), a worker of
/// concurrency 16 and short jobs stopped its handlers while a batch was written, and
/// burned 0.57–0.68 of raw SQL against 0.69–0.83 with two (docs/performance.md); with 256,
/// 0.61.
const RESULTS_WAITING: usize = 2 * completer::MAX_BATCH;

/// The work, at the handlers' mean run time, that may wait in a worker for a slot.
const PREFETCH_HORIZON: Duration = Duration::from_millis(25);

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
    fn store(&self) -> &Store {
        &self.store
    }
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        Shared::now(self)
    }
}

impl Shared {
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
        true
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
    pub(crate) fn waiting(&self) -> MutexGuard<'_, executor::LocalQueue> {
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

    /// Sleeps for `d` unless the worker is stopping; returns false when stopping.
    pub(crate) async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            () = self.stopping.cancelled() => false,
            () = tokio::time::sleep(d) => true,
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
        ]
    }
}

impl Worker {
    /// Starts configuring a worker on `pool`.
    pub fn builder(pool: impl Into<crate::Pool>) -> WorkerBuilder {
        let pool = pool.into();
        WorkerBuilder {
            config: Config {
                concurrency: 10,
                lease: Duration::from_secs(30),
                heartbeat: None,
                poll_interval: pool.default_poll_interval(),
                grace_period: Duration::from_secs(30),
                auto_migrate: true,
                result_retention: Duration::from_secs(7 * 24 * 3600),
                results_partition: crate::store::RESULTS_PARTITION,
                archive_results_to: None,
                maintenance_interval: Duration::from_secs(60),
                vacuum: true,
                start_timeout: None,
                default_timeout: None,
                retry_jitter: 0.1,
                queue_depth_every: None,
                // Twice the largest claim: the refill from half-way is a full claim.
                prefetch: 2 * producer::MAX_CLAIM_BATCH,
            },
            queues: None,
            queue_limits: Vec::new(),
            tenants: None,
            only: None,
            data: DataMap::default(),
            schema: Schema::default(),
            clock: Arc::new(SystemClock),
            id: None,
            periodic: Vec::new(),
            pool,
        }
    }

    /// This worker's id (`task_locked_by`).
    pub fn id(&self) -> &str {
        self.shared.store.worker_id()
    }

    /// The task types this worker runs.
    pub fn task_types(&self) -> &[String] {
        &self.shared.task_types
    }

    /// Runs until Ctrl-C or SIGTERM, then stops gracefully; a second Ctrl-C or SIGTERM
    /// during the grace period stops at once, giving the leases of running jobs back.
    /// Every signal is logged.
    ///
    /// # Errors
    /// As [`Worker::run_until`].
    pub async fn run(self) -> Result<()> {
        let (tx, mut signals) = mpsc::unbounded_channel();
        let listener = tokio::spawn(signal::forward(tx));
        let grace = self.shared.config.grace_period;
        let (force_tx, force_rx) = tokio::sync::oneshot::channel::<()>();
        let stop = async move {
            if let Some(name) = signals.recv().await {
                tracing::info!(
                    "sk: {name} received; stopping gracefully within {}; send it again to stop at once",
                    humantime::format_duration(grace)
                );
            }
            tokio::spawn(async move {
                if let Some(name) = signals.recv().await {
                    tracing::warn!("sk: {name} received again; stopping at once");
                    let _ = force_tx.send(());
                }
                while let Some(name) = signals.recv().await {
                    tracing::warn!("sk: {name} received; already stopping at once");
                }
            });
        };
        let result = self
            .run_inner(stop, async move {
                // A dropped sender (no second signal) never forces the stop.
                if force_rx.await.is_err() {
                    std::future::pending::<()>().await;
                }
            })
            .await;
        listener.abort();
        result
    }

    /// Runs until `stop` completes, then stops gracefully: no more claims, running jobs
    /// get the grace period, the leases of the rest are given back at once.
    ///
    /// # Errors
    /// At start: the migration fails, the database refuses the connection for good
    /// (authentication, unknown database), or it stays unreachable past
    /// [`WorkerBuilder::start_timeout`]. Once running, database errors are logged and
    /// retried with backoff; the worker does not exit for them. It exits with
    /// [`Error::WorkerTask`](crate::Error::WorkerTask) if one of its own tasks panics.
    pub async fn run_until<F: Future<Output = ()>>(self, stop: F) -> Result<()> {
        self.run_inner(stop, std::future::pending()).await
    }

    /// The run: `stop` begins a graceful stop; `force` (polled once the stop began) ends
    /// the grace period early.
    async fn run_inner<F, G>(self, stop: F, force: G) -> Result<()>
    where
        F: Future<Output = ()>,
        G: Future<Output = ()>,
    {
        let shared = self.shared;
        let mut stop = std::pin::pin!(stop);
        tokio::select! {
            ready = wait_for_database(&shared) => ready?,
            () = &mut stop => {
                tracing::info!("sk: stopped while waiting for the database");
                return Ok(());
            }
        }
        if shared.config.auto_migrate {
            shared.store.migrate().await?;
        }
        warn_of_a_large_pool(&shared).await;
        tracing::info!(
            worker = %shared.store.worker_id(),
            task_types = ?shared.task_types,
            queues = ?shared.queues,
            concurrency = shared.config.concurrency,
            "sk: worker started"
        );
        // Schedules count ticks from here; the metrics row then announces the worker, so
        // whoever sees it knows every tick after this instant will be enqueued.
        let started = shared.now();
        crate::worker::maintenance::write_metrics(&shared, shared.now()).await;
        if let Err(e) = shared
            .store
            .worker_up(&announcement(&shared), started)
            .await
        {
            tracing::warn!("sk: cannot announce this worker in the workers table: {e}");
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let background = CancellationToken::new();
        let mut completer = tokio::spawn(completer::run(shared.clone(), rx));
        let mut heartbeat = tokio::spawn(heartbeat::run(shared.clone(), background.clone()));
        let listener = tokio::spawn(listener::run(shared.clone()));
        let scheduler = tokio::spawn(crate::worker::schedule::run(shared.clone(), started));
        let maintenance = tokio::spawn(crate::worker::maintenance::run(shared.clone()));

        let mut producer = tokio::spawn(producer::run(shared.clone(), tx.clone()));
        // None of the three ends before the stop: the producer returns once stopping, the
        // completer once every sender is gone, the heartbeat once `background` is
        // cancelled. One that ends sooner panicked; the worker cannot go on without it
        // (a completer gone would leave its jobs leased for ever, kept by the heartbeat).
        let ended = tokio::select! {
            () = &mut stop => None,
            ended = &mut producer => Some(("producer", ended)),
            ended = &mut completer => Some(("completer", ended)),
            ended = &mut heartbeat => Some(("heartbeat", ended)),
        };
        if let Some((task, ended)) = ended {
            let cause = match ended {
                Err(e) if e.is_panic() => executor::panic_message(&*e.into_panic()),
                Err(e) => e.to_string(),
                Ok(()) => "it returned".to_owned(),
            };
            tracing::error!(worker = %shared.store.worker_id(), "sk: the worker's {task} stopped unexpectedly ({cause}); stopping this worker at once: its jobs run again once their leases run out");
            // No more claims, no more heartbeats, no handler left running: every lease
            // this worker holds runs out on its own.
            shared.stopping.cancel();
            shared.cancel_jobs();
            background.cancel();
            for task in [
                &producer,
                &completer,
                &heartbeat,
                &listener,
                &scheduler,
                &maintenance,
            ] {
                task.abort();
            }
            for entry in shared.running().values() {
                if let Some(abort) = &entry.abort {
                    abort.abort();
                }
            }
            return Err(crate::Error::WorkerTask { task, cause });
        }
        tracing::info!(worker = %shared.store.worker_id(), "sk: stopping; no more claims");
        shared.stopping.cancel();
        shared.cancel_jobs();
        // The producer returns at its next idle point, never in the middle of a claim, so
        // every job it claimed is known to the running map below.
        let _ = producer.await;
        executor::drain(&shared, &tx, force).await;
        drop(tx);
        // The completer finishes what is queued (retrying the database) before heartbeats
        // stop, so no finished job's lease runs out before its result is written.
        let _ = completer.await;
        background.cancel();
        let _ = tokio::join!(heartbeat, listener, scheduler, maintenance);
        crate::worker::maintenance::write_metrics(&shared, shared.now()).await;
        shared.flush_job_stats().await;
        if let Err(e) = shared.store.worker_down().await {
            tracing::warn!("sk: cannot remove this worker from the workers table: {e}");
        }
        tracing::info!(worker = %shared.store.worker_id(), "sk: worker stopped");
        Ok(())
    }
}

impl Worker {
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// Claims the one job due first, runs it and records its outcome, as the pipeline does
/// (`testing::drain`); `None` when no job is due.
pub(crate) async fn run_one_due(shared: &Arc<Shared>) -> Result<Option<crate::worker::run::Run>> {
    let now = shared.now();
    let lease_until = crate::clock::add(now, shared.config.lease);
    let controls = shared.store.queue_controls().await?;
    let mut jobs = shared
        .store
        .claim(&crate::store::Claim {
            task_types: &shared.task_types,
            queues: shared.queues.as_deref(),
            tenants: shared.tenants.as_deref(),
            paused: &controls.paused,
            capped: false,
            limit: 1,
            now,
            lease_until,
        })
        .await?;
    let Some(job) = jobs.pop() else {
        return Ok(None);
    };
    let (id, task_type, attempt) = (job.task_id, job.task_type.clone(), job.task_attempt);
    let (tx, mut rx) = mpsc::unbounded_channel();
    executor::admit(shared, vec![(job, None)], lease_until, &tx);
    drop(tx);
    let completion = rx
        .recv()
        .await
        .expect("a spawned run always sends its completion");
    let outcome = run::outcome_of(&completion);
    completer::finalize(shared, vec![completion]).await;
    Ok(Some(crate::worker::run::Run {
        id,
        task_type,
        attempt,
        outcome,
    }))
}

// The worker must be spawnable on a multi-threaded runtime; this fails to compile if a
// non-`Send` value (or a sqlx executor borrow that is not general enough) is held across
// an await anywhere in the pipeline.
const _: () = {
    fn assert_send<T: Send>(_: &T) {}
    #[allow(dead_code)]
    fn check(worker: Worker) {
        assert_send(&worker.run_until(std::future::pending::<()>()));
    }
};

/// What this worker says of itself in the workers table.
fn announcement(shared: &Shared) -> crate::model::WorkerUp {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    crate::model::WorkerUp {
        host,
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        queues: shared
            .queues
            .as_ref()
            .and_then(|q| serde_json::to_string(q).ok()),
        task_types: serde_json::to_string(&shared.task_types).unwrap_or_else(|_| "[]".into()),
        concurrency: i32::try_from(shared.config.concurrency).unwrap_or(i32::MAX),
        heartbeat_ms: shared
            .config
            .heartbeat
            .map_or(0, |h| i64::try_from(h.as_millis()).unwrap_or(i64::MAX)),
    }
}

/// Applies sk's migrations (what a worker does at start unless `auto_migrate(false)`).
///
/// # Errors
/// The database fails, or holds a schema newer than this build knows.
pub async fn migrate(pool: impl Into<crate::Pool>, schema: &Schema) -> Result<()> {
    pool.into().migrate(schema).await
}

/// One migration of this build ([`migrations`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Migration {
    /// Its version, from 1.
    pub version: i32,
    /// What it does.
    pub description: &'static str,
    /// When it was applied to this schema; `None` while it is pending.
    pub applied_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// This build's migrations and which of them the database has (`sk migrate --status`).
/// A database without sk's tables has them all pending.
///
/// # Errors
/// The database fails.
pub async fn migrations(pool: impl Into<crate::Pool>, schema: &Schema) -> Result<Vec<Migration>> {
    Ok(pool
        .into()
        .migrations(schema)
        .await?
        .into_iter()
        .map(|(version, description, applied_at)| Migration {
            version,
            description,
            applied_at,
        })
        .collect())
}

/// Warns, with the numbers, when this worker's pool alone may take more than half of the
/// connections the server has free: a few workers sized as the README's pool section
/// once said (concurrency + 5 each) went past PostgreSQL's default of 100, and a server
/// that refuses connections stalls every worker sharing it.
async fn warn_of_a_large_pool(shared: &Shared) {
    let (limit, open) = match shared.store.connection_room().await {
        Ok(Some(room)) => room,
        Ok(None) => return,
        Err(e) => {
            tracing::debug!("sk: cannot read the server's connection limit: {e}");
            return;
        }
    };
    let pool = i64::from(shared.store.pool_max());
    if let Some(message) = pool_warning(pool, limit, open) {
        tracing::warn!(pool, server_limit = limit, open, "sk: {message}");
    }
}

/// The warning for a pool of `pool` connections on a server that takes `limit` and has
/// `open` now (one of them this worker's), if it needs one.
fn pool_warning(pool: i64, limit: i64, open: i64) -> Option<String> {
    let free = limit - open;
    (pool * 2 > free).then(|| {
        format!(
            "this worker's pool may open {pool} connections, more than half of the {free} the server has free \
             ({limit} allowed, {open} open); size each worker's pool for its concurrency plus 5, and all \
             workers together below the server's limit (or put PgBouncer in front), or the server will refuse connections"
        )
    })
}

/// Waits until the database answers a direct connection (the pool's own wait retries a
/// refused connection in silence). Each failed attempt is logged at once with the address
/// and the cause; a cause that waiting cannot cure (authentication, an unknown database)
/// fails at once, and so does any cause once the start timeout has passed.
async fn wait_for_database(shared: &Shared) -> Result<()> {
    let started = std::time::Instant::now();
    // The start timeout bounds the probes and the waits between them too: a probe of a
    // database that does not answer takes up to 2 s, and a limit of 5 s gave up at 6.3.
    let deadline = shared.config.start_timeout.map(|limit| started + limit);
    let mut failures = 0u32;
    let mut last = None;
    loop {
        let probe = shared.store.probe();
        // Each probe gets at least 100 ms, so a limit of zero (or the end of a longer
        // one) still reports what a refused or misconfigured connection says.
        let probed = match deadline {
            Some(deadline) => {
                let floor = std::time::Instant::now() + Duration::from_millis(100);
                tokio::time::timeout_at(deadline.max(floor).into(), probe).await
            }
            None => Ok(probe.await),
        };
        let Ok(probed) = probed else {
            if let Some(error) = last {
                return Err(error);
            }
            let limit = shared.config.start_timeout.unwrap_or_default();
            return Err(Error::Connect {
                address: shared.store.address(),
                cause: format!(
                    "no answer within the start timeout ({})",
                    humantime::format_duration(limit)
                ),
            });
        };
        let error = match probed {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(
                        "sk: the database at {} answers after {:.1} s",
                        shared.store.address(),
                        started.elapsed().as_secs_f64()
                    );
                }
                return Ok(());
            }
            Err(ProbeFailure::Permanent(e)) => return Err(e),
            Err(ProbeFailure::Transient(e)) => e,
        };
        failures += 1;
        let now = std::time::Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Err(error);
        }
        let wait = match deadline {
            Some(deadline) => crate::retry::database_backoff(failures).min(deadline - now),
            None => crate::retry::database_backoff(failures),
        };
        tracing::warn!(
            "sk: {error}; retrying in {wait:?} (waiting {:.1} s so far)",
            started.elapsed().as_secs_f64()
        );
        last = Some(error);
        tokio::time::sleep(wait).await;
    }
}

mod signal {
    //! Ctrl-C and SIGTERM, forwarded by name as they arrive.

    use tokio::sync::mpsc::UnboundedSender;

    #[cfg(unix)]
    pub(super) async fn forward(to: UnboundedSender<&'static str>) {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut int, mut term) = match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => (int, term),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(
                    "sk: cannot listen for SIGINT/SIGTERM ({e}); stopping on Ctrl-C only"
                );
                while tokio::signal::ctrl_c().await.is_ok() {
                    if to.send("Ctrl-C").is_err() {
                        return;
                    }
                }
                return;
            }
        };
        loop {
            let name = tokio::select! {
                Some(()) = int.recv() => "SIGINT",
                Some(()) = term.recv() => "SIGTERM",
                else => return,
            };
            if to.send(name).is_err() {
                return;
            }
        }
    }

    #[cfg(not(unix))]
    pub(super) async fn forward(to: UnboundedSender<&'static str>) {
        while tokio::signal::ctrl_c().await.is_ok() {
            if to.send("Ctrl-C").is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::Worker;

    /// Log lines written while `f` runs.
    fn logs_of(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_pool_over_half_of_the_free_connections_is_warned_of() {
        // PostgreSQL's default 100 less 3 reserved, 10 open: 87 free.
        assert_eq!(super::pool_warning(43, 97, 10), None);
        let said = super::pool_warning(44, 97, 10).expect("44 is over half of 87");
        assert!(
            said.contains("may open 44 connections, more than half of the 87 the server has free (97 allowed, 10 open)"),
            "{said}"
        );
        assert!(
            super::pool_warning(37, 97, 40).is_some(),
            "three workers of 37"
        );
    }

    // No `#[job]` is linked into this crate's unit tests: the case of a job crate the
    // linker dropped.
    #[tokio::test]
    async fn a_worker_without_jobs_says_so_loudly() {
        let pool = sqlx::PgPool::connect_lazy("postgres://sk@127.0.0.1:1/none").unwrap();
        let logs = logs_of(|| {
            let worker = Worker::builder(pool).build().unwrap();
            assert!(worker.task_types().is_empty());
        });
        assert!(
            logs.contains("WARN") && logs.contains("no #[job] fn is linked into this binary"),
            "{logs}"
        );
        assert!(logs.contains("`use my_jobs as _;`"), "{logs}");
    }
}
