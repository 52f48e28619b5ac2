//! Rate limits: at most so many job starts per time window, shared by every worker
//! (`Client::set_rate_limit`, `WorkerBuilder::rate_limit`), and the sliding log of starts
//! each limited key keeps (docs/operations.md, "Flow control").

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// The longest window a rate limit may have.
pub const MAX_RATE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// At most `count` job starts in any window of `window`, over every worker: written
/// `"100/1m"`, `"50/1s"`, `"10/500ms"` or `"3/h"` (a count, a slash and a window as
/// `humantime` reads it; a unit alone is one of it).
///
/// The limit holds in every sliding window, not only in fixed ones: after 100 starts at
/// 12:00:30, the next start of `"100/1m"` is at 12:01:30, not at 12:01:00.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RateLimit {
    /// Most starts per window.
    pub count: u32,
    /// The window, from 1 ms to [`MAX_RATE_WINDOW`].
    #[serde(serialize_with = "millis")]
    pub window: Duration,
}

fn millis<S: serde::Serializer>(window: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(window.as_millis()).unwrap_or(u64::MAX))
}

impl RateLimit {
    /// At most `count` starts per `window`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a count of 0 or over `i32::MAX`, or a window under 1 ms or
    /// over [`MAX_RATE_WINDOW`].
    pub fn new(count: u32, window: Duration) -> Result<Self> {
        if count == 0 || i32::try_from(count).is_err() {
            return Err(Error::invalid(
                "rate limit",
                format!("{count} starts is not between 1 and {}", i32::MAX),
            ));
        }
        if window < Duration::from_millis(1) || window > MAX_RATE_WINDOW {
            return Err(Error::invalid(
                "rate limit",
                format!(
                    "a window of {} is not between 1ms and {}",
                    humantime::format_duration(window),
                    humantime::format_duration(MAX_RATE_WINDOW)
                ),
            ));
        }
        Ok(RateLimit {
            count,
            window: Duration::from_millis(u64::try_from(window.as_millis()).unwrap_or(u64::MAX)),
        })
    }

    /// The window in milliseconds, as stored.
    pub(crate) fn window_ms(&self) -> i64 {
        i64::try_from(self.window.as_millis()).unwrap_or(i64::MAX)
    }

    /// The span in microseconds over which the log counts a start: the window and the
    /// [`START_ALLOWANCE`] after it.
    fn window_us(&self) -> i64 {
        let allowance = START_ALLOWANCE.as_micros() as i64;
        self.window_ms()
            .saturating_mul(1000)
            .saturating_add(allowance)
    }
}

/// The most a rate-limited job's handler may start after the claim recorded its start:
/// one that would start later is handed back unstarted, without using an attempt, and
/// the log counts each start over its window and this allowance. So the limit holds on
/// the handlers' own start times in any window of its length, not only on the claims'
/// (the handlers started 10-80 ms after their claim, and up to 65 of a limit of 50 a
/// second started in one sliding second). A limit of 50 a second lets through at most
/// 50 in 1.05 s, about 47.6 a second at its fullest.
pub(crate) const START_ALLOWANCE: Duration = Duration::from_millis(50);

impl FromStr for RateLimit {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(
                "rate limit",
                format!(
                    "{text:?}: {why} (write it as starts/window: \"100/1m\", \"50/1s\", \"3/h\")"
                ),
            )
        };
        let (count, window) = text.split_once('/').ok_or_else(|| bad("no slash"))?;
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| bad("the count is not a whole number"))?;
        let window = window.trim();
        let window = if window.starts_with(|c: char| c.is_ascii_digit()) {
            humantime::parse_duration(window)
        } else {
            humantime::parse_duration(&format!("1{window}"))
        }
        .map_err(|e| bad(&format!("the window: {e}")))?;
        RateLimit::new(count, window)
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.count,
            humantime::format_duration(self.window)
        )
    }
}

/// A rate limit as it stands: the limit, the starts in the window that ends now, and
/// until when an operator or a handler (`JobError::rate_limited`) holds it shut.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RateState {
    /// The limit.
    pub limit: RateLimit,
    /// Jobs started in the window that ends now.
    pub started: u32,
    /// The next time a start is allowed, when none is now.
    pub opens_at: Option<DateTime<Utc>>,
}

