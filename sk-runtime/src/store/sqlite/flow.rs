//! SQLite: workflows, jobs that wait on other jobs (migration 4), as on PostgreSQL
//! (`postgres::flow`). Every write holds the database's one write lock, so a dependant's
//! count is never lowered by two transactions at once.

use chrono::{DateTime, Utc};
use sqlx::{Connection as _, SqliteConnection};
use uuid::Uuid;

use super::id_list;
use super::ts;
use crate::error::Result;
use crate::model::status::{PENDING, PROCESSED, UNPROCESSED};
use crate::store::{dependency_kind, dependency_states, NewJob, Schema, WAITING_UNTIL};

/// Inserts `jobs`, each waiting on all of `deps` (in a transaction, or a savepoint of the
/// caller's); their ids in order.
pub(crate) async fn enqueue_after(
    conn: &mut SqliteConnection,
    schema: &Schema,
    mut jobs: Vec<NewJob>,
    deps: Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    // A write first: the transaction holds the write lock from here on.
    let mut tx = conn.begin().await?;
    let live: Vec<Uuid> = sqlx::query_scalar(&format!(
        "UPDATE {q} SET task_dependants = 1 WHERE task_id IN (SELECT unhex(value) FROM json_each($1))
         RETURNING task_id"
    ))
    .bind(id_list(&deps))
    .fetch_all(&mut *tx)
    .await?;
    let rest: Vec<Uuid> = deps.iter().filter(|d| !live.contains(d)).copied().collect();
    let ended: Vec<(Uuid, String, i32, Option<String>)> = sqlx::query_as(&format!(
        "SELECT task_id, task_type, task_status, task_output FROM {r}
         WHERE task_id IN (SELECT unhex(value) FROM json_each($1))"
    ))
    .bind(id_list(&rest))
    .fetch_all(&mut *tx)
    .await?;
    let states = dependency_states(&deps, &live, &ended)?;
    let waiting = i32::try_from(live.len()).unwrap_or(i32::MAX);
    if waiting > 0 {
        for job in &mut jobs {
            job.run_at = WAITING_UNTIL;
        }
    }
    let ids = super::enqueue_many(&mut *tx, schema, jobs, now).await?;
    let ids_json = id_list(&ids);
    // Every job of the stage times every dependency, in one statement: `$2` holds
    // `[id, done, output]` per dependency, its place in the array its position.
    let dep_rows: Vec<(String, bool, Option<String>)> = deps
        .iter()
        .zip(states)
        .map(|(dep, state)| (dep.simple().to_string(), state.is_some(), state.flatten()))
        .collect();
    let dep_rows = serde_json::to_string(&dep_rows)
        .map_err(|e| crate::Error::invalid("job output", e.to_string()))?;
    sqlx::query(&format!(
        "INSERT INTO {d} (task_id, dep_position, dep_task_id, dep_done, dep_output)
         SELECT unhex(j.value), p.key, unhex(p.value ->> 0), p.value ->> 1, p.value ->> 2
         FROM json_each($1) AS j, json_each($2) AS p"
    ))
    .bind(&ids_json)
    .bind(dep_rows)
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "UPDATE {q} SET task_waiting_on = $2, task_has_result = task_has_result OR $2 > 0
         WHERE task_id IN (SELECT unhex(value) FROM json_each($1))"
    ))
    .bind(&ids_json)
    .bind(waiting)
    .execute(&mut *tx)
    .await?;
    if waiting > 0 {
        // A waiting job's status (8) is kept in a results row, which a job without a
        // unique key does not have yet (`NEW_VALUES`).
        sqlx::query(&format!(
            "INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id,
                task_metadata)
             SELECT task_id, task_type, task_source, task_queue, 8, task_priority, task_unique_key,
                task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id, task_metadata
             FROM {q} WHERE task_id IN (SELECT unhex(value) FROM json_each($1)) AND true
             ON CONFLICT (task_id) DO UPDATE SET task_status = {PENDING}"
        ))
        .bind(&ids_json)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(ids)
}

