//! The one clock every query takes `now` from, so tests can control time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SubsecRound as _, Utc};

/// A source of "now". Every time comparison in the store uses this, never the database's
/// own `now()`.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told; clones share the same time. For tests of delays,
/// backoff and schedules without sleeping.
///
/// ```
/// use sk_runtime::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(chrono::Utc::now());
/// let before = clock.now();
/// clock.advance(Duration::from_secs(60));
/// assert_eq!((clock.now() - before).num_seconds(), 60);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock standing at `start`, truncated to microseconds (the store's precision), so
    /// times read back from the tables compare equal to the clock's.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(Mutex::new(start.trunc_subsecs(6))))
    }

    /// Moves the clock forward.
    ///
    /// # Panics
    /// If `by` does not fit a `chrono::Duration`.
    pub fn advance(&self, by: Duration) {
        let by = chrono::Duration::from_std(by).expect("an advance of less than 292 years");
        *self.lock() += by;
    }

    /// Sets the clock to `at`.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.lock() = at;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // A poisoned lock still holds a valid time.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }
}

pub(crate) type SharedClock = Arc<dyn Clock>;

/// The latest time sk stores, 9999-12-31T23:59:59.999999Z: where MySQL's `DATETIME`
/// ends, and the last that SQLite's text times sort by (a later year takes a `+` and
/// sorts before every other).
pub(crate) const LATEST: DateTime<Utc> =
    match DateTime::from_timestamp(253_402_300_799, 999_999_000) {
        Some(at) => at,
        None => DateTime::<Utc>::MAX_UTC,
    };

/// `at` if sk can store it; an `Error::Invalid` about `what` if it is after [`LATEST`].
pub(crate) fn storable(what: &'static str, at: DateTime<Utc>) -> crate::Result<DateTime<Utc>> {
    if at > LATEST {
        return Err(crate::Error::invalid(
            what,
            format!(
                "{at} is after {LATEST}, the latest time sk stores (where MySQL's DATETIME ends); a delay (run_after, a snooze) that ends later waits until then"
            ),
        ));
    }
    Ok(at)
}

/// `at + d`, held at [`LATEST`]: a delay past it (a snooze or a backoff of centuries, a
/// `run_after(Duration::MAX)`) waits until then, which no claim reaches.
pub(crate) fn add(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .map_or(LATEST, |t| t.min(LATEST))
}

/// The longest period sk keeps (about 10,000 years, in ms): a longer one waits as long.
pub(crate) const PERIOD_CAP_MS: i64 = 315_569_520_000_000;

/// A UUIDv7 of `at`: the id of a rerun or a periodic job's next run (its time prefix is
/// when a fixed-rate run is due, [`next_run`]).
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn uuid_v7(at: DateTime<Utc>) -> uuid::Uuid {
    let secs = u64::try_from(at.timestamp()).unwrap_or(0);
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        secs,
        at.timestamp_subsec_nanos(),
    ))
}

/// When the run after periodic job `id` is due, its outcome recorded at `now`, and that
/// run's id. `every_ms` is the stored period: positive, it runs from `now` (`after =
/// "end"`); negative, from when this run was due (`after = "due"`, seed 003's
/// `next_run_time + period`), the time in its id. A slot already past (a run longer than
/// the period) is due at once, and of several past slots only the latest: one catch-up
/// run, never a burst. (PostgreSQL does the same in SQL: `store::postgres::sql`.)
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn next_run(
    id: uuid::Uuid,
    every_ms: i64,
    now: DateTime<Utc>,
) -> (uuid::Uuid, DateTime<Utc>) {
    if every_ms >= 0 {
        return (uuid_v7(now), add_millis(now, every_ms));
    }
    let period = every_ms.saturating_neg().min(PERIOD_CAP_MS);
    let due = id.get_timestamp().map_or(now.timestamp_millis(), |t| {
        let (secs, nanos) = t.to_unix();
        i64::try_from(secs).unwrap_or(0) * 1000 + i64::from(nanos / 1_000_000)
    });
    let behind = (now.timestamp_millis() - due) / period;
    let next = DateTime::from_timestamp_millis(due + behind.max(1) * period)
        .map_or(LATEST, |t| t.min(LATEST));
    (uuid_v7(next), next)
}

/// `at` plus `ms` milliseconds (a stored period; a negative one counts as none), as [`add`].
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn add_millis(at: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
    add(at, Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// A wait as a log line says it: `250 ms`, `1.5 s`, `2m 30s`, not `1.494345258s`.
pub(crate) fn shown(d: std::time::Duration) -> String {
    if d < std::time::Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d < std::time::Duration::from_secs(60) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        humantime::format_duration(std::time::Duration::from_secs(d.as_secs())).to_string()
    }
}

#[cfg(test)]
#[test]
fn a_wait_is_shown_rounded() {
    use std::time::Duration;
    assert_eq!(shown(Duration::from_nanos(250_400_000)), "250 ms");
    assert_eq!(shown(Duration::from_nanos(1_494_345_258)), "1.5 s");
    assert_eq!(shown(Duration::from_millis(150_700)), "2m 30s");
}

#[cfg(all(test, any(feature = "sqlite", feature = "mysql")))]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).expect("a time in range")
    }

    #[test]
    fn a_periodic_jobs_next_run_counts_from_its_end_or_its_slot() {
        let due = 1_800_000_000_000;
        let id = uuid_v7(at(due));
        // After the end: the period from the outcome.
        assert_eq!(next_run(id, 1000, at(due + 400)).1, at(due + 1400));
        // After the due time: the next slot, whenever the run ended within its period.
        let (next, when) = next_run(id, -1000, at(due + 400));
        assert_eq!(when, at(due + 1000));
        assert_eq!(
            next.get_timestamp().unwrap().to_unix(),
            (1_800_000_001, 0),
            "the next run's id holds its slot"
        );
        // A run past its slot: the latest passed slot, due at once; older ones skipped.
        assert_eq!(next_run(id, -1000, at(due + 2500)).1, at(due + 2000));
        assert_eq!(
            next_run(id, -1000, at(due + 3_600_000)).1,
            at(due + 3_600_000)
        );
        // An outcome before its own slot (a clock behind) still waits a period.
        assert_eq!(next_run(id, -1000, at(due - 50)).1, at(due + 1000));
        // A period past what sk stores waits until the last time it stores.
        assert_eq!(next_run(id, i64::MIN, at(due)).1, LATEST);
    }
}
