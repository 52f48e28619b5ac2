//! Queue insight on the client handle: counts by queue, task type or tenant, and the job
//! list with filters and keyset pagination.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::control::{Client, JobFilter};
use crate::error::{Error, Result};
use crate::info::JobStatus;

/// The most jobs one page of [`Client::jobs`] returns.
pub const MAX_PAGE: u32 = 1000;

/// What [`Client::count_by`] groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CountBy {
    /// The job's queue.
    Queue,
    /// The job's task type.
    TaskType,
    /// The job's tenant (`None` for jobs without one).
    Tenant,
}

/// The jobs of one queue, task type or tenant by state ([`Client::count_by`]). Jobs that
/// succeeded are not counted here: throughput says how many finished when.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct GroupCounts {
    /// The queue, task type or tenant.
    pub key: Option<String>,
    /// Waiting jobs that can run now (never run yet).
    pub available: i64,
    /// Waiting jobs whose not-before time is still ahead (never run yet).
    pub scheduled: i64,
    /// Jobs waiting on other jobs to succeed (a workflow's later stages).
    pub pending: i64,
    /// Waiting jobs that ran before and failed, or lost their lease: retries.
    pub retrying: i64,
    /// Jobs a worker holds.
    pub running: i64,
    /// Jobs that failed for good, still in the results.
    pub fatal: i64,
    /// Jobs cancelled, still in the results.
    pub cancelled: i64,
}

/// One job in a list ([`Client::jobs`]); [`Client::job`] has its whole record.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct JobSummary {
    /// Job id.
    #[sqlx(rename = "task_id")]
    pub id: Uuid,
    /// Task type.
    #[sqlx(rename = "task_type")]
    pub task_type: String,
    /// Queue.
    #[sqlx(rename = "task_queue")]
    pub queue: String,
    /// Status code; see [`JobSummary::status`].
    #[sqlx(rename = "task_status")]
    pub status_code: i32,
    /// Priority.
    #[sqlx(rename = "task_priority")]
    pub priority: i32,
    /// Attempts used, while the job is live.
    #[sqlx(rename = "task_attempt")]
    pub attempt: Option<i32>,
    /// Tenant.
    #[sqlx(rename = "task_tenant")]
    pub tenant: Option<String>,
    /// Correlation id.
    #[sqlx(rename = "task_correlation_id")]
    pub correlation_id: Option<String>,
    /// When it was enqueued.
    #[sqlx(rename = "task_posted_at_ts")]
    pub posted_at: DateTime<Utc>,
    /// Not-before time (waiting) or lease expiry (running), while the job is live.
    #[sqlx(rename = "task_locked_until_ts")]
    pub locked_until: Option<DateTime<Utc>>,
    /// When it finished.
    #[sqlx(rename = "task_processing_finalized_at_ts")]
    pub finalized_at: Option<DateTime<Utc>>,
    /// How many runs failed.
    #[sqlx(rename = "task_error_count")]
    pub error_count: i32,
    /// The last error's type.
    #[sqlx(rename = "task_last_error_type")]
    pub last_error_type: Option<String>,
    /// The last error's message.
    #[sqlx(rename = "task_last_error_message")]
    pub last_error_message: Option<String>,
}

impl JobSummary {
    /// The status (processing while a worker holds it).
    pub fn status(&self) -> JobStatus {
        JobStatus::from_code(self.status_code)
    }
}

/// One page of [`Client::jobs`].
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<JobSummary>,
    /// Pass it as `after` for the next page; `None` on the last page.
    pub next: Option<Uuid>,
}

impl Client {
    /// Counts jobs by queue, task type or tenant and state: live jobs (waiting, retrying,
    /// running) from the queue table, and those that failed for good or were cancelled
    /// from the results, through indexes that hold only such rows. Sorted by key.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// use sk_runtime::CountBy;
    ///
    /// for q in client.count_by(CountBy::Queue).await? {
    ///     println!("{:?}: {} waiting, {} running, {} fatal", q.key, q.available, q.running, q.fatal);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The database fails.
    pub async fn count_by(&self, by: CountBy) -> Result<Vec<GroupCounts>> {
        self.pool.count_by(&self.schema, by, self.now()).await
    }

