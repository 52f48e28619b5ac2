//! Workflows on the client handle: a workflow's record, the newest workflows, a
//! workflow's jobs by stage with their states, and running again what failed of one.

use uuid::Uuid;

use super::audit::On;
use super::Client;
use crate::error::{Error, Result};
use crate::model::{JobStatus, WorkflowJob, WorkflowRecord, MAX_PAGE};
use crate::store::Pool;

impl Client {
    /// Workflow `id` (`Workflow::enqueue`'s `WorkflowIds::workflow`): when it was
    /// enqueued, its stages and jobs; `None` if there is no such workflow (or its jobs'
    /// results were pruned).
    ///
    /// # Errors
    /// The database fails.
    pub async fn workflow(&self, id: Uuid) -> Result<Option<WorkflowRecord>> {
        if self.spread() {
            let all = self.each(|c| async move { c.workflow(id).await }).await?;
            return Ok(all.into_iter().flatten().next());
        }
        Ok(self
            .reader()
            .workflows(&self.schema, Some(id), 1)
            .await?
            .into_iter()
            .next())
    }

    /// The newest `limit` workflows (at most [`MAX_PAGE`]), newest first.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit of 0 or over [`MAX_PAGE`]; the database fails.
    pub async fn workflows(&self, limit: u32) -> Result<Vec<WorkflowRecord>> {
        if self.spread() && limit > 0 && limit <= MAX_PAGE {
            let all = self
                .each(|c| async move { c.workflows(limit).await })
                .await?;
            return Ok(super::across::workflows(all, limit as usize));
        }
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(
                "page size",
                format!("{limit} must be from 1 to {MAX_PAGE}"),
            ));
        }
        self.reader()
            .workflows(&self.schema, None, i64::from(limit))
            .await
    }

    /// The jobs of workflow `id`, stage by stage (in id order within one), each with its
    /// state now; none if there is no such workflow.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client, id: uuid::Uuid) -> sk_runtime::Result<()> {
    /// for job in client.workflow_jobs(id).await? {
    ///     println!("stage {}: {} {:?} {:?}", job.stage, job.id, job.task_type, job.status);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The database fails.
    pub async fn workflow_jobs(&self, id: Uuid) -> Result<Vec<WorkflowJob>> {
        if self.spread() {
            return Box::pin(self.home_of_workflow(id).await?.workflow_jobs(id)).await;
        }
        self.workflow_jobs_on(self.reader(), id).await
    }

    async fn workflow_jobs_on(&self, pool: &Pool, id: Uuid) -> Result<Vec<WorkflowJob>> {
        let rows = pool.workflow_jobs(&self.schema, id, self.now()).await?;
        Ok(rows.into_iter().map(WorkflowJob::from).collect())
    }

    /// Runs workflow `id`'s jobs that failed for good or were cancelled again, as
    /// [`Client::retry`]: those of the first stage that has any. The later stages' jobs
    /// ended with them; they wait on them again and run when they succeed. How many were
    /// retried (not counting the jobs brought back with them).
    ///
    /// # Errors
    /// The database fails; the jobs retried before it failed stay retried.
    pub async fn retry_workflow(&self, id: Uuid) -> Result<u64> {
        if self.spread() {
            return Box::pin(self.home_of_workflow(id).await?.retry_workflow(id)).await;
        }
        // What it acts on is read on the primary.
        let ended: Vec<WorkflowJob> = self
            .workflow_jobs_on(&self.pool, id)
            .await?
            .into_iter()
            .filter(|j| matches!(j.status, Some(JobStatus::Fatal | JobStatus::Cancelled)))
            .collect();
        let first = ended.iter().map(|j| j.stage).min();
        let ended: Vec<Uuid> = ended
            .into_iter()
            .filter(|j| Some(j.stage) == first)
            .map(|j| j.id)
            .collect();
        let mut total = 0;
        for ids in ended.chunks(super::bulk::BULK_BATCH as usize) {
            let back = self.pool.retry(&self.schema, ids, self.now(), true).await?;
            total += back.len() as u64;
        }
        self.record("retry-workflow", On::Target(id.to_string()), Some(total))
            .await?;
        Ok(total)
    }
}
