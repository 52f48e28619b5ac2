//! The worker's builder: every setting, checked at `build`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::{Clock, SharedClock, SystemClock};
use crate::error::{Error, Result};
use crate::registry::{DataMap, Registry};
use crate::store::Schema;

use super::shared::RESULTS_WAITING;
use super::{producer, Metrics, Shared, Worker};

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
    call_timeout: Option<Duration>,
    rate_limits: Vec<(String, u32, Duration)>,
    tenants: Option<Vec<String>>,
    only: Option<Vec<String>>,
    data: DataMap,
    schema: Schema,
    clock: SharedClock,
    id: Option<String>,
    periodic: Vec<crate::worker::schedule::Periodic>,
    layers: crate::layer::Layers,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) concurrency: usize,
    pub(crate) lease: Duration,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) grace_period: Duration,
    pub(crate) bounds: crate::store::bound::Bounds,
    pub(crate) auto_migrate: bool,
    pub(crate) result_retention: Duration,
    pub(crate) results_partition: Duration,
    pub(crate) results_week_start: chrono::Weekday,
    pub(crate) archive_results_to: Option<String>,
    pub(crate) maintenance_interval: Duration,
    pub(crate) vacuum: bool,
    pub(crate) start_timeout: Option<Duration>,
    pub(crate) default_timeout: Option<Duration>,
    pub(crate) retry_jitter: f64,
    pub(crate) queue_depth_every: Option<Duration>,
    pub(crate) prefetch: usize,
    /// Rate limits this worker writes at start (`WorkerBuilder::rate_limit`).
    pub(crate) rate_limits: Vec<(String, crate::model::RateLimit)>,
    /// The queues this worker makes fair at start (`WorkerBuilder::fair`).
    pub(crate) fair: Vec<String>,
    /// The keys this worker opens sealed arguments with (`WorkerBuilder::payload_keys`);
    /// `None`: the process's (`set_payload_keys`).
    pub(crate) payload_keys: Option<Arc<crate::PayloadKeys>>,
    /// Publishes its job events to other processes (`WorkerBuilder::publish_events`).
    pub(crate) publish_events: bool,
    /// A direct connection's URL to LISTEN on (`WorkerBuilder::listen_on`).
    pub(crate) listen_on: Option<String>,
    /// Writes its task types' schemas at start (`WorkerBuilder::publish_schemas`).
    pub(crate) publish_schemas: bool,
}

impl WorkerBuilder {
    /// A builder with every default, on `pool` (`Worker::builder`).
    pub(super) fn new(pool: crate::Pool) -> Self {
        WorkerBuilder {
            config: Config {
                concurrency: 10,
                lease: Duration::from_secs(30),
                heartbeat: None,
                poll_interval: pool.default_poll_interval(),
                grace_period: Duration::from_secs(30),
                bounds: crate::store::bound::Bounds::default(),
                auto_migrate: true,
                result_retention: Duration::from_secs(7 * 24 * 3600),
                results_partition: crate::store::RESULTS_PARTITION,
                results_week_start: chrono::Weekday::Mon,
                archive_results_to: None,
                maintenance_interval: Duration::from_secs(60),
                vacuum: true,
                start_timeout: None,
                default_timeout: None,
                retry_jitter: 0.1,
                queue_depth_every: None,
                // Twice the largest claim: the refill from half-way is a full claim.
                prefetch: 2 * producer::MAX_CLAIM_BATCH,
                rate_limits: Vec::new(),
                fair: Vec::new(),
                payload_keys: None,
                publish_events: false,
                listen_on: None,
                publish_schemas: true,
            },
            queues: None,
            queue_limits: Vec::new(),
            call_timeout: None,
            rate_limits: Vec::new(),
            tenants: None,
            only: None,
            data: DataMap::default(),
            schema: Schema::default(),
            clock: Arc::new(SystemClock),
            id: None,
            periodic: Vec::new(),
            layers: crate::layer::Layers::default(),
            pool,
        }
    }

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
    /// heartbeat and handed back, attempts intact, when the worker stops. A queue or job
    /// type with a rate limit is never prefetched (a start counts as it is claimed); one
    /// with a limit of running jobs across workers (`Client::set_global_limit`,
    /// `Client::set_tenant_limit`) at most the worker's concurrency.
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

    /// Limits `queue` to `count` job starts per `window` over every worker (as
    /// `Client::set_rate_limit` does): written to the database when the worker starts,
    /// so the last worker started sets it; lift it with `Client::set_rate_limit(queue,
    /// None)` or `sk limit QUEUE --rate none`. Checked at `build`: a count from 1 to
    /// `i32::MAX`, a window from 1 ms to [`MAX_RATE_WINDOW`](crate::MAX_RATE_WINDOW).
    pub fn rate_limit(mut self, queue: impl Into<String>, count: u32, window: Duration) -> Self {
        self.rate_limits.push((queue.into(), count, window));
        self
    }