    /// Lists the jobs `filter` takes, newest first (by id, that is posting time), `limit`
    /// at a time (at most [`MAX_PAGE`]): pass the page's `next` as `after` for the next
    /// one. Every job is listed from its enqueue, whoever posted it.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// use sk_runtime::{JobFilter, JobStatus};
    ///
    /// let filter = JobFilter::new().queue("mail").status(JobStatus::Fatal);
    /// let mut after = None;
    /// loop {
    ///     let page = client.jobs(&filter, after, 100).await?;
    ///     for job in &page.jobs {
    ///         println!("{} {:?} {:?}", job.id, job.last_error_type, job.last_error_message);
    ///     }
    ///     match page.next {
    ///         Some(next) => after = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit of 0 or over [`MAX_PAGE`], or a filter's text with a
    /// NUL character; the database fails.
    pub async fn jobs(
        &self,
        filter: &JobFilter,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<JobPage> {
        filter.check()?;
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(
                "page size",
                format!("{limit} must be from 1 to {MAX_PAGE}"),
            ));
        }
        let jobs = self
            .pool
            .list_jobs(&self.schema, filter, after, i64::from(limit), self.now())
            .await?;
        let next = (jobs.len() == limit as usize)
            .then(|| jobs.last().map(|j| j.id))
            .flatten();
        Ok(JobPage { jobs, next })
    }
}

/// Group counts from live counts per key (available, scheduled, retrying, running) and
/// ended ones (fatal, cancelled), sorted by key.
pub(crate) fn merge_group_counts(
    live: Vec<(Option<String>, i64, i64, i64, i64, i64)>,
    ended: Vec<(Option<String>, i64, i64)>,
) -> Vec<GroupCounts> {
    let mut by_key: std::collections::BTreeMap<Option<String>, GroupCounts> = Default::default();
    for (key, available, scheduled, retrying, running, pending) in live {
        let entry = by_key.entry(key.clone()).or_insert_with(|| GroupCounts {
            key,
            ..GroupCounts::default()
        });
        entry.available += available;
        entry.scheduled += scheduled;
        entry.retrying += retrying;
        entry.running += running;
        entry.pending += pending;
    }
    for (key, fatal, cancelled) in ended {
        let entry = by_key.entry(key.clone()).or_insert_with(|| GroupCounts {
            key,
            ..GroupCounts::default()
        });
        entry.fatal += fatal;
        entry.cancelled += cancelled;
    }
    by_key.into_values().collect()
}

/// The column a [`CountBy`] groups by (a fixed name, never input).
pub(crate) fn group_column(by: CountBy) -> &'static str {
    match by {
        CountBy::Queue => "task_queue",
        CountBy::TaskType => "task_type",
        CountBy::Tenant => "task_tenant",
    }
}

/// Appends `filter`'s conditions on the results row `r` (and the queue row `q`) of the
/// job list to `$query`, a `QueryBuilder` of any backend; `$now` is the time bound as the
/// backend stores it, `$metadata` pushes the metadata condition.
macro_rules! push_list_filter {
    ($query:expr, $filter:expr, $after:expr, $now:expr, |$q:ident, $key:ident, $value:ident| $metadata:block) => {{
        let filter: &$crate::control::JobFilter = $filter;
        if let Some(after) = $after {
            $query.push(" AND r.task_id < ").push_bind(after);
        }
        for (column, value) in [
            ("r.task_queue", &filter.queue),
            ("r.task_type", &filter.task_type),
            ("r.task_tenant", &filter.tenant),
            ("r.task_correlation_id", &filter.correlation_id),
        ] {
            if let Some(value) = value {
                $query
                    .push(format!(" AND {column} = "))
                    .push_bind(value.clone());
            }
        }
        if let Some(($key, $value)) = filter.metadata.clone() {
            let $q = &mut $query;
            $metadata
        }
        if let Some(from) = filter.posted_after {
            $query
                .push(" AND r.task_id >= ")
                .push_bind($crate::store::id_floor(from));
        }
        if let Some(to) = filter.posted_before {
            $query
                .push(" AND r.task_id < ")
                .push_bind($crate::store::id_floor(to));
        }
        match filter.status {
            None => {}
            Some($crate::info::JobStatus::Processing) => {
                $query
                    .push(" AND q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > ")
                    .push_bind($now.clone());
            }
            Some(status) => {
                $query
                    .push(" AND r.task_status = ")
                    .push_bind(status as i32);
                if !status.is_final() {
                    $query
                        .push(" AND (q.task_locked_by IS NULL OR q.task_locked_until_ts <= ")
                        .push_bind($now.clone())
                        .push(")");
                }
            }
        }
    }};
}
pub(crate) use push_list_filter;

