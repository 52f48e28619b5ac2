//! Job control on the client handle: cancel, retry, run now, reschedule, prune, pause
//! and resume queues and their limits, wait for a result.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::audit::On;
use super::{CancelOutcome, Client, ReprioritizeOutcome, RescheduleOutcome, RetryOutcome};
use crate::error::{Error, Result};
use crate::model::{JobRecord, JobStatus, Pruned, QueueCounts, QueueState, QueuedJob, RateLimit};
use crate::store::{QueueFlag, QueueLimit};

impl Client {
    /// Cancels one job: a waiting job leaves the queue, a running one is recorded as
    /// cancelled at once and its handler is asked to stop; either way it is not retried.
    ///
    /// # Errors
    /// The database fails.
    pub async fn cancel(&self, id: Uuid) -> Result<CancelOutcome> {
        if self.spread() {
            return Box::pin(self.home_of_job(id).await?.cancel(id)).await;
        }
        let outcome = self.cancel_one(id).await?;
        let changed = matches!(
            outcome,
            CancelOutcome::Cancelled | CancelOutcome::CancelledWhileRunning
        );
        self.record("cancel", On::Target(id.to_string()), Some(changed.into()))
            .await?;
        Ok(outcome)
    }

    async fn cancel_one(&self, id: Uuid) -> Result<CancelOutcome> {
        let done = self.pool.cancel(&self.schema, &[id], self.now()).await?;
        if let Some(&(_, running)) = done.first() {
            crate::bus::cancelled(&[id]);
            return Ok(if running {
                CancelOutcome::CancelledWhileRunning
            } else {
                CancelOutcome::Cancelled
            });
        }
        Ok(match self.primary_job(id).await? {
            None => CancelOutcome::NotFound,
            Some(record) => CancelOutcome::AlreadyFinished(record.status()),
        })
    }

    /// Deletes what the workers' retention would: the results of jobs that ended (succeeded,
    /// failed for good, cancelled) before `before`, whole partitions where every job in
    /// them did, and the run counts of minutes before it. Live jobs are never touched.
    ///
    /// # Errors
    /// The database fails; what was deleted before it failed stays deleted.
    pub async fn prune(&self, before: DateTime<Utc>) -> Result<Pruned> {
        if self.spread() {
            let all = self.each(|c| async move { c.prune(before).await }).await?;
            return Ok(super::across::pruned(all));
        }
        let pruned = self.pool.prune(&self.schema, before).await?;
        let target = format!("before {}", before.to_rfc3339());
        self.record("prune", On::Target(target), Some(pruned.rows))
            .await?;
        Ok(pruned)
    }

    /// Cancels the live jobs among `ids` and tells their workers; how many.
    pub(super) async fn cancel_ids(&self, ids: &[Uuid]) -> Result<u64> {
        let done = self.pool.cancel(&self.schema, ids, self.now()).await?;
        let ids: Vec<Uuid> = done.iter().map(|(id, _)| *id).collect();
        crate::bus::cancelled(&ids);
        Ok(ids.len() as u64)
    }

    /// Runs a fatal or cancelled job again, now, with a fresh attempt budget (its history
    /// is kept, and its attempts go on counting from where they were); a job waiting for
    /// its not-before time or a retry is made due now.
    ///
    /// A workflow heals: the jobs that waited on it and ended when it failed or was
    /// cancelled (and theirs in turn) wait on it again, in the same transaction, and run
    /// when it succeeds; a dependant that also waits on another job that failed comes
    /// back when that one is retried too. [`Client::retry_alone`] leaves them ended.
    ///
    /// # Errors
    /// The database fails.
    pub async fn retry(&self, id: Uuid) -> Result<RetryOutcome> {
        self.retry_healing(id, true).await
    }

    /// Runs a fatal or cancelled job again as [`Client::retry`] does, but alone: the jobs
    /// that waited on it and ended with it stay ended.
    ///
    /// # Errors
    /// The database fails.
    pub async fn retry_alone(&self, id: Uuid) -> Result<RetryOutcome> {
        self.retry_healing(id, false).await
    }

    async fn retry_healing(&self, id: Uuid, heal: bool) -> Result<RetryOutcome> {
        if self.spread() {
            return Box::pin(self.home_of_job(id).await?.retry_healing(id, heal)).await;
        }
        let outcome = self.retry_one(id, heal).await?;
        let changed = matches!(outcome, RetryOutcome::Retried | RetryOutcome::MadeDue);
        let action = if heal { "retry" } else { "retry-alone" };
        self.record(action, On::Target(id.to_string()), Some(changed.into()))
            .await?;
        Ok(outcome)
    }

