//! Cron schedules: each worker enqueues every tick of its scheduled jobs with a unique key
//! (`task_type@tick`), so a tick runs once however many workers run.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::job::JobOptions;
use crate::registry::{Registration, Registry};
use crate::store::{postgres, NewJob};
use crate::worker::Shared;

/// Ticks further behind than this many are skipped: only the latest missed tick runs.
const MAX_CATCH_UP: usize = 1000;

/// One scheduled job: what to enqueue at each tick.
struct Entry {
    task_type: &'static str,
    payload: String,
    options: JobOptions,
    schedule: cron::Schedule,
    /// The unique key is `{key_prefix}@{tick}`.
    key_prefix: String,
    /// Whether a tick may start while the last one is still live.
    overlap: bool,
    /// Whether the latest tick before the worker started is run (once across workers).
    run_missed: bool,
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
            });
        }
        Ok(Schedules(all))
    }
}

/// A stable hash (unlike `DefaultHasher`, the same in every process and version).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The id of the tick with unique key `key`: a UUIDv7 of the tick's time whose other bits
/// come from the key, so every worker posts the tick under the same id and the results
/// table's primary key keeps it once (migration 5), in the partition of the tick's time.
fn tick_id(key: &str, tick: DateTime<Utc>) -> Uuid {
    let mut bits = [0; 10];
    bits[..8].copy_from_slice(&fnv1a(key.as_bytes()).to_be_bytes());
    bits[8..].copy_from_slice(&fnv1a(key.as_bytes()).rotate_left(32).to_le_bytes()[..2]);
    let millis = u64::try_from(tick.timestamp_millis()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &bits).into_uuid()
}

/// Parses a 5-field (minutes), 6-field (seconds first) or 7-field (with years) expression.
pub(crate) fn parse(expr: &str) -> std::result::Result<cron::Schedule, String> {
    let normalized = match expr.split_whitespace().count() {
        5 => format!("0 {}", expr.trim()),
        6 | 7 => expr.trim().to_owned(),
        n => return Err(format!("{expr:?} has {n} fields; expected 5, 6 or 7")),
    };
    cron::Schedule::from_str(&normalized).map_err(|e| {
        // The parser's message repeats the input with a caret; keep only its reason line.
        let text = e.to_string();
        let reason = text
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or_default()
            .to_owned();
        format!("{expr:?} does not parse: {reason}")
    })
}

/// The latest tick in `(after, now]`, if any.
fn latest_due(
    schedule: &cron::Schedule,
    after: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let mut latest = None;
    for (n, tick) in schedule.after(&after).enumerate() {
        if tick > now {
            return latest;
        }
        if n >= MAX_CATCH_UP {
            // Far behind (a clock jump): take the last tick before now directly.
            return schedule
                .after(&now)
                .next_back()
                .filter(|t| *t > after)
                .or(Some(tick));
        }
        latest = Some(tick);
    }
    latest
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
                    let wait = crate::worker::backoff(failures);
                    tracing::warn!(task_type = registration.task_type, "sk: cannot post the periodic job (attempt {failures}), retrying in {wait:?}: {e}");
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
        task_type: registration.task_type,
        source: "sk-scheduler".to_owned(),
        // Periodic fns take no payload arguments (checked by #[job]).
        payload: "{}".to_owned(),
        queue: registration.options.queue.to_owned(),
        priority: registration.options.priority,
        run_at: now,
        max_attempts: registration.options.max_attempts,
        unique_key: Some(format!("sk-every:{}", registration.task_type)),
        unique_mode: Some(crate::client::UniqueMode::Skip),
        tenant: None,
        correlation_id: None,
        metadata: None,
        every_ms: Some(i64::try_from(period.as_millis()).unwrap_or(i64::MAX)),
    };
    let mut conn = shared.store.acquire().await?;
    postgres::enqueue_unique(
        &mut *conn,
        &shared.store.schema,
        job,
        crate::client::UniqueMode::Skip,
        now,
    )
    .await?;
    Ok(())
}

