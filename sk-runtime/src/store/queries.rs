//! The admin and control queries that read or change the same rows the same way on every
//! backend, written once over the [`Dialect`]: pauses and limits, a job's priority, queue
//! states, counts and peek, counts by group, error groups, workers, run counts, the ids a
//! bulk action takes, stored schedules and the migrations' read. Each backend's `Admin`
//! and `Control` call these and add what is its own (PostgreSQL notifies its listeners of
//! a change of queues; SQLite and MySQL signal the workers of this process).

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use super::dialect::{Arg, Dialect};
use super::listing::{group_column, merge_group_counts, workers_of, WorkerRow};
use super::{merge_queue_states, ScheduleRow, Schema, NULL_PRIORITY};
use crate::error::{Error, Result};
use crate::model::status::{CANCELLED, ERROR, FATAL, FAULTED};
use crate::model::{
    CountBy, ErrorRow, GroupCounts, JobFilter, JobStatus, QueueCounts, QueueState, QueuedJob,
    StatRow, WorkerInfo,
};

pub(crate) use super::dialect::Boxed;

/// Turns a queue's `flag` on (a new row if it has none: a pause, fair claims) or off;
/// whether that changed it.
pub(crate) async fn set_queue_flag<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    flag: crate::store::QueueFlag,
    queue: &str,
    on: bool,
    now: DateTime<Utc>,
) -> Result<bool> {
    let t = D::table(schema, "queues_t");
    let column = flag.column();
    let args = [Arg::Text(Some(queue)), Arg::Time(now)];
    if !on {
        let sql = format!(
            "UPDATE {t} SET {column} = NULL, queue_updated_at_ts = $2
             WHERE queue_name = $1 AND {column} IS NOT NULL"
        );
        return Ok(D::execute(pool, &sql, &args).await? > 0);
    }
    // A queue with its flag off turns it on; one without a row gets a row with it on (a
    // row another call added meanwhile is left as it is: that call turned it on, or set
    // a limit, and this one is then not a change).
    let sql = format!(
        "UPDATE {t} SET {column} = $2, queue_updated_at_ts = $2
         WHERE queue_name = $1 AND {column} IS NULL"
    );
    if D::execute(pool, &sql, &args).await? > 0 {
        return Ok(true);
    }
    let sql = D::insert_or_ignore(
        &t,
        &format!("queue_name, {column}, queue_updated_at_ts"),
        "$1, $2, $2",
    );
    Ok(D::execute(pool, &sql, &args).await? > 0)
}

/// Sets a live job's priority (waiting, due, running or waiting on others: its next claim
/// takes it in the new order); whether its queue row changed.
pub(crate) async fn reprioritize<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    id: Uuid,
    priority: i32,
) -> Result<bool> {
    let sql = format!(
        "UPDATE {} SET task_priority = $2, task_version = task_version + 1 WHERE task_id = $1",
        D::table(schema, "tasks_queue_t")
    );
    Ok(D::execute(pool, &sql, &[Arg::Id(Some(id)), Arg::Int4(Some(priority))]).await? > 0)
}

/// What an application changes in a waiting job (`Client::update`).
#[derive(Debug, Default)]
pub(crate) struct WaitingChange<'a> {
    pub(crate) payload: Option<&'a str>,
    pub(crate) run_at: Option<DateTime<Utc>>,
    pub(crate) priority: Option<i32>,
    pub(crate) metadata: Option<&'a str>,
}

