//! Cron expressions and their ticks: parsed in UTC or a time zone, in order across clock
//! changes, and each tick's id (a UUIDv7 of its time, made from its key).

use std::str::FromStr;

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Ticks further behind than this many are skipped: only the latest missed tick runs.
const MAX_CATCH_UP: usize = 1000;

/// A cron expression in a time zone: UTC, or the IANA zone a `CRON_TZ=<zone> ` prefix
/// names (the convention of robfig/cron, which River's periodic jobs use), so a job at
/// `CRON_TZ=Europe/Paris 0 8 * * *` runs at 8:00 in Paris in summer and in winter.
#[derive(Clone, Debug)]
pub(crate) struct Cron {
    schedule: cron::Schedule,
    tz: chrono_tz::Tz,
}

impl Cron {
    /// The ticks after `t`, in order.
    pub(super) fn after(&self, t: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        InOrder {
            cron: self,
            inner: self
                .schedule
                .after(&t.with_timezone(&self.tz))
                .filter(|tick| self.once(tick))
                .map(|tick| tick.with_timezone(&Utc)),
            held: std::collections::BinaryHeap::new(),
            reach: t,
            last: None,
            done: false,
        }
    }

    /// The latest tick at or before `t`.
    pub(super) fn at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut back = self
            .schedule
            .after(&t.with_timezone(&self.tz))
            .rev()
            .filter(|tick| self.once(tick))
            .map(|tick| tick.with_timezone(&Utc));
        let first = back.next()?;
        if first <= t && self.calm(first) {
            return Some(first);
        }
        // Near a switch, a tick further back in local time may be later in time, and one
        // the crate gives may be after `t`.
        let mut latest = (first <= t).then_some(first);
        for tick in back {
            if latest.is_some_and(|latest| tick + SWITCH < latest) {
                break;
            }
            if tick <= t {
                latest = latest.max(Some(tick));
            }
        }
        latest
    }

    /// Whether a tick is one this schedule runs: when clocks go back and a local time
    /// shows twice, a schedule with fixed hours runs at the first only (as Vixie cron
    /// does: a job at 2:30 every day runs once that day); one that runs every hour runs
    /// at both.
    fn once(&self, tick: &DateTime<chrono_tz::Tz>) -> bool {
        use chrono::TimeZone;
        use cron::TimeUnitSpec;
        if self.schedule.hours().is_all() {
            return true;
        }
        match self.tz.from_local_datetime(&tick.naive_local()) {
            chrono::LocalResult::Ambiguous(first, _) => first == *tick,
            _ => true,
        }
    }

    /// Whether the zone's offset is the same [`SWITCH`] either side of `tick`: no clock
    /// change near, so local order is time order there.
    fn calm(&self, tick: DateTime<Utc>) -> bool {
        use chrono::Offset;
        let offset = |t: DateTime<Utc>| t.with_timezone(&self.tz).offset().fix();
        offset(tick - SWITCH) == offset(tick + SWITCH)
    }
}

/// Longer than any clock change (the largest in use is 2 hours).
const SWITCH: chrono::Duration = chrono::Duration::hours(3);

/// A schedule's ticks in time order. The cron crate walks local time, and when clocks go
/// back it gives a time that shows twice at both instants before it goes on, so an
/// instant may come after a later one (2:00 CEST, 2:00 CET, 2:30 CEST; found by the cron
/// fuzzer). Near a clock change ticks are held until one more than [`SWITCH`] later has
/// come; elsewhere each goes out as it comes.
struct InOrder<'a, I> {
    cron: &'a Cron,
    inner: I,
    held: std::collections::BinaryHeap<std::cmp::Reverse<DateTime<Utc>>>,
    /// The latest tick taken from `inner`.
    reach: DateTime<Utc>,
    last: Option<DateTime<Utc>>,
    done: bool,
}