    /// Claims `queue` fairly across its tenants ([`Enqueue::with_tenant`](crate::Enqueue::with_tenant))
    /// on every worker: written to the database when the worker starts, as
    /// [`Client::set_fair`](crate::Client::set_fair) does, which says what a fair claim
    /// does and costs. A worker started without it does not turn it off; turn it off with
    /// `Client::set_fair(queue, false)` or `sk limit QUEUE --fair off`. Checked at
    /// `build`: a queue this worker takes jobs from, given once.
    pub fn fair(mut self, queue: impl Into<String>) -> Self {
        self.config.fair.push(queue.into());
        self
    }

    /// Publishes this worker's job events (those of [`Worker::subscribe`](crate::Worker::subscribe))
    /// to other processes, which receive them with
    /// [`Client::subscribe`](crate::Client::subscribe): a `NOTIFY` on the schema's
    /// events channel every 50 ms while there are events, outside the jobs'
    /// transactions. PostgreSQL only (`build` refuses it elsewhere).
    pub fn publish_events(mut self) -> Self {
        self.config.publish_events = true;
        self
    }

    /// Whether the worker writes its task types' schemas ([`crate::schema`]) to the
    /// database at start, for `sk schema`, producers in other languages and
    /// `Client::enqueue_json`; on by default.
    pub fn publish_schemas(mut self, on: bool) -> Self {
        self.config.publish_schemas = on;
        self
    }