/// Applies `change` to job `id` if it is waiting and (with `expected`) still at that
/// version (seed 002's compare and set): read the version, then write where it is still
/// that one, so a change made in between is never overwritten. Without `expected`, a race
/// lost to another change reads again and applies on top of it.
pub(crate) fn update_waiting<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    id: Uuid,
    expected: Option<i32>,
    change: &'a WaitingChange<'a>,
) -> Boxed<'a, crate::model::UpdateOutcome>
where
    (i32, i64): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        use crate::model::UpdateOutcome;
        let q = D::table(schema, "tasks_queue_t");
        let read = format!(
            "SELECT task_version, {} FROM {q} WHERE task_id = $1",
            D::bigint("CASE WHEN task_locked_by IS NULL THEN 0 ELSE 1 END")
        );
        loop {
            let rows: Vec<(i32, i64)> = D::fetch_all(pool, &read, &[Arg::Id(Some(id))]).await?;
            let Some(&(version, running)) = rows.first() else {
                return Ok(UpdateOutcome::NotWaiting);
            };
            if running != 0 {
                return Ok(UpdateOutcome::Running);
            }
            if expected.is_some_and(|e| e != version) {
                return Ok(UpdateOutcome::VersionChanged { version });
            }
            let mut args = vec![Arg::Id(Some(id)), Arg::Int4(Some(version))];
            let mut sets = vec!["task_version = $2 + 1".to_owned()];
            for (column, arg, json) in [
                (
                    "task_payload",
                    change.payload.map(|p| Arg::Text(Some(p))),
                    false,
                ),
                ("task_locked_until_ts", change.run_at.map(Arg::Time), false),
                (
                    "task_priority",
                    change.priority.map(|p| Arg::Int4(Some(p))),
                    false,
                ),
                (
                    "task_metadata",
                    change.metadata.map(|m| Arg::Text(Some(m))),
                    true,
                ),
            ] {
                let Some(arg) = arg else { continue };
                args.push(arg);
                let p = format!("${}", args.len());
                sets.push(format!("{column} = {}", if json { D::json(&p) } else { p }));
            }
            let sql = format!(
                "UPDATE {q} SET {} WHERE task_id = $1 AND task_version = $2 AND task_locked_by IS NULL",
                sets.join(", ")
            );
            if D::execute(pool, &sql, &args).await? > 0 {
                return Ok(UpdateOutcome::Updated {
                    version: version + 1,
                });
            }
        }
    })
}

/// Sets metadata `key` (a fixed name) of job `id` while run `attempt` holds it, to the
/// text `value` (the sub-state, seed 002) or, with `json`, the JSON it holds (progress);
/// whether it did (false: the run no longer holds the job).
pub(crate) async fn set_running_metadata<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    (id, attempt): (Uuid, i32),
    key: &'static str,
    value: &str,
    json: bool,
) -> Result<bool> {
    let set = if json {
        D::metadata_json_with(key)
    } else {
        D::metadata_with(key)
    };
    let sql = format!(
        "UPDATE {} SET task_metadata = {set} WHERE task_id = $2 AND task_attempt = $3
            AND task_locked_by IS NOT NULL",
        D::table(schema, "tasks_queue_t"),
    );
    let args = [
        Arg::Text(Some(value)),
        Arg::Id(Some(id)),
        Arg::Int4(Some(attempt)),
    ];
    Ok(D::execute(pool, &sql, &args).await? > 0)
}

/// Sets or (with `None`) removes a queue's limit of running jobs across workers, of the
/// whole queue or of each of its tenants (`kind`).
pub(crate) async fn set_queue_limit<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    kind: crate::store::QueueLimit,
    queue: &str,
    limit: Option<i32>,
    now: DateTime<Utc>,
) -> Result<()> {
    let t = D::table(schema, "queues_t");
    let column = kind.column();
    let sql = if limit.is_some() {
        format!(
            "INSERT INTO {t} (queue_name, {column}, queue_updated_at_ts) VALUES ($1, $2, $3) {}",
            D::upsert("queue_name", &[column, "queue_updated_at_ts"])
        )
    } else {
        format!("UPDATE {t} SET {column} = $2, queue_updated_at_ts = $3 WHERE queue_name = $1")
    };
    let args = [Arg::Text(Some(queue)), Arg::Int4(limit), Arg::Time(now)];
    D::execute(pool, &sql, &args).await?;
    Ok(())
}

/// Live jobs per queue and state, with each queue's pause and limit.
pub(crate) fn queue_states<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<QueueState>>
where
    (String, i64, i64, i64, i64): for<'r> FromRow<'r, D::Row>,
    super::ControlRow: for<'r> FromRow<'r, D::Row>,
    (String, i64, i64, String, Option<DateTime<Utc>>): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let live_sql = format!(
            "SELECT {}, {}, {}, {}, {} FROM {} GROUP BY task_queue",
            D::text("task_queue"),
            D::count_if("task_locked_by IS NULL AND task_locked_until_ts <= $1"),
            D::count_if(
                "task_locked_by IS NULL AND task_locked_until_ts > $1 AND coalesce(task_waiting_on, 0) = 0"
            ),
            D::count_if("task_locked_by IS NOT NULL AND task_locked_until_ts > $1"),
            D::count_if("task_waiting_on > 0"),
            D::table(schema, "tasks_queue_t")
        );
        let live = D::fetch_all(pool, &live_sql, &[Arg::Time(now)]).await?;
        let controlled_sql = format!(
            "SELECT {}, queue_paused_at_ts, {}, {}, queue_fair_at_ts FROM {}",
            D::text("queue_name"),
            D::bigint("queue_global_limit"),
            D::bigint("queue_tenant_limit"),
            D::table(schema, "queues_t")
        );
        let controlled = D::fetch_all(pool, &controlled_sql, &[]).await?;
        let rates = super::rates::states(pool, schema, super::rates::QUEUE, now).await?;
        let tenants = super::rates::states(pool, schema, super::rates::TENANT, now).await?;
        Ok(merge_queue_states(live, controlled, rates, tenants))
    })
}

