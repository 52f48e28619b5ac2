//! Error groups: an error message with what varies from one job to the next masked, so
//! 500 gateway errors that differ by an invoice number are one group
//! ([`Client::error_groups`](crate::Client::error_groups), `sk errors`, the dashboard).
//!
//! The rules, applied left to right over the message, each taking the longest text it can
//! at a place where the one before it took nothing:
//!
//! | What | Example | Becomes |
//! |---|---|---|
//! | a quoted value (`'…'`, `"…"`, `` `…` ``; the opening quote not after a letter or digit, closed on the same line) | `no user 'ann'` | `no user '{q}'` |
//! | a UUID | `3f2a…-…` | `{uuid}` |
//! | an e-mail address | `ann@example.com` | `{email}` |
//! | the value of a URL parameter (after `?` or `&` and `name=`) | `?invoice=17&x=a` | `?invoice={v}&x={v}` |
//! | a hex id: `0x` and hex digits, or 8 hex digits or more with a digit among them | `0xdeadbeef`, `9f86d081` | `{hex}` |
//! | a number (digits, with a decimal part) | `INV-1042`, `3.5s` | `INV-{n}`, `{n}s` |
//!
//! Everything else stays as it is, so a group keeps the words that say what went wrong.
//! A group is its task type, its error's type and the masked message; its
//! [fingerprint](ErrorGroup::fingerprint) a hash of the three.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Jobs whose last run failed with one error, its varying parts masked
/// ([`Client::error_groups`](crate::Client::error_groups); the rules are in this
/// module's documentation).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ErrorGroup {
    /// 16 hex digits that name the group: a hash of its task type, error type and
    /// pattern, the same on every backend and in every release that keeps the rules.
    pub fingerprint: String,
    /// The jobs' task type.
    pub task_type: String,
    /// The error's type (`"timeout"`, `"panic"`, a Rust type name, ...).
    pub kind: Option<String>,
    /// The message with its varying parts masked (`{n}`, `{uuid}`, `{hex}`, `{email}`,
    /// `{q}`, `{v}`).
    pub pattern: String,
    /// The message of one of the jobs, as it was written.
    pub message: Option<String>,
    /// How many jobs it is the last error of.
    pub count: i64,
    /// The queues of those jobs, by name.
    pub queues: Vec<String>,
    /// The earliest of those failed runs' starts.
    pub first_seen: Option<DateTime<Utc>>,
    /// The latest of those failed runs' starts.
    pub last_seen: Option<DateTime<Utc>>,
    /// One of those jobs (the newest), to look at with [`Client::job`](crate::Client::job).
    pub sample: Uuid,
    /// Those jobs by the hour their failed run started (the hour's start), oldest first;
    /// hours without one are left out.
    pub hourly: Vec<(DateTime<Utc>, i64)>,
}

from_row! {
/// The jobs of one task type, queue, error and hour, as the store groups them.
#[derive(Debug)]
pub(crate) struct ErrorRow {
    task_type: String = "task_type",
    task_queue: String = "task_queue",
    kind: Option<String> = "kind",
    message: Option<String> = "message",
    hour: Option<String> = "hour",
    jobs: i64 = "jobs",
    first_seen: Option<DateTime<Utc>> = "first_seen",
    last_seen: Option<DateTime<Utc>> = "last_seen",
    sample: Uuid = "sample",
}
}

