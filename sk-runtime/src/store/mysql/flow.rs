//! MySQL / MariaDB: workflows, jobs that wait on other jobs (migration 4), as on
//! PostgreSQL (`postgres::flow`). A dependant's count is read and lowered under its row
//! lock (`FOR UPDATE`), so two dependencies finishing at once take turns.

use chrono::{DateTime, Utc};
use sqlx::{Connection as _, MySql, MySqlConnection, QueryBuilder};
use uuid::Uuid;

use super::dt;
use super::push_ids;
use crate::error::Result;
use crate::model::status::{PENDING, PROCESSED, UNPROCESSED};
use crate::store::{dependency_kind, dependency_states, NewJob, Schema, WAITING_UNTIL};

/// Inserts `jobs`, each waiting on all of `deps` (in a transaction, or a savepoint of the
/// caller's); their ids in order.
pub(crate) async fn enqueue_after(
    conn: &mut MySqlConnection,
    schema: &Schema,
    jobs: Vec<NewJob>,
    deps: Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    let mut tx = conn.begin().await?;
    // Locked until this commits, in id order: a finalization of one waits, then sees the
    // mark; one that finished before is in its results row.
    let locked: Vec<(Uuid, i64)> = if deps.is_empty() {
        Vec::new()
    } else {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT task_id, task_lock_handle_id FROM {q} WHERE "
        ));
        push_ids(&mut query, "task_id", &deps);
        query.push(" ORDER BY task_id FOR UPDATE");
        query.build_query_as().fetch_all(&mut *tx).await?
    };
    let live: Vec<Uuid> = locked.iter().map(|(id, _)| *id).collect();
    if !locked.is_empty() {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "UPDATE {q} SET task_dependants = TRUE WHERE task_lock_handle_id IN ("
        ));
        let mut list = query.separated(", ");
        for (_, handle) in &locked {
            list.push_bind(*handle);
        }
        query.push(")");
        query.build().execute(&mut *tx).await?;
    }
    let rest: Vec<Uuid> = deps.iter().filter(|d| !live.contains(d)).copied().collect();
    let ended: Vec<(Uuid, String, i32, Option<String>)> = if rest.is_empty() {
        Vec::new()
    } else {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT task_id, CAST(task_type AS CHAR), task_status, task_output FROM {r} WHERE "
        ));
        push_ids(&mut query, "task_id", &rest);
        query.build_query_as().fetch_all(&mut *tx).await?
    };
    let states = dependency_states(&deps, &live, &ended)?;
    let waiting = i32::try_from(live.len()).unwrap_or(i32::MAX);
    let ids = super::enqueue_many(&mut tx, schema, jobs, now).await?;
    // Every job of the stage times every dependency, in multi-row inserts.
    let rows: Vec<(Uuid, i64, Uuid, bool, Option<&str>)> = ids
        .iter()
        .flat_map(|id| {
            deps.iter()
                .zip(&states)
                .enumerate()
                .map(|(position, (dep, state))| {
                    let position = i64::try_from(position).unwrap_or(i64::MAX);
                    let output = state.as_ref().and_then(|o| o.as_deref());
                    (*id, position, *dep, state.is_some(), output)
                })
        })
        .collect();
    for chunk in rows.chunks(super::ROWS_PER_STATEMENT) {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "INSERT INTO {d} (task_id, dep_position, dep_task_id, dep_done, dep_output) "
        ));
        query.push_values(chunk, |mut row, (id, position, dep, done, output)| {
            row.push_bind(*id)
                .push_bind(*position)
                .push_bind(*dep)
                .push_bind(*done)
                .push_bind(*output);
        });
        query.build().execute(&mut *tx).await?;
    }
    for chunk in ids.chunks(super::ROWS_PER_STATEMENT) {
        // The not-before time as text: a bound time travels as a TIMESTAMP, whose range
        // ends in 2038 on MariaDB.
        let mut query = QueryBuilder::<MySql>::new(format!("UPDATE {q} SET task_waiting_on = "));
        query.push_bind(waiting);
        if waiting > 0 {
            query
                .push(", task_has_result = 1, task_locked_until_ts = ")
                .push_bind(dt(WAITING_UNTIL));
        }
        query.push(" WHERE ");
        push_ids(&mut query, "task_id", chunk);
        query.build().execute(&mut *tx).await?;
        if waiting > 0 {
            // A waiting job's status (8) is kept in a results row, which a job without a
            // unique key does not have yet (`enqueue_one`).
            let mut query = QueryBuilder::<MySql>::new(format!(
                "INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                    task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id,
                    task_metadata)
                 SELECT task_id, task_type, task_source, task_queue, 8, task_priority, task_unique_key,
                    task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id, task_metadata
                 FROM {q} WHERE "
            ));
            push_ids(&mut query, "task_id", chunk);
            query.push(format!(" ON DUPLICATE KEY UPDATE task_status = {PENDING}"));
            query.build().execute(&mut *tx).await?;
        }
    }
    tx.commit().await?;
    Ok(ids)
}