/// Builds the job list into `$query` (a `QueryBuilder` opened with `SELECT * FROM (`): one
/// branch per `FROM` clause of `$branches` (each selecting `r`, the results row or what
/// stands in for it, and `q`, the queue row, and ending in a `WHERE`), each filtered,
/// newest first and limited, merged under the same order and limit. `$text` wraps a text
/// column for reading (MySQL reads its binary-collated names through `CAST(… AS CHAR)`,
/// which also gives both branches one collation).
macro_rules! push_job_list {
    ($query:expr, $branches:expr, $text:expr, $filter:expr, $after:expr, $limit:expr, $now:expr,
     |$q:ident, $key:ident, $value:ident| $metadata:block) => {{
        let text: fn(&str) -> String = $text;
        for (i, from) in $branches.into_iter().enumerate() {
            if i > 0 {
                $query.push(") a UNION ALL SELECT * FROM (");
            }
            $query
                .push(format!(
                    "SELECT r.task_id, {} AS task_type, {} AS task_queue,
                        CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > ",
                    text("r.task_type"),
                    text("r.task_queue")
                ))
                .push_bind($now.clone())
                .push(format!(
                    " THEN 2 ELSE r.task_status END AS task_status,
                        coalesce(q.task_priority, r.task_priority) AS task_priority, q.task_attempt,
                        {} AS task_tenant, {} AS task_correlation_id, r.task_posted_at_ts, q.task_locked_until_ts,
                        r.task_processing_finalized_at_ts, r.task_error_count,
                        {} AS task_last_error_type, {} AS task_last_error_message
                     FROM ",
                    text("r.task_tenant"),
                    text("r.task_correlation_id"),
                    text("r.task_last_error_type"),
                    text("r.task_last_error_message")
                ))
                .push(from);
            $crate::insight::push_list_filter!($query, $filter, $after, $now, |$q, $key, $value| $metadata);
            $query
                .push(" ORDER BY r.task_id DESC LIMIT ")
                .push_bind($limit);
        }
        $query
            .push(") b ORDER BY task_id DESC LIMIT ")
            .push_bind($limit);
    }};
}
pub(crate) use push_job_list;

/// Jobs whose last run failed with one error ([`Client::error_groups`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct ErrorGroup {
    /// The error's type (`"timeout"`, `"panic"`, a Rust type name, ...).
    #[sqlx(rename = "kind")]
    pub kind: Option<String>,
    /// The error's message.
    #[sqlx(rename = "message")]
    pub message: Option<String>,
    /// How many jobs it is the last error of.
    #[sqlx(rename = "jobs")]
    pub count: i64,
    /// The earliest of those failed runs' starts.
    #[sqlx(rename = "first_seen")]
    pub first_seen: Option<DateTime<Utc>>,
    /// The latest of those failed runs' starts.
    #[sqlx(rename = "last_seen")]
    pub last_seen: Option<DateTime<Utc>>,
    /// One of those jobs (the newest), to look at with [`Client::job`].
    #[sqlx(rename = "sample")]
    pub sample: Uuid,
}

/// A worker as [`Client::workers`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Its id (`task_locked_by` of the jobs it runs).
    pub id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id there.
    pub pid: i32,
    /// The queues it takes jobs from; `None`: every queue.
    pub queues: Option<Vec<String>>,
    /// The task types it runs.
    pub task_types: Vec<String>,
    /// Its concurrency.
    pub concurrency: i32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub seen_at: DateTime<Utc>,
    /// Whether it heartbeat within three of its heartbeat intervals: a worker that is not
    /// alive crashed or was cut off (a graceful stop removes its row).
    pub alive: bool,
    /// Jobs it holds under a valid lease.
    pub running: i64,
}

/// A worker's row as the store reads it.
#[derive(sqlx::FromRow)]
pub(crate) struct WorkerRow {
    pub(crate) worker_id: String,
    pub(crate) worker_host: String,
    pub(crate) worker_pid: i32,
    pub(crate) worker_queues: Option<String>,
    pub(crate) worker_task_types: String,
    pub(crate) worker_concurrency: i32,
    pub(crate) worker_heartbeat_ms: i64,
    pub(crate) worker_started_at_ts: DateTime<Utc>,
    pub(crate) worker_seen_at_ts: DateTime<Utc>,
}