    async fn retry_one(&self, id: Uuid, heal: bool) -> Result<RetryOutcome> {
        // A job running at the first try may have failed for good by the time its
        // record is read: then it is tried once more.
        let mut first = true;
        loop {
            let now = self.now();
            if !self
                .pool
                .retry(&self.schema, &[id], now, heal)
                .await?
                .is_empty()
            {
                return Ok(RetryOutcome::Retried);
            }
            if self.pool.reschedule(&self.schema, id, now).await? {
                return Ok(RetryOutcome::MadeDue);
            }
            let Some(record) = self.primary_job(id).await? else {
                return Ok(RetryOutcome::NotFound);
            };
            return Ok(match record.status() {
                JobStatus::Processed => RetryOutcome::Succeeded,
                JobStatus::Fatal | JobStatus::Cancelled if record.payload.is_none() => {
                    RetryOutcome::NoPayload
                }
                JobStatus::Fatal | JobStatus::Cancelled if first => {
                    first = false;
                    continue;
                }
                JobStatus::Fatal | JobStatus::Cancelled => RetryOutcome::KeyHeld,
                // Live and not waiting: a worker holds it.
                _ => RetryOutcome::Running,
            });
        }
    }

    /// Makes a waiting job (delayed, or waiting for a retry) due now.
    ///
    /// # Errors
    /// The database fails.
    pub async fn run_now(&self, id: Uuid) -> Result<RescheduleOutcome> {
        if self.spread() {
            return Box::pin(self.home_of_job(id).await?.run_now(id)).await;
        }
        let outcome = self.reschedule_one(id, self.now()).await?;
        self.record_rescheduled("run-now", id, outcome).await?;
        Ok(outcome)
    }

    /// Moves a waiting job's not-before time to `at`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a time after 9999-12-31T23:59:59.999999Z, the latest sk
    /// stores; the database fails.
    pub async fn reschedule(&self, id: Uuid, at: DateTime<Utc>) -> Result<RescheduleOutcome> {
        if self.spread() {
            return Box::pin(self.home_of_job(id).await?.reschedule(id, at)).await;
        }
        let outcome = self.reschedule_one(id, at).await?;
        self.record_rescheduled("reschedule", id, outcome).await?;
        Ok(outcome)
    }

    async fn record_rescheduled(
        &self,
        action: &str,
        id: Uuid,
        outcome: RescheduleOutcome,
    ) -> Result<()> {
        let changed = outcome == RescheduleOutcome::Rescheduled;
        self.record(action, On::Target(id.to_string()), Some(changed.into()))
            .await
    }

    async fn reschedule_one(&self, id: Uuid, at: DateTime<Utc>) -> Result<RescheduleOutcome> {
        let at = crate::clock::storable("reschedule time", at)?;
        if self.pool.reschedule(&self.schema, id, at).await? {
            return Ok(RescheduleOutcome::Rescheduled);
        }
        Ok(match self.primary_job(id).await? {
            None => RescheduleOutcome::NotFound,
            Some(r) if r.status().is_final() => RescheduleOutcome::Finished(r.status()),
            Some(r) if r.status() == JobStatus::Pending => RescheduleOutcome::WaitingOnDependencies,
            Some(_) => RescheduleOutcome::Running,
        })
    }

    /// Sets a live job's priority (lower runs first): a waiting job is claimed in its new
    /// order, a running one keeps it for a retry. A finished job is left as it ran.
    ///
    /// # Errors
    /// The database fails.
    pub async fn reprioritize(&self, id: Uuid, priority: i32) -> Result<ReprioritizeOutcome> {
        if self.spread() {
            let home = self.home_of_job(id).await?;
            return Box::pin(home.reprioritize(id, priority)).await;
        }
        let outcome = self.reprioritize_one(id, priority).await?;
        let changed = outcome == ReprioritizeOutcome::Reprioritized;
        let target = format!("{id} priority {priority}");
        self.record("reprioritize", On::Target(target), Some(changed.into()))
            .await?;
        Ok(outcome)
    }

    async fn reprioritize_one(&self, id: Uuid, priority: i32) -> Result<ReprioritizeOutcome> {
        if self.pool.reprioritize(&self.schema, id, priority).await? {
            return Ok(ReprioritizeOutcome::Reprioritized);
        }
        Ok(match self.primary_job(id).await? {
            None => ReprioritizeOutcome::NotFound,
            Some(r) if r.status().is_final() => ReprioritizeOutcome::Finished(r.status()),
            Some(_) => ReprioritizeOutcome::Reprioritized,
        })
    }

