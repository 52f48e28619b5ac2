//! Lists, filters and groups of jobs and workers, as the client asks for and shows them.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::JobStatus;
use crate::error::{Error, Result};

/// The most jobs one page of [`Client::jobs`](crate::Client::jobs) returns.
pub const MAX_PAGE: u32 = 1000;

/// What [`Client::count_by`](crate::Client::count_by) groups by.
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

/// The jobs of one queue, task type or tenant by state ([`Client::count_by`](crate::Client::count_by)). Jobs that
/// succeeded are not counted here: throughput says how many finished when.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct GroupCounts {
    /// The queue, task type or tenant.
    pub key: Option<String>,
    /// Waiting jobs that can run now: due, whether they ran before or not (a retry that
    /// is due, a job an operator retried), the same count as [`QueueState::available`].
    pub available: i64,
    /// Waiting jobs whose not-before time is still ahead (never run yet).
    pub scheduled: i64,
    /// Jobs waiting on other jobs to succeed (a workflow's later stages).
    pub pending: i64,
    /// Waiting jobs that ran before and failed, or lost their lease, whose retry is not
    /// due yet (their backoff).
    pub retrying: i64,
    /// Jobs a worker holds.
    pub running: i64,
    /// Jobs that failed for good, still in the results.
    pub fatal: i64,
    /// Jobs cancelled, still in the results.
    pub cancelled: i64,
}

from_row! {
/// One job in a list ([`Client::jobs`](crate::Client::jobs)); [`Client::job`](crate::Client::job) has its whole record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct JobSummary {
    /// Job id.
    pub id: Uuid = "task_id",
    /// Task type.
    pub task_type: String = "task_type",
    /// Queue.
    pub queue: String = "task_queue",
    /// Status code; see [`JobSummary::status`].
    pub status_code: i32 = "task_status",
    /// Priority.
    pub priority: i32 = "task_priority",
    /// Attempts used: while the job is live, its queue row's count; once it has ended,
    /// its failed runs and its success (`None` for a job that never ran).
    pub attempt: Option<i32> = "task_attempt",
    /// Tenant.
    pub tenant: Option<String> = "task_tenant",
    /// Correlation id.
    pub correlation_id: Option<String> = "task_correlation_id",
    /// When it was enqueued.
    pub posted_at: DateTime<Utc> = "task_posted_at_ts",
    /// Not-before time (waiting) or lease expiry (running), while the job is live.
    pub locked_until: Option<DateTime<Utc>> = "task_locked_until_ts",
    /// When it finished.
    pub finalized_at: Option<DateTime<Utc>> = "task_processing_finalized_at_ts",
    /// How many runs failed.
    pub error_count: i32 = "task_error_count",
    /// The last error's type.
    pub last_error_type: Option<String> = "task_last_error_type",
    /// The last error's message.
    pub last_error_message: Option<String> = "task_last_error_message",
}
=> JobSummary::settled
}

impl JobSummary {
    /// The summary as read, with the attempts of an ended job (its queue row, which
    /// counts them, is gone) from its failed runs and its success.
    fn settled(mut self) -> Self {
        if self.attempt.is_none() {
            let ran = self.error_count + i32::from(self.status() == JobStatus::Processed);
            self.attempt = (ran > 0).then_some(ran);
        }
        self
    }

    /// The status (processing while a worker holds it).
    pub fn status(&self) -> JobStatus {
        JobStatus::from_code(self.status_code)
    }
}

/// One page of [`Client::jobs`](crate::Client::jobs).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<JobSummary>,
    /// Pass it as `after` for the next page; `None` on the last page.
    pub next: Option<Uuid>,
}

/// A worker as [`Client::workers`](crate::Client::workers) shows it.
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
    /// The queues its task types go to by default (`#[job(queue = ...)]`), by name.
    pub default_queues: Vec<String>,
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