/// One tenant of a queue as [`Client::tenants`](crate::Client::tenants) shows it: its
/// live jobs, what it uses of the queue's limits per tenant, and whether they hold it
/// back now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TenantState {
    /// The tenant (`Enqueue::with_tenant`).
    pub tenant: String,
    /// Its jobs that can run now.
    pub available: i64,
    /// Its jobs under a valid lease.
    pub running: i64,
    /// Its starts against the queue's rate limit per tenant, if the queue has one: the
    /// starts of the window that ends now, and when it opens next if it is full or a
    /// handler holds it shut.
    pub rate: Option<RateState>,
    /// What keeps any of its jobs from starting now, if a limit does.
    pub held_by: Option<TenantHold>,
}

/// The limit per tenant that keeps a tenant's jobs from starting now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TenantHold {
    /// It runs as many jobs as the queue's limit per tenant allows
    /// ([`Client::set_tenant_limit`](crate::Client::set_tenant_limit)).
    RunningLimit,
    /// Its window of starts is full, or a handler's
    /// [`JobError::rate_limited`](crate::JobError::rate_limited) holds it shut, until
    /// `rate.opens_at` ([`Client::set_tenant_rate_limit`](crate::Client::set_tenant_rate_limit)).
    RateLimit,
}

/// Most pairs a log keeps: past it, the two closest in time are merged into the later,
/// which counts the earlier's starts a little longer (never shorter), so the limit still
/// holds.
const MAX_ENTRIES: usize = 64;

/// The sliding log of a limited key: `[microseconds since the epoch, starts]` pairs, one
/// per claim that started jobs, oldest first, as stored in `limit_starts`. Microseconds,
/// as the databases keep a job's start: in milliseconds, a start at 0.9 ms and one at
/// 1000.1 ms fell in different windows though 999.2 ms apart.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StartLog(Vec<(i64, u32)>);

impl StartLog {
    /// The stored log; text that is not one reads as full until the window passes from
    /// `now` (a log sk cannot read never lets more through).
    pub(crate) fn parse(text: &str, limit: &RateLimit, now: DateTime<Utc>) -> Self {
        match serde_json::from_str::<Vec<(i64, u32)>>(text) {
            Ok(mut pairs) => {
                pairs.sort_by_key(|p| p.0);
                StartLog(pairs)
            }
            Err(e) => {
                tracing::warn!("sk: a rate limit's log of starts cannot be read ({e}); it counts as full for one window");
                StartLog(vec![(now.timestamp_micros(), limit.count)])
            }
        }
    }

    /// The stored form.
    pub(crate) fn text(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_else(|_| "[]".to_owned())
    }

    /// Starts in the window that ends at `now` (pairs after `now - window`).
    fn started(&self, limit: &RateLimit, now: DateTime<Utc>) -> u32 {
        let from = now.timestamp_micros().saturating_sub(limit.window_us());
        self.0
            .iter()
            .filter(|p| p.0 > from)
            .fold(0u32, |n, p| n.saturating_add(p.1))
    }

