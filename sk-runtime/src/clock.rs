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

/// `at` plus `ms` milliseconds (a stored period; a negative one counts as none), as [`add`].
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn add_millis(at: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
    add(at, Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}
