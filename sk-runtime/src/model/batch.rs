//! A batch's record: its jobs counted by state, and its callbacks.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

/// The event a batch's callback waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchEvent {
    /// Every job of the batch succeeded (after retries, and after an operator's retry of
    /// one that had failed for good).
    Success,
    /// Every job of the batch ended: succeeded, failed for good or cancelled.
    Complete,
    /// A job of the batch failed for good: the first such failure, once.
    Death,
}

impl BatchEvent {
    /// The code stored in `batch_callbacks_t`.
    pub(crate) fn code(self) -> i32 {
        match self {
            BatchEvent::Success => 1,
            BatchEvent::Complete => 2,
            BatchEvent::Death => 3,
        }
    }

    pub(crate) fn from_code(code: i64) -> Option<Self> {
        match code {
            1 => Some(BatchEvent::Success),
            2 => Some(BatchEvent::Complete),
            3 => Some(BatchEvent::Death),
            _ => None,
        }
    }

    /// `"success"`, `"complete"` or `"death"`.
    pub fn name(self) -> &'static str {
        match self {
            BatchEvent::Success => "success",
            BatchEvent::Complete => "complete",
            BatchEvent::Death => "death",
        }
    }

    /// The event of a name [`name`](Self::name) gives.
    pub fn from_name(name: &str) -> Option<Self> {
        [BatchEvent::Success, BatchEvent::Complete, BatchEvent::Death]
            .into_iter()
            .find(|e| e.name() == name)
    }
}

/// A batch's callback, as [`BatchRecord`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BatchCallback {
    /// What it waits for.
    pub event: BatchEvent,
    /// The id its job has once posted (chosen at the batch's enqueue).
    pub job_id: Uuid,
    /// Its job's task type.
    pub task_type: String,
    /// When it was posted; `None` while its event has not come.
    pub posted_at: Option<DateTime<Utc>>,
}

/// A batch (`Client::batch`, `sk batch`, the dashboard's Batches page): its jobs counted
/// by state as their outcomes were recorded, and its callbacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BatchRecord {
    /// Its id.
    pub id: Uuid,
    /// What the application said it is, if anything.
    pub description: Option<String>,
    /// Its jobs.
    pub total: i64,
    /// Its jobs not ended yet (waiting, running or to be retried).
    pub pending: i64,
    /// Its jobs that succeeded.
    pub succeeded: i64,
    /// Its jobs that failed for good.
    pub failed: i64,
    /// Its jobs that were cancelled.
    pub cancelled: i64,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When its last live job ended; `None` while one is live.
    pub finished_at: Option<DateTime<Utc>>,
    /// Its callbacks, in the order success, complete, death.
    pub callbacks: Vec<BatchCallback>,
}

impl BatchRecord {
    /// Whether every job of the batch has ended.
    pub fn is_finished(&self) -> bool {
        self.pending == 0
    }
}