/// Jobs by queue, task type or tenant and state (`Client::count_by`).
pub(crate) fn count_by<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    by: CountBy,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<GroupCounts>>
where
    (Option<String>, i64, i64, i64, i64, i64): for<'r> FromRow<'r, D::Row>,
    (Option<String>, i64, i64): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let key = D::text(group_column(by));
        let live_sql = format!(
            "SELECT {key}, {}, {}, {}, {}, {} FROM {} GROUP BY 1",
            // Due now is available, whatever its attempt (a retried job too); not due yet
            // is scheduled at its first attempt and retrying after one.
            D::count_if("task_locked_by IS NULL AND task_locked_until_ts <= $1"),
            D::count_if(
                "task_locked_by IS NULL AND task_attempt = 0 AND task_locked_until_ts > $1
                 AND coalesce(task_waiting_on, 0) = 0"
            ),
            D::count_if(
                "task_locked_by IS NULL AND task_attempt > 0 AND task_locked_until_ts > $1
                 AND coalesce(task_waiting_on, 0) = 0"
            ),
            D::count_if("task_locked_by IS NOT NULL"),
            D::count_if("task_waiting_on > 0"),
            D::table(schema, "tasks_queue_t")
        );
        let live = D::fetch_all(pool, &live_sql, &[Arg::Time(now)]).await?;
        let ended_sql = format!(
            "SELECT {key}, {}, {} FROM {} WHERE task_status IN ({FATAL}, {CANCELLED}) GROUP BY 1",
            D::count_if(&format!("task_status = {FATAL}")),
            D::count_if(&format!("task_status = {CANCELLED}")),
            D::table(schema, "task_results_t")
        );
        let ended = D::fetch_all(pool, &ended_sql, &[]).await?;
        Ok(merge_group_counts(live, ended))
    })
}

/// The jobs whose last run failed since `since`, grouped by error (`Client::error_groups`).
pub(crate) fn error_groups<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    since: DateTime<Utc>,
    limit: i64,
) -> Boxed<'a, Vec<ErrorRow>>
where
    ErrorRow: for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let attempted = "task_last_processing_attempted_at_ts";
        // A seed consumer writes its error in `task_last_error` alone.
        let message_raw = "coalesce(task_last_error_message, task_last_error)";
        let sql = format!(
            "SELECT {task_type} AS task_type, {queue} AS task_queue, {kind} AS kind,
                {message} AS message, {hour} AS hour, count(*) AS jobs,
                min({attempted}) AS first_seen, max({attempted}) AS last_seen, {sample} AS sample
             FROM {table} WHERE task_status IN ({ERROR}, {FAULTED}, {FATAL}) AND {attempted} >= $1
             GROUP BY task_type, task_queue, task_last_error_type, {message_raw}, {hour}
             ORDER BY jobs DESC LIMIT $2",
            task_type = D::text("task_type"),
            queue = D::text("task_queue"),
            kind = D::text("task_last_error_type"),
            message = D::text(message_raw),
            hour = D::hour_text(attempted),
            sample = D::newest_id("task_id"),
            table = D::table(schema, "task_results_t"),
        );
        D::fetch_all(pool, &sql, &[Arg::Time(since), Arg::Int(Some(limit))]).await
    })
}

/// The workers' rows with the jobs each holds (`Client::workers`).
pub(crate) fn workers<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<WorkerInfo>>
where
    WorkerRow: for<'r> FromRow<'r, D::Row>,
    (String, i64): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let rows_sql = format!("SELECT * FROM {}", D::table(schema, "workers_t"));
        let rows = D::fetch_all(pool, &rows_sql, &[]).await?;
        let running_sql = format!(
            "SELECT {}, count(*) FROM {}
             WHERE task_locked_by IS NOT NULL AND task_locked_until_ts > $1 GROUP BY task_locked_by",
            D::text("task_locked_by"),
            D::table(schema, "tasks_queue_t")
        );
        let running = D::fetch_all(pool, &running_sql, &[Arg::Time(now)]).await?;
        Ok(workers_of(rows, running, now))
    })
}

