//! Batches on the client handle: a batch's record, the newest batches, a batch's jobs,
//! and cancelling or retrying what is left of one.

use uuid::Uuid;

use super::audit::On;
use super::Client;
use crate::error::Result;
use crate::model::status::{CANCELLED, FATAL, UNPROCESSED};
use crate::model::{BatchRecord, MAX_PAGE};

/// Which of a batch's jobs [`Client::batch_jobs`] lists, by the state the batch counted
/// each in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchJobs {
    /// Every job.
    All,
    /// Those not ended yet.
    Pending,
    /// Those that succeeded.
    Succeeded,
    /// Those that failed for good.
    Failed,
    /// Those that were cancelled.
    Cancelled,
}

impl BatchJobs {
    fn code(self) -> Option<i32> {
        match self {
            BatchJobs::All => None,
            BatchJobs::Pending => Some(UNPROCESSED),
            BatchJobs::Succeeded => Some(crate::model::status::PROCESSED),
            BatchJobs::Failed => Some(FATAL),
            BatchJobs::Cancelled => Some(CANCELLED),
        }
    }
}

impl Client {
    /// Batch `id` (`Batch::enqueue`'s `BatchIds::batch`) with its counts and callbacks;
    /// `None` if there is no such batch (or it was pruned).
    ///
    /// # Errors
    /// The database fails.
    pub async fn batch(&self, id: Uuid) -> Result<Option<BatchRecord>> {
        if self.spread() {
            let all = self.each(|c| async move { c.batch(id).await }).await?;
            return Ok(all.into_iter().flatten().next());
        }
        Ok(self
            .reader()
            .batches(&self.schema, Some(&[id]), 1)
            .await?
            .into_iter()
            .next())
    }

    /// The newest `limit` batches (at most [`MAX_PAGE`]), newest first.
    ///
    /// # Errors
    /// The database fails.
    pub async fn batches(&self, limit: u32) -> Result<Vec<BatchRecord>> {
        if self.spread() {
            let all = self.each(|c| async move { c.batches(limit).await }).await?;
            return Ok(super::across::batches(all, limit.min(MAX_PAGE) as usize));
        }
        let limit = i64::from(limit.min(MAX_PAGE));
        self.reader().batches(&self.schema, None, limit).await
    }

    /// The ids of batch `id`'s jobs that `which` takes, in id order after `after`, at
    /// most `limit` (at most [`MAX_PAGE`]): pass the last id back for the next page.
    ///
    /// # Errors
    /// The database fails.
    pub async fn batch_jobs(
        &self,
        id: Uuid,
        which: BatchJobs,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Uuid>> {
        if self.spread() {
            let home = self.home_of_batch(id).await?;
            return Box::pin(home.batch_jobs(id, which, after, limit)).await;
        }
        let limit = i64::from(limit.min(MAX_PAGE));
        self.reader()
            .batch_jobs(&self.schema, id, which.code(), after, limit)
            .await
    }

    /// Cancels batch `id`'s jobs not ended yet; how many were cancelled. The batch
    /// counts them as cancelled, which can complete it (its complete callback runs).
    ///
    /// # Errors
    /// The database fails; the jobs cancelled before it failed stay cancelled.
    pub async fn cancel_batch(&self, id: Uuid) -> Result<u64> {
        if self.spread() {
            return Box::pin(self.home_of_batch(id).await?.cancel_batch(id)).await;
        }
        let mut total = 0;
        let mut pages = self.pages_of(id, UNPROCESSED);
        while let Some(ids) = pages.next(self).await? {
            total += self.cancel_ids(&ids).await?;
        }
        self.record("cancel-batch", On::Target(id.to_string()), Some(total))
            .await?;
        Ok(total)
    }

    /// Runs batch `id`'s jobs that failed for good or were cancelled again (as
    /// [`Client::retry`]); how many. The batch counts them as pending again, and its
    /// success callback runs if they all succeed.
    ///
    /// # Errors
    /// The database fails; the jobs retried before it failed stay retried.
    pub async fn retry_batch(&self, id: Uuid) -> Result<u64> {
        if self.spread() {
            return Box::pin(self.home_of_batch(id).await?.retry_batch(id)).await;
        }
        let mut total = 0;
        for state in [FATAL, CANCELLED] {
            let mut pages = self.pages_of(id, state);
            while let Some(ids) = pages.next(self).await? {
                let back = self
                    .pool
                    .retry(&self.schema, &ids, self.now(), true)
                    .await?;
                total += back.len() as u64;
            }
        }
        self.record("retry-batch", On::Target(id.to_string()), Some(total))
            .await?;
        Ok(total)
    }

    fn pages_of(&self, batch: Uuid, state: i32) -> Pages {
        Pages {
            batch,
            state,
            after: None,
        }
    }
}

/// The ids of a batch's jobs in one state, a bulk call's page at a time, in id order.
struct Pages {
    batch: Uuid,
    state: i32,
    after: Option<Uuid>,
}

impl Pages {
    async fn next(&mut self, client: &Client) -> Result<Option<Vec<Uuid>>> {
        let ids = client
            .pool
            .batch_jobs(
                &client.schema,
                self.batch,
                Some(self.state),
                self.after,
                super::bulk::BULK_BATCH,
            )
            .await?;
        self.after = ids.last().copied();
        Ok(self.after.is_some().then_some(ids))
    }
}