    /// How many jobs may start at `now`, given a hold until `held_until`.
    pub(crate) fn room(
        &self,
        limit: &RateLimit,
        held_until: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> u32 {
        if held_until.is_some_and(|at| at > now) {
            return 0;
        }
        limit.count.saturating_sub(self.started(limit, now))
    }

    /// Records `n` starts at `now` and drops the pairs past the window.
    pub(crate) fn record(&mut self, limit: &RateLimit, now: DateTime<Utc>, n: u32) {
        let at = now.timestamp_micros();
        let from = at.saturating_sub(limit.window_us());
        self.0.retain(|p| p.0 > from);
        if n > 0 {
            match self.0.iter_mut().find(|p| p.0 == at) {
                Some(pair) => pair.1 = pair.1.saturating_add(n),
                None => {
                    self.0.push((at, n));
                    self.0.sort_by_key(|p| p.0);
                }
            }
        }
        while self.0.len() > MAX_ENTRIES {
            let closest = (1..self.0.len())
                .min_by_key(|&i| self.0[i].0 - self.0[i - 1].0)
                .unwrap_or(1);
            let earlier = self.0.remove(closest - 1);
            self.0[closest - 1].1 = self.0[closest - 1].1.saturating_add(earlier.1);
        }
    }

    /// When a start is next allowed, if none is at `now`: the end of a hold, or when
    /// enough of the window's starts have left it.
    pub(crate) fn opens_at(
        &self,
        limit: &RateLimit,
        held_until: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let held = held_until.filter(|at| *at > now);
        let mut started = self.started(limit, now);
        let from = now.timestamp_micros().saturating_sub(limit.window_us());
        let mut freed = None;
        for pair in self.0.iter().filter(|p| p.0 > from) {
            if started < limit.count {
                break;
            }
            started = started.saturating_sub(pair.1);
            freed = Some(pair.0.saturating_add(limit.window_us()));
        }
        let freed = freed.and_then(DateTime::from_timestamp_micros);
        match (held, freed) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The limit as it stands at `now`.
    pub(crate) fn state(
        &self,
        limit: RateLimit,
        held_until: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> RateState {
        RateState {
            limit,
            started: self.started(&limit, now),
            opens_at: self.opens_at(&limit, held_until, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    #[test]
    fn a_rate_reads_as_written() {
        let r: RateLimit = "100/1m".parse().unwrap();
        assert_eq!((r.count, r.window), (100, Duration::from_secs(60)));
        assert_eq!(
            "3/h".parse::<RateLimit>().unwrap().window,
            Duration::from_secs(3600)
        );
        assert_eq!("50 / 500ms".parse::<RateLimit>().unwrap().window_ms(), 500);
        assert_eq!(r.to_string(), "100/1m");
        for bad in ["100", "0/1s", "x/1s", "10/0s", "10/8weeks", "10/fortnight"] {
            let e = bad.parse::<RateLimit>().unwrap_err().to_string();
            assert!(e.contains("rate limit"), "{bad}: {e}");
        }
    }

    #[test]
    fn no_sliding_window_holds_more_than_the_count() {
        let limit = RateLimit::new(10, Duration::from_secs(1)).unwrap();
        let mut log = StartLog::default();
        let mut starts = Vec::new();
        // A claim every 70 ms, each taking all the room there is.
        for step in 0..100 {
            let now = at(step * 70);
            let n = log.room(&limit, None, now);
            log.record(&limit, now, n);
            starts.extend(std::iter::repeat_n(step * 70, n as usize));
            assert_eq!(log.room(&limit, None, now), 0);
            let opens = log.opens_at(&limit, None, now).unwrap();
            assert!(opens > now && opens <= now + chrono::Duration::milliseconds(1050));
        }
        for (i, &t) in starts.iter().enumerate() {
            let within = starts[i..].iter().take_while(|&&u| u < t + 1000).count();
            assert!(within <= 10, "{within} starts in the second from {t} ms");
        }
        // And it drains near the limit: ~10 a second over 7 s, less the allowance.
        assert!(starts.len() >= 65, "{} starts", starts.len());
    }

    #[test]
    fn windows_are_counted_to_the_microsecond() {
        let limit = RateLimit::new(1, Duration::from_secs(1)).unwrap();
        let mut log = StartLog::default();
        let start = at(0) + chrono::Duration::microseconds(900);
        log.record(&limit, start, 1);
        let almost = at(1000) + chrono::Duration::microseconds(100);
        assert_eq!(
            log.room(&limit, None, almost),
            0,
            "999.2 ms after the start"
        );
        let counted =
            chrono::Duration::seconds(1) + chrono::Duration::from_std(START_ALLOWANCE).unwrap();
        assert_eq!(log.opens_at(&limit, None, almost), Some(start + counted));
        assert_eq!(
            log.room(
                &limit,
                None,
                start + counted - chrono::Duration::microseconds(1)
            ),
            0,
            "a start is counted past its window by the allowance"
        );
        assert_eq!(log.room(&limit, None, start + counted), 1);
    }

    #[test]
    fn a_full_log_merges_forward_and_a_hold_shuts_it() {
        let limit = RateLimit::new(1000, Duration::from_secs(60)).unwrap();
        let mut log = StartLog::default();
        for i in 0..200 {
            log.record(&limit, at(i * 10), 1);
        }
        assert_eq!(log.0.len(), MAX_ENTRIES);
        assert_eq!(log.started(&limit, at(2000)), 200);
        assert!(log.0.last().unwrap().0 == at(1990).timestamp_micros());
        assert_eq!(log.room(&limit, Some(at(5000)), at(2000)), 0);
        assert_eq!(
            log.opens_at(&limit, Some(at(5000)), at(2000)),
            Some(at(5000))
        );
        let reread = StartLog::parse(&log.text(), &limit, at(0));
        assert_eq!(reread, log);
        let unreadable = StartLog::parse("{", &limit, at(0));
        assert_eq!(unreadable.room(&limit, None, at(60_049)), 0);
        assert_eq!(unreadable.room(&limit, None, at(60_050)), 1000);
    }
}