/// The stored run counts per minute since `since` (`Client::throughput`).
pub(crate) fn job_stats<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    since: DateTime<Utc>,
    task_type: Option<&'a str>,
) -> Boxed<'a, Vec<StatRow>>
where
    StatRow: for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT stat_minute_ts, {}, stat_processed, stat_failed, stat_run_ms, stat_histogram
             FROM {} WHERE stat_minute_ts >= $1{} ORDER BY stat_minute_ts",
            D::text("task_type"),
            D::table(schema, "job_stats_t"),
            if task_type.is_some() {
                " AND task_type = $2"
            } else {
                ""
            }
        );
        D::fetch_all(pool, &sql, &[Arg::Time(since), Arg::Text(task_type)]).await
    })
}

/// Adds or replaces a stored schedule.
pub(crate) async fn schedule_put<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    row: &ScheduleRow,
) -> Result<()> {
    let sql = format!(
        "INSERT INTO {} (schedule_name, task_type, task_payload, schedule_cron, schedule_overlap,
            schedule_updated_at_ts)
         VALUES ($1, $2, $3, $4, $5, $6) {}",
        D::table(schema, "schedules_t"),
        D::upsert(
            "schedule_name",
            &[
                "task_type",
                "task_payload",
                "schedule_cron",
                "schedule_overlap",
                "schedule_updated_at_ts"
            ]
        )
    );
    let args = [
        Arg::Text(Some(&row.schedule_name)),
        Arg::Text(Some(&row.task_type)),
        Arg::Text(Some(&row.task_payload)),
        Arg::Text(Some(&row.schedule_cron)),
        Arg::Bool(Some(row.schedule_overlap)),
        Arg::Time(row.schedule_updated_at_ts),
    ];
    D::execute(pool, &sql, &args).await?;
    Ok(())
}

/// Removes a stored schedule; false if there was none of that name.
pub(crate) async fn schedule_remove<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    name: &str,
) -> Result<bool> {
    let sql = format!(
        "DELETE FROM {} WHERE schedule_name = $1",
        D::table(schema, "schedules_t")
    );
    Ok(D::execute(pool, &sql, &[Arg::Text(Some(name))]).await? == 1)
}

/// Every stored schedule, by name.
pub(crate) fn schedule_list<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
) -> Boxed<'a, Vec<ScheduleRow>>
where
    ScheduleRow: for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT {} AS schedule_name, {} AS task_type, task_payload, schedule_cron, schedule_overlap,
                schedule_updated_at_ts
             FROM {} ORDER BY schedule_name",
            D::text("schedule_name"),
            D::text("task_type"),
            D::table(schema, "schedules_t")
        );
        D::fetch_all(pool, &sql, &[]).await
    })
}

/// A migration of this build: version, description, and when it was applied (`None`: not
/// yet).
pub(crate) type Applied = (i32, &'static str, Option<DateTime<Utc>>);

/// This build's migrations (`all`: version, description, SQL), each with when it was
/// applied to `schema` (`None`: not yet, or no schema at all).
pub(crate) fn migrations<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    all: &'static [(i32, &'static str, &'static str)],
) -> Boxed<'a, Vec<Applied>>
where
    (i32, DateTime<Utc>): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT version, applied_at FROM {}",
            D::table(schema, "schema_migrations_t")
        );
        let applied: Vec<(i32, DateTime<Utc>)> = match D::fetch_all(pool, &sql, &[]).await {
            Ok(rows) => rows,
            Err(Error::Database(e)) if super::no_such_table(&e) => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(all
            .iter()
            .map(|&(version, description, _)| {
                let at = applied
                    .iter()
                    .find(|(v, _)| *v == version)
                    .map(|(_, at)| *at);
                (version, description, at)
            })
            .collect())
    })
}