/// After the successes of `done` (id, output) of jobs others wait on, and of `fed`, jobs
/// that waited on others: as on PostgreSQL. Whether a dependant became due.
pub(crate) async fn settle(
    conn: &mut SqliteConnection,
    schema: &Schema,
    done: &[(Uuid, Option<&str>)],
    fed: &[Uuid],
    now: DateTime<Utc>,
) -> Result<bool> {
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    for id in fed {
        sqlx::query(&format!("DELETE FROM {d} WHERE task_id = $1"))
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    let mut released = false;
    // Only the jobs that other jobs wait on (not those of a batch alone) take the steps
    // below, a statement each.
    let ids: Vec<Uuid> = done.iter().map(|(id, _)| *id).collect();
    let awaited: Vec<Uuid> = sqlx::query_scalar(&format!(
        "SELECT DISTINCT dep_task_id FROM {d} WHERE NOT dep_done
            AND dep_task_id IN (SELECT unhex(value) FROM json_each($1))"
    ))
    .bind(id_list(&ids))
    .fetch_all(&mut *conn)
    .await?;
    for (id, output) in done.iter().filter(|(id, _)| awaited.contains(id)) {
        let dependants: Vec<Uuid> = sqlx::query_scalar(&format!(
            "UPDATE {d} SET dep_done = 1, dep_output = $2 WHERE dep_task_id = $1 AND NOT dep_done
             RETURNING task_id"
        ))
        .bind(id)
        .bind(output)
        .fetch_all(&mut *conn)
        .await?;
        for dependant in dependants {
            let due: Option<Uuid> = sqlx::query_scalar(&format!(
                "UPDATE {q} SET task_waiting_on = task_waiting_on - 1,
                    task_locked_until_ts = CASE WHEN task_waiting_on <= 1 THEN $2 ELSE task_locked_until_ts END
                 WHERE task_id = $1 AND task_waiting_on > 0
                 RETURNING CASE WHEN task_waiting_on <= 0 THEN task_id END"
            ))
            .bind(dependant)
            .bind(ts(now))
            .fetch_optional(&mut *conn)
            .await?
            .flatten();
            if let Some(due) = due {
                sqlx::query(&format!(
                    "UPDATE {r} SET task_status = {UNPROCESSED} WHERE task_id = $1 AND task_status = {PENDING}"
                ))
                .bind(due)
                .execute(&mut *conn)
                .await?;
                released = true;
            }
        }
    }
    released |= tally(conn, schema, &ids, PROCESSED, now).await?;
    Ok(released)
}

/// Ends the jobs waiting on `roots` (id, the message its dependants record), and theirs
/// in turn: fatal, or cancelled when `cancelled`. In the transaction that ended the roots.
pub(crate) async fn propagate(
    conn: &mut SqliteConnection,
    schema: &Schema,
    mut roots: Vec<(Uuid, String)>,
    cancelled: bool,
    now: DateTime<Utc>,
) -> Result<()> {
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    let kind = dependency_kind(cancelled);
    let status = if cancelled { 7 } else { 6 };
    // A job of a batch among them is counted as ended (`store::batch`).
    let ended: Vec<Uuid> = roots.iter().map(|(id, _)| *id).collect();
    tally(conn, schema, &ended, status, now).await?;
    while let Some((root, message)) = roots.pop() {
        let dependants: Vec<Uuid> = sqlx::query_scalar(&format!(
            "SELECT DISTINCT task_id FROM {d} WHERE dep_task_id = $1 ORDER BY task_id"
        ))
        .bind(root)
        .fetch_all(&mut *conn)
        .await?;
        for dependant in dependants {
            type Gone = (String, Option<String>, i32, Option<i64>, bool);
            let gone: Option<Gone> = sqlx::query_as(&format!(
                "DELETE FROM {q} WHERE task_id = $1 AND task_waiting_on > 0
                 RETURNING task_type, task_payload, task_max_attempts, task_timeout_ms, task_dependants"
            ))
            .bind(dependant)
            .fetch_optional(&mut *conn)
            .await?;
            let Some((task_type, payload, max_attempts, timeout_ms, dependants)) = gone else {
                continue;
            };
            sqlx::query(&format!(
                "UPDATE {r} SET task_status = $2, task_last_error_type = $3, task_last_error_message = $4,
                    task_last_error_detail = NULL, task_last_error = $3 || ': ' || $4,
                    task_last_error_is_recoverable = 0, task_processing_finalized_at_ts = $5,
                    task_payload = $6, task_max_attempts = $7, task_timeout_ms = $8
                 WHERE task_id = $1"
            ))
            .bind(dependant)
            .bind(status)
            .bind(kind)
            .bind(&message)
            .bind(ts(now))
            .bind(payload)
            .bind(max_attempts)
            .bind(timeout_ms)
            .execute(&mut *conn)
            .await?;
            if dependants {
                let next =
                    crate::store::dependency_message(dependant, &task_type, cancelled, &message);
                tally(conn, schema, &[dependant], status, now).await?;
                roots.push((dependant, next));
            }
        }
    }
    Ok(())
}

/// The outputs of job `id`'s dependencies, in order.
pub(crate) async fn inputs(
    conn: &mut SqliteConnection,
    schema: &Schema,
    id: Uuid,
) -> Result<Vec<Option<Option<String>>>> {
    let rows: Vec<(bool, Option<String>)> = sqlx::query_as(&format!(
        "SELECT dep_done, dep_output FROM {} WHERE task_id = $1 ORDER BY dep_position",
        schema.flat_table("task_deps_t")
    ))
    .bind(id)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(done, output)| done.then_some(output))
        .collect())
}

