//! Actions on every job a filter takes, on the client handle: cancel, retry, run now and
//! delete, a statement per [`BULK_BATCH`] jobs (no round trip per job), and the count of
//! what a filter takes, for a confirmation. Each adds one entry to the audit trail.

use uuid::Uuid;

use super::audit::On;
use super::Client;
use crate::error::Result;
use crate::model::{JobFilter, JobStatus, MAX_PAGE};

/// Jobs per statement of a bulk call.
pub(super) const BULK_BATCH: i64 = 500;

impl Client {
    /// Cancels every live job the filter takes (a filter on a final status takes none);
    /// how many were cancelled.
    ///
    /// # Errors
    /// The database fails; the jobs cancelled before it failed stay cancelled.
    pub async fn cancel_where(&self, filter: &JobFilter) -> Result<u64> {
        if self.spread() {
            let all = self
                .each(|c| async move { c.cancel_where(filter).await })
                .await?;
            return Ok(all.into_iter().sum());
        }
        filter.check()?;
        let mut total = 0;
        if filter.takes_live() {
            let mut pages = FilterPages::new(filter, Side::Live);
            while let Some(ids) = pages.next(self).await? {
                total += self.cancel_ids(&ids).await?;
            }
        }
        self.record("cancel", On::Filter(filter), Some(total))
            .await?;
        Ok(total)
    }

    /// Runs every fatal or cancelled job the filter takes again (as [`Client::retry`],
    /// workflows healing); how many, not counting the dependants revived. A filter on
    /// another status takes none.
    ///
    /// # Errors
    /// The database fails; the jobs retried before it failed stay retried.
    pub async fn retry_where(&self, filter: &JobFilter) -> Result<u64> {
        if self.spread() {
            let all = self
                .each(|c| async move { c.retry_where(filter).await })
                .await?;
            return Ok(all.into_iter().sum());
        }
        filter.check()?;
        let mut total = 0;
        if filter
            .status
            .is_none_or(|s| matches!(s, JobStatus::Fatal | JobStatus::Cancelled))
        {
            let mut pages = FilterPages::new(filter, Side::Ended);
            while let Some(ids) = pages.next(self).await? {
                let back = self
                    .pool
                    .retry(&self.schema, &ids, self.now(), true)
                    .await?;
                total += back.len() as u64;
            }
        }
        self.record("retry", On::Filter(filter), Some(total))
            .await?;
        Ok(total)
    }

    /// Runs every fatal or cancelled job of retry group `group` again (seed 002's
    /// `retry_group`, `Enqueue::with_retry_group`): [`Client::retry_where`] with that
    /// group; how many. `sk retry --retry-group` does the same.
    ///
    /// # Errors
    /// As [`Client::retry_where`].
    pub async fn retry_group(&self, group: &str) -> Result<u64> {
        self.retry_where(&JobFilter::new().retry_group(group)).await
    }

    /// Makes every waiting job the filter takes (delayed, or waiting for a retry; not
    /// one waiting on another job) due now; how many.
    ///
    /// # Errors
    /// The database fails; the jobs made due before it failed stay due.
    pub async fn run_now_where(&self, filter: &JobFilter) -> Result<u64> {
        if self.spread() {
            let all = self
                .each(|c| async move { c.run_now_where(filter).await })
                .await?;
            return Ok(all.into_iter().sum());
        }
        filter.check()?;
        let mut total = 0;
        if filter.takes_live() && filter.status != Some(JobStatus::Processing) {
            let mut pages = FilterPages::new(filter, Side::Live);
            while let Some(ids) = pages.next(self).await? {
                total += self
                    .pool
                    .reschedule_many(&self.schema, &ids, self.now())
                    .await?;
            }
        }
        self.record("run-now", On::Filter(filter), Some(total))
            .await?;
        Ok(total)
    }

    /// Deletes the ended jobs the filter takes: those that failed for good or were
    /// cancelled, or, with [`JobFilter::status`] [`JobStatus::Processed`], those that
    /// succeeded; how many. A live job is never deleted: cancel it first.
    ///
    /// # Errors
    /// The database fails; the jobs deleted before it failed stay deleted.
    pub async fn delete_where(&self, filter: &JobFilter) -> Result<u64> {
        if self.spread() {
            let all = self
                .each(|c| async move { c.delete_where(filter).await })
                .await?;
            return Ok(all.into_iter().sum());
        }
        filter.check()?;
        let mut total = 0;
        if filter.status.is_none_or(JobStatus::is_final) {
            let mut pages = FilterPages::new(filter, Side::Ended);
            while let Some(ids) = pages.next(self).await? {
                total += self.pool.delete_ended(&self.schema, &ids).await?;
            }
        }
        self.record("delete", On::Filter(filter), Some(total))
            .await?;
        Ok(total)
    }

