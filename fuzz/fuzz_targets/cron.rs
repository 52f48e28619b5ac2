//! A cron expression is outside input when it is stored (`StoredSchedules::add`, the
//! `sk_schedules` table any tool may write): every worker parses it and computes its ticks.
//! Any text must parse or be refused with a reason, without a panic or a hang, and a parsed
//! schedule's ticks must come in order after the time asked, the due one within its window.
#![no_main]

use chrono::{DateTime, TimeZone, Utc};
use libfuzzer_sys::fuzz_target;

/// 1970 to 2200: the times a worker's clock can show.
fn time(seconds: u32) -> DateTime<Utc> {
    Utc.timestamp_opt(i64::from(seconds) * 2, 0)
        .single()
        .expect("in chrono's range")
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (times, text) = data.split_at(8);
    let Ok(expr) = std::str::from_utf8(text) else {
        return;
    };
    let after = time(u32::from_le_bytes([times[0], times[1], times[2], times[3]]));
    // Now is at most about 6 days after the last tick, as a worker that was away.
    let now = after
        + chrono::Duration::seconds(i64::from(
            u32::from(u16::from_le_bytes([times[4], times[5]])) * 8,
        ));
    let Ok((due, ticks)) = sk_runtime::fuzzing::fuzz_ticks(expr, after, now, 8) else {
        return;
    };
    if let Some(due) = due {
        assert!(
            due > after && due <= now,
            "{expr:?}: due {due} outside ({after}, {now}]"
        );
    }
    let mut last = after;
    for tick in &ticks {
        assert!(
            *tick > last,
            "{expr:?}: tick {tick} not after {last} (ticks {ticks:?})"
        );
        last = *tick;
    }
    if let (Some(due), Some(first)) = (due, ticks.first()) {
        assert!(
            *first <= due,
            "{expr:?}: due {due} before the first tick {first}"
        );
    }
});
