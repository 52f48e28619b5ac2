//! A client over several databases ([`Client::across`]): each database as a client of
//! its own, the database that holds a job, batch or workflow, and the merges of what
//! each database answers (counts summed, lists merged in their order).

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use uuid::Uuid;

use super::Client;
use crate::error::{Error, Result};
use crate::model::{
    AuditEntry, BatchRecord, GroupCounts, JobPage, Pruned, QueueCounts, QueueState, QueuedJob,
    RateState, TenantState, WorkerInfo, WorkflowRecord,
};
use crate::route::{Router, Routes};
use crate::store::{Backend, Pool};

impl Client {
    /// A client over several databases of sk's tables, as one system (database 0
    /// first): counts are summed, lists merged in their order (jobs newest first by
    /// id), an action on a job, batch or workflow goes to the database that holds it,
    /// and a queue's pause, fairness and limits are set in every database (each
    /// database enforces its own: a queue routed by tenant has its global and rate
    /// limits per database). [`Client::enqueue_json`] stores in the job's home database
    /// by queue name ([`Routes`]; [`Client::with_routes`] for another rule);
    /// [`Router::client`](crate::Router::client) gives the router's own.
    /// [`Client::insight_from`] gives database 0's replica.
    ///
    /// ```no_run
    /// # async fn f() -> sk_runtime::Result<()> {
    /// use sk_runtime::{Client, Pool};
    ///
    /// let client = Client::across([
    ///     Pool::connect("postgres://app@db-a/app").await?,
    ///     Pool::connect("postgres://app@db-b/app").await?,
    /// ])?;
    /// let counts = client.counts().await?; // both databases, summed
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for no database.
    pub fn across(pools: impl IntoIterator<Item = impl Into<Pool>>) -> Result<Client> {
        let pools: Vec<Pool> = pools.into_iter().map(Into::into).collect();
        let routes = Routes::new(pools.len())?;
        Ok(Client::across_routed(pools, routes))
    }

    /// `pools` (at least one, as many as `routes` has) with `routes`.
    pub(crate) fn across_routed(mut pools: Vec<Pool>, routes: Routes) -> Client {
        let more: Arc<[Pool]> = pools.drain(1..).collect();
        let mut client = Client::new(pools.remove(0));
        client.more = more;
        client.routes = Arc::new(routes);
        client
    }

    /// Stores the jobs [`Client::enqueue_json`] posts where `routes` says.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `routes` is over another number of databases.
    pub fn with_routes(mut self, routes: Routes) -> Result<Self> {
        if routes.databases() != self.databases() {
            return Err(Error::invalid(
                "routes",
                format!(
                    "they are over {} databases, and the client over {}",
                    routes.databases(),
                    self.databases()
                ),
            ));
        }
        self.routes = Arc::new(routes);
        Ok(self)
    }

    /// How many databases the client works on.
    pub fn databases(&self) -> usize {
        1 + self.more.len()
    }

    /// Whether it works on more than one database.
    pub(super) fn spread(&self) -> bool {
        !self.more.is_empty()
    }

    /// Each database as a client of its own, database 0 first.
    pub(super) fn parts(&self) -> Vec<Client> {
        std::iter::once(self.pool.clone())
            .chain(self.more.iter().cloned())
            .enumerate()
            .map(|(at, pool)| Client {
                pool,
                read: if at == 0 { self.read.clone() } else { None },
                more: Arc::from([]),
                routes: Arc::new(Routes::new(1).expect("one database")),
                schema: self.schema.clone(),
                clock: self.clock.clone(),
                actor: self.actor.clone(),
            })
            .collect()
    }

    /// Database `at` as a client of its own.
    pub(super) fn part(&self, at: usize) -> Client {
        self.parts().swap_remove(at)
    }