/// Up to `limit` ids of the jobs `filter` takes, after `after` in id order: live jobs
/// (`live`) from the queue table, else fatal and cancelled ones from the results. Only
/// the conditions given are written, so each is an index's to use.
pub(crate) fn find_ids<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    filter: &'a JobFilter,
    live: bool,
    after: Option<Uuid>,
    limit: i64,
) -> Boxed<'a, Vec<Uuid>>
where
    (Uuid,): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let table = if live {
            "tasks_queue_t"
        } else {
            "task_results_t"
        };
        let mut sql = format!("SELECT task_id FROM {} WHERE true", D::table(schema, table));
        let mut args = Vec::new();
        // A condition `column = $n` on the next argument.
        let given = |sql: &mut String, args: &mut Vec<Arg<'a>>, condition: &str, arg: Arg<'a>| {
            args.push(arg);
            sql.push_str(&format!(" AND {condition} ${}", args.len()));
        };
        if let Some(after) = after {
            given(&mut sql, &mut args, "task_id >", Arg::Id(Some(after)));
        }
        for (column, value) in [
            ("task_queue", &filter.queue),
            ("task_type", &filter.task_type),
            ("task_tenant", &filter.tenant),
            ("task_correlation_id", &filter.correlation_id),
        ] {
            if let Some(value) = value {
                given(
                    &mut sql,
                    &mut args,
                    &format!("{column} ="),
                    Arg::Text(Some(value)),
                );
            }
        }
        for (key, value) in filter.seed_002() {
            given(
                &mut sql,
                &mut args,
                &format!("{} =", D::metadata_key("", key)),
                Arg::Text(Some(value)),
            );
        }
        if live {
            match filter.running() {
                Some(true) => sql.push_str(" AND task_locked_by IS NOT NULL"),
                Some(false) => sql.push_str(" AND task_locked_by IS NULL"),
                None => {}
            }
            sql.push_str(filter.pending_clause());
        } else {
            match filter.status {
                Some(s) => given(
                    &mut sql,
                    &mut args,
                    "task_status =",
                    Arg::Int4(Some(s as i32)),
                ),
                None => sql.push_str(&format!(" AND task_status IN ({FATAL}, {CANCELLED})")),
            }
        }
        args.push(Arg::Int(Some(limit)));
        sql.push_str(&format!(" ORDER BY task_id LIMIT ${}", args.len()));
        let ids: Vec<(Uuid,)> = D::fetch_all(pool, &sql, &args).await?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    })
}

/// The jobs by status (`by_status`: the backend's statement of (status, count) rows) and
/// the live ones by what they wait for (`QueueInfo::counts`).
pub(crate) fn counts<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    by_status: &'a str,
    now: DateTime<Utc>,
) -> Boxed<'a, QueueCounts>
where
    (i32, i64): for<'r> FromRow<'r, D::Row>,
    (i64, i64, i64, i64, i64): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let statuses: Vec<(i32, i64)> = D::fetch_all(pool, by_status, &[]).await?;
        let live_sql = format!(
            "SELECT {}, {}, {}, {}, {} FROM {}",
            D::count_if("task_locked_by IS NULL AND task_locked_until_ts <= $1"),
            D::count_if(
                "task_locked_by IS NULL AND task_locked_until_ts > $1 AND coalesce(task_waiting_on, 0) = 0"
            ),
            D::count_if("task_locked_by IS NOT NULL AND task_locked_until_ts > $1"),
            D::count_if("task_locked_by IS NOT NULL AND task_locked_until_ts <= $1"),
            D::count_if("task_waiting_on > 0"),
            D::table(schema, "tasks_queue_t")
        );
        let live: Vec<(i64, i64, i64, i64, i64)> =
            D::fetch_all(pool, &live_sql, &[Arg::Time(now)]).await?;
        let (available, scheduled, running, lease_expired, pending) =
            live.first().copied().unwrap_or_default();
        Ok(QueueCounts {
            by_status: statuses
                .into_iter()
                .map(|(status, n)| (JobStatus::from_code(status), n))
                .collect(),
            available,
            scheduled,
            running,
            lease_expired,
            pending,
        })
    })
}

/// The next `limit` jobs a claim would take, first first (`QueueInfo::peek`).
pub(crate) fn peek<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    limit: i64,
) -> Boxed<'a, Vec<QueuedJob>>
where
    QueuedJob: for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT task_id, {} AS task_type, {} AS task_queue,
                coalesce(task_priority, {NULL_PRIORITY}) AS task_priority, task_attempt,
                task_max_attempts, task_locked_until_ts, task_posted_at_ts
             FROM {} WHERE task_locked_by IS NULL
             ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id LIMIT $1",
            D::text("task_type"),
            D::text("task_queue"),
            D::table(schema, "tasks_queue_t")
        );
        D::fetch_all(pool, &sql, &[Arg::Int(Some(limit))]).await
    })
}