/// The span of one [`Throughput`] row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Per {
    /// A minute.
    Minute,
    /// An hour.
    Hour,
    /// The whole time asked for: one row per task type, at its first minute with runs.
    Whole,
}

/// Runs of one task type in one minute or hour ([`Client::throughput`](crate::Client::throughput)).
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
    /// The median run time, in milliseconds (as `p95_ms`).
    pub p50_ms: f64,
    /// The 99th percentile of the run times, in milliseconds (as `p95_ms`).
    pub p99_ms: f64,
}

/// Which jobs a bulk call or a listing takes: every condition given must hold (none
/// given: every job).
///
/// ```
/// use sk_runtime::{JobFilter, JobStatus};
///
/// let stuck_mail = JobFilter::new().queue("mail").status(JobStatus::Fatal);
/// # let _ = stuck_mail;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobFilter {
    /// The job's queue.
    pub queue: Option<String>,
    /// The job's task type.
    pub task_type: Option<String>,
    /// The job's tenant.
    pub tenant: Option<String>,
    /// The job's correlation id.
    pub correlation_id: Option<String>,
    /// The job's status. For live jobs, [`JobStatus::Processing`] takes the running ones
    /// and the other live statuses the waiting ones.
    pub status: Option<JobStatus>,
    /// A key of the job's metadata and its value as text ([`Client::jobs`](crate::Client::jobs) only).
    pub metadata: Option<(String, String)>,
    /// The job's retry group (seed 002; `Enqueue::with_retry_group`).
    pub retry_group: Option<String>,
    /// The job's external id (seed 002's string id; `Enqueue::with_external_id`).
    pub external_id: Option<String>,
    /// The job's sub-state (seed 002; `JobContext::set_sub_state`).
    pub sub_state: Option<String>,
    /// Posted at or after this time ([`Client::jobs`](crate::Client::jobs) only; by the UUIDv7 id, so a job
    /// another producer posted with a random id is outside every range).
    pub posted_after: Option<DateTime<Utc>>,
    /// Posted before this time ([`Client::jobs`](crate::Client::jobs) only, as `posted_after`).
    pub posted_before: Option<DateTime<Utc>>,
    /// The type of the job's last error.
    pub error_kind: Option<String>,
    /// The job's last error, masked ([`ErrorGroup::pattern`](crate::ErrorGroup::pattern)):
    /// only jobs whose last run failed (retrying or failed for good) with a message that
    /// masks to this.
    pub error_pattern: Option<String>,
}

impl JobFilter {
    /// Every job.
    pub fn new() -> Self {
        JobFilter::default()
    }

    /// Refuses a filter no stored job could match and a database could not take: a text
    /// with a NUL character (PostgreSQL's text cannot hold one, and answered with its own
    /// error). Every backend refuses it alike.
    pub(crate) fn check(&self) -> Result<()> {
        let texts = [
            ("job filter's queue", self.queue.as_deref()),
            ("job filter's task type", self.task_type.as_deref()),
            ("job filter's tenant", self.tenant.as_deref()),
            (
                "job filter's correlation id",
                self.correlation_id.as_deref(),
            ),
            (
                "job filter's metadata key",
                self.metadata.as_ref().map(|m| m.0.as_str()),
            ),
            (
                "job filter's metadata value",
                self.metadata.as_ref().map(|m| m.1.as_str()),
            ),
            ("job filter's retry group", self.retry_group.as_deref()),
            ("job filter's external id", self.external_id.as_deref()),
            ("job filter's sub-state", self.sub_state.as_deref()),
            ("job filter's error type", self.error_kind.as_deref()),
            ("job filter's error pattern", self.error_pattern.as_deref()),
        ];
        for (what, text) in texts {
            if text.is_some_and(|t| t.contains('\0')) {
                return Err(Error::invalid(what, "must not contain a NUL character"));
            }
        }
        Ok(())
    }

