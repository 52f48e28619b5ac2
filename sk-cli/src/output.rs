//! What the commands print: tables, JSON, times and states, with terminal control characters made inert.

use std::io::Write;

use chrono::{DateTime, Utc};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use sk_runtime::JobStatus;

use crate::{fail, Failure};

pub(crate) fn workers_table(workers: &[sk_runtime::WorkerInfo]) -> Table {
    let mut table = table(&[
        "worker",
        "host",
        "pid",
        "alive",
        "running",
        "concurrency",
        "queues",
        "started",
        "last seen",
    ]);
    for w in workers {
        table.add_row(cells([
            w.id.clone(),
            w.host.clone(),
            w.pid.to_string(),
            if w.alive { "yes" } else { "no" }.to_owned(),
            w.running.to_string(),
            w.concurrency.to_string(),
            w.queues
                .as_ref()
                .map_or_else(|| "all".to_owned(), |q| q.join(", ")),
            time(Some(w.started_at)),
            time(Some(w.seen_at)),
        ]));
    }
    table
}

pub(crate) fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    table
}

pub(crate) fn print_table(
    out: &mut dyn Write,
    table: Table,
    empty: bool,
    none: &str,
) -> Result<(), Failure> {
    if empty {
        writeln!(out, "({none})")?;
    } else {
        writeln!(out, "{table}")?;
    }
    Ok(())
}

pub(crate) fn print_json<T: serde::Serialize + ?Sized>(
    out: &mut dyn Write,
    value: &T,
) -> Result<(), Failure> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

/// Prints `value` as JSON, or `human()` as a line.
pub(crate) fn say(
    out: &mut dyn Write,
    json: bool,
    value: &serde_json::Value,
    human: impl FnOnce() -> String,
) -> Result<(), Failure> {
    if json {
        print_json(out, value)
    } else {
        writeln!(out, "{}", human())?;
        Ok(())
    }
}

/// The time `span` before now.
pub(crate) fn ago(span: humantime::Duration) -> Result<DateTime<Utc>, Failure> {
    chrono::Duration::from_std(*span)
        .ok()
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .ok_or_else(|| fail(format!("{span} is too far back"), 1))
}

pub(crate) fn time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(String::new, |at| at.format("%F %T").to_string())
}

/// The names of a job's steps that succeeded (`JobContext::step`), in order of name.
pub(crate) fn steps_done(record: &sk_runtime::JobRecord) -> Option<String> {
    let steps = record.steps()?;
    let names: Vec<&str> = steps.keys().map(String::as_str).collect();
    Some(names.join(", "))
}

/// A job's arguments as shown: sealed ones (`#[job(encrypted)]`) by their key's id only.
pub(crate) fn payload_shown(record: &sk_runtime::JobRecord) -> Option<String> {
    match record.sealed_with() {
        Some(key) => Some(format!("(sealed with payload key {key:?})")),
        None => record.payload.clone(),
    }
}

/// Outside text, or nothing. (Every cell is made inert in [`cells`].)
pub(crate) fn text(value: Option<&str>) -> String {
    value.unwrap_or_default().to_owned()
}

/// A table row: every cell with its control characters shown as escapes (see [`inert`]),
/// before the table measures it, so outside text (a queue name, a tenant, a payload, an
/// error message) can neither drive the terminal nor break the columns.
pub(crate) fn cells<const N: usize>(row: [String; N]) -> Vec<String> {
    row.iter().map(|c| inert(c)).collect()
}

/// `s` with its control characters but the newline (C0, DEL and C1, the ANSI escape and
/// the bell among them) written as escapes (`\u{1b}`).
pub(crate) fn inert(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Everything `sk` prints goes through this, the table cells already made inert and the
/// other lines (an error message, a job's outcome) here: none of the outside text reaches
/// the terminal as a control character. (JSON is unchanged: serde escapes control
/// characters itself.)
pub(crate) struct Inert<'a>(pub(crate) &'a mut dyn Write);

impl Write for Inert<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Formatted output arrives in whole characters; bytes that are not UTF-8 are
        // shown as the replacement character.
        let text = String::from_utf8_lossy(buf);
        if text.chars().any(|c| c.is_control() && c != '\n') {
            self.0.write_all(inert(&text).as_bytes())?;
        } else {
            self.0.write_all(text.as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

pub(crate) fn state(status: JobStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{status:?}"))
}

/// A rate limit as `sk status` and the dashboard show it: starts in the window that ends now, of the
/// limit, and when it opens if it is full.
pub(crate) fn rate_cell(rate: &sk_runtime::RateState) -> String {
    let mut cell = format!(
        "{}/{} per {}",
        rate.started,
        rate.limit.count,
        humantime::format_duration(rate.limit.window)
    );
    if let Some(at) = rate.opens_at {
        cell.push_str(&format!(", opens {}", at.format("%T%.3f")));
    }
    cell
}