impl<I: Iterator<Item = DateTime<Utc>>> Iterator for InOrder<'_, I> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        loop {
            if let Some(&std::cmp::Reverse(earliest)) = self.held.peek() {
                if self.done || self.reach > earliest + SWITCH || self.cron.calm(earliest) {
                    self.held.pop();
                    if self.last.is_some_and(|last| earliest <= last) {
                        continue;
                    }
                    self.last = Some(earliest);
                    return Some(earliest);
                }
            }
            match self.inner.next() {
                Some(tick) => {
                    self.reach = self.reach.max(tick);
                    self.held.push(std::cmp::Reverse(tick));
                }
                None if self.held.is_empty() => return None,
                None => self.done = true,
            }
        }
    }
}

/// A stable hash (unlike `DefaultHasher`, the same in every process and version).
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The id of the tick with unique key `key`: a UUIDv7 of the tick's time whose other bits
/// come from the key, so every worker posts the tick under the same id and the results
/// table's primary key keeps it once (migration 5), in the partition of the tick's time.
pub(super) fn tick_id(key: &str, tick: DateTime<Utc>) -> Uuid {
    let hash = fnv1a(key.as_bytes()).to_be_bytes();
    let mut bits = [0; 10];
    bits[..8].copy_from_slice(&hash);
    bits[8..].copy_from_slice(&hash[..2]);
    let millis = u64::try_from(tick.timestamp_millis()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &bits).into_uuid()
}

/// Parses a 5-field (minutes), 6-field (seconds first) or 7-field (with years) expression,
/// optionally after `CRON_TZ=<zone> ` (or `TZ=<zone> `) with an IANA zone name.
pub(crate) fn parse(expr: &str) -> std::result::Result<Cron, String> {
    let trimmed = expr.trim();
    let (tz, fields) = match trimmed
        .strip_prefix("CRON_TZ=")
        .or_else(|| trimmed.strip_prefix("TZ="))
    {
        Some(rest) => {
            let (zone, fields) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let tz = zone.parse::<chrono_tz::Tz>().map_err(|_| {
                format!("{expr:?} names an unknown time zone {zone:?} (expected an IANA name such as \"Europe/Paris\")")
            })?;
            (tz, fields.trim())
        }
        None => (chrono_tz::UTC, trimmed),
    };
    let normalized = match fields.split_whitespace().count() {
        5 => format!("0 {fields}"),
        6 | 7 => fields.to_owned(),
        n => return Err(format!("{expr:?} has {n} fields; expected 5, 6 or 7")),
    };
    let schedule = cron::Schedule::from_str(&normalized).map_err(|e| {
        // The parser's message repeats the input with a caret; keep only its reason line.
        let text = e.to_string();
        let reason = text
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or_default()
            .to_owned();
        format!("{expr:?} does not parse: {reason}")
    })?;
    Ok(Cron { schedule, tz })
}

/// The latest tick in `(after, now]`, if any.
pub(super) fn latest_due(
    schedule: &Cron,
    after: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let mut latest = None;
    for (n, tick) in schedule.after(after).enumerate() {
        if tick > now {
            return latest;
        }
        if n >= MAX_CATCH_UP {
            // Far behind (a clock jump): take the last tick before now directly.
            return schedule
                .at_or_before(now)
                .filter(|t| *t > after)
                .or(Some(tick));
        }
        latest = Some(tick);
    }
    latest
}