    /// `f` on every database at once; the answers in database order.
    pub(super) async fn each<T, F, Fut>(&self, f: F) -> Result<Vec<T>>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        // Boxed: `f` calls back into the client's own methods.
        futures_util::future::try_join_all(self.parts().into_iter().map(|c| Box::pin(f(c)))).await
    }

    /// The database that holds what `holds` finds (read on each primary), or database
    /// 0 when none does (whose answer is then "not found").
    pub(super) async fn home_where<F, Fut>(&self, holds: F) -> Result<Client>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        let found = self.each(&holds).await?;
        let at = found.iter().position(|f| *f).unwrap_or(0);
        Ok(self.part(at))
    }

    /// The database that holds job `id`.
    pub(super) async fn home_of_job(&self, id: Uuid) -> Result<Client> {
        self.home_where(|c| async move { Ok(c.primary_job(id).await?.is_some()) })
            .await
    }

    /// The database that holds batch `id`.
    pub(super) async fn home_of_batch(&self, id: Uuid) -> Result<Client> {
        self.home_where(|c| async move {
            let found = c.pool.batches(&c.schema, Some(&[id]), 1).await?;
            Ok(!found.is_empty())
        })
        .await
    }

    /// The database that holds workflow `id`.
    pub(super) async fn home_of_workflow(&self, id: Uuid) -> Result<Client> {
        self.home_where(|c| async move {
            let found = c.pool.workflows(&c.schema, Some(id), 1).await?;
            Ok(!found.is_empty())
        })
        .await
    }

    /// The database a job of `queue` and `tenant` is stored in.
    pub(super) fn home_for(&self, queue: &str, tenant: Option<&str>) -> Client {
        self.part(self.routes.home(queue, tenant))
    }
}

impl<DB: Backend> Router<DB>
where
    Pool: From<sqlx::Pool<DB>>,
{
    /// A client over every database: counts summed, lists merged, each action on the
    /// database that holds its job ([`Client::across`]), `enqueue_json` by the router's
    /// routes.
    pub fn client(&self) -> Client {
        let pools = self.databases().iter().cloned().map(Pool::from).collect();
        Client::across_routed(pools, self.routes().clone()).schema(self.schema.clone())
    }
}

/// Sums what each database counted, by key, sorted by key.
pub(super) fn group_counts(all: Vec<Vec<GroupCounts>>) -> Vec<GroupCounts> {
    let mut by: BTreeMap<Option<String>, GroupCounts> = BTreeMap::new();
    for g in all.into_iter().flatten() {
        let sum = by.entry(g.key.clone()).or_insert_with(|| GroupCounts {
            key: g.key.clone(),
            ..GroupCounts::default()
        });
        sum.available += g.available;
        sum.scheduled += g.scheduled;
        sum.pending += g.pending;
        sum.retrying += g.retrying;
        sum.running += g.running;
        sum.fatal += g.fatal;
        sum.cancelled += g.cancelled;
    }
    by.into_values().collect()
}

/// Sums the databases' counts.
pub(super) fn queue_counts(all: Vec<QueueCounts>) -> QueueCounts {
    let mut sum = QueueCounts::default();
    for c in all {
        for (status, n) in c.by_status {
            match sum.by_status.iter_mut().find(|(s, _)| *s == status) {
                Some((_, total)) => *total += n,
                None => sum.by_status.push((status, n)),
            }
        }
        sum.available += c.available;
        sum.scheduled += c.scheduled;
        sum.pending += c.pending;
        sum.running += c.running;
        sum.lease_expired += c.lease_expired;
    }
    sum
}

