//! Enqueue: one job, a batch (uniform or not), a cron tick, a job with a unique key.

use super::pooler::{conn_keeps, on};
use super::*;
use crate::store::backend::keeps_known;

/// Runs `post` (an enqueue's statements) on the application's connection, prepared as
/// the executor said (`backend::with_keeps`), else as the connection has so far
/// (`pooler::conn_keeps`). A pool behind a transaction pooler hands out a connection
/// outside a transaction: the statements get one of their own, so each parse and its
/// execution reach the same server.
async fn posted<T>(
    conn: &mut PgConnection,
    post: impl AsyncFnOnce(super::pooler::On<'_>) -> Result<T>,
) -> Result<T> {
    match keeps_known() {
        Some(false) => {
            let mut tx = conn.begin().await?;
            let done = post(on(&mut tx, false)).await?;
            tx.commit().await?;
            Ok(done)
        }
        keep => {
            let keep = keep.unwrap_or_else(|| conn_keeps(conn));
            post(on(conn, keep)).await
        }
    }
}

/// `enqueue_one` on the application's executor (`Backend::enqueue_one`, [`posted`]).
pub(crate) async fn post_one(
    conn: &mut PgConnection,
    schema: &Schema,
    job: NewJob,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    posted(conn, async |c| enqueue_one(c, schema, job, now).await).await
}

/// `enqueue_unique` on the application's executor ([`posted`]).
pub(crate) async fn post_unique(
    conn: &mut PgConnection,
    schema: &Schema,
    job: NewJob,
    mode: crate::model::UniqueMode,
    now: DateTime<Utc>,
) -> Result<(Uuid, bool, bool)> {
    posted(conn, async |c| {
        enqueue_unique(c, schema, job, mode, now).await
    })
    .await
}

/// `enqueue_many` on the application's executor ([`posted`]).
pub(crate) async fn post_many(
    conn: &mut PgConnection,
    schema: &Schema,
    jobs: Vec<NewJob>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    posted(conn, async |c| enqueue_many(c, schema, jobs, now).await).await
}

/// Binds the parameters every single-job insert statement shares, `$1` to `$11`.
macro_rules! bind_job {
    ($query:expr, $job:ident, $now:ident, $sql:ident) => {
        $query
            .bind($job.id)
            .bind(&*$job.task_type)
            .bind($job.source)
            .bind($job.payload)
            .bind($job.queue)
            .bind($job.priority)
            .bind($job.unique_key)
            .bind($now)
            .bind($job.run_at)
            .bind($job.max_attempts)
            .bind(&$sql.channel)
    };
}

/// Inserts one job; `None` when its unique key already exists.
pub(crate) async fn enqueue_one<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let sql = &schema.sql;
    let statement = match job.unique_key {
        None => &sql.enqueue_one_plain,
        Some(_) => &sql.enqueue_one,
    };
    let id: Option<Uuid> = bind_job!(sqlx::query_scalar(statement), job, now, sql)
        .bind(job.tenant)
        .bind(job.correlation_id)
        .bind(job.metadata)
        .bind(job.timeout_ms)
        .fetch_one(executor)
        .await?;
    Ok(id)
}

/// Inserts many jobs in one statement; returns the ids in order (a duplicate key's place
/// holds the live job's id).
pub(crate) async fn enqueue_many<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    mut jobs: Vec<NewJob>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let Some(first) = jobs.first() else {
        return Ok(Vec::new());
    };
    if super::super::uniform(&jobs) {
        let (task_type, source, queue) = (
            first.task_type.clone(),
            first.source.clone(),
            first.queue.clone(),
        );
        let timeout_ms = first.timeout_ms;
        let (priority, run_at, max_attempts) = (first.priority, first.run_at, first.max_attempts);
        let (tenant, correlation_id, metadata) = (
            first.tenant.clone(),
            first.correlation_id.clone(),
            first.metadata.clone(),
        );
        let (ids, payloads): (Vec<Uuid>, Vec<String>) =
            jobs.into_iter().map(|j| (j.id, j.payload)).unzip();
        sqlx::query(&schema.sql.enqueue_many_uniform)
            .bind(&ids)
            .bind(payloads)
            .bind(task_type)
            .bind(source)
            .bind(queue)
            .bind(priority)
            .bind(run_at)
            .bind(max_attempts)
            .bind(now)
            .bind(&schema.sql.channel)
            .bind(tenant)
            .bind(correlation_id)
            .bind(metadata)
            .bind(timeout_ms)
            .execute(executor)
            .await?;
        return Ok(ids);
    }
    // A key that comes again in the batch gets the id of its first job, which is sent
    // alone (the statement cannot see its own inserts).
    let mut first_with_key: std::collections::HashMap<String, usize> = Default::default();
    let mut same_as: Vec<Option<usize>> = Vec::with_capacity(jobs.len());
    let mut sent = Vec::with_capacity(jobs.len());
    for job in jobs.drain(..) {
        let earlier = job
            .unique_key
            .as_ref()
            .and_then(|k| first_with_key.get(k).copied());
        same_as.push(earlier);
        if earlier.is_none() {
            if let Some(key) = &job.unique_key {
                first_with_key.insert(key.clone(), sent.len());
            }
            sent.push(job);
        }
    }
    let n = sent.len();
    let mut columns = Columns::with_capacity(n);
    for job in sent {
        columns.push(job);
    }
    let keyed = columns.keys.iter().any(Option::is_some);
    let ids = columns.ids.clone();
    let keys = columns.keys.clone();
    let sql = if keyed {
        &schema.sql.enqueue_many_keyed
    } else {
        &schema.sql.enqueue_many
    };
    let mut query = sqlx::query(sql)
        .bind(columns.ids)
        .bind(columns.types)
        .bind(columns.sources)
        .bind(columns.payloads)
        .bind(columns.queues)
        .bind(columns.priorities)
        .bind(columns.run_ats)
        .bind(columns.max_attempts)
        .bind(now)
        .bind(&schema.sql.channel);
    query = query
        .bind(columns.tenants)
        .bind(columns.correlation_ids)
        .bind(columns.metadata)
        .bind(columns.timeouts);
    if !keyed {
        query.execute(executor).await?;
        return Ok(ids);
    }
    let found: Vec<Option<Uuid>> = query
        .bind(columns.keys)
        .fetch_all(executor)
        .await?
        .into_iter()
        .map(|row| row.try_get(0))
        .collect::<sqlx::Result<_>>()?;
    let mut stored = Vec::with_capacity(found.len());
    for (id, key) in found.into_iter().zip(&keys) {
        // Our insert waited for a concurrent one with the same key, which committed after
        // this statement's snapshot was taken: the job exists, but its id is not visible.
        stored.push(id.ok_or_else(|| {
            Error::invalid(
                "unique key",
                format!("{key:?} was enqueued by a concurrent transaction just now; enqueue again to get its id"),
            )
        })?);
    }
    let mut batch = Vec::with_capacity(same_as.len());
    let mut next = 0;
    for earlier in same_as {
        match earlier {
            Some(index) => batch.push(stored[index]),
            None => {
                batch.push(stored[next]);
                next += 1;
            }
        }
    }
    Ok(batch)
}

