//! The worker: a builder, and the pipeline of docs/architecture.md (listener + poll -> producer ->
//! executor -> completer; heartbeat, scheduler and maintenance beside them).

mod builder;
pub(crate) mod completer;
pub(crate) mod events;
pub(crate) mod executor;
mod heartbeat;
mod listener;
mod local;
pub(crate) mod maintenance;
mod producer;
#[cfg(feature = "postgres")]
mod publish;
pub(crate) mod run;
pub(crate) mod schedule;
mod shared;

pub(crate) use builder::Config;
pub use builder::WorkerBuilder;
pub(crate) use shared::{Metrics, RunState, Running, Shared, Slot};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::store::ProbeFailure;

/// Runs jobs of the task types linked into this binary.
pub struct Worker {
    shared: Arc<Shared>,
}

impl Worker {
    /// Starts configuring a worker on `pool`.
    pub fn builder(pool: impl Into<crate::Pool>) -> WorkerBuilder {
        WorkerBuilder::new(pool.into())
    }

    /// This worker's id (`task_locked_by`).
    pub fn id(&self) -> &str {
        self.shared.store.worker_id()
    }

    /// The task types this worker runs.
    pub fn task_types(&self) -> &[String] {
        &self.shared.task_types
    }

    /// What happens to this worker's jobs from now on, as it happens: each run's start,
    /// then its outcome once it is recorded (succeeded, retried, failed for good,
    /// snoozed; cancelled while running). Take it before [`Worker::run`]; any number of
    /// subscribers, each with its own buffer of 4,096 events: one that falls behind
    /// misses the oldest, and its next `recv` says how many (`RecvError::Lagged(n)`).
    /// The events are built only while someone subscribes.
    pub fn subscribe(&self) -> events::JobEvents {
        self.shared.events.subscribe()
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
        let _ = shared.span.set(tracing::Span::current());
        let mut stop = std::pin::pin!(stop);
        tokio::select! {
            ready = wait_for_database(&shared) => ready?,
            () = &mut stop => {
                tracing::info!("sk: stopped while waiting for the database");
                return Ok(());
            }
        }
        let started_at = std::time::Instant::now();
        if shared.config.auto_migrate {
            past_locks(&shared, started_at, "migrate", || shared.store.migrate()).await?;
        }
        past_locks(&shared, started_at, "write its limits", || {
            write_flow_controls(&shared)
        })
        .await?;
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
        let mut heartbeat = tokio::spawn(heartbeat::run(
            shared.clone(),
            background.clone(),
            tx.downgrade(),
        ));
        let listener = tokio::spawn(listener::run(shared.clone()));
        let scheduler = tokio::spawn(crate::worker::schedule::run(shared.clone(), started));
        let maintenance = tokio::spawn(crate::worker::maintenance::run(shared.clone()));
        #[cfg(feature = "postgres")]
        let publisher = shared.config.publish_events.then(|| {
            let events = shared.events.subscribe();
            tokio::spawn(publish::run(shared.clone(), events, background.clone()))
        });

        let mut producer = tokio::spawn(producer::run(shared.clone(), tx.clone()));
        #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
        let mut tasks = vec![
            producer.abort_handle(),
            completer.abort_handle(),
            heartbeat.abort_handle(),
            listener.abort_handle(),
            scheduler.abort_handle(),
            maintenance.abort_handle(),
        ];
        #[cfg(feature = "postgres")]
        tasks.extend(
            publisher
                .as_ref()
                .map(tokio::task::JoinHandle::abort_handle),
        );
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
                Err(e) if e.is_panic() => crate::error::panic_message(&*e.into_panic()),
                Err(e) => e.to_string(),
                Ok(()) => "it returned".to_owned(),
            };
            tracing::error!(worker = %shared.store.worker_id(), "sk: the worker's {task} stopped unexpectedly ({cause}); stopping this worker at once: its jobs run again once their leases run out");
            // No more claims, no more heartbeats, no handler left running: every lease
            // this worker holds runs out on its own.
            shared.stopping.cancel();
            shared.cancel_jobs();
            background.cancel();
            abort_all(&shared, &tasks);
            return Err(crate::Error::WorkerTask { task, cause });
        }
        tracing::info!(worker = %shared.store.worker_id(), "sk: stopping; no more claims");
        // The stop keeps its word whatever the database does: past the grace period and
        // `STOP_SLACK`, what is left is dropped, and the leases of unfinished jobs run out.
        let deadline = tokio::time::Instant::now() + shared.config.grace_period + STOP_SLACK;
        shared.stopping.cancel();
        shared.cancel_jobs();
        let ending = async {
            // The producer returns at its next idle point, never in the middle of a claim,
            // so every job it claimed is known to the running map below.
            let _ = producer.await;
            executor::drain(&shared, &tx, force).await;
            drop(tx);
            // The completer finishes what is queued (retrying the database) before
            // heartbeats stop, so no finished job's lease runs out before its result is
            // written.
            let _ = completer.await;
            background.cancel();
            let _ = tokio::join!(heartbeat, listener, scheduler, maintenance);
            #[cfg(feature = "postgres")]
            if let Some(publisher) = publisher {
                let _ = publisher.await;
            }
            crate::worker::maintenance::write_metrics(&shared, shared.now()).await;
            shared.flush_job_stats().await;
            if let Err(e) = shared.store.worker_down().await {
                tracing::warn!("sk: cannot remove this worker from the workers table: {e}");
            }
        };
        if tokio::time::timeout_at(deadline, ending).await.is_err() {
            let left = shared.running().len();
            tracing::error!(
                worker = %shared.store.worker_id(),
                jobs = left,
                "sk: the stop's deadline ({} of grace period) passed while calls to the database at {} were unfinished; stopping now: the leases of the {left} jobs left run out, then they run again",
                crate::clock::shown(shared.config.grace_period),
                shared.store.address()
            );
            abort_all(&shared, &tasks);
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

/// Aborts the worker's `tasks` and every job's run: no claim, heartbeat or handler goes
/// on, and the leases this worker holds run out on their own.
fn abort_all(shared: &Shared, tasks: &[tokio::task::AbortHandle]) {
    for task in tasks {
        task.abort();
    }
    for entry in shared.running().values() {
        if let Some(abort) = &entry.abort {
            abort.abort();
        }
    }
}

/// How long past its grace period a stop may take to write what it has and leave.
const STOP_SLACK: std::time::Duration = std::time::Duration::from_millis(800);

/// Writes the rate limits of this worker's queues (`WorkerBuilder::rate_limit`) and job
/// types (`#[job(rate = "...")]`), and its fair queues (`WorkerBuilder::fair`), so every
/// worker shares them.
async fn write_flow_controls(shared: &Shared) -> Result<()> {
    use crate::store::rates::{QUEUE, TYPE};
    let runtime = &shared.runtime;
    let mut limits: Vec<(&'static str, &str, crate::model::RateLimit)> = shared
        .config
        .rate_limits
        .iter()
        .map(|(queue, limit)| (QUEUE, queue.as_str(), *limit))
        .collect();
    for registration in shared.registry.jobs.values() {
        if let Some((count, window)) = registration.rate {
            let limit = crate::model::RateLimit::new(count, window)?;
            limits.push((TYPE, registration.task_type, limit));
        }
    }
    for (scope, name, limit) in limits {
        runtime
            .pool
            .set_rate_limit(&runtime.schema, scope, name, Some(limit), shared.now())
            .await?;
    }
    for queue in &shared.config.fair {
        let fair = crate::store::QueueFlag::Fair;
        runtime
            .pool
            .set_queue_flag(&runtime.schema, fair, queue, true, shared.now())
            .await?;
    }
    Ok(())
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
            fair: None,
            tenant_capped: false,
            untenanted: false,
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
    executor::admit(shared, vec![(job, None)], (lease_until, None), false, &tx);
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

/// The queues `task_types` go to by default, by name.
fn default_queues(task_types: &[String]) -> Vec<&'static str> {
    let mut queues: Vec<&'static str> = task_types
        .iter()
        .filter_map(|t| crate::registry::find(t))
        .map(|r| r.options.queue)
        .collect();
    queues.sort_unstable();
    queues.dedup();
    queues
}

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
        default_queues: serde_json::to_string(&default_queues(&shared.task_types))
            .unwrap_or_else(|_| "[]".into()),
        concurrency: i32::try_from(shared.config.concurrency).unwrap_or(i32::MAX),
        heartbeat_ms: shared
            .config
            .heartbeat
            .map_or(0, |h| i64::try_from(h.as_millis()).unwrap_or(i64::MAX)),
        schemas: if shared.config.publish_schemas {
            let mut types: Vec<_> = shared.registry.jobs.values().collect();
            types.sort_by_key(|r| r.task_type);
            types
                .into_iter()
                .map(|r| {
                    (
                        r.task_type.to_owned(),
                        crate::job_schema::describe(r).to_string(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        },
    }
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

/// Runs a step of the start, again while it fails waiting for a lock another connection
/// holds (another process's transaction on SQLite's one file, a migration running
/// elsewhere): within the start timeout from `since`, or for as long as it takes without
/// one, as the start waits for an unreachable database. A restarted worker exited at start
/// with "database is locked" while other processes ran transaction jobs.
async fn past_locks<T, F, Fut>(
    shared: &Shared,
    since: std::time::Instant,
    what: &str,
    mut step: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = shared.config.start_timeout.map(|limit| since + limit);
    let mut failures = 0u32;
    loop {
        let error = match step().await {
            Err(e) if crate::store::lock_wait(&e) => e,
            done => return done,
        };
        failures += 1;
        let now = std::time::Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Err(error);
        }
        let wait = crate::retry::database_backoff(failures);
        let wait = deadline.map_or(wait, |deadline| wait.min(deadline - now));
        tracing::warn!(
            "sk: cannot {what} at start, waiting for a lock another connection holds; retrying in {}: {error}",
            crate::clock::shown(wait)
        );
        tokio::time::sleep(wait).await;
    }
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
            "sk: {error}; retrying in {} (waiting {:.1} s so far)",
            crate::clock::shown(wait),
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
