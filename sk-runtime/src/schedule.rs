//! Cron schedules: each worker enqueues every tick of its scheduled jobs with a unique key
//! (`task_type@tick`), so a tick runs once however many workers run.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::registry::{Registration, Registry};
use crate::store::{postgres, NewJob};
use crate::worker::Shared;

/// Ticks further behind than this many are skipped: only the latest missed tick runs.
const MAX_CATCH_UP: usize = 1000;

pub(crate) struct Schedules(Vec<(&'static Registration, cron::Schedule)>);

impl Schedules {
    pub(crate) fn new(registry: &Registry) -> Result<Self> {
        let mut all = Vec::new();
        for registration in registry.jobs.values() {
            if let Some(expr) = registration.schedule {
                let schedule = parse(expr).map_err(|reason| {
                    Error::invalid(
                        "cron schedule",
                        format!("job `{}`: {reason}", registration.task_type),
                    )
                })?;
                all.push((*registration, schedule));
            }
        }
        all.sort_by_key(|(r, _)| r.task_type);
        Ok(Schedules(all))
    }
}

/// Parses a 5-field (minutes), 6-field (seconds first) or 7-field (with years) expression.
pub(crate) fn parse(expr: &str) -> std::result::Result<cron::Schedule, String> {
    let normalized = match expr.split_whitespace().count() {
        5 => format!("0 {}", expr.trim()),
        6 | 7 => expr.trim().to_owned(),
        n => return Err(format!("{expr:?} has {n} fields; expected 5, 6 or 7")),
    };
    cron::Schedule::from_str(&normalized).map_err(|e| format!("{expr:?} does not parse: {e}"))
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

pub(crate) async fn run(shared: Arc<Shared>, start: DateTime<Utc>) {
    let schedules = &shared.schedules.0;
    if schedules.is_empty() {
        return;
    }
    let mut last: Vec<DateTime<Utc>> = vec![start; schedules.len()];
    loop {
        let now = shared.now();
        let mut wait = shared.config.poll_interval;
        for ((registration, schedule), last) in schedules.iter().zip(last.iter_mut()) {
            if let Some(tick) = latest_due(schedule, *last, now) {
                match enqueue(&shared, registration, tick, now).await {
                    // A failed enqueue is retried on the next pass; the unique key keeps
                    // the tick single even if the first attempt did commit.
                    Err(e) => {
                        tracing::warn!(task_type = registration.task_type, %tick, "sk: cannot enqueue scheduled tick: {e}")
                    }
                    Ok(new) => {
                        if new {
                            tracing::info!(task_type = registration.task_type, %tick, "sk: enqueued scheduled job");
                        }
                        *last = tick;
                    }
                }
            }
            if let Some(next) = schedule.after(last).next() {
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
    registration: &Registration,
    tick: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool> {
    let options = &registration.options;
    let job = NewJob {
        id: Uuid::now_v7(),
        task_type: registration.task_type,
        source: "sk-scheduler".to_owned(),
        // Scheduled fns take no payload arguments (checked by #[job]).
        payload: "{}".to_owned(),
        queue: options.queue.to_owned(),
        priority: options.priority,
        run_at: tick,
        max_attempts: options.max_attempts,
        unique_key: Some(format!("{}@{}", registration.task_type, tick.to_rfc3339())),
    };
    let id = postgres::enqueue_one(&shared.store.pool, &shared.store.schema, job, now).await?;
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
        assert!(parse("0 0 25 * * *")
            .unwrap_err()
            .contains("does not parse"));
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
}
