//! A worker's own record and its per-minute statistics: what it writes of itself and
//! the run-time histogram the client reads back as throughput.

use chrono::{DateTime, Utc};

use super::{Per, Throughput};

/// What a worker writes of itself at start (`workers_t`).
pub(crate) struct WorkerUp {
    pub(crate) host: String,
    pub(crate) pid: i32,
    pub(crate) queues: Option<String>,
    pub(crate) task_types: String,
    pub(crate) default_queues: String,
    pub(crate) concurrency: i32,
    pub(crate) heartbeat_ms: i64,
    /// Its task types' schema documents, to publish (`WorkerBuilder::publish_schemas`).
    pub(crate) schemas: Vec<(String, String)>,
}

/// Run-time histogram buckets per doubling.
const BUCKETS_PER_DOUBLING: f64 = 4.0;

/// The histogram bucket of a run of `ms` milliseconds.
pub(crate) fn bucket_of(ms: i64) -> u32 {
    let ms = ms.max(0) as f64;
    (BUCKETS_PER_DOUBLING * (ms + 1.0).log2()).floor() as u32
}

/// The largest run time (ms) bucket `b` holds.
fn bucket_top(b: u32) -> f64 {
    (2f64.powf(f64::from(b + 1) / BUCKETS_PER_DOUBLING) - 1.0).max(0.0)
}

/// One minute of one task type's runs in one worker, as stored (`job_stats_t`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StatBucket {
    pub(crate) processed: i64,
    pub(crate) failed: i64,
    pub(crate) run_ms: i64,
    /// Histogram bucket -> runs.
    pub(crate) histogram: std::collections::BTreeMap<u32, i64>,
}

impl StatBucket {
    pub(crate) fn add(&mut self, ok: bool, ms: i64) {
        if ok {
            self.processed += 1;
        } else {
            self.failed += 1;
        }
        self.run_ms += ms.max(0);
        *self.histogram.entry(bucket_of(ms)).or_default() += 1;
    }

    pub(crate) fn histogram_json(&self) -> String {
        serde_json::to_string(&self.histogram).unwrap_or_else(|_| "{}".to_owned())
    }

    fn merge(&mut self, processed: i64, failed: i64, run_ms: i64, histogram: &str) {
        self.processed += processed;
        self.failed += failed;
        self.run_ms += run_ms;
        let more: std::collections::BTreeMap<u32, i64> =
            serde_json::from_str(histogram).unwrap_or_default();
        for (b, n) in more {
            *self.histogram.entry(b).or_default() += n;
        }
    }
}

/// A stored row of `job_stats_t`: minute, task type, processed, failed, run time, histogram.
pub(crate) type StatRow = (DateTime<Utc>, String, i64, i64, i64, String);

/// Sums stored minutes into rows per minute or hour and task type, oldest first.
pub(crate) fn throughput_of(rows: Vec<StatRow>, per: Per) -> Vec<Throughput> {
    use chrono::{DurationRound, TimeDelta};
    let span = match per {
        Per::Minute => Some(TimeDelta::minutes(1)),
        Per::Hour => Some(TimeDelta::hours(1)),
        Per::Whole => None,
    };
    let mut sums: std::collections::BTreeMap<(DateTime<Utc>, String), StatBucket> =
        Default::default();
    let first = rows.iter().map(|r| r.0).min();
    for (minute, task_type, processed, failed, run_ms, histogram) in rows {
        let at = match span {
            Some(span) => minute.duration_trunc(span).unwrap_or(minute),
            None => first.unwrap_or(minute),
        };
        sums.entry((at, task_type))
            .or_default()
            .merge(processed, failed, run_ms, &histogram);
    }
    sums.into_iter()
        .map(|((at, task_type), b)| {
            let runs = b.processed + b.failed;
            Throughput {
                at,
                task_type,
                processed: b.processed,
                failed: b.failed,
                mean_ms: if runs > 0 {
                    b.run_ms as f64 / runs as f64
                } else {
                    0.0
                },
                p50_ms: percentile(&b, runs, 50),
                p95_ms: percentile(&b, runs, 95),
                p99_ms: percentile(&b, runs, 99),
            }
        })
        .collect()
}

/// The run time under which `q` % of a bucket's `runs` fall: the upper bound of the
/// histogram bucket where they are reached.
fn percentile(b: &StatBucket, runs: i64, q: i64) -> f64 {
    let mut seen = 0;
    for (bucket, n) in &b.histogram {
        seen += n;
        if seen * 100 >= runs * q {
            return bucket_top(*bucket);
        }
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_percentiles() {
        assert_eq!(bucket_of(0), 0);
        for ms in [1, 5, 17, 250, 9_999, 3_600_000] {
            let top = bucket_top(bucket_of(ms));
            assert!(
                top >= ms as f64 && top <= ms as f64 * 1.19 + 1.0,
                "{ms}: {top}"
            );
        }
        let minute = DateTime::parse_from_rfc3339("2026-11-22T10:07:00Z")
            .unwrap()
            .to_utc();
        let mut b = StatBucket::default();
        for ms in 1..=100 {
            b.add(ms % 10 != 0, ms);
        }
        let rows = vec![
            (
                minute,
                "t".to_owned(),
                b.processed,
                b.failed,
                b.run_ms,
                b.histogram_json(),
            ),
            (
                minute + chrono::Duration::minutes(5),
                "t".to_owned(),
                1,
                0,
                1,
                "{\"4\":1}".to_owned(),
            ),
        ];
        let per_minute = throughput_of(rows.clone(), Per::Minute);
        assert_eq!(per_minute.len(), 2);
        assert_eq!((per_minute[0].processed, per_minute[0].failed), (90, 10));
        assert!((per_minute[0].mean_ms - 50.5).abs() < 1e-9);
        assert!(
            per_minute[0].p95_ms >= 95.0 && per_minute[0].p95_ms < 114.0,
            "{}",
            per_minute[0].p95_ms
        );
        let per_hour = throughput_of(rows, Per::Hour);
        assert_eq!(per_hour.len(), 1);
        assert_eq!(per_hour[0].at.to_rfc3339(), "2026-11-22T10:00:00+00:00");
        assert_eq!(per_hour[0].processed, 91);
    }
}