/// Workers from their rows and the running jobs per worker id, by id.
pub(crate) fn workers_of(
    rows: Vec<WorkerRow>,
    running: Vec<(String, i64)>,
    now: DateTime<Utc>,
) -> Vec<WorkerInfo> {
    let running: std::collections::HashMap<String, i64> = running.into_iter().collect();
    let mut workers: Vec<WorkerInfo> = rows
        .into_iter()
        .map(|r| WorkerInfo {
            alive: r.worker_seen_at_ts
                + chrono::Duration::milliseconds(r.worker_heartbeat_ms.saturating_mul(3))
                > now,
            running: running.get(&r.worker_id).copied().unwrap_or(0),
            queues: r
                .worker_queues
                .as_deref()
                .and_then(|q| serde_json::from_str(q).ok()),
            task_types: serde_json::from_str(&r.worker_task_types).unwrap_or_default(),
            id: r.worker_id,
            host: r.worker_host,
            pid: r.worker_pid,
            concurrency: r.worker_concurrency,
            started_at: r.worker_started_at_ts,
            seen_at: r.worker_seen_at_ts,
        })
        .collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    workers
}

/// What a worker writes of itself at start (`workers_t`).
pub(crate) struct WorkerUp {
    pub(crate) host: String,
    pub(crate) pid: i32,
    pub(crate) queues: Option<String>,
    pub(crate) task_types: String,
    pub(crate) concurrency: i32,
    pub(crate) heartbeat_ms: i64,
}

impl Client {
    /// Groups the jobs whose last run failed (retrying, or failed for good) with a run
    /// that started at or after `since`, by error type and message, largest group first,
    /// at most `limit` groups. Served by the results' index of jobs not waiting or done.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit of 0 or over [`MAX_PAGE`]; the database fails.
    pub async fn error_groups(&self, since: DateTime<Utc>, limit: u32) -> Result<Vec<ErrorGroup>> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(
                "group count",
                format!("{limit} must be from 1 to {MAX_PAGE}"),
            ));
        }
        self.pool
            .error_groups(&self.schema, since, i64::from(limit))
            .await
    }

    /// The workers that announced themselves, alive or not, by id, with the jobs each
    /// holds now.
    ///
    /// # Errors
    /// The database fails.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.pool.workers(&self.schema, self.now()).await
    }
}

/// The span of one [`Throughput`] row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Per {
    /// A minute.
    Minute,
    /// An hour.
    Hour,
}

/// Runs of one task type in one minute or hour ([`Client::throughput`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct Throughput {
    /// The start of the minute or hour (UTC).
    pub at: DateTime<Utc>,
    /// The task type.
    pub task_type: String,
    /// Runs that succeeded.
    pub processed: i64,
    /// Runs that failed (retried, or failed for good).
    pub failed: i64,
    /// Mean run time of all those runs, in milliseconds.
    pub mean_ms: f64,
    /// The 95th percentile of their run times, in milliseconds (the upper bound of the
    /// histogram bucket it falls in: within 19 % of the true value).
    pub p95_ms: f64,
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
        Per::Minute => TimeDelta::minutes(1),
        Per::Hour => TimeDelta::hours(1),
    };
    let mut sums: std::collections::BTreeMap<(DateTime<Utc>, String), StatBucket> =
        Default::default();
    for (minute, task_type, processed, failed, run_ms, histogram) in rows {
        let at = minute.duration_trunc(span).unwrap_or(minute);
        sums.entry((at, task_type))
            .or_default()
            .merge(processed, failed, run_ms, &histogram);
    }
    sums.into_iter()
        .map(|((at, task_type), b)| {
            let runs = b.processed + b.failed;
            let mut p95 = 0.0;
            let mut seen = 0;
            for (bucket, n) in &b.histogram {
                seen += n;
                if seen * 100 >= runs * 95 {
                    p95 = bucket_top(*bucket);
                    break;
                }
            }
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
                p95_ms: p95,
            }
        })
        .collect()
}

impl Client {
    /// Runs per minute or hour and task type since `since` (all types, or only
    /// `task_type`): how many succeeded and failed, mean and 95th percentile run time.
    /// Each worker writes its counts of the current minute at every heartbeat and at its
    /// stop, so the last few seconds may be missing, and a worker that crashes loses at
    /// most its last heartbeat interval of counts. Served by the stats table's primary key
    /// (minute first).
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// use sk_runtime::Per;
    ///
    /// let day = chrono::Utc::now() - chrono::Duration::hours(24);
    /// for t in client.throughput(day, Per::Hour, None).await? {
    ///     println!("{} {}: {} ok, {} failed, mean {:.1} ms, p95 {:.1} ms",
    ///         t.at, t.task_type, t.processed, t.failed, t.mean_ms, t.p95_ms);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The database fails.
    pub async fn throughput(
        &self,
        since: DateTime<Utc>,
        per: Per,
        task_type: Option<&str>,
    ) -> Result<Vec<Throughput>> {
        let rows = self.pool.job_stats(&self.schema, since, task_type).await?;
        Ok(throughput_of(rows, per))
    }
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
