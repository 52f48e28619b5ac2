//! What a job is, as the store records it and the client shows it: statuses, records,
//! counts and the queue's state.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::Result;

/// The job states' codes (the seed's), named for the SQL sk writes:
/// `format!("… WHERE task_status = {FATAL}")`. [`JobStatus`] has the same values.
pub(crate) mod status {
    pub(crate) const UNPROCESSED: i32 = 1;
    pub(crate) const PROCESSING: i32 = 2;
    pub(crate) const PROCESSED: i32 = 3;
    pub(crate) const ERROR: i32 = 4;
    pub(crate) const FAULTED: i32 = 5;
    pub(crate) const FATAL: i32 = 6;
    pub(crate) const CANCELLED: i32 = 7;
    pub(crate) const PENDING: i32 = 8;
}

/// A job's status in `task_results_t.task_status` (the seed's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JobStatus {
    /// Posted, not yet run (1).
    Unprocessed = status::UNPROCESSED as isize,
    /// A worker holds it now (2).
    Processing = status::PROCESSING as isize,
    /// Succeeded (3).
    Processed = status::PROCESSED as isize,
    /// Failed with a recoverable error and waits for its retry (4).
    Error = status::ERROR as isize,
    /// Failed with a recoverable error and has one attempt left (5).
    Faulted = status::FAULTED as isize,
    /// Failed for good: attempts exhausted, a fatal error, or a payload that does not
    /// deserialize (6).
    Fatal = status::FATAL as isize,
    /// Cancelled by an operator, before or while it ran, or because a job it waited on
    /// was (7).
    Cancelled = status::CANCELLED as isize,
    /// Waits on other jobs, and runs once they have all succeeded (8; a workflow's later
    /// stage, [`Workflow`](crate::Workflow)).
    Pending = status::PENDING as isize,
    /// A code this version does not know.
    Unknown = 0,
}

impl JobStatus {
    pub(crate) fn from_code(code: i32) -> Self {
        match code {
            status::UNPROCESSED => JobStatus::Unprocessed,
            status::PROCESSING => JobStatus::Processing,
            status::PROCESSED => JobStatus::Processed,
            status::ERROR => JobStatus::Error,
            status::FAULTED => JobStatus::Faulted,
            status::FATAL => JobStatus::Fatal,
            status::CANCELLED => JobStatus::Cancelled,
            status::PENDING => JobStatus::Pending,
            _ => JobStatus::Unknown,
        }
    }

    /// Whether the job is finished (processed, fatal or cancelled).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Processed | JobStatus::Fatal | JobStatus::Cancelled
        )
    }
}

/// Counts from [`QueueInfo::counts`](crate::QueueInfo::counts).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct QueueCounts {
    /// Jobs per recorded status; a job waiting for its first outcome is unprocessed,
    /// with or without its results row. A running job keeps its last recorded status
    /// here (unprocessed, or error when retrying); see `running` for jobs under a lease,
    /// and [`QueueInfo::job`](crate::QueueInfo::job), which reports a running job as processing.
    pub by_status: Vec<(JobStatus, i64)>,
    /// Live jobs that can run now.
    pub available: i64,
    /// Live jobs waiting for their not-before time (delayed or retrying).
    pub scheduled: i64,
    /// Live jobs waiting on other jobs to succeed (a workflow's later stages).
    pub pending: i64,
    /// Live jobs under a valid lease.
    pub running: i64,
    /// Live jobs whose holder's lease ran out; the next claim takes them.
    pub lease_expired: i64,
}

impl QueueCounts {
    /// The number of results rows with `status`.
    pub fn status(&self, status: JobStatus) -> i64 {
        self.by_status
            .iter()
            .filter(|(s, _)| *s == status)
            .map(|(_, n)| n)
            .sum()
    }
}