/// After the successes of `done` (id, output) of jobs others wait on, and of `fed`, jobs
/// that waited on others: as on PostgreSQL. Whether a dependant became due.
pub(crate) async fn settle(
    conn: &mut MySqlConnection,
    schema: &Schema,
    done: &[(Uuid, Option<&str>)],
    fed: &[Uuid],
    now: DateTime<Utc>,
) -> Result<bool> {
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    for id in fed {
        sqlx::query(&format!("DELETE FROM {d} WHERE task_id = ?"))
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    let mut released = false;
    // Only the jobs that other jobs wait on (not those of a batch alone) take the steps
    // below, one round trip each.
    let awaited: Vec<Uuid> = if done.is_empty() {
        Vec::new()
    } else {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT DISTINCT dep_task_id FROM {d} WHERE NOT dep_done AND "
        ));
        let ids: Vec<Uuid> = done.iter().map(|(id, _)| *id).collect();
        push_ids(&mut query, "dep_task_id", &ids);
        query.build_query_scalar().fetch_all(&mut *conn).await?
    };
    for (id, output) in done.iter().filter(|(id, _)| awaited.contains(id)) {
        let mut dependants: Vec<Uuid> = sqlx::query_scalar(&format!(
            "SELECT task_id FROM {d} WHERE dep_task_id = ? AND NOT dep_done FOR UPDATE"
        ))
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        sqlx::query(&format!(
            "UPDATE {d} SET dep_done = TRUE, dep_output = ? WHERE dep_task_id = ? AND NOT dep_done"
        ))
        .bind(output)
        .bind(id)
        .execute(&mut *conn)
        .await?;
        dependants.sort_unstable();
        dependants.dedup();
        for dependant in dependants {
            let waiting: Option<Option<i32>> = sqlx::query_scalar(&format!(
                "SELECT task_waiting_on FROM {q} WHERE task_id = ? FOR UPDATE"
            ))
            .bind(dependant)
            .fetch_optional(&mut *conn)
            .await?;
            let Some(Some(waiting)) = waiting.filter(|w| w.is_some_and(|w| w > 0)) else {
                continue;
            };
            let due = waiting <= 1;
            sqlx::query(&format!(
                "UPDATE {q} SET task_waiting_on = ?,
                    task_locked_until_ts = CASE WHEN ? THEN ? ELSE task_locked_until_ts END
                 WHERE task_id = ?"
            ))
            .bind(waiting - 1)
            .bind(due)
            .bind(dt(now))
            .bind(dependant)
            .execute(&mut *conn)
            .await?;
            if due {
                sqlx::query(&format!(
                    "UPDATE {r} SET task_status = {UNPROCESSED} WHERE task_id = ? AND task_status = {PENDING}"
                ))
                .bind(dependant)
                .execute(&mut *conn)
                .await?;
                released = true;
            }
        }
    }
    let ids: Vec<Uuid> = done.iter().map(|(id, _)| *id).collect();
    released |= tally(conn, schema, &ids, PROCESSED, now).await?;
    Ok(released)
}

