//! PostgreSQL: workflows, jobs that wait on other jobs (migration 9). A waiting job is a
//! queue row due at `WAITING_UNTIL` with its count of dependencies still to succeed; the
//! success of each lowers the count in the transaction that records it, and the last
//! makes it due. A dependency that fails for good or is cancelled ends its waiting
//! dependants, and theirs, in the transaction that ends it.

use chrono::{DateTime, Utc};
use sqlx::{Connection as _, PgConnection};
use uuid::Uuid;

use super::pooler::kept;

use crate::error::Result;
use crate::model::status::{PENDING, PROCESSED, UNPROCESSED};
use crate::store::{
    dependency_kind, dependency_states, NewJob, Schema, NULL_PRIORITY, WAITING_UNTIL,
};

/// Inserts `jobs`, each waiting on all of `deps` (in a transaction, or a savepoint of the
/// caller's); their ids in order.
pub(crate) async fn enqueue_after(
    conn: &mut PgConnection,
    schema: &Schema,
    mut jobs: Vec<NewJob>,
    deps: Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let q = schema.table("tasks_queue_t");
    let r = schema.table("task_results_t");
    let d = schema.table("task_deps_t");
    let mut tx = conn.begin().await?;
    // Marking a live dependency locks its row until this commits: its finalization waits
    // and then sees the mark; one that finished before is in its results row.
    let live: Vec<Uuid> = sqlx::query_scalar(&format!(
        "UPDATE {q} SET task_dependants = true WHERE task_id = ANY($1) RETURNING task_id"
    ))
    .bind(&deps)
    .fetch_all(kept(&mut tx))
    .await?;
    let ended: Vec<(Uuid, String, i32, Option<String>)> = sqlx::query_as(&format!(
        "SELECT task_id, task_type, task_status, task_output FROM {r}
         WHERE task_id = ANY($1) AND NOT task_id = ANY($2)"
    ))
    .bind(&deps)
    .bind(&live)
    .fetch_all(kept(&mut tx))
    .await?;
    let states = dependency_states(&deps, &live, &ended)?;
    let waiting = i32::try_from(states.iter().filter(|s| s.is_none()).count()).unwrap_or(i32::MAX);
    if waiting > 0 {
        for job in &mut jobs {
            job.run_at = WAITING_UNTIL;
        }
    }
    let ids = super::enqueue_many(kept(&mut tx), schema, jobs, now).await?;
    let done: Vec<bool> = states.iter().map(Option::is_some).collect();
    let outputs: Vec<Option<String>> = states.into_iter().map(Option::flatten).collect();
    sqlx::query(&format!(
        "INSERT INTO {d} (task_id, dep_position, dep_task_id, dep_done, dep_output)
         SELECT j.id, p.n - 1, p.dep, p.done, p.output
         FROM unnest($1::uuid[]) AS j(id),
            unnest($2::uuid[], $3::bool[], $4::text[]) WITH ORDINALITY AS p(dep, done, output, n)"
    ))
    .bind(&ids)
    .bind(&deps)
    .bind(&done)
    .bind(&outputs)
    .execute(kept(&mut tx))
    .await?;
    sqlx::query(&format!(
        "UPDATE {q} SET task_waiting_on = $2, task_has_result = task_has_result OR $2 > 0
         WHERE task_id = ANY($1)"
    ))
    .bind(&ids)
    .bind(waiting)
    .execute(kept(&mut tx))
    .await?;
    if waiting > 0 {
        // A waiting job's status (8) is kept in a results row, which a job without a
        // unique key does not have yet (`enqueue_one_plain`).
        sqlx::query(&format!(
            "INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id,
                task_metadata)
             SELECT task_id, task_type, task_source, task_queue, 8, coalesce(task_priority, {NULL_PRIORITY}),
                task_unique_key,
                task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id, task_metadata
             FROM {q} WHERE task_id = ANY($1)
             ON CONFLICT (task_id) DO UPDATE SET task_status = {PENDING}"
        ))
        .bind(&ids)
        .execute(kept(&mut tx))
        .await?;
    }
    tx.commit().await?;
    Ok(ids)
}