/// One page of `limit` jobs from each database's page after the same cursor: the
/// newest `limit` of them; more follow when a database had more or some were left.
pub(super) fn job_page(pages: Vec<JobPage>, limit: usize) -> JobPage {
    let more = pages.iter().any(|p| p.next.is_some());
    let mut jobs: Vec<_> = pages.into_iter().flat_map(|p| p.jobs).collect();
    jobs.sort_by_key(|j| Reverse(j.id));
    let left = jobs.len() > limit;
    jobs.truncate(limit);
    let next = if more || left {
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    JobPage { jobs, next }
}

/// Every database's workers, by id.
pub(super) fn workers(all: Vec<Vec<WorkerInfo>>) -> Vec<WorkerInfo> {
    first(all, usize::MAX, |w| w.id.clone())
}

/// A queue's tenants over the databases, by name: their jobs summed; the first
/// database's rate and hold of a tenant found in several.
pub(super) fn tenants(all: Vec<Vec<TenantState>>) -> Vec<TenantState> {
    let mut by: BTreeMap<String, TenantState> = BTreeMap::new();
    for t in all.into_iter().flatten() {
        match by.get_mut(&t.tenant) {
            Some(sum) => {
                sum.available += t.available;
                sum.running += t.running;
                sum.held_by = sum.held_by.or(t.held_by);
                sum.rate = sum.rate.take().or(t.rate);
            }
            None => {
                by.insert(t.tenant.clone(), t);
            }
        }
    }
    by.into_values().collect()
}

/// The queues over the databases, by name: their jobs summed; paused or fair since the
/// earliest database that says so; the limits of the first that has one (the client
/// sets them in every database); starts against a rate limit summed.
pub(super) fn queues(all: Vec<Vec<QueueState>>) -> Vec<QueueState> {
    let mut by: BTreeMap<String, QueueState> = BTreeMap::new();
    for q in all.into_iter().flatten() {
        match by.get_mut(&q.name) {
            Some(sum) => {
                sum.available += q.available;
                sum.scheduled += q.scheduled;
                sum.running += q.running;
                sum.pending += q.pending;
                sum.paused_at = earliest(sum.paused_at, q.paused_at);
                sum.fair_since = earliest(sum.fair_since, q.fair_since);
                sum.global_limit = sum.global_limit.or(q.global_limit);
                sum.tenant_limit = sum.tenant_limit.or(q.tenant_limit);
                sum.tenant_rate_limit = sum.tenant_rate_limit.take().or(q.tenant_rate_limit);
                sum.rate_limit = rate(sum.rate_limit.take(), q.rate_limit);
            }
            None => {
                by.insert(q.name.clone(), q);
            }
        }
    }
    by.into_values().collect()
}

/// Each task type's rate limit over the databases: starts summed.
pub(super) fn type_rates(all: Vec<Vec<(String, RateState)>>) -> Vec<(String, RateState)> {
    let mut by: BTreeMap<String, RateState> = BTreeMap::new();
    for (name, state) in all.into_iter().flatten() {
        let merged = rate(by.remove(&name), Some(state));
        by.insert(name, merged.expect("a state"));
    }
    by.into_iter().collect()
}

/// Two databases' states of one rate limit: starts summed, open again at the later.
fn rate(a: Option<RateState>, b: Option<RateState>) -> Option<RateState> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.started += b.started;
            a.opens_at = a.opens_at.max(b.opens_at);
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

fn earliest<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The first `limit` of every database's items in the order of `key`.
fn first<T, K: Ord>(all: Vec<Vec<T>>, limit: usize, key: impl FnMut(&T) -> K) -> Vec<T> {
    let mut items: Vec<T> = all.into_iter().flatten().collect();
    items.sort_by_key(key);
    items.truncate(limit);
    items
}

/// The newest `limit` entries of every database's trail.
pub(super) fn audit(all: Vec<Vec<AuditEntry>>, limit: usize) -> Vec<AuditEntry> {
    first(all, limit, |e| Reverse((e.at, e.id)))
}

/// The newest `limit` batches of every database.
pub(super) fn batches(all: Vec<Vec<BatchRecord>>, limit: usize) -> Vec<BatchRecord> {
    first(all, limit, |b| Reverse((b.created_at, b.id)))
}

/// The newest `limit` workflows of every database.
pub(super) fn workflows(all: Vec<Vec<WorkflowRecord>>, limit: usize) -> Vec<WorkflowRecord> {
    first(all, limit, |w| Reverse((w.created_at, w.id)))
}

/// The next `limit` waiting jobs of every database, in the order workers take them.
pub(super) fn peek(all: Vec<Vec<QueuedJob>>, limit: usize) -> Vec<QueuedJob> {
    first(all, limit, |j| (j.priority, j.run_at, j.id))
}

/// What every database's prune removed.
pub(super) fn pruned(all: Vec<Pruned>) -> Pruned {
    let mut sum = Pruned::default();
    for p in all {
        sum.rows += p.rows;
        sum.partitions.extend(p.partitions);
        sum.run_counts += p.run_counts;
    }
    sum
}
