//! Queue insight on the client handle: counts by queue, task type or tenant, the job
//! list with filters and keyset pagination, workers, a queue's tenants and throughput.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Client;
use crate::error::{Error, Result};
use crate::model::{groups_of, throughput_of};
use crate::model::{
    CountBy, ErrorGroup, GroupCounts, JobFilter, JobPage, Per, TenantState, Throughput, WorkerInfo,
    MAX_PAGE,
};

/// How many groups of one task type, queue, exact error message and hour
/// [`Client::error_groups`] reads at most, largest first, before it masks the messages.
pub const ERROR_ROWS: i64 = 50_000;

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
        if self.spread() {
            let all = self.each(|c| async move { c.count_by(by).await }).await?;
            return Ok(super::across::group_counts(all));
        }
        self.reader().count_by(&self.schema, by, self.now()).await
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
        if self.spread() {
            let pages = self
                .each(|c| async move { c.jobs(filter, after, limit).await })
                .await?;
            return Ok(super::across::job_page(pages, limit as usize));
        }
        filter.check()?;
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(
                "page size",
                format!("{limit} must be from 1 to {MAX_PAGE}"),
            ));
        }
        let limit = limit as usize;
        let mut jobs = Vec::with_capacity(limit);
        let mut cursor = after;
        loop {
            let page = self
                .reader()
                .list_jobs(&self.schema, filter, cursor, limit as i64, self.now())
                .await?;
            let full = page.len() == limit;
            cursor = page.last().map(|j| j.id);
            // The store's `LIKE` on an error pattern takes a few jobs of other patterns.
            jobs.extend(page.into_iter().filter(|j| filter.takes_error_of(j)));
            if !full || jobs.len() >= limit {
                break;
            }
        }
        jobs.truncate(limit);
        let next = (jobs.len() == limit)
            .then(|| jobs.last().map(|j| j.id))
            .flatten();
        Ok(JobPage { jobs, next })
    }
}

impl Client {
    /// Groups the jobs whose last run failed (retrying, or failed for good) with a run
    /// that started at or after `since`, by task type, error type and message with what
    /// varies masked (numbers, UUIDs, hex ids, quoted values, e-mail addresses, URL
    /// parameters: [`ErrorGroup`]'s rules), largest group first, at most `limit` groups.
    /// The database groups by exact message and hour (served by the results' index of
    /// jobs not waiting or done); the masking merges those groups here, from the
    /// [`ERROR_ROWS`] largest.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// let day = chrono::Utc::now() - chrono::Duration::hours(24);
    /// for g in client.error_groups(day, 20).await? {
    ///     println!("{} × {} {:?}: {} (queues {:?})", g.count, g.task_type, g.kind, g.pattern, g.queues);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit of 0 or over [`MAX_PAGE`]; the database fails.
    pub async fn error_groups(&self, since: DateTime<Utc>, limit: u32) -> Result<Vec<ErrorGroup>> {
        if self.spread() && limit > 0 && limit <= MAX_PAGE {
            let rows = self
                .each(
                    |c| async move { c.reader().error_groups(&c.schema, since, ERROR_ROWS).await },
                )
                .await?;
            return Ok(groups_of(
                rows.into_iter().flatten().collect(),
                limit as usize,
            ));
        }
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(
                "group count",
                format!("{limit} must be from 1 to {MAX_PAGE}"),
            ));
        }
        let rows = self
            .reader()
            .error_groups(&self.schema, since, ERROR_ROWS)
            .await?;
        Ok(groups_of(rows, limit as usize))
    }

    /// The workers that announced themselves, alive or not, by id, with the jobs each
    /// holds now.
    ///
    /// # Errors
    /// The database fails.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        if self.spread() {
            let all = self.each(|c| async move { c.workers().await }).await?;
            return Ok(super::across::workers(all));
        }
        self.reader().workers(&self.schema, self.now()).await
    }

    /// The tenants of `queue` ([`Enqueue::with_tenant`](crate::Enqueue::with_tenant))
    /// with live jobs, or with starts in the window of the queue's rate limit per tenant,
    /// by name: each one's available and running jobs, its starts against that rate, and
    /// which limit per tenant holds it back now, if one does
    /// ([`Client::set_tenant_limit`](crate::Client::set_tenant_limit),
    /// [`Client::set_tenant_rate_limit`](crate::Client::set_tenant_rate_limit)). A
    /// tenant held with available jobs waits for its own limit, not for the others.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// for t in client.tenants("partner_api").await? {
    ///     if let Some(hold) = t.held_by {
    ///         println!("{}: {} waiting, held by {hold:?}", t.tenant, t.available);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name; the database fails.
    pub async fn tenants(&self, queue: &str) -> Result<Vec<TenantState>> {
        if self.spread() {
            let all = self.each(|c| async move { c.tenants(queue).await }).await?;
            return Ok(super::across::tenants(all));
        }
        crate::model::check_name("queue name", queue)?;
        self.reader()
            .tenant_states(&self.schema, queue, self.now())
            .await
    }
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
    /// [`Error::Invalid`] for a task type no job can have (empty, a control character);
    /// the database fails.
    pub async fn throughput(
        &self,
        since: DateTime<Utc>,
        per: Per,
        task_type: Option<&str>,
    ) -> Result<Vec<Throughput>> {
        if let Some(task_type) = task_type {
            crate::model::check_name("task type", task_type)?;
        }
        if self.spread() {
            let rows = self
                .each(|c| async move { c.reader().job_stats(&c.schema, since, task_type).await })
                .await?;
            return Ok(throughput_of(rows.into_iter().flatten().collect(), per));
        }
        let rows = self
            .reader()
            .job_stats(&self.schema, since, task_type)
            .await?;
        Ok(throughput_of(rows, per))
    }
}