/// After the successes of `done` (id, output) of jobs others wait on, and of `fed`, jobs
/// that waited on others: records each output for its dependants, makes due those whose
/// last dependency this was, and drops the dependency rows of `fed`. In the transaction
/// that records the successes.
pub(crate) async fn settle(
    conn: &mut PgConnection,
    schema: &Schema,
    done: &[(Uuid, Option<&str>)],
    fed: &[Uuid],
    now: DateTime<Utc>,
) -> Result<()> {
    let q = schema.table("tasks_queue_t");
    let r = schema.table("task_results_t");
    let d = schema.table("task_deps_t");
    if !fed.is_empty() {
        sqlx::query(&format!("DELETE FROM {d} WHERE task_id = ANY($1)"))
            .bind(fed)
            .execute(kept(&mut *conn))
            .await?;
    }
    if done.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = done.iter().map(|(id, _)| *id).collect();
    let outputs: Vec<Option<&str>> = done.iter().map(|(_, o)| *o).collect();
    tally(conn, schema, &ids, PROCESSED, now).await?;
    // A dependant's count is lowered under its row lock: two dependencies finishing at
    // once in two transactions take turns, the second re-reading the first's count.
    let released: Vec<Uuid> = sqlx::query_scalar::<_, Option<Uuid>>(&format!(
        "WITH marked AS (
            UPDATE {d} d SET dep_done = true, dep_output = i.output
            FROM unnest($1::uuid[], $2::text[]) AS i(id, output)
            WHERE d.dep_task_id = i.id AND NOT d.dep_done
            RETURNING d.task_id
        ), counted AS (
            SELECT task_id, count(*)::int4 AS n FROM marked GROUP BY task_id ORDER BY task_id
        )
        UPDATE {q} q SET task_waiting_on = q.task_waiting_on - counted.n,
            task_locked_until_ts = CASE WHEN q.task_waiting_on - counted.n <= 0 THEN $3
                ELSE q.task_locked_until_ts END
        FROM counted WHERE q.task_id = counted.task_id AND q.task_waiting_on > 0
        RETURNING CASE WHEN q.task_waiting_on <= 0 THEN q.task_id END"
    ))
    .bind(&ids)
    .bind(&outputs)
    .bind(now)
    .fetch_all(kept(&mut *conn))
    .await?
    .into_iter()
    .flatten()
    .collect();
    if !released.is_empty() {
        sqlx::query(&format!(
            "UPDATE {r} SET task_status = {UNPROCESSED} WHERE task_id = ANY($1) AND task_status = {PENDING}"
        ))
        .bind(&released)
        .execute(kept(&mut *conn))
        .await?;
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(schema.channel())
            .execute(kept(&mut *conn))
            .await?;
    }
    Ok(())
}

/// Ends the jobs waiting on `roots` (id, the message its dependants record), and theirs
/// in turn: fatal, or cancelled when `cancelled`, with the reason recorded. In the
/// transaction that ended the roots.
pub(crate) async fn propagate(
    conn: &mut PgConnection,
    schema: &Schema,
    mut roots: Vec<(Uuid, String)>,
    cancelled: bool,
    now: DateTime<Utc>,
) -> Result<()> {
    let q = schema.table("tasks_queue_t");
    let r = schema.table("task_results_t");
    let d = schema.table("task_deps_t");
    let kind = dependency_kind(cancelled);
    let status = if cancelled { 7 } else { 6 };
    let sql = format!(
        "WITH hit AS (
            SELECT DISTINCT ON (d.task_id) d.task_id, i.message
            FROM {d} d JOIN unnest($1::uuid[], $2::text[]) AS i(id, message) ON d.dep_task_id = i.id
            ORDER BY d.task_id, d.dep_position
        ), gone AS (
            DELETE FROM {q} q USING hit WHERE q.task_id = hit.task_id AND q.task_waiting_on > 0
            RETURNING q.task_id, q.task_type, q.task_payload, q.task_max_attempts, q.task_timeout_ms,
                q.task_dependants, hit.message
        ), res AS (
            UPDATE {r} r SET task_status = $3, task_last_error_type = $4, task_last_error_message = gone.message,
                task_last_error_detail = NULL, task_last_error = $4 || ': ' || gone.message,
                task_last_error_is_recoverable = false, task_processing_finalized_at_ts = $5,
                task_payload = gone.task_payload, task_max_attempts = gone.task_max_attempts,
                task_timeout_ms = gone.task_timeout_ms
            FROM gone WHERE r.task_id = gone.task_id
        )
        SELECT task_id, task_type, message, task_dependants FROM gone ORDER BY task_id"
    );
    let mut ended = false;
    while !roots.is_empty() {
        let (ids, messages): (Vec<Uuid>, Vec<String>) = roots.into_iter().unzip();
        tally(conn, schema, &ids, status, now).await?;
        let next: Vec<(Uuid, String, String, bool)> = sqlx::query_as(&sql)
            .bind(&ids)
            .bind(&messages)
            .bind(status)
            .bind(kind)
            .bind(now)
            .fetch_all(kept(&mut *conn))
            .await?;
        ended |= !next.is_empty();
        roots = next
            .into_iter()
            .filter(|row| row.3)
            .map(|(id, task_type, message, _)| {
                let message = crate::store::dependency_message(id, &task_type, cancelled, &message);
                (id, message)
            })
            .collect();
    }
    if ended {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(schema.done_channel())
            .execute(kept(&mut *conn))
            .await?;
    }
    Ok(())
}