from_row! {
/// A job at the head of the queue, from [`QueueInfo::peek`](crate::QueueInfo::peek).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueuedJob {
    /// Job id.
    pub id: Uuid = "task_id",
    /// Task type.
    pub task_type: String = "task_type",
    /// Queue.
    pub queue: String = "task_queue",
    /// Priority (lower runs first).
    pub priority: i32 = "task_priority",
    /// Attempts used so far.
    pub attempt: i32 = "task_attempt",
    /// Attempt limit.
    pub max_attempts: i32 = "task_max_attempts",
    /// Not-before time.
    pub run_at: DateTime<Utc> = "task_locked_until_ts",
    /// When it was enqueued.
    pub posted_at: DateTime<Utc> = "task_posted_at_ts",
}
}

from_row! {
/// Everything recorded about one job, from [`QueueInfo::job`](crate::QueueInfo::job).
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct JobRecord {
    /// Job id.
    pub id: Uuid = "task_id",
    /// Task type.
    pub task_type: String = "task_type",
    /// Who posted it.
    pub source: String = "task_source",
    /// Queue.
    pub queue: String = "task_queue",
    /// The JSON payload, while the job is live or after it failed for good (successful
    /// jobs do not keep it).
    pub payload: Option<String> = "task_payload",
    /// Status code; see [`JobRecord::status`].
    pub status_code: i32 = "task_status",
    /// Priority.
    pub priority: i32 = "task_priority",
    /// How many runs failed.
    pub error_count: i32 = "task_error_count",
    /// The last error's type.
    pub last_error_type: Option<String> = "task_last_error_type",
    /// The last error's message.
    pub last_error_message: Option<String> = "task_last_error_message",
    /// The last error's detail (source chain, panic location, ...).
    pub last_error_detail: Option<String> = "task_last_error_detail",
    /// Whether the last error was recoverable.
    pub last_error_recoverable: Option<bool> = "task_last_error_is_recoverable",
    /// Duration of the last run in milliseconds.
    pub processing_time_ms: i64 = "task_processing_time_milliseconds",
    /// When it was enqueued.
    pub posted_at: DateTime<Utc> = "task_posted_at_ts",
    /// When it first started.
    pub first_attempt_at: Option<DateTime<Utc>> = "task_first_processing_attempted_at_ts",
    /// When it last started.
    pub last_attempt_at: Option<DateTime<Utc>> = "task_last_processing_attempted_at_ts",
    /// When it was finished (processed or fatal).
    pub finalized_at: Option<DateTime<Utc>> = "task_processing_finalized_at_ts",
    /// Attempts used: while the job is live, its queue row's count; once it has ended,
    /// the number of its last recorded attempt (`None` for a job that never ran).
    pub attempt: Option<i32> = "task_attempt",
    /// Attempt limit, while the job is live.
    pub max_attempts: Option<i32> = "task_max_attempts",
    /// Not-before time or lease expiry, while the job is live.
    pub locked_until: Option<DateTime<Utc>> = "task_locked_until_ts",
    /// The worker holding it, while running.
    pub locked_by: Option<String> = "task_locked_by",
    /// Every attempt that did not succeed, oldest first: failures, and leases that ran out
    /// ("worker lost"). [`JobRecord::attempts`] adds the successful one.
    pub failed_attempts: Vec<Attempt> = [json "task_errors"],
    /// The worker of the last recorded attempt.
    pub last_worker: Option<String> = "task_last_locked_by",
    /// What the handler returned with `Ok`, as JSON (`None` for `()`); see
    /// [`JobRecord::output`].
    pub output_json: Option<String> = "task_output",
    /// The tenant it was enqueued for.
    pub tenant: Option<String> = "task_tenant",
    /// Its correlation id.
    pub correlation_id: Option<String> = "task_correlation_id",
    /// Its metadata, a JSON object as text.
    pub metadata: Option<String> = "task_metadata",
    /// Its unique key, if it has one.
    pub unique_key: Option<String> = "task_unique_key",
    #[serde(skip)]
    unique_mode_code: Option<i16> = "task_unique_mode",
    /// How many times an application changed it while it waited (seed 002's `version`):
    /// what [`Client::update`](crate::Client::update) compares. `None` once it has ended.
    pub version: Option<i32> = "task_version",
    /// When its row last changed (seed 002's `updated_at`), on PostgreSQL and
    /// MySQL/MariaDB; `None` on SQLite.
    pub updated_at: Option<DateTime<Utc>> = "task_updated_at_ts",
}
=> JobRecord::settled
}