/// The fuzz target `cron` (fuzz/): parses `expr` as a stored schedule is parsed, then takes
/// the tick a worker would post at `now` after a last tick at `after`, and the `n` ticks
/// after `after`. Compiled only with `--cfg fuzzing`.
#[cfg(fuzzing)]
#[doc(hidden)]
#[allow(missing_docs)]
pub fn fuzz_ticks(
    expr: &str,
    after: DateTime<Utc>,
    now: DateTime<Utc>,
    n: usize,
) -> std::result::Result<(Option<DateTime<Utc>>, Vec<DateTime<Utc>>), String> {
    let schedule = parse(expr)?;
    let due = latest_due(&schedule, after, now);
    Ok((due, schedule.after(after).take(n).collect()))
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
    fn ticks_go_forward_when_clocks_go_back() {
        // Found by the cron fuzzer: on 25 October 2026 Paris sets its clocks back from
        // 3:00 CEST (1:00 UTC) to 2:00 CET, so 2:00 to 2:59 show twice.
        let utc = |d: u32, h: u32, m: u32| Utc.with_ymd_and_hms(2026, 10, d, h, m, 0).unwrap();
        let from = utc(23, 12, 0);
        // Fixed hours: the first 2:00 and 2:03 only, as on any other day.
        let daily = parse("TZ=Europe/Paris 3,0 2 * * *").expect("valid");
        let ticks: Vec<_> = daily.after(from).take(6).collect();
        assert_eq!(
            ticks,
            [
                utc(24, 0, 0),
                utc(24, 0, 3),
                utc(25, 0, 0),
                utc(25, 0, 3),
                utc(26, 1, 0),
                utc(26, 1, 3)
            ]
        );
        assert_eq!(daily.at_or_before(utc(25, 1, 30)), Some(utc(25, 0, 3)));
        // Every hour: both times the clock shows 2:00 and 2:30, in time order.
        let half_hourly = parse("TZ=Europe/Paris 0,30 * * * *").expect("valid");
        let ticks: Vec<_> = half_hourly.after(utc(24, 23, 45)).take(5).collect();
        assert_eq!(
            ticks,
            [
                utc(25, 0, 0),
                utc(25, 0, 30),
                utc(25, 1, 0),
                utc(25, 1, 30),
                utc(25, 2, 0)
            ]
        );
        assert_eq!(
            half_hourly.at_or_before(utc(25, 1, 10)),
            Some(utc(25, 1, 0))
        );
        assert_eq!(
            half_hourly.at_or_before(utc(25, 0, 50)),
            Some(utc(25, 0, 30))
        );
        // Away from a switch, ticks go out as they come (an every-second schedule does
        // not look hours ahead).
        let every_second = parse("* * * * * *").expect("valid");
        assert_eq!(
            every_second.after(from).nth(2),
            Some(from + chrono::Duration::seconds(3))
        );
    }

    #[test]
    fn a_time_zone_keeps_local_time_across_daylight_saving() {
        let paris = parse("CRON_TZ=Europe/Paris 0 8 * * *").expect("valid");
        let day = |m: u32, d: u32, h: u32| Utc.with_ymd_and_hms(2026, m, d, h, 0, 0).unwrap();
        // 8:00 in Paris is 7:00 UTC in winter (CET) and 6:00 UTC in summer (CEST).
        assert_eq!(paris.after(day(1, 10, 0)).next(), Some(day(1, 10, 7)));
        assert_eq!(paris.after(day(7, 10, 0)).next(), Some(day(7, 10, 6)));
        // Across the switch on 29 March 2026.
        let ticks: Vec<_> = paris.after(day(3, 28, 0)).take(2).collect();
        assert_eq!(ticks, [day(3, 28, 7), day(3, 29, 6)]);
        assert_eq!(paris.at_or_before(day(1, 10, 12)), Some(day(1, 10, 7)));
        let tokyo = parse("TZ=Asia/Tokyo 0 0 9 * * *").expect("valid");
        assert_eq!(tokyo.after(day(1, 10, 1)).next(), Some(day(1, 11, 0)));
        assert!(parse("CRON_TZ=Mars/Olympus 0 8 * * *")
            .unwrap_err()
            .contains("unknown time zone \"Mars/Olympus\""));
        assert!(parse("CRON_TZ=Europe/Paris")
            .unwrap_err()
            .contains("has 0 fields"));
        assert_eq!(
            parse("0 8 * * *")
                .expect("valid")
                .after(day(1, 10, 0))
                .next(),
            Some(day(1, 10, 8))
        );
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
        assert_eq!(hourly.at_or_before(at(10, 30, 0)), Some(at(10, 0, 0)));
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