/// The outputs of job `id`'s dependencies, in order.
pub(crate) async fn inputs(
    conn: &mut PgConnection,
    schema: &Schema,
    id: Uuid,
) -> Result<Vec<Option<Option<String>>>> {
    let rows: Vec<(bool, Option<String>)> = sqlx::query_as(&format!(
        "SELECT dep_done, dep_output FROM {} WHERE task_id = $1 ORDER BY dep_position",
        schema.table("task_deps_t")
    ))
    .bind(id)
    .fetch_all(kept(conn))
    .await?;
    Ok(rows
        .into_iter()
        .map(|(done, output)| done.then_some(output))
        .collect())
}

/// Heals a workflow after a retry put `roots` back in the queue (in this transaction):
/// a root that waited on jobs waits again on those that have not succeeded
/// (`wait_again_sql`), and the jobs the roots ended as their dependency failed or was
/// cancelled come back, and theirs in turn, each due when its last dependency succeeds.
/// A dependant comes back only when each dependency it still waits on is live, so none
/// waits on a job that cannot run. The ids revived.
pub(crate) async fn revive(
    conn: &mut PgConnection,
    schema: &Schema,
    mut roots: Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let q = schema.table("tasks_queue_t");
    let r = schema.table("task_results_t");
    let d = schema.table("task_deps_t");
    let m = schema.table("batch_jobs_t");
    let seed002 = "task_tenant, task_correlation_id, task_metadata";
    let sql = format!(
        "WITH ended AS ({revivable}), back AS (
            INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts,
                task_locked_until_ts, task_queue, task_attempt, task_max_attempts, task_has_result, {seed002},
                task_timeout_ms, task_waiting_on, task_dependants)
            SELECT r.task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts, $2, task_queue,
                jsonb_array_length(task_errors), jsonb_array_length(task_errors) + coalesce(task_max_attempts, {max}),
                true, {seed002}, task_timeout_ms,
                (SELECT count(*)::int4 FROM {d} w WHERE w.task_id = r.task_id AND NOT w.dep_done),
                EXISTS (SELECT 1 FROM {m} b WHERE b.task_id = r.task_id)
            FROM {r} r JOIN ended USING (task_id)
            ORDER BY r.task_id
            ON CONFLICT DO NOTHING
            RETURNING task_id
        ), res AS (
            UPDATE {r} r SET task_status = {PENDING}, task_processing_finalized_at_ts = NULL, task_payload = NULL
            FROM back WHERE r.task_id = back.task_id
        ), awaited AS (
            UPDATE {q} q SET task_dependants = true
            WHERE q.task_id IN (SELECT w.dep_task_id FROM {d} w JOIN back USING (task_id) WHERE NOT w.dep_done)
        )
        SELECT task_id FROM back",
        revivable = crate::store::revivable_sql(&q, &r, &d, "d.dep_task_id = ANY($1)"),
        max = crate::DEFAULT_MAX_ATTEMPTS,
    );
    let [queue, results] = crate::store::wait_again_sql(&q, &r, &d, "task_id = ANY($1)", "$2");
    sqlx::query(&queue)
        .bind(&roots)
        .bind(WAITING_UNTIL)
        .execute(kept(&mut *conn))
        .await?;
    sqlx::query(&results)
        .bind(&roots)
        .execute(kept(&mut *conn))
        .await?;
    let mut revived = Vec::new();
    while !roots.is_empty() {
        roots = sqlx::query_scalar(&sql)
            .bind(&roots)
            .bind(WAITING_UNTIL)
            .fetch_all(kept(&mut *conn))
            .await?;
        revived.extend_from_slice(&roots);
    }
    tally(conn, schema, &revived, UNPROCESSED, now).await?;
    Ok(revived)
}

/// Counts the jobs `ids`, of batches or not, as now in `status`
/// (`store::batch::tally`), and posts the callbacks that brings due, in this
/// transaction.
pub(crate) async fn tally(
    conn: &mut PgConnection,
    schema: &Schema,
    ids: &[Uuid],
    status: i32,
    now: DateTime<Utc>,
) -> Result<()> {
    let posts =
        crate::store::batch::tally::<sqlx::Postgres>(conn, schema, ids, status, now).await?;
    if !posts.is_empty() {
        super::enqueue_many(kept(&mut *conn), schema, posts, now).await?;
    }
    Ok(())
}
