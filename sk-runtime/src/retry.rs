//! How long a job waits before its next attempt.

use std::time::Duration;

use crate::error::JobError;

const DEFAULT_BASE: Duration = Duration::from_secs(1);
const DEFAULT_MAX: Duration = Duration::from_secs(3600);

/// The delay before retry number `attempt` (1 = the first retry, after the first failure).
///
/// Set with `#[job(backoff = "...", backoff_base = "...", backoff_max = "...")]`; the
/// default is exponential from 1 s, capped at 1 h. The curves are deterministic (no
/// jitter), so a test can assert exact spacing.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Backoff {
    /// `base * 2^(attempt - 1)`, at most `max`.
    Exponential {
        /// The first delay.
        base: Duration,
        /// The cap.
        max: Duration,
    },
    /// `base * attempt`, at most `max`.
    Linear {
        /// The step.
        base: Duration,
        /// The cap.
        max: Duration,
    },
    /// Always the same delay.
    Constant(Duration),
    /// The user's own curve, given the attempt that just failed (1-based).
    Custom(fn(u32) -> Duration),
}

impl Backoff {
    /// Exponential, with the defaults for what is `None` (1 s base, 1 h cap).
    pub const fn exponential(base: Option<Duration>, max: Option<Duration>) -> Self {
        Backoff::Exponential {
            base: or(base, DEFAULT_BASE),
            max: or(max, DEFAULT_MAX),
        }
    }

    /// Linear, with the defaults for what is `None` (1 s step, 1 h cap).
    pub const fn linear(base: Option<Duration>, max: Option<Duration>) -> Self {
        Backoff::Linear {
            base: or(base, DEFAULT_BASE),
            max: or(max, DEFAULT_MAX),
        }
    }

    /// Constant, 1 s unless given.
    pub const fn constant(delay: Option<Duration>) -> Self {
        Backoff::Constant(or(delay, DEFAULT_BASE))
    }

    /// The delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let attempt = attempt.max(1);
        match *self {
            Backoff::Exponential { base, max } => {
                let factor = 2u32.checked_pow(attempt - 1).unwrap_or(u32::MAX);
                base.checked_mul(factor).map_or(max, |d| d.min(max))
            }
            Backoff::Linear { base, max } => base.checked_mul(attempt).map_or(max, |d| d.min(max)),
            Backoff::Constant(d) => d,
            Backoff::Custom(f) => f(attempt),
        }
    }
}

const fn or(value: Option<Duration>, default: Duration) -> Duration {
    match value {
        Some(v) => v,
        None => default,
    }
}

/// 100 ms doubling to 5 s: a worker whose database is down keeps trying without spinning.
pub(crate) fn database_backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(6);
    Duration::from_millis(100 * (1u64 << exp)).min(Duration::from_secs(5))
}

/// Whether a failed run is tried again.
pub(crate) fn retries(error: &JobError, attempt: i32, max_attempts: i32) -> bool {
    !error.fatal && attempt < max_attempts
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn exponential_doubles_up_to_the_cap() {
        let b = Backoff::exponential(Some(S(2)), Some(S(30)));
        let delays: Vec<_> = (1..=6).map(|a| b.delay(a)).collect();
        assert_eq!(delays, [S(2), S(4), S(8), S(16), S(30), S(30)]);
        assert_eq!(b.delay(u32::MAX), S(30));
    }

    #[test]
    fn linear_and_constant() {
        let l = Backoff::linear(Some(S(5)), Some(S(12)));
        assert_eq!([l.delay(1), l.delay(2), l.delay(3)], [S(5), S(10), S(12)]);
        assert_eq!(Backoff::constant(None).delay(9), S(1));
        assert_eq!(Backoff::Custom(|a| S(u64::from(a) * 7)).delay(3), S(21));
    }
}