    /// Pauses a queue: from now on no worker starts a job of it (workers see it in their
    /// next claim; jobs running now finish). Persisted: it holds across worker restarts
    /// until [`Client::resume`]. Returns false if it was paused already.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name; the database fails.
    pub async fn pause(&self, queue: &str) -> Result<bool> {
        self.set_flag(QueueFlag::Paused, queue, true, "pause").await
    }

    /// Resumes a paused queue; its jobs run again at once. Returns false if it was not
    /// paused.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name; the database fails.
    pub async fn resume(&self, queue: &str) -> Result<bool> {
        self.set_flag(QueueFlag::Paused, queue, false, "resume")
            .await
    }

    /// Claims `queue` fairly across its tenants ([`Enqueue::with_tenant`](crate::Enqueue::with_tenant))
    /// on every worker (`on`), or in the queue's order again. Persisted, and read by every
    /// worker within a second. Returns false if the queue already was so.
    ///
    /// A fair claim shares its jobs among the tenants with due jobs, served in turn, each
    /// tenant's in the claim's order (priority first), and fills what they leave in the
    /// queue's order: one tenant's backlog then delays another's jobs by about one claim,
    /// not by the backlog. Jobs without a tenant are taken with what the tenants leave.
    /// It costs one index probe per tenant with due jobs more per claim
    /// (docs/operations.md, "Flow control"). A limit per tenant
    /// ([`Client::set_tenant_limit`], [`Client::set_tenant_rate_limit`]) claims fairly
    /// whatever this says.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name; the database fails.
    pub async fn set_fair(&self, queue: &str, on: bool) -> Result<bool> {
        let action = if on { "fair" } else { "unfair" };
        self.set_flag(QueueFlag::Fair, queue, on, action).await
    }

    /// Turns a queue's switch on or off, recorded as `action`; whether that changed it.
    async fn set_flag(&self, flag: QueueFlag, queue: &str, on: bool, action: &str) -> Result<bool> {
        if self.spread() {
            let changed = self
                .each(|c| async move { c.set_flag(flag, queue, on, action).await })
                .await?;
            return Ok(changed.into_iter().any(|c| c));
        }
        crate::model::check_name("queue name", queue)?;
        let changed = self
            .pool
            .set_queue_flag(&self.schema, flag, queue, on, self.now())
            .await?;
        self.record(action, On::Target(queue.to_owned()), None)
            .await?;
        Ok(changed)
    }

    /// Limits how many jobs of `queue` run at once over every worker, wherever they
    /// run; `None` removes the limit. Persisted, and read by every worker within a
    /// second; jobs running over a lowered limit finish. Within one worker, a queue's
    /// share is also bounded by its own concurrency (`WorkerBuilder::queue`).
    ///
    /// Each claim of a limited queue takes the queue's row lock and counts its running
    /// jobs, so claims of that queue take turns (docs/operations.md gives the cost);
    /// other queues' claims are untouched. Every lease counts against the limit, a job
    /// waiting in a worker's local queue too, so a limited queue's claims prefetch at most
    /// the worker's concurrency (`WorkerBuilder::prefetch`): a job waiting in one worker
    /// holds room under the limit that another worker's free slot could use.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name or a limit of 0 or over `i32::MAX`; the
    /// database fails.
    pub async fn set_global_limit(&self, queue: &str, limit: Option<u32>) -> Result<()> {
        self.set_queue_limit(QueueLimit::Global, "global limit", queue, limit)
            .await
    }

    /// Limits how many jobs of each tenant of `queue` (`Enqueue::with_tenant`) run at
    /// once over every worker, wherever they run; `None` removes the limit. Persisted,
    /// and read by every worker within a second; jobs running over a lowered limit
    /// finish. Jobs without a tenant are not limited by it. Use it for a downstream that
    /// allows each account a few requests at a time: the account is the job's tenant
    /// (`#[job(tenant = account_id)]` derives it from an argument).
    ///
    /// A claim of such a queue takes the queue's row lock, counts each tenant's running
    /// jobs, and takes each tenant with due jobs in turn (as a fair claim does,
    /// `WorkerBuilder::fair`) up to its room: a tenant at its limit holds back its own
    /// jobs and no one else's. As with a global limit, claims of the queue take turns,
    /// and they prefetch at most the worker's concurrency (a waiting job's lease counts
    /// against its tenant's limit); with a rate per tenant
    /// ([`Client::set_tenant_rate_limit`]), for free handler slots only. A global limit
    /// of the same queue holds too.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name or a limit of 0 or over `i32::MAX`; the
    /// database fails.
    pub async fn set_tenant_limit(&self, queue: &str, limit: Option<u32>) -> Result<()> {
        self.set_queue_limit(QueueLimit::PerTenant, "tenant limit", queue, limit)
            .await
    }