/// Enqueues due ticks until the worker stops; `start` is when the worker came up, so only
/// ticks after it count.
pub(crate) async fn run(shared: Arc<Shared>, start: DateTime<Utc>) {
    start_periodic(&shared).await;
    let entries = &shared.schedules.0;
    if entries.is_empty() {
        return;
    }
    // Ticks count from the start; an entry that runs its missed tick counts from just
    // before the latest tick at or before the start (its unique key keeps it once, also
    // when it ran before the worker stopped).
    let mut last: Vec<DateTime<Utc>> = entries
        .iter()
        .map(|entry| {
            let latest = entry
                .run_missed
                .then(|| entry.schedule.after(&start).next_back())
                .flatten();
            latest.map_or(start, |tick| tick - chrono::Duration::milliseconds(1))
        })
        .collect();
    loop {
        let now = shared.now();
        let mut wait = shared.config.poll_interval;
        for (entry, last) in entries.iter().zip(last.iter_mut()) {
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
            if let Some(next) = entry.schedule.after(last).next() {
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
        task_type: entry.task_type,
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
    };
    let mut conn = shared.store.acquire().await?;
    let id = if entry.overlap {
        postgres::enqueue_one(&mut *conn, &shared.store.schema, job, now).await?
    } else {
        let live_key = format!("sk-cron:{}", entry.key_prefix);
        postgres::enqueue_tick(&mut *conn, &shared.store.schema, job, &live_key, now).await?
    };
    Ok(id.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, h, m, s)
            .single()
            .expect("a valid time")
    }

    #[test]
    fn five_six_and_seven_fields() {
        assert!(parse("*/5 * * * *").is_ok());
        assert!(parse("0 0 3 * * *").is_ok());
        assert!(parse("0 0 3 * * * 2030").is_ok());
        assert_eq!(
            parse("0 0 25 * * *").unwrap_err(),
            "\"0 0 25 * * *\" does not parse: Hours must be less than 23. ('25' specified.)"
        );
        assert!(parse("hourly").unwrap_err().contains("expected 5, 6 or 7"));
    }

    #[test]
    fn latest_due_takes_only_the_newest_missed_tick() {
        let every_minute = parse("* * * * *").expect("valid");
        assert_eq!(latest_due(&every_minute, at(3, 0, 0), at(3, 0, 59)), None);
        assert_eq!(
            latest_due(&every_minute, at(3, 0, 0), at(3, 1, 0)),
            Some(at(3, 1, 0))
        );
        assert_eq!(
            latest_due(&every_minute, at(3, 0, 0), at(3, 5, 30)),
            Some(at(3, 5, 0))
        );
        let every_second = parse("* * * * * *").expect("valid");
        assert_eq!(
            latest_due(&every_second, at(0, 0, 0), at(5, 0, 0)),
            Some(at(4, 59, 59))
        );
    }

    #[test]
    fn the_tick_before_a_time_is_found_backwards() {
        let hourly = parse("0 0 * * * *").expect("valid");
        assert_eq!(hourly.after(&at(10, 30, 0)).next_back(), Some(at(10, 0, 0)));
        assert_eq!(
            latest_due(
                &hourly,
                at(10, 0, 0) - chrono::Duration::milliseconds(1),
                at(10, 30, 0)
            ),
            Some(at(10, 0, 0))
        );
    }

    #[test]
    fn a_tick_has_one_id_in_the_partition_of_its_time() {
        let tick = at(3, 0, 0);
        let id = tick_id("report@2026-01-01T03:00:00+00:00", tick);
        assert_eq!(id, tick_id("report@2026-01-01T03:00:00+00:00", tick));
        assert_ne!(id, tick_id("other@2026-01-01T03:00:00+00:00", tick));
        assert_eq!(id.get_version_num(), 7);
        let (secs, _) = id.get_timestamp().expect("a v7 id").to_unix();
        assert_eq!(i64::try_from(secs).unwrap(), tick.timestamp());
    }

    #[test]
    fn periodic_keys_are_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(
            fnv1a(b"{\"kind\":\"weekly\"}"),
            fnv1a(b"{\"kind\":\"weekly\"}")
        );
        assert_ne!(
            fnv1a(b"{\"kind\":\"weekly\"}"),
            fnv1a(b"{\"kind\":\"daily\"}")
        );
    }
}
