//! Enqueue: one job, a batch, a job with a unique key.

use super::*;

/// Inserts one job without a unique key; `None` when a job with its id exists.
pub(crate) async fn enqueue_one<'e, E: sqlx::Executor<'e, Database = Sqlite>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let mode = job.unique_mode.map(|m| m as i16);
    let id = bind_new!(
        sqlx::query_scalar(&schema.sqlite.enqueue_one),
        job,
        now,
        mode
    )
    .fetch_optional(executor)
    .await?;
    wake();
    Ok(id)
}

/// Inserts one job with a unique key of mode skip, restart or replace; the id of the new
/// or live job, whether it is new, and whether the live job is running.
pub(crate) async fn enqueue_unique<'e, E: sqlx::Executor<'e, Database = Sqlite>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    mode: crate::model::UniqueMode,
    now: DateTime<Utc>,
) -> Result<(Uuid, bool, bool)> {
    let new_id = job.id;
    let (id, running): (Uuid, bool) = bind_new!(
        sqlx::query_as(&schema.sqlite.enqueue_unique),
        job,
        now,
        Some(mode as i16)
    )
    .fetch_one(executor)
    .await?;
    wake();
    Ok((id, id == new_id, running))
}

/// Inserts many jobs in one statement; the ids in order (a duplicate key's place holds
/// the live job's id, or the first of the batch with that key).
pub(crate) async fn enqueue_many<'e, E: sqlx::Executor<'e, Database = Sqlite>>(
    executor: E,
    schema: &Schema,
    jobs: Vec<NewJob>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let first = &jobs[0];
    if super::super::uniform(&jobs) {
        let pairs: Vec<(String, &str)> = jobs
            .iter()
            .map(|j| (j.id.simple().to_string(), j.payload.as_str()))
            .collect();
        sqlx::query(&schema.sqlite.enqueue_many_uniform)
            .bind(ts(now))
            .bind(
                serde_json::to_string(&pairs)
                    .map_err(|e| Error::invalid("payload", e.to_string()))?,
            )
            .bind(&*first.task_type)
            .bind(&first.source)
            .bind(first.priority)
            .bind(ts(first.run_at))
            .bind(&first.queue)
            .bind(first.max_attempts)
            .bind(&first.tenant)
            .bind(&first.correlation_id)
            .bind(&first.metadata)
            .bind(first.timeout_ms)
            .execute(executor)
            .await?;
        wake();
        return Ok(jobs.iter().map(|j| j.id).collect());
    }
    let rows: Vec<serde_json::Value> = jobs
        .iter()
        .map(|j| {
            serde_json::json!({
                "id": j.id.simple().to_string(),
                "type": j.task_type,
                "source": j.source,
                "payload": j.payload,
                "priority": j.priority,
                "run_at": ts(j.run_at),
                "queue": j.queue,
                "max_attempts": j.max_attempts,
                "tenant": j.tenant,
                "correlation_id": j.correlation_id,
                "metadata": j.metadata,
                "key": j.unique_key,
                "timeout_ms": j.timeout_ms,
            })
        })
        .collect();
    let rows = serde_json::Value::Array(rows).to_string();
    if jobs.iter().all(|j| j.unique_key.is_none()) {
        sqlx::query(&schema.sqlite.enqueue_many)
            .bind(ts(now))
            .bind(rows)
            .execute(executor)
            .await?;
        wake();
        return Ok(jobs.iter().map(|j| j.id).collect());
    }
    let stored: Vec<(Uuid, Option<String>)> = sqlx::query_as(&schema.sqlite.enqueue_many_keyed)
        .bind(ts(now))
        .bind(rows)
        .fetch_all(executor)
        .await?;
    wake();
    let by_key: HashMap<String, Uuid> = stored
        .into_iter()
        .filter_map(|(id, key)| key.map(|k| (k, id)))
        .collect();
    Ok(jobs
        .iter()
        .map(|j| {
            j.unique_key
                .as_ref()
                .and_then(|k| by_key.get(k).copied())
                .unwrap_or(j.id)
        })
        .collect())
}