    /// Runs every job of this worker through `layer` ([`Layer`](crate::Layer)): around
    /// the layers added after it and each job type's own.
    pub fn layer(mut self, layer: impl crate::Layer) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    /// Runs the jobs of type `J` through `layer`, inside the worker's layers. Checked at
    /// `build`: a job type this worker runs.
    pub fn layer_for<J: crate::Job>(mut self, layer: impl crate::Layer) -> Self {
        self.layers.push_for(J::TASK_TYPE, Arc::new(layer));
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

    /// The longest any one call of the worker to the database may take: a claim, a
    /// completion, a heartbeat, a job transaction's begin and commit (default 10 s,
    /// [`CALL_TIMEOUT`](crate::bounds::CALL_TIMEOUT)). A call past it is dropped and its connection
    /// closed, never handed back to the pool, and the log line names the call, the host
    /// and the bound. It is what a host that goes silent costs before the worker knows:
    /// keep it well under the lease. The upkeep (migrations, partitions, pruning, vacuum)
    /// has its own, [`UPKEEP_TIMEOUT`](crate::bounds::UPKEEP_TIMEOUT) (5 min), or this one if
    /// longer.
    pub fn call_timeout(mut self, bound: Duration) -> Self {
        self.call_timeout = Some(bound);
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

    /// PostgreSQL behind a transaction pooler (PgBouncer in transaction mode, a pool whose
    /// statement cache is off: docs/scaling.md): the URL of a direct connection to the
    /// same database, past the pooler, on which the worker LISTENs for new jobs and
    /// cancels. A LISTEN through the pooler would stay on a server that goes to other
    /// clients, so without this a worker behind a pooler does not listen: it polls every
    /// [`poll_interval`](Self::poll_interval) (200 ms by default there) and sees another
    /// process's cancel at its next heartbeat. A worker on a direct pool listens on a
    /// connection of its pool and needs none. The URL may list the hosts of a replicated
    /// cluster (`postgres://app@db-1:5432,db-2:5432/app`): the listener connects to the
    /// one that takes writes, and connects again when the pool's primary moves.
    ///
    /// ```no_run
    /// # async fn f() -> sk_runtime::Result<()> {
    /// use sqlx::postgres::PgPoolOptions;
    ///
    /// // Statements through PgBouncer (port 6432), LISTEN straight to PostgreSQL.
    /// let pool = PgPoolOptions::new()
    ///     .connect_lazy("postgres://app@pgbouncer:6432/app?statement-cache-capacity=0")?;
    /// let worker = sk_runtime::Worker::builder(pool)
    ///     .listen_on("postgres://app@db:5432/app")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn listen_on(mut self, url: impl Into<String>) -> Self {
        self.config.listen_on = Some(url.into());
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
    ///
    /// A retention of zero keeps no history of successes, as graphile_worker and Sidekiq
    /// keep none: a job that succeeded without output leaves the queue table and writes
    /// no results row (on PostgreSQL 29 % less WAL a job and 2 to 6 % more jobs a second,
    /// on MariaDB 15 % more, on SQLite 27 %; docs/performance.md). [`Client::job`](crate::Client::job) then
    /// finds nothing for it, and [`Client::wait`](crate::Client::wait) reports
    /// [`Error::JobNotFound`](crate::Error::JobNotFound) unless it was waiting already
    /// (PostgreSQL with LISTEN); the run counts and run times per minute still count it.
    /// A success with output, of a job with a unique key, a rerun or next run, or in a
    /// workflow, is recorded as before, and so is every failure and cancellation; the
    /// upkeep then deletes them past the retention, at once.
    pub fn result_retention(mut self, keep: Duration) -> Self {
        self.config.result_retention = keep;
        self
    }

    /// The span of posting time each results partition covers (default 1 day; whole
    /// minutes from 1 hour to 366 days), aligned to whole spans since a Monday at 00:00
    /// UTC: daily partitions start at midnight, weekly ones on Monday as seed 002's weeks
    /// do (another day with [`results_week_start`](Self::results_week_start)).
    /// Maintenance keeps partitions two spans ahead; a change applies to the partitions
    /// created from then on.
    pub fn results_partition(mut self, span: Duration) -> Self {
        self.config.results_partition = span;
        self
    }

    /// The day of the week results partitions of a week (or several) start on, at 00:00
    /// UTC (default Monday).
    pub fn results_week_start(mut self, day: chrono::Weekday) -> Self {
        self.config.results_week_start = day;
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

    /// The keys this worker opens sealed arguments (`#[job(encrypted)]`) with, instead of
    /// the process's ([`set_payload_keys`](crate::set_payload_keys)). A job whose key it
    /// lacks fails for good, naming the key.
    pub fn payload_keys(mut self, keys: crate::PayloadKeys) -> Self {
        self.config.payload_keys = Some(Arc::new(keys));
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
        #[cfg(feature = "postgres")]
        let on_postgres = matches!(self.pool, crate::Pool::Postgres(_));
        #[cfg(not(feature = "postgres"))]
        let on_postgres = false;
        if c.publish_events && !on_postgres {
            return Err(Error::invalid(
                "events",
                "publishing job events to other processes needs PostgreSQL's LISTEN/NOTIFY; elsewhere subscribe in the worker's process (Worker::subscribe)",
            ));
        }
        if let Some(url) = &c.listen_on {
            #[cfg(feature = "postgres")]
            // One URL, or a host list as `primary_pool` takes.
            let parsed = crate::store::postgres::primary::Hosts::parse(url)
                .map(|_| ())
                .map_err(|e| e.to_string());
            #[cfg(not(feature = "postgres"))]
            let parsed: std::result::Result<(), String> = Err(String::new());
            if !on_postgres {
                return Err(Error::invalid(
                    "listen_on",
                    "only PostgreSQL listens for notifications",
                ));
            }
            if let Err(e) = parsed {
                return Err(Error::invalid(
                    "listen_on",
                    format!(
                        "{:?} is not a PostgreSQL URL: {e}",
                        crate::store::without_password(url)
                    ),
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
        if let Some(bound) = self.call_timeout {
            if bound.is_zero() || bound >= c.lease {
                return Err(Error::invalid(
                    "call timeout",
                    format!(
                        "{} must be longer than zero and shorter than the lease ({}): a heartbeat that waits longer lets the lease run out",
                        humantime::format_duration(bound),
                        humantime::format_duration(c.lease)
                    ),
                ));
            }
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
        let mut rate_limits = Vec::with_capacity(self.rate_limits.len());
        for (queue, count, window) in self.rate_limits {
            crate::model::check_name("queue name", &queue)?;
            if rate_limits.iter().any(|(q, _)| *q == queue) {
                return Err(Error::invalid(
                    "rate limit",
                    format!("queue {queue:?} is given twice"),
                ));
            }
            let limit = crate::model::RateLimit::new(count, window)?;
            rate_limits.push((queue, limit));
        }
        for (i, queue) in self.config.fair.iter().enumerate() {
            crate::model::check_name("queue name", queue)?;
            if self.config.fair[..i].contains(queue) {
                return Err(Error::invalid(
                    "fair queue",
                    format!("queue {queue:?} is given twice"),
                ));
            }
            if queues.as_ref().is_some_and(|all| !all.contains(queue)) {
                return Err(Error::invalid(
                    "fair queue",
                    format!("this worker does not take jobs from queue {queue:?}: add it with `queues` or `queue`"),
                ));
            }
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
        if let Some(task_type) = self.layers.typed().find(|t| !registry.jobs.contains_key(t)) {
            return Err(Error::invalid(
                "layer",
                format!("this worker does not run job type {task_type:?}: `layer_for` names one it runs"),
            ));
        }
        let stacks = registry
            .jobs
            .keys()
            .map(|t| (*t, self.layers.stack(t)))
            .filter(|(_, stack)| !stack.is_empty())
            .collect();
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
        if let Some(bound) = self.call_timeout {
            config.bounds = crate::store::bound::Bounds {
                call: bound,
                upkeep: crate::store::bound::UPKEEP_TIMEOUT.max(bound),
            };
        }
        config.rate_limits = rate_limits;
        let runtime = Arc::new(crate::job::Runtime {
            pool: self.pool.clone(),
            schema: self.schema.clone(),
        });
        Ok(Worker {
            shared: Arc::new(Shared {
                runtime,
                store: self.pool.store(self.schema, id, config.bounds),
                task_types: registry.task_types(),
                registry,
                stacks,
                events: super::events::Sender::default(),
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
                posted: AtomicBool::new(false),
                running: Mutex::new(HashMap::new()),
                failure_log: Mutex::default(),
                stopping: CancellationToken::new(),
                jobs_cancel: CancellationToken::new(),
                span: std::sync::OnceLock::new(),
                metrics: Metrics::default(),
            }),
        })
    }
}