/// Ends the jobs waiting on `roots` (id, the message its dependants record), and theirs
/// in turn: fatal, or cancelled when `cancelled`. In the transaction that ended the roots.
pub(crate) async fn propagate(
    conn: &mut MySqlConnection,
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
            "SELECT DISTINCT task_id FROM {d} WHERE dep_task_id = ? ORDER BY task_id"
        ))
        .bind(root)
        .fetch_all(&mut *conn)
        .await?;
        for dependant in dependants {
            type Gone = (i64, String, Option<String>, i32, Option<i64>, bool);
            let gone: Option<Gone> = sqlx::query_as(&format!(
                "SELECT task_lock_handle_id, CAST(task_type AS CHAR), task_payload, task_max_attempts,
                    task_timeout_ms, task_dependants
                 FROM {q} WHERE task_id = ? AND task_waiting_on > 0 FOR UPDATE"
            ))
            .bind(dependant)
            .fetch_optional(&mut *conn)
            .await?;
            let Some((handle, task_type, payload, max_attempts, timeout_ms, dependants)) = gone
            else {
                continue;
            };
            sqlx::query(&format!("DELETE FROM {q} WHERE task_lock_handle_id = ?"))
                .bind(handle)
                .execute(&mut *conn)
                .await?;
            sqlx::query(&format!(
                "UPDATE {r} SET task_status = ?, task_last_error_type = ?, task_last_error_message = ?,
                    task_last_error_detail = NULL, task_last_error = CONCAT(?, ': ', ?),
                    task_last_error_is_recoverable = FALSE, task_processing_finalized_at_ts = ?,
                    task_payload = ?, task_max_attempts = ?, task_timeout_ms = ?
                 WHERE task_id = ?"
            ))
            .bind(status)
            .bind(kind)
            .bind(&message)
            .bind(kind)
            .bind(&message)
            .bind(dt(now))
            .bind(payload)
            .bind(max_attempts)
            .bind(timeout_ms)
            .bind(dependant)
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
    conn: &mut MySqlConnection,
    schema: &Schema,
    id: Uuid,
) -> Result<Vec<Option<Option<String>>>> {
    let rows: Vec<(bool, Option<String>)> = sqlx::query_as(&format!(
        "SELECT dep_done, dep_output FROM {} WHERE task_id = ? ORDER BY dep_position",
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
    conn: &mut MySqlConnection,
    schema: &Schema,
    mut roots: Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    let m = schema.flat_table("batch_jobs_t");
    let listed =
        "IN (SELECT UNHEX(i) FROM JSON_TABLE(?, '$[*]' COLUMNS (i CHAR(32) PATH '$')) AS ids)";
    let [queue, results] =
        crate::store::wait_again_sql(&q, &r, &d, &format!("task_id {listed}"), "?");
    let revivable = crate::store::revivable_sql(&q, &r, &d, &format!("d.dep_task_id {listed}"));
    let hex = hex_list(&roots);
    sqlx::query(&queue)
        .bind(dt(WAITING_UNTIL))
        .bind(&hex)
        .execute(&mut *conn)
        .await?;
    sqlx::query(&results).bind(&hex).execute(&mut *conn).await?;
    let mut revived = Vec::new();
    while !roots.is_empty() {
        let ended: Vec<Uuid> = sqlx::query_scalar(&revivable)
            .bind(hex_list(&roots))
            .fetch_all(&mut *conn)
            .await?;
        if ended.is_empty() {
            break;
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
            "INSERT IGNORE INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                task_posted_at_ts, task_locked_until_ts, task_queue, task_attempt, task_max_attempts,
                task_has_result, task_tenant, task_correlation_id, task_metadata, task_timeout_ms,
                task_waiting_on, task_dependants)
             SELECT task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts, "
        ));
        query.push_bind(dt(WAITING_UNTIL)).push(format!(
            ", task_queue, JSON_LENGTH(task_errors), JSON_LENGTH(task_errors) + coalesce(task_max_attempts, {max}),
                1, task_tenant, task_correlation_id, task_metadata, task_timeout_ms,
                (SELECT count(*) FROM {d} w WHERE w.task_id = {r}.task_id AND NOT w.dep_done),
                EXISTS (SELECT 1 FROM {m} b WHERE b.task_id = {r}.task_id)
             FROM {r} WHERE ",
            max = crate::DEFAULT_MAX_ATTEMPTS,
        ));
        push_ids(&mut query, "task_id", &ended);
        query.push(" ORDER BY task_id");
        query.build().execute(&mut *conn).await?;
        let mut query = QueryBuilder::<MySql>::new(format!("SELECT task_id FROM {q} WHERE "));
        push_ids(&mut query, "task_id", &ended);
        query.push(" ORDER BY task_id");
        roots = query.build_query_scalar().fetch_all(&mut *conn).await?;
        if roots.is_empty() {
            break;
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
            "UPDATE {r} SET task_status = {PENDING}, task_processing_finalized_at_ts = NULL, task_payload = NULL WHERE "
        ));
        push_ids(&mut query, "task_id", &roots);
        query.build().execute(&mut *conn).await?;
        let mut query = QueryBuilder::<MySql>::new(format!(
            "UPDATE {q} SET task_dependants = 1 WHERE task_id IN
                (SELECT dep_task_id FROM {d} WHERE NOT dep_done AND "
        ));
        push_ids(&mut query, "task_id", &roots);
        query.push(")");
        query.build().execute(&mut *conn).await?;
        revived.extend_from_slice(&roots);
    }
    tally(conn, schema, &revived, UNPROCESSED, now).await?;
    Ok(revived)
}

/// Counts the jobs `ids`, of batches or not, as now in `status`
/// (`store::batch::tally`), and posts the callbacks that brings due, in this
/// transaction; whether it posted any.
pub(crate) async fn tally(
    conn: &mut MySqlConnection,
    schema: &Schema,
    ids: &[Uuid],
    status: i32,
    now: DateTime<Utc>,
) -> Result<bool> {
    let posts = crate::store::batch::tally::<sqlx::MySql>(conn, schema, ids, status, now).await?;
    if posts.is_empty() {
        return Ok(false);
    }
    super::enqueue_many(&mut *conn, schema, posts, now).await?;
    Ok(true)
}

/// Ids as the JSON array of hex strings that `JSON_TABLE` reads.
fn hex_list(ids: &[Uuid]) -> String {
    let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
    serde_json::to_string(&hex).expect("a list of strings serializes")
}
