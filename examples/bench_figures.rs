//! The bench's side figures: what a measure finds along the way beside its rate (CPU
//! time and log bytes per job, read from `/proc` and the database), kept per run and
//! printed as medians after the measures, on every backend.

use std::sync::{Mutex, PoisonError};

use super::BoxError;

/// The side figures of the runs so far, and the measure whose run is going.
pub(super) struct Figures {
    /// (name, value, unit), one per run; the median is printed.
    side: Mutex<Vec<(String, f64, &'static str)>>,
    /// The name of the measure running, which names its side figures.
    measuring: Mutex<String>,
}

/// The bench's figures: one run at a time, on one backend.
pub(super) static FIGURES: Figures = Figures {
    side: Mutex::new(Vec::new()),
    measuring: Mutex::new(String::new()),
};

impl Figures {
    /// Names the side figures of the measure `name`'s run that starts.
    pub(super) fn start(&self, name: &str) {
        name.clone_into(
            &mut self
                .measuring
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
    }

    /// The measure whose run is going (`start`).
    pub(super) fn current(&self) -> String {
        self.measuring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Notes a side figure, printed after the measures.
    pub(super) fn note(&self, name: String, value: f64, unit: &'static str) {
        self.side
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name, value, unit));
    }

    /// Notes `seconds` of CPU time over `n` jobs as a side figure in µs per job.
    pub(super) fn note_us_per_job(&self, name: String, seconds: f64, n: u64) {
        self.note(name, seconds / n as f64 * 1e6, "us");
    }

    /// Notes, for the running measure, the server's CPU time and the log bytes per job
    /// since `before` (`Cost::now`) as `{measure}_server_cpu_us_per_job` and
    /// `{measure}_wal_bytes_per_job`.
    pub(super) fn note_cost(&self, before: Cost, after: Cost, n: u64) {
        let measure = self.current();
        self.note_us_per_job(
            format!("{measure}_server_cpu_us_per_job"),
            after.cpu_seconds - before.cpu_seconds,
            n,
        );
        self.note(
            format!("{measure}_wal_bytes_per_job"),
            (after.log_bytes - before.log_bytes) / n as f64,
            "bytes",
        );
    }

    /// The side figures so far, copied.
    pub(super) fn snapshot(&self) -> Vec<(String, f64, &'static str)> {
        self.side
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The side figures so far, taken.
    pub(super) fn take(&self) -> Vec<(String, f64, &'static str)> {
        std::mem::take(&mut *self.side.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Where a server's CPU time and its log stood at one moment.
#[derive(Clone, Copy)]
pub(super) struct Cost {
    pub(super) cpu_seconds: f64,
    pub(super) log_bytes: f64,
}

/// The lines of the side figures: each figure's median, in the order first noted.
pub(super) fn side_lines(side: &[(String, f64, &'static str)]) -> Vec<String> {
    let mut names: Vec<&String> = Vec::new();
    for (name, _, _) in side {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let unit = side.iter().find(|(n, _, _)| n == name).map_or("", |s| s.2);
            let value = side_median(side, name).unwrap_or(f64::NAN);
            format!("{name} {value:.1} {unit}")
        })
        .collect()
}

/// For a burn-down measured beside the minimal queue's (`min_burn_down`), its server CPU
/// and log per job against the minimal's: CPU as the minimal's over sk's (1.0: no more
/// than the bare queue), the log as sk's over the minimal's (issue target: at most 1.3).
pub(super) fn of_min_lines(side: &[(String, f64, &'static str)], name: &str) -> Vec<String> {
    let of = |figure: &str| {
        side_median(side, &format!("{name}_{figure}"))
            .zip(side_median(side, &format!("min_burn_down_{figure}")))
    };
    let mut lines = Vec::new();
    if let Some((sk, min)) = of("server_cpu_us_per_job") {
        lines.push(format!("{name}_server_cpu_ratio {:.2} of_min", min / sk));
    }
    if let Some((sk, min)) = of("wal_bytes_per_job") {
        lines.push(format!("{name}_wal_ratio {:.2} of_min", sk / min));
    }
    lines
}

/// The median of the side figures named `name`.
pub(super) fn side_median(side: &[(String, f64, &'static str)], name: &str) -> Option<f64> {
    let mut runs: Vec<f64> = side
        .iter()
        .filter(|(n, _, _)| n == name)
        .map(|s| s.1)
        .collect();
    runs.sort_by(f64::total_cmp);
    runs.get(runs.len() / 2).copied()
}

/// This process's CPU time so far, user and system, in seconds (`/proc/self/stat`, in
/// clock ticks of 10 ms).
pub(super) fn cpu_seconds() -> Result<f64, BoxError> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    Ok(stat_ticks(&stat, false)?.1 / 100.0)
}

/// The bytes this process has written so far (`wchar` of `/proc/self/io`: every
/// `write`, all threads): on SQLite, the write-ahead log and the checkpoints into the
/// database file.
pub(super) fn written_bytes() -> Result<f64, BoxError> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    let line = io
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .ok_or("no wchar in /proc/self/io")?;
    Ok(line.trim().parse()?)
}

/// The command name in a `/proc/PID/stat` and its CPU ticks, user and system (with
/// `children`, also those of its children it waited for).
fn stat_ticks(stat: &str, children: bool) -> Result<(&str, f64), BoxError> {
    // The fields after the command name (in parentheses, which may hold spaces): utime
    // and stime are the 12th and 13th, cutime and cstime the 14th and 15th.
    let (head, tail) = stat.rsplit_once(')').ok_or("no ')' in a /proc stat")?;
    let command = head.split_once('(').map_or("", |(_, c)| c);
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64, BoxError> {
        Ok(fields.get(i).ok_or("a short /proc stat")?.parse::<f64>()?)
    };
    let mut sum = ticks(11)? + ticks(12)?;
    if children {
        sum += ticks(13)? + ticks(14)?;
    }
    Ok((command, sum))
}

/// The CPU time so far of the processes named one of `commands` on this machine, in
/// seconds (`postgres` backends that exited count in the postmaster's children's time;
/// `mariadbd` and `mysqld` are one process). The server's share of a burn-down's cost,
/// steadier than throughput on a machine whose speed drifts.
pub(super) fn server_cpu_seconds(commands: &[&str]) -> Result<f64, BoxError> {
    let mut sum = 0.0;
    for entry in std::fs::read_dir("/proc")? {
        let path = entry?.path().join("stat");
        // A process may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        if let Ok((command, ticks)) = stat_ticks(&stat, true) {
            if commands.contains(&command) {
                sum += ticks;
            }
        }
    }
    Ok(sum / 100.0)
}
