//! Cron schedules: each worker enqueues every tick of its scheduled jobs with a unique key
//! (`task_type@tick`), so a tick runs once however many workers run. Schedules come from
//! the code (`#[job(schedule)]`, `WorkerBuilder::periodic`) or from the database
//! ([`StoredSchedules`]), in UTC or a time zone (`CRON_TZ=<zone>`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::job::JobOptions;
use crate::registry::{Registration, Registry};
use crate::store::NewJob;
use crate::worker::Shared;

mod cron;
mod stored;

#[cfg(fuzzing)]
pub use cron::fuzz_ticks;
use cron::{fnv1a, latest_due, parse, tick_id, Cron};
use stored::load_stored;
pub use stored::{StoredSchedule, StoredSchedules};

/// One scheduled job: what to enqueue at each tick.
#[derive(Clone)]
struct Entry {
    task_type: &'static str,
    payload: String,
    options: JobOptions,
    schedule: Cron,
    /// The unique key is `{key_prefix}@{tick}`.
    key_prefix: String,
    /// Whether a tick may start while the last one is still live.
    overlap: bool,
    /// Whether the latest tick before the worker started is run (once across workers).
    run_missed: bool,
    /// A stored schedule's name and update time, as read (`StoredSchedules`).
    stored: Option<(String, DateTime<Utc>)>,
}

/// A periodic job given at run time with
/// [`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic).
pub(crate) struct Periodic {
    pub(crate) cron: String,
    pub(crate) task_type: &'static str,
    pub(crate) payload: std::result::Result<String, serde_json::Error>,
    pub(crate) options: JobOptions,
}

pub(crate) struct Schedules(Vec<Entry>);

impl Schedules {
    pub(crate) fn new(registry: &Registry, periodic: Vec<Periodic>) -> Result<Self> {
        let mut all = Vec::new();
        let mut registered: Vec<&Registration> = registry.jobs.values().copied().collect();
        registered.sort_by_key(|r| r.task_type);
        for registration in registered {
            let Some(expr) = registration.schedule else {
                continue;
            };
            let schedule = parse(expr).map_err(|reason| {
                Error::invalid(
                    "cron schedule",
                    format!("job `{}`: {reason}", registration.task_type),
                )
            })?;
            all.push(Entry {
                task_type: registration.task_type,
                // Scheduled fns take no payload arguments (checked by #[job]).
                payload: "{}".to_owned(),
                options: registration.options,
                schedule,
                key_prefix: registration.task_type.to_owned(),
                overlap: registration.overlap,
                run_missed: registration.run_missed,
                stored: None,
            });
        }
        for p in periodic {
            let schedule = parse(&p.cron).map_err(|reason| {
                Error::invalid(
                    "cron schedule",
                    format!("periodic job `{}`: {reason}", p.task_type),
                )
            })?;
            let payload = p.payload.map_err(|source| Error::Serialize {
                task_type: p.task_type,
                source,
            })?;
            // Two periodic entries of one type differ by payload; so do their keys.
            let key_prefix = format!("{}#{:016x}", p.task_type, fnv1a(payload.as_bytes()));
            all.push(Entry {
                task_type: p.task_type,
                payload,
                options: p.options,
                schedule,
                key_prefix,
                overlap: false,
                run_missed: false,
                stored: None,
            });
        }
        Ok(Schedules(all))
    }
}

/// Posts the first run of each `#[job(every = "...")]` job this worker runs, unless one is
/// live already (its unique key, mode skip, holds it once across all workers); each run's
/// outcome posts the next (migration 4). Retried until it succeeds or the worker stops.
pub(crate) async fn start_periodic(shared: &Shared) {
    let mut every: Vec<&Registration> = shared
        .registry
        .jobs
        .values()
        .copied()
        .filter(|r| r.every.is_some())
        .collect();
    every.sort_by_key(|r| r.task_type);
    for registration in every {
        let mut failures = 0;
        loop {
            match post_periodic(shared, registration).await {
                Ok(()) => break,
                Err(e) => {
                    failures += 1;
                    let wait = crate::retry::database_backoff(failures);
                    tracing::warn!(task_type = registration.task_type, "sk: cannot post the periodic job (attempt {failures}), retrying in {}: {e}", crate::clock::shown(wait));
                    if !shared.pause(wait).await {
                        return;
                    }
                }
            }
        }
    }
}

