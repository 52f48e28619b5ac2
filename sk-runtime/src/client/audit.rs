//! The audit trail on the client handle: every action of [`Client`] that changes jobs or
//! queues adds an entry (who, when, on what, how many jobs), and [`Client::audit`] reads
//! them back (`sk audit`, the dashboard's Audit page).

use super::Client;
use crate::error::{Error, Result};
use crate::model::{AuditEntry, JobFilter, MAX_PAGE};

/// `os:` and the user this process runs as (`$USER`, `$LOGNAME`), or `os:unknown`.
pub(super) fn os_user() -> String {
    let user = ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|u| !u.is_empty()));
    format!("os:{}", user.as_deref().unwrap_or("unknown"))
}

/// What an action was taken on, for its entry.
pub(super) enum On<'a> {
    /// A queue, a job or a batch, or a limit's new value.
    Target(String),
    /// Every job a filter takes.
    Filter(&'a JobFilter),
}

impl Client {
    /// The audit trail, newest first: `limit` entries (at most [`MAX_PAGE`]) before entry
    /// `before` (the newest, when `None`). Every action of a client that changes jobs
    /// or queues adds one, with [`Client::actor`]'s name: pause, resume, fair claims,
    /// the limits, retry, cancel, run now, reschedule, reprioritize, update, delete and
    /// prune, of one job, of a filter's jobs, of a batch or of a workflow.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// for e in client.audit(None, 20).await? {
    ///     println!("{} {} {} {:?} {:?} {:?}", e.at, e.actor, e.action, e.target, e.filter, e.jobs);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit of 0 or over [`MAX_PAGE`]; the database fails.
    pub async fn audit(&self, before: Option<i64>, limit: u32) -> Result<Vec<AuditEntry>> {
        if self.spread() {
            if before.is_some() {
                return Err(Error::invalid(
                    "audit page",
                    "entries are numbered per database: a client across several databases reads the newest page of each, merged (before = None)",
                ));
            }
            let all = self
                .each(|c| async move { c.audit(None, limit).await })
                .await?;
            return Ok(super::across::audit(all, limit as usize));
        }
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(
                "page size",
                format!("{limit} must be from 1 to {MAX_PAGE}"),
            ));
        }
        self.reader()
            .audit(&self.schema, before, i64::from(limit))
            .await
    }

    /// Adds this client's action `action` on `on` that changed `jobs` jobs (`None` for
    /// an action on a queue) to the audit trail.
    pub(super) async fn record(&self, action: &str, on: On<'_>, jobs: Option<u64>) -> Result<()> {
        let (target, filter) = match on {
            On::Target(target) => (Some(target), None),
            On::Filter(filter) => (None, Some(filter.describe())),
        };
        let entry = AuditEntry {
            id: 0,
            at: self.now(),
            actor: self.actor.to_string(),
            action: action.to_owned(),
            target,
            filter,
            jobs: jobs.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        };
        self.pool.record_audit(&self.schema, &entry).await
    }
}