    /// Sets or lifts a limit of running jobs of `queue` (`what` names it in an error).
    async fn set_queue_limit(
        &self,
        kind: QueueLimit,
        what: &'static str,
        queue: &str,
        limit: Option<u32>,
    ) -> Result<()> {
        if self.spread() {
            self.each(|c| async move { c.set_queue_limit(kind, what, queue, limit).await })
                .await?;
            return Ok(());
        }
        crate::model::check_name("queue name", queue)?;
        let value = crate::store::running_limit_value(what, limit)?;
        self.pool
            .set_queue_limit(&self.schema, kind, queue, value, self.now())
            .await?;
        let shown = limit.map_or_else(|| "none".to_owned(), |n| n.to_string());
        let action = what.replace(' ', "-");
        self.record(&action, On::Target(format!("{queue} {shown}")), None)
            .await
    }

    /// Limits how many jobs of `queue` start per time window over every worker, wherever
    /// they run (`"100/1m"`: at most 100 starts in any minute); `None` lifts the limit.
    /// Persisted, and read by every worker within a second. A job the limit holds back
    /// waits in the queue without using an attempt, and is claimed when the window
    /// allows: a worker held back sleeps until the limit's next opening, not polling.
    ///
    /// The limit holds in every sliding window (a log of the window's starts, one entry
    /// per claim; docs/operations.md, "Flow control"). A start counts when a worker claims
    /// the job, and stays counted: a retry is a new start, and a job whose worker died
    /// counts again when another worker takes it up after its lease. A rate-limited queue
    /// is claimed on its own for free handler slots only (no prefetch), under its
    /// limit's row lock, so its claims take turns.
    ///
    /// The limit holds on the handlers' own start times: each handler starts within
    /// 50 ms of the time its claim counted it, or is handed back unstarted (no attempt
    /// used), and each start counts over the window and those 50 ms, so `"50/1s"` starts
    /// at most 50 handlers in any second (about 47.6 a second at its fullest).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name; the database fails.
    pub async fn set_rate_limit(&self, queue: &str, limit: Option<RateLimit>) -> Result<()> {
        self.set_queue_rate(crate::store::rates::QUEUE, "rate-limit", queue, limit)
            .await
    }

    /// Sets or lifts the rate limit of `queue` in `scope` (of the queue, or of each of
    /// its tenants).
    async fn set_queue_rate(
        &self,
        scope: &'static str,
        action: &str,
        queue: &str,
        limit: Option<RateLimit>,
    ) -> Result<()> {
        if self.spread() {
            self.each(|c| async move { c.set_queue_rate(scope, action, queue, limit).await })
                .await?;
            return Ok(());
        }
        crate::model::check_name("queue name", queue)?;
        let shown = limit
            .as_ref()
            .map_or_else(|| "none".to_owned(), ToString::to_string);
        self.pool
            .set_rate_limit(&self.schema, scope, queue, limit, self.now())
            .await?;
        self.record(action, On::Target(format!("{queue} {shown}")), None)
            .await
    }

    /// Limits how many jobs of each tenant of `queue` (`Enqueue::with_tenant`) start per
    /// time window over every worker (`"10/1s"`: at most 10 starts of each tenant in any
    /// second); `None` lifts the limit. Persisted, and read by every worker within a
    /// second. Jobs without a tenant are not limited by it. Use it for a downstream that
    /// gives each account its own quota: the account is the job's tenant.
    ///
    /// Each tenant has its own sliding log of starts (as [`Client::set_rate_limit`]'s),
    /// written by the claims that start its jobs. A claim of the queue serves the tenants
    /// with due jobs in turn, each up to what its log lets start (and, with
    /// [`Client::set_tenant_limit`] too, its running jobs): a tenant at its limit holds
    /// back its own jobs and no one else's, and a worker whose claim found every tenant
    /// held sleeps until the first opens. A handler's [`JobError::rate_limited`] holds
    /// its job's tenant shut until then, not the other tenants.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue name; the database fails.
    ///
    /// [`JobError::rate_limited`]: crate::JobError::rate_limited
    pub async fn set_tenant_rate_limit(&self, queue: &str, limit: Option<RateLimit>) -> Result<()> {
        self.set_queue_rate(
            crate::store::rates::TENANT,
            "tenant-rate-limit",
            queue,
            limit,
        )
        .await
    }