    /// Only jobs of this queue.
    #[must_use]
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only jobs of this task type.
    #[must_use]
    pub fn task_type(mut self, task_type: impl Into<String>) -> Self {
        self.task_type = Some(task_type.into());
        self
    }

    /// Only jobs of this tenant.
    #[must_use]
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Only jobs with this correlation id.
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// Only jobs in this status.
    #[must_use]
    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only jobs of this retry group (seed 002).
    #[must_use]
    pub fn retry_group(mut self, group: impl Into<String>) -> Self {
        self.retry_group = Some(group.into());
        self
    }

    /// Only jobs with this external id (seed 002's string id).
    #[must_use]
    pub fn external_id(mut self, id: impl Into<String>) -> Self {
        self.external_id = Some(id.into());
        self
    }

    /// Only jobs whose handler last set this sub-state (seed 002).
    #[must_use]
    pub fn sub_state(mut self, sub_state: impl Into<String>) -> Self {
        self.sub_state = Some(sub_state.into());
        self
    }

    /// Seed 002's fields this filter asks for, by their metadata key (`retry_group`,
    /// `external_id`, `sub_state`: fixed names, never input), with the value.
    pub(crate) fn seed_002(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("retry_group", self.retry_group.as_deref()),
            ("external_id", self.external_id.as_deref()),
            ("sub_state", self.sub_state.as_deref()),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
    }

    /// Only jobs whose metadata has `key` with this value (a JSON string, number or
    /// boolean compared as text).
    #[must_use]
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata = Some((key.into(), value.into()));
        self
    }

    /// Only the jobs of an error group: its task type, error type and pattern.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// use sk_runtime::JobFilter;
    ///
    /// let day = chrono::Utc::now() - chrono::Duration::hours(24);
    /// if let Some(group) = client.error_groups(day, 1).await?.first() {
    ///     let retried = client.retry_where(&JobFilter::new().error_group(group)).await?;
    ///     println!("{retried} jobs of {:?} retried", group.pattern);
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn error_group(mut self, group: &crate::ErrorGroup) -> Self {
        self.task_type = Some(group.task_type.clone());
        self.error_kind = group.kind.clone();
        self.error_pattern = Some(group.pattern.clone());
        self
    }

    /// Only jobs whose last error has this type.
    #[must_use]
    pub fn error_kind(mut self, kind: impl Into<String>) -> Self {
        self.error_kind = Some(kind.into());
        self
    }

    /// Only jobs whose last run failed with a message that masks to `pattern`
    /// ([`ErrorGroup::pattern`](crate::ErrorGroup::pattern)).
    #[must_use]
    pub fn error_pattern(mut self, pattern: impl Into<String>) -> Self {
        self.error_pattern = Some(pattern.into());
        self
    }

    /// The filter as `key=value` words (`queue=payments type=charge_card status=fatal`),
    /// for the audit trail; values with a space or a quote are quoted as JSON strings.
    pub(crate) fn describe(&self) -> String {
        let quoted = |v: &str| {
            if v.is_empty() || v.contains(|c: char| c.is_whitespace() || c == '"' || c == '=') {
                serde_json::to_string(v).unwrap_or_default()
            } else {
                v.to_owned()
            }
        };
        let status = self.status.map(|s| format!("{s:?}").to_lowercase());
        let metadata = self.metadata.as_ref().map(|(k, v)| format!("{k}:{v}"));
        let posted = |t: Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339());
        let words: Vec<String> = [
            ("queue", self.queue.clone()),
            ("type", self.task_type.clone()),
            ("tenant", self.tenant.clone()),
            ("correlation", self.correlation_id.clone()),
            ("status", status),
            ("metadata", metadata),
            ("retry-group", self.retry_group.clone()),
            ("external-id", self.external_id.clone()),
            ("sub-state", self.sub_state.clone()),
            ("posted-after", posted(self.posted_after)),
            ("posted-before", posted(self.posted_before)),
            ("error-kind", self.error_kind.clone()),
            ("error", self.error_pattern.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", quoted(&v?))))
        .collect();
        if words.is_empty() {
            "all".to_owned()
        } else {
            words.join(" ")
        }
    }

    /// Whether a listed job's last error is the one the filter asks for (the store's
    /// `LIKE` on the pattern takes a few more).
    pub(crate) fn takes_error_of(&self, job: &JobSummary) -> bool {
        self.error_pattern.as_deref().is_none_or(|p| {
            crate::model::mask(job.last_error_message.as_deref().unwrap_or_default()) == p
        }) && self
            .error_kind
            .as_ref()
            .is_none_or(|k| job.last_error_type.as_ref() == Some(k))
    }

    /// Only jobs posted in `[from, to)`; either end may be open.
    #[must_use]
    pub fn posted(mut self, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        self.posted_after = from;
        self.posted_before = to;
        self
    }

    /// Whether a live job (in the queue table) may match: not a final status.
    pub(crate) fn takes_live(&self) -> bool {
        !self.status.is_some_and(JobStatus::is_final)
    }

    /// Whether only running live jobs match (`Some(true)`), only waiting ones
    /// (`Some(false)`), or both.
    pub(crate) fn running(&self) -> Option<bool> {
        self.status.map(|s| s == JobStatus::Processing)
    }

    /// The condition on a live queue row for the jobs waiting on others: only those
    /// (pending), none of those (unprocessed), or no condition.
    pub(crate) fn pending_clause(&self) -> &'static str {
        match self.status {
            Some(JobStatus::Pending) => " AND coalesce(task_waiting_on, 0) > 0",
            Some(JobStatus::Unprocessed) => " AND coalesce(task_waiting_on, 0) = 0",
            _ => "",
        }
    }
}