/// Heals a workflow after a retry put `roots` back (in this transaction), as on
/// PostgreSQL (`postgres::flow::revive`); the ids revived.
pub(crate) async fn revive(
    conn: &mut SqliteConnection,
    schema: &Schema,
    mut roots: Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    let m = schema.flat_table("batch_jobs_t");
    let deps = "d.dep_task_id IN (SELECT unhex(value) FROM json_each($1))";
    let ended = crate::store::revivable_sql(&q, &r, &d, deps);
    let back = format!(
        "INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts,
            task_locked_until_ts, task_queue, task_attempt, task_max_attempts, task_has_result, task_tenant,
            task_correlation_id, task_metadata, task_timeout_ms, task_waiting_on, task_dependants)
         SELECT task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts, $2, task_queue,
            json_array_length(task_errors), json_array_length(task_errors) + coalesce(task_max_attempts, {max}),
            1, task_tenant, task_correlation_id, task_metadata, task_timeout_ms,
            (SELECT count(*) FROM {d} w WHERE w.task_id = {r}.task_id AND NOT w.dep_done),
            EXISTS (SELECT 1 FROM {m} b WHERE b.task_id = {r}.task_id)
         FROM {r} WHERE task_id IN (SELECT unhex(value) FROM json_each($1))
         ORDER BY task_id
         ON CONFLICT DO NOTHING
         RETURNING task_id",
        max = crate::DEFAULT_MAX_ATTEMPTS,
    );
    let ids = "task_id IN (SELECT unhex(value) FROM json_each($1))";
    let [queue, results] = crate::store::wait_again_sql(&q, &r, &d, ids, "$2");
    sqlx::query(&queue)
        .bind(id_list(&roots))
        .bind(ts(WAITING_UNTIL))
        .execute(&mut *conn)
        .await?;
    sqlx::query(&results)
        .bind(id_list(&roots))
        .execute(&mut *conn)
        .await?;
    let mut revived = Vec::new();
    while !roots.is_empty() {
        let ended: Vec<Uuid> = sqlx::query_scalar(&ended)
            .bind(id_list(&roots))
            .fetch_all(&mut *conn)
            .await?;
        if ended.is_empty() {
            break;
        }
        roots = sqlx::query_scalar(&back)
            .bind(id_list(&ended))
            .bind(ts(WAITING_UNTIL))
            .fetch_all(&mut *conn)
            .await?;
        sqlx::query(&format!(
            "UPDATE {r} SET task_status = {PENDING}, task_processing_finalized_at_ts = NULL, task_payload = NULL
             WHERE task_id IN (SELECT unhex(value) FROM json_each($1))"
        ))
        .bind(id_list(&roots))
        .execute(&mut *conn)
        .await?;
        sqlx::query(&format!(
            "UPDATE {q} SET task_dependants = 1 WHERE task_id IN
                (SELECT dep_task_id FROM {d} WHERE NOT dep_done
                    AND task_id IN (SELECT unhex(value) FROM json_each($1)))"
        ))
        .bind(id_list(&roots))
        .execute(&mut *conn)
        .await?;
        revived.extend_from_slice(&roots);
    }
    tally(conn, schema, &revived, UNPROCESSED, now).await?;
    Ok(revived)
}

/// Counts the jobs `ids`, of batches or not, as now in `status`
/// (`store::batch::tally`), and posts the callbacks that brings due, in this
/// transaction; whether it posted any.
pub(crate) async fn tally(
    conn: &mut SqliteConnection,
    schema: &Schema,
    ids: &[Uuid],
    status: i32,
    now: DateTime<Utc>,
) -> Result<bool> {
    let posts = crate::store::batch::tally::<sqlx::Sqlite>(conn, schema, ids, status, now).await?;
    if posts.is_empty() {
        return Ok(false);
    }
    super::enqueue_many(&mut *conn, schema, posts, now).await?;
    Ok(true)
}