    /// Deletes job `id` if it has ended (succeeded, failed for good, cancelled); whether
    /// it did. A live job is never deleted: cancel it first.
    ///
    /// # Errors
    /// The database fails.
    pub async fn delete(&self, id: Uuid) -> Result<bool> {
        if self.spread() {
            return Box::pin(self.home_of_job(id).await?.delete(id)).await;
        }
        let deleted = self.pool.delete_ended(&self.schema, &[id]).await?;
        self.record("delete", On::Target(id.to_string()), Some(deleted))
            .await?;
        Ok(deleted > 0)
    }

    /// How many jobs the filter takes that a bulk action acts on, counting no further
    /// than `up_to`, a page of ids at a time: the live ones, and those that failed for
    /// good or were cancelled (with a final status in the filter, those in it). For a
    /// bulk action's confirmation.
    ///
    /// # Errors
    /// The database fails.
    pub async fn count_where(&self, filter: &JobFilter, up_to: u64) -> Result<u64> {
        if self.spread() {
            let all = self
                .each(|c| async move { c.count_where(filter, up_to).await })
                .await?;
            return Ok(all.into_iter().sum::<u64>().min(up_to));
        }
        filter.check()?;
        let mut total = 0;
        if filter.error_pattern.is_some() || filter.error_kind.is_some() {
            // One pass over the list, which reads each job's last error.
            let mut after = None;
            while total < up_to {
                let page = self
                    .pool
                    .list_jobs(
                        &self.schema,
                        filter,
                        after,
                        COUNT_PAGE.min(i64::from(MAX_PAGE)),
                        self.now(),
                    )
                    .await?;
                after = page.last().map(|j| j.id);
                total += page
                    .iter()
                    .filter(|j| {
                        filter.takes_error_of(j) && !matches!(j.status(), JobStatus::Processed)
                    })
                    .count() as u64;
                if (page.len() as i64) < COUNT_PAGE.min(i64::from(MAX_PAGE)) {
                    break;
                }
            }
            return Ok(total.min(up_to));
        }
        for side in [Side::Live, Side::Ended] {
            let takes = match side {
                Side::Live => filter.takes_live(),
                Side::Ended => filter.status.is_none_or(JobStatus::is_final),
            };
            let mut pages = FilterPages::new(filter, side);
            pages.size = COUNT_PAGE;
            while takes && total < up_to {
                let Some(ids) = pages.next(self).await? else {
                    break;
                };
                total += ids.len() as u64;
            }
        }
        Ok(total.min(up_to))
    }
}

/// Ids per page of [`Client::count_where`].
const COUNT_PAGE: i64 = 10_000;

/// Which of a filter's jobs a bulk call takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The live ones (waiting or running).
    Live,
    /// The ended ones: failed for good and cancelled, or the filter's final status.
    Ended,
}

/// The ids a filter takes, a bulk call's page at a time.
struct FilterPages<'f> {
    filter: &'f JobFilter,
    side: Side,
    size: i64,
    after: Option<Uuid>,
    done: bool,
}

impl<'f> FilterPages<'f> {
    fn new(filter: &'f JobFilter, side: Side) -> Self {
        FilterPages {
            filter,
            side,
            size: BULK_BATCH,
            after: None,
            done: false,
        }
    }

    async fn next(&mut self, client: &Client) -> Result<Option<Vec<Uuid>>> {
        let (pool, schema, filter) = (&client.pool, &client.schema, self.filter);
        while !self.done {
            if filter.error_pattern.is_none() && filter.error_kind.is_none() {
                // Straight from the table of the side, in id order.
                let ids = pool
                    .find_ids(
                        schema,
                        filter,
                        self.side == Side::Live,
                        self.after,
                        self.size,
                    )
                    .await?;
                self.after = ids.last().copied();
                self.done = ids.is_empty();
                return Ok((!ids.is_empty()).then_some(ids));
            }
            // An error filter reads each job's last error: through the list, newest first.
            // A live job with a last error waits for its retry.
            let retrying;
            let listed = if self.side == Side::Live && filter.status.is_none() {
                retrying = JobFilter {
                    status: Some(JobStatus::Error),
                    ..filter.clone()
                };
                &retrying
            } else {
                filter
            };
            let size = self.size.min(i64::from(MAX_PAGE));
            let page = pool
                .list_jobs(schema, listed, self.after, size, client.now())
                .await?;
            self.done = (page.len() as i64) < size;
            self.after = page.last().map(|j| j.id);
            let ids: Vec<Uuid> = page
                .iter()
                .filter(|j| filter.takes_error_of(j) && self.takes(j.status()))
                .map(|j| j.id)
                .collect();
            if !ids.is_empty() {
                return Ok(Some(ids));
            }
        }
        Ok(None)
    }

    fn takes(&self, status: JobStatus) -> bool {
        match (self.side, self.filter.status) {
            (Side::Live, _) => !status.is_final(),
            (Side::Ended, Some(wanted)) => status == wanted,
            (Side::Ended, None) => matches!(status, JobStatus::Fatal | JobStatus::Cancelled),
        }
    }
}