/// The groups of `rows` by task type, error type and masked message, largest first (the
/// latest seen first among equals), at most `limit`.
pub(crate) fn groups_of(rows: Vec<ErrorRow>, limit: usize) -> Vec<ErrorGroup> {
    let mut groups: std::collections::HashMap<String, ErrorGroup> = Default::default();
    for row in rows {
        let pattern = mask(row.message.as_deref().unwrap_or_default());
        let key = fingerprint(&row.task_type, row.kind.as_deref(), &pattern);
        let group = groups.entry(key.clone()).or_insert_with(|| ErrorGroup {
            fingerprint: key,
            task_type: row.task_type.clone(),
            kind: row.kind.clone(),
            pattern,
            message: None,
            count: 0,
            queues: Vec::new(),
            first_seen: None,
            last_seen: None,
            sample: row.sample,
            hourly: Vec::new(),
        });
        group.count += row.jobs;
        if !group.queues.contains(&row.task_queue) {
            group.queues.push(row.task_queue);
        }
        group.first_seen = earliest(group.first_seen, row.first_seen);
        if row.last_seen > group.last_seen || group.message.is_none() {
            group.message = row.message.or(group.message.take());
        }
        group.last_seen = group.last_seen.max(row.last_seen);
        group.sample = group.sample.max(row.sample);
        if let Some(hour) = row.hour.as_deref().and_then(hour_of) {
            match group.hourly.iter_mut().find(|(h, _)| *h == hour) {
                Some((_, n)) => *n += row.jobs,
                None => group.hourly.push((hour, row.jobs)),
            }
        }
    }
    let mut groups: Vec<ErrorGroup> = groups.into_values().collect();
    for g in &mut groups {
        g.queues.sort();
        g.hourly.sort();
    }
    groups.sort_by(|a, b| {
        (b.count, b.last_seen, &a.fingerprint).cmp(&(a.count, a.last_seen, &b.fingerprint))
    });
    groups.truncate(limit);
    groups
}

fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The start of the hour `YYYY-MM-DD HH` (or with a `T`), UTC.
fn hour_of(text: &str) -> Option<DateTime<Utc>> {
    let text = text.replacen('T', " ", 1);
    chrono::NaiveDateTime::parse_from_str(&format!("{text}:00:00"), "%Y-%m-%d %H:%M:%S")
        .ok()
        .map(|t| t.and_utc())
}

/// Masks what varies in `message` (the module's rules).
pub(crate) fn mask(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    let mut out = String::with_capacity(message.len());
    let mut i = 0;
    while i < chars.len() {
        let after_word = i > 0 && chars[i - 1].is_alphanumeric();
        let (len, placeholder) = if let Some(len) = quoted(&chars[i..]).filter(|_| !after_word) {
            // The quotes stay: `'{q}'`.
            out.push(chars[i]);
            out.push_str("{q}");
            out.push(chars[i]);
            i += len;
            continue;
        } else if let Some(len) = uuid(&chars[i..]).filter(|_| !after_word) {
            (len, "{uuid}")
        } else if let Some(len) = email(&chars[i..]).filter(|_| !after_word) {
            (len, "{email}")
        } else if let Some((name, len)) = url_parameter(&chars, i) {
            out.extend(&chars[i..i + name]);
            out.push_str("={v}");
            i += len;
            continue;
        } else if let Some(len) = hex(&chars[i..]).filter(|_| !after_word) {
            (len, "{hex}")
        } else if let Some(len) = number(&chars[i..]) {
            (len, "{n}")
        } else {
            out.push(chars[i]);
            i += 1;
            continue;
        };
        out.push_str(placeholder);
        i += len;
    }
    out
}

/// What masks put in a message's place.
const PLACEHOLDERS: [&str; 6] = ["{n}", "{uuid}", "{hex}", "{email}", "{q}", "{v}"];

/// The SQL `LIKE` pattern (escape character `!`) that every message masking to `pattern`
/// matches: each placeholder becomes `%`.
pub(crate) fn like_of(pattern: &str) -> String {
    let mut like = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        if let Some(p) = PLACEHOLDERS.iter().find(|p| rest.starts_with(**p)) {
            like.push('%');
            rest = &rest[p.len()..];
            continue;
        }
        if matches!(c, '%' | '_' | '!') {
            like.push('!');
        }
        like.push(c);
        rest = &rest[c.len_utf8()..];
    }
    like
}