/// Inserts a cron tick unless the schedule's last tick is still live (`live_key`) or this
/// tick was enqueued already; `None` when skipped. On `None` the caller rolls back: the
/// queue row may have gone in for a tick whose results row another worker wrote (and whose
/// run ended) after this statement's snapshot.
pub(crate) async fn enqueue_tick<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    live_key: &str,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let sql = &schema.sql;
    let (id, recorded): (Option<Uuid>, bool) =
        bind_job!(sqlx::query_as(&sql.enqueue_tick), job, now, sql)
            .bind(live_key)
            .fetch_one(executor)
            .await?;
    Ok(id.filter(|_| recorded))
}

/// Inserts one job with a unique key of mode skip, restart or replace; returns the id of
/// the new or live job, whether it is new, and whether the live job is running.
pub(crate) async fn enqueue_unique<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    mode: crate::model::UniqueMode,
    now: DateTime<Utc>,
) -> Result<(Uuid, bool, bool)> {
    let sql = &schema.sql;
    Ok(
        bind_job!(sqlx::query_as(&sql.enqueue_unique), job, now, sql)
            .bind(job.tenant)
            .bind(job.correlation_id)
            .bind(job.metadata)
            .bind(mode as i16)
            .bind(job.every_ms)
            .bind(job.timeout_ms)
            .fetch_one(executor)
            .await?,
    )
}

/// A batch of jobs as one array per column, for `unnest`.
#[derive(Default)]
pub(super) struct Columns {
    pub(super) ids: Vec<Uuid>,
    pub(super) types: Vec<String>,
    pub(super) sources: Vec<String>,
    pub(super) payloads: Vec<String>,
    pub(super) queues: Vec<String>,
    pub(super) priorities: Vec<i32>,
    pub(super) run_ats: Vec<DateTime<Utc>>,
    pub(super) max_attempts: Vec<i32>,
    pub(super) keys: Vec<Option<String>>,
    pub(super) tenants: Vec<Option<String>>,
    pub(super) correlation_ids: Vec<Option<String>>,
    pub(super) metadata: Vec<Option<String>>,
    pub(super) timeouts: Vec<Option<i64>>,
}

impl Columns {
    fn with_capacity(n: usize) -> Self {
        Columns {
            ids: Vec::with_capacity(n),
            types: Vec::with_capacity(n),
            sources: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            queues: Vec::with_capacity(n),
            priorities: Vec::with_capacity(n),
            run_ats: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            tenants: Vec::with_capacity(n),
            correlation_ids: Vec::with_capacity(n),
            metadata: Vec::with_capacity(n),
            timeouts: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, job: NewJob) {
        self.ids.push(job.id);
        self.types.push(job.task_type.into_owned());
        self.sources.push(job.source);
        self.payloads.push(job.payload);
        self.queues.push(job.queue);
        self.priorities.push(job.priority);
        self.run_ats.push(job.run_at);
        self.max_attempts.push(job.max_attempts);
        self.keys.push(job.unique_key);
        self.tenants.push(job.tenant);
        self.correlation_ids.push(job.correlation_id);
        self.metadata.push(job.metadata);
        self.timeouts.push(job.timeout_ms);
    }
}

/// A batch of leases as id and attempt arrays, sorted by id.
///
/// Every statement that locks several queue rows takes them in `task_id` order: the batch
/// arrives sorted, and whatever join the planner picks (a nested loop over the input, a
/// merge join, or a hash join probed by the input) walks it in that order. So the
/// heartbeat, the completer, a stop and another worker's control call never wait on each
/// other in a cycle, which PostgreSQL would resolve only after `deadlock_timeout` by
/// aborting one of them.
pub(super) fn in_lock_order(leases: &[Lease]) -> (Vec<Uuid>, Vec<i32>) {
    let mut sorted: Vec<Lease> = leases.to_vec();
    sorted.sort_unstable_by_key(|l| l.id);
    sorted.into_iter().map(|l| (l.id, l.attempt)).unzip()
}