    /// The rate limits of job types (`#[job(rate = "100/1m")]`, written by each worker
    /// that runs the type when it starts), by type: each limit with the starts of the
    /// window that ends now and when it opens next if it is full. A queue's rate limit is
    /// in [`Client::queues`].
    ///
    /// # Errors
    /// The database fails.
    pub async fn task_type_rate_limits(&self) -> Result<Vec<(String, crate::model::RateState)>> {
        if self.spread() {
            let all = self
                .each(|c| async move { c.task_type_rate_limits().await })
                .await?;
            return Ok(super::across::type_rates(all));
        }
        self.reader()
            .type_rate_limits(&self.schema, self.now())
            .await
    }

    /// Every queue that has live jobs, was ever paused or has a global or rate limit, by
    /// name: its live jobs by state, whether it is paused, and its limits.
    ///
    /// # Errors
    /// The database fails.
    pub async fn queues(&self) -> Result<Vec<QueueState>> {
        if self.spread() {
            let all = self.each(|c| async move { c.queues().await }).await?;
            return Ok(super::across::queues(all));
        }
        self.reader().queue_states(&self.schema, self.now()).await
    }

    /// Waits until job `id` has finished (processed, fatal or cancelled) and returns its
    /// record; read its typed output with [`JobRecord::output`]. Looks again when a
    /// worker of this process records outcomes and, on PostgreSQL, when any worker does
    /// (a notification on the done channel, `sk_task_done`, over a connection of its
    /// own: the wait marks the job, and only the completion of a marked job notifies);
    /// else it polls, from 10 ms backing off to 1 s.
    ///
    /// # Errors
    /// [`Error::JobNotFound`] when no such job exists, [`Error::WaitTimedOut`] when it
    /// has not finished within `timeout`; the database fails.
    pub async fn wait(&self, id: Uuid, timeout: Duration) -> Result<JobRecord> {
        if self.spread() {
            return Box::pin(self.home_of_job(id).await?.wait(id, timeout)).await;
        }
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(10);
        let mut finished = crate::store::Finished::new(&self.pool, &self.schema).await;
        finished.mark(&self.pool, &self.schema, id).await;
        loop {
            match self.primary_job(id).await? {
                None => return Err(Error::JobNotFound(id)),
                Some(record) if record.status().is_final() => return Ok(record),
                Some(_) => {}
            }
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(Error::WaitTimedOut {
                    id,
                    waited: timeout,
                });
            }
            finished.next(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Counts per status, and the live queue by state ([`QueueInfo::counts`]).
    ///
    /// [`QueueInfo::counts`]: crate::QueueInfo::counts
    ///
    /// # Errors
    /// The database fails.
    pub async fn counts(&self) -> Result<QueueCounts> {
        if self.spread() {
            let all = self.each(|c| async move { c.counts().await }).await?;
            return Ok(super::across::queue_counts(all));
        }
        self.reader().counts(&self.schema, self.now()).await
    }

    /// The next `limit` waiting jobs in the order workers take them.
    ///
    /// # Errors
    /// The database fails.
    pub async fn peek(&self, limit: i64) -> Result<Vec<QueuedJob>> {
        if self.spread() {
            let all = self.each(|c| async move { c.peek(limit).await }).await?;
            return Ok(super::across::peek(all, limit.max(0) as usize));
        }
        self.reader().peek(&self.schema, limit).await
    }

    /// Everything recorded about one job; `None` if no such job was ever posted (or its
    /// result was pruned).
    ///
    /// # Errors
    /// The database fails.
    pub async fn job(&self, id: Uuid) -> Result<Option<JobRecord>> {
        if self.spread() {
            let all = self.each(|c| async move { c.job(id).await }).await?;
            return Ok(all.into_iter().flatten().next());
        }
        self.reader().job(&self.schema, id, self.now()).await
    }

    /// Job `id` as the primary has it, for the actions that decide on it.
    pub(crate) async fn primary_job(&self, id: Uuid) -> Result<Option<JobRecord>> {
        self.pool.job(&self.schema, id, self.now()).await
    }
}
