//! Workflows as the client shows them ([`Client::workflow`](crate::Client::workflow)).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::JobStatus;

from_row! {
/// A workflow on record: when it was enqueued, how many stages and jobs it has.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkflowRecord {
    /// Its id (`WorkflowIds::workflow`).
    pub id: Uuid = "workflow_id",
    /// Its stages.
    pub stages: i64 = "workflow_stages",
    /// Its jobs, over every stage.
    pub jobs: i64 = "workflow_jobs",
    /// When it was enqueued.
    pub created_at: DateTime<Utc> = "workflow_created_at_ts",
}
}

/// One job of a workflow with its state now ([`Client::workflow_jobs`](crate::Client::workflow_jobs)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkflowJob {
    /// The job's id.
    pub id: Uuid,
    /// Its stage, from 0.
    pub stage: usize,
    /// Its task type (`None` once its results are pruned).
    pub task_type: Option<String>,
    /// Its state: [`JobStatus::Processing`] while a worker holds it,
    /// [`JobStatus::Pending`] while it waits on the stage before; `None` once pruned.
    pub status: Option<JobStatus>,
}

from_row! {
/// A workflow's job as the store reads it.
#[derive(Debug)]
pub(crate) struct WorkflowJobRow {
    task_id: Uuid = "task_id",
    workflow_stage: i64 = "workflow_stage",
    task_type: Option<String> = "task_type",
    task_status: Option<i32> = "task_status",
}
}

impl From<WorkflowJobRow> for WorkflowJob {
    fn from(row: WorkflowJobRow) -> Self {
        WorkflowJob {
            id: row.task_id,
            stage: usize::try_from(row.workflow_stage).unwrap_or(0),
            task_type: row.task_type,
            status: row.task_status.map(JobStatus::from_code),
        }
    }
}