/// What [`Client::prune`](crate::Client::prune) removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Pruned {
    /// Results deleted row by row.
    pub rows: u64,
    /// Whole results partitions dropped (PostgreSQL and MySQL), with all their rows.
    pub partitions: Vec<String>,
    /// Rows of per-minute run counts deleted.
    pub run_counts: u64,
}

/// One queue as [`Client::queues`](crate::Client::queues) shows it: its live jobs by state, whether it is
/// paused, and its concurrency limit across workers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct QueueState {
    /// The queue's name.
    pub name: String,
    /// When an operator paused it; `None` while it runs.
    pub paused_at: Option<DateTime<Utc>>,
    /// Since when every worker claims it fairly across its tenants
    /// ([`Client::set_fair`](crate::Client::set_fair)); `None`: in the queue's order
    /// (a limit per tenant still claims tenant by tenant).
    pub fair_since: Option<DateTime<Utc>>,
    /// At most this many of its jobs run at once over all workers
    /// ([`Client::set_global_limit`](crate::Client::set_global_limit)).
    pub global_limit: Option<u32>,
    /// At most this many jobs of each of its tenants run at once over all workers
    /// ([`Client::set_tenant_limit`](crate::Client::set_tenant_limit)).
    pub tenant_limit: Option<u32>,
    /// At most so many jobs of each of its tenants start per time window over all workers
    /// ([`Client::set_tenant_rate_limit`](crate::Client::set_tenant_rate_limit)).
    pub tenant_rate_limit: Option<crate::model::RateLimit>,
    /// At most so many of its jobs start per time window over all workers, and how many
    /// did in the window that ends now
    /// ([`Client::set_rate_limit`](crate::Client::set_rate_limit)).
    pub rate_limit: Option<crate::model::RateState>,
    /// Jobs that can run now.
    pub available: i64,
    /// Jobs waiting for their not-before time (delayed or retrying).
    pub scheduled: i64,
    /// Jobs under a valid lease.
    pub running: i64,
    /// Jobs waiting on other jobs to succeed (a workflow's later stages).
    pub pending: i64,
}