/// One recorded run of a job (seed 004's audit log).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[non_exhaustive]
pub struct Attempt {
    /// 1 for the first run, 2 for the first retry, ...
    pub attempt: i32,
    /// The worker that ran it (`task_locked_by`), where known.
    #[serde(default)]
    pub worker: Option<String>,
    /// When it was claimed.
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    /// When its outcome was recorded (for a lost attempt: when the next claim noticed).
    #[serde(default)]
    pub ended_at: Option<DateTime<Utc>>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error's type (`"timeout"`, `"panic"`, `"worker_lost"`, ...), unless it succeeded.
    #[serde(default)]
    pub kind: Option<String>,
    /// The error's message, unless it succeeded.
    #[serde(default)]
    pub message: Option<String>,
    /// The error's detail, where it had one.
    #[serde(default)]
    pub detail: Option<String>,
}

/// How an [`Attempt`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// It succeeded.
    Processed,
    /// It failed and the job was retried.
    Retried,
    /// It failed for good.
    Fatal,
    /// Its worker's lease ran out before it recorded an outcome (a crash, a stall, a lost
    /// connection); it counts as a failed attempt.
    Lost,
    /// An operator cancelled the job while it ran ([`Client::cancel`](crate::Client::cancel)).
    Cancelled,
}

impl JobRecord {
    /// The status.
    pub fn status(&self) -> JobStatus {
        JobStatus::from_code(self.status_code)
    }

    /// The mode of its unique key: `None` without a key, and for the scheduler's ticks
    /// (unique until their result is pruned).
    pub fn unique_mode(&self) -> Option<crate::UniqueMode> {
        match self.unique_mode_code {
            Some(1) => Some(crate::UniqueMode::Skip),
            Some(2) => Some(crate::UniqueMode::Restart),
            Some(3) => Some(crate::UniqueMode::Replace),
            _ => None,
        }
    }

    /// The record as read, with the attempt of an ended job (its queue row, which counts
    /// them, is gone) from the attempts recorded.
    fn settled(mut self) -> Self {
        if self.attempt.is_none() {
            self.attempt = self.attempts().last().map(|a| a.attempt);
        }
        self
    }

    /// Every recorded attempt, oldest first: the failed ones and, for a processed job,
    /// the successful last one.
    pub fn attempts(&self) -> Vec<Attempt> {
        let mut all = self.failed_attempts.clone();
        if self.status() == JobStatus::Processed {
            all.push(Attempt {
                attempt: all.last().map_or(1, |a| a.attempt + 1),
                worker: self.last_worker.clone(),
                started_at: self.last_attempt_at,
                ended_at: self.finalized_at,
                outcome: AttemptOutcome::Processed,
                kind: None,
                message: None,
                detail: None,
            });
        }
        all
    }

    /// The handler's `Ok` value, deserialized; `None` if it returned `()` or has not
    /// succeeded.
    ///
    /// # Errors
    /// The stored output is not a `T`.
    pub fn output<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.output_json
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
    }
}

/// What a duplicate unique key does while a job with that key is live. Modes hold among
/// live jobs only: once the job has finished, its key is free and the next enqueue runs it
/// again (seed 003's "restart a finished task when its data changes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UniqueMode {
    /// Nothing changes; the live job's id is returned.
    Skip = 1,
    /// Seed 003's restart-on-update. A waiting job takes the new payload (any number of
    /// re-posts while it waits coalesce into one run); a running job runs once more after
    /// the current run, with the newest payload, as a new job with the same key.
    Restart = 2,
    /// A waiting job takes the new payload and run-at time; a running one is left alone.
    Replace = 3,
}