async fn post_periodic(shared: &Shared, registration: &Registration) -> Result<()> {
    let now = shared.now();
    let period = registration
        .every
        .expect("only periodic jobs are posted here");
    let job = NewJob {
        id: Uuid::now_v7(),
        task_type: registration.task_type.into(),
        source: "sk-scheduler".to_owned(),
        // Periodic fns take no payload arguments (checked by #[job]).
        payload: "{}".to_owned(),
        queue: registration.options.queue.to_owned(),
        priority: registration.options.priority,
        run_at: now,
        max_attempts: registration.options.max_attempts,
        unique_key: Some(format!("sk-every:{}", registration.task_type)),
        unique_mode: Some(crate::model::UniqueMode::Skip),
        tenant: None,
        correlation_id: None,
        metadata: None,
        // Negative: the period runs from when each run was due (`after = "due"`), the time
        // in its id (`clock::next_run`).
        every_ms: Some({
            let ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1);
            if registration.every_after_due {
                -ms
            } else {
                ms
            }
        }),
        timeout_ms: None,
    };
    shared
        .store
        .enqueue_unique(job, crate::model::UniqueMode::Skip, now)
        .await?;
    Ok(())
}

/// Enqueues due ticks until the worker stops; `start` is when the worker came up, so only
/// ticks after it count. Stored schedules are read again once per poll interval.
pub(crate) async fn run(shared: Arc<Shared>, start: DateTime<Utc>) {
    start_periodic(&shared).await;
    // Ticks count from the start; an entry that runs its missed tick counts from just
    // before the latest tick at or before the start (its unique key keeps it once, also
    // when it ran before the worker stopped). Each entry with the last tick it handled.
    let mut entries: Vec<(Entry, DateTime<Utc>)> = shared
        .schedules
        .0
        .iter()
        .map(|entry| {
            let latest = entry
                .run_missed
                .then(|| entry.schedule.at_or_before(start))
                .flatten();
            let last = latest.map_or(start, |tick| tick - chrono::Duration::milliseconds(1));
            (entry.clone(), last)
        })
        .collect();
    let fixed = entries.len();
    let mut loaded: Option<std::time::Instant> = None;
    let mut refused = std::collections::HashSet::new();
    loop {
        if loaded.is_none_or(|at| at.elapsed() >= shared.config.poll_interval) {
            loaded = Some(std::time::Instant::now());
            load_stored(&shared, &mut entries, fixed, start, &mut refused).await;
        }
        let now = shared.now();
        let mut wait = shared.config.poll_interval;
        for (entry, last) in &mut entries {
            if let Some(tick) = latest_due(&entry.schedule, *last, now) {
                match enqueue(&shared, entry, tick, now).await {
                    // Retried on the next pass; the unique key keeps the tick single even
                    // if this attempt did commit.
                    Err(e) => {
                        tracing::warn!(task_type = entry.task_type, %tick, "sk: cannot enqueue scheduled tick: {e}");
                    }
                    Ok(new) => {
                        if new {
                            tracing::info!(task_type = entry.task_type, %tick, "sk: enqueued scheduled job");
                        }
                        *last = tick;
                    }
                }
            }
            if let Some(next) = entry.schedule.after(*last).next() {
                let until = (next - now).to_std().unwrap_or(Duration::ZERO);
                wait = wait.min(until.max(Duration::from_millis(1)));
            }
        }
        if !shared.pause(wait).await {
            return;
        }
    }
}

async fn enqueue(
    shared: &Shared,
    entry: &Entry,
    tick: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool> {
    let key = format!("{}@{}", entry.key_prefix, tick.to_rfc3339());
    let job = NewJob {
        id: tick_id(&key, tick),
        task_type: entry.task_type.into(),
        source: "sk-scheduler".to_owned(),
        payload: entry.payload.clone(),
        queue: entry.options.queue.to_owned(),
        priority: entry.options.priority,
        run_at: tick,
        max_attempts: entry.options.max_attempts,
        unique_key: Some(key),
        unique_mode: None,
        tenant: None,
        correlation_id: None,
        metadata: None,
        every_ms: None,
        timeout_ms: None,
    };
    let live_key = (!entry.overlap).then(|| format!("sk-cron:{}", entry.key_prefix));
    let stored = entry.stored.as_ref().map(|(name, at)| (name.as_str(), *at));
    shared
        .store
        .enqueue_tick(job, live_key.as_deref(), stored, now)
        .await
}