/// A group's fingerprint: FNV-1a (64 bits) over its task type, error type and pattern.
pub(crate) fn fingerprint(task_type: &str, kind: Option<&str>, pattern: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [task_type, kind.unwrap_or("\u{1}"), pattern] {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

/// The length of a quoted value at the start, quotes included.
fn quoted(s: &[char]) -> Option<usize> {
    let quote = *s.first()?;
    if !matches!(quote, '\'' | '"' | '`') {
        return None;
    }
    let end = s[1..]
        .iter()
        .take_while(|&&c| c != '\n')
        .position(|&c| c == quote)?;
    Some(end + 2)
}

fn is_hex(c: char) -> bool {
    c.is_ascii_hexdigit()
}

/// The length of a UUID at the start (8-4-4-4-12 hex digits).
fn uuid(s: &[char]) -> Option<usize> {
    let mut i = 0;
    for (n, group) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if n > 0 {
            (s.get(i) == Some(&'-')).then_some(())?;
            i += 1;
        }
        for _ in 0..group {
            s.get(i).copied().filter(|&c| is_hex(c))?;
            i += 1;
        }
    }
    (!s.get(i).is_some_and(|c| c.is_alphanumeric())).then_some(i)
}

/// The length of an e-mail address at the start: `local@domain.tld`.
fn email(s: &[char]) -> Option<usize> {
    let local = s
        .iter()
        .take_while(|&&c| c.is_ascii_alphanumeric() || "._%+-".contains(c))
        .count();
    if local == 0 || s.get(local) != Some(&'@') {
        return None;
    }
    let domain_start = local + 1;
    let domain = s[domain_start..]
        .iter()
        .take_while(|&&c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        .count();
    let text: String = s[domain_start..domain_start + domain].iter().collect();
    let text = text.trim_end_matches('.');
    let labels: Vec<&str> = text.split('.').collect();
    (labels.len() >= 2 && labels.iter().all(|l| !l.is_empty())).then(|| domain_start + text.len())
}

/// A URL parameter at `i`, right after `?` or `&`: the length of its name and of
/// `name=value`.
fn url_parameter(chars: &[char], i: usize) -> Option<(usize, usize)> {
    if i == 0 || !matches!(chars[i - 1], '?' | '&') {
        return None;
    }
    let rest = &chars[i..];
    let name = rest
        .iter()
        .take_while(|&&c| c.is_alphanumeric() || "_.-[]".contains(c))
        .count();
    if name == 0 || rest.get(name) != Some(&'=') {
        return None;
    }
    let value = rest[name + 1..]
        .iter()
        .take_while(|&&c| !c.is_whitespace() && !"&#\"'`".contains(c))
        .count();
    Some((name, name + 1 + value))
}

/// The length of a hex id at the start: `0x` and hex digits, or 8 hex digits or more
/// with a digit among them, not followed by a letter or digit.
fn hex(s: &[char]) -> Option<usize> {
    let ends = |n: usize| !s.get(n).is_some_and(|c| c.is_alphanumeric());
    if s.first() == Some(&'0') && matches!(s.get(1), Some('x' | 'X')) {
        let digits = s[2..].iter().take_while(|&&c| is_hex(c)).count();
        return (digits > 0 && ends(2 + digits)).then_some(2 + digits);
    }
    let digits = s.iter().take_while(|&&c| is_hex(c)).count();
    let has_digit = s[..digits].iter().any(char::is_ascii_digit);
    let has_letter = s[..digits].iter().any(|c| c.is_ascii_alphabetic());
    (digits >= 8 && has_digit && has_letter && ends(digits)).then_some(digits)
}

/// The length of a number at the start: digits, with a decimal part.
fn number(s: &[char]) -> Option<usize> {
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let fraction = match s.get(digits) {
        Some('.') => s[digits + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count(),
        _ => 0,
    };
    Some(if fraction > 0 {
        digits + 1 + fraction
    } else {
        digits
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(message: &str) -> String {
        mask(message)
    }

    #[test]
    fn what_varies_is_masked() {
        assert_eq!(
            masked("gateway timeout charging invoice INV-10423 after 30.5s"),
            "gateway timeout charging invoice INV-{n} after {n}s"
        );
        assert_eq!(
            masked("no user 'ann' (id 3f2a9c1e-7b4d-4e8f-9a0b-1c2d3e4f5a6b)"),
            "no user '{q}' (id {uuid})"
        );
        assert_eq!(masked("can't reach \"db-7\""), "can't reach \"{q}\"");
        assert_eq!(
            masked("bounced: ann.lee+x@mail.example.com."),
            "bounced: {email}."
        );
        assert_eq!(
            masked("GET https://api.example.com/v2/charge?invoice=17&token=abc#x failed"),
            "GET https://api.example.com/v{n}/charge?invoice={v}&token={v}#x failed"
        );
        assert_eq!(
            masked("object 0xdeadbeef, commit 9f86d081884c, word deadbeef"),
            "object {hex}, commit {hex}, word deadbeef"
        );
        assert_eq!(masked("user42 http2"), "user{n} http{n}");
    }

    #[test]
    fn messages_of_one_mask_match_its_like_pattern() {
        let m = mask("50% of 'x' done_now! at 12");
        assert_eq!(m, "{n}% of '{q}' done_now! at {n}");
        assert_eq!(like_of(&m), "%!% of '%' done!_now!! at %");
        assert_eq!(like_of(&mask("42 7")), "% %");
        assert_eq!(like_of("{uuid}/{v}{x}"), "%/%{x}");
    }

    #[test]
    fn rows_merge_into_groups_by_mask() {
        let at = |h: u32| chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 11, 28, h, 5, 0).single();
        let row =
            |queue: &str, message: &str, hour: &str, jobs: i64, h: u32, sample: u128| ErrorRow {
                task_type: "charge_card".into(),
                task_queue: queue.into(),
                kind: Some("Gateway".into()),
                message: Some(message.into()),
                hour: Some(hour.into()),
                jobs,
                first_seen: at(h),
                last_seen: at(h),
                sample: Uuid::from_u128(sample),
            };
        let groups = groups_of(
            vec![
                row("payments", "timeout INV-1", "2026-11-28 10", 2, 10, 5),
                row("payments", "timeout INV-2", "2026-11-28T11", 1, 11, 9),
                row("eu", "timeout INV-3", "2026-11-28 11", 4, 11, 7),
                row("eu", "declined", "2026-11-28 11", 1, 11, 8),
            ],
            10,
        );
        assert_eq!(groups.len(), 2);
        let g = &groups[0];
        assert_eq!((g.count, g.pattern.as_str()), (7, "timeout INV-{n}"));
        assert_eq!(g.queues, ["eu", "payments"]);
        assert_eq!((g.first_seen, g.last_seen), (at(10), at(11)));
        assert_eq!(g.sample, Uuid::from_u128(9));
        let hour = |h| at(h).map(|t| t - chrono::Duration::minutes(5)).unwrap();
        assert_eq!(g.hourly, [(hour(10), 2), (hour(11), 5)]);
        assert_eq!(groups[1].count, 1);
        assert_eq!(groups_of(Vec::new(), 10), []);
    }

    #[test]
    fn a_fingerprint_names_the_type_kind_and_pattern() {
        let a = fingerprint("charge_card", Some("Gateway"), "timeout {n}");
        assert_eq!(a.len(), 16);
        assert_eq!(
            a,
            fingerprint("charge_card", Some("Gateway"), "timeout {n}")
        );
        assert_ne!(a, fingerprint("charge_card", None, "timeout {n}"));
        assert_ne!(a, fingerprint("refund", Some("Gateway"), "timeout {n}"));
    }
}
