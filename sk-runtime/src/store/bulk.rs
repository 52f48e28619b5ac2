//! The operator's actions on many jobs at once, written once over the dialect: a list of
//! ids in one statement (`Client::run_now_where`, `Client::delete_where`), and the audit
//! trail those actions write (`Client::audit`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::batch::id_list;
use super::dialect::{Arg, Boxed, Dialect};
use super::Schema;
use crate::error::Result;
use crate::model::status::{CANCELLED, FATAL, PROCESSED};
use crate::model::AuditEntry;

/// Moves the not-before time of the waiting jobs among `ids` (not running, not waiting
/// on another job) to `at`; how many moved.
pub(crate) async fn reschedule<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    ids: &[Uuid],
    at: DateTime<Utc>,
) -> Result<u64> {
    let sql = D::update_listed(
        &D::table(schema, "tasks_queue_t"),
        "task_locked_until_ts = $2, task_version = task_version + 1",
        "task_id",
        "$1",
        "task_locked_by IS NULL AND coalesce(task_waiting_on, 0) = 0",
    );
    let list = id_list(ids);
    D::execute(pool, &sql, &[Arg::Text(Some(&list)), Arg::Time(at)]).await
}

/// Deletes the results of the ended jobs among `ids` (succeeded, failed for good,
/// cancelled; a live job is never touched); how many.
pub(crate) async fn delete_ended<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    ids: &[Uuid],
) -> Result<u64> {
    let sql = D::delete_listed(
        &D::table(schema, "task_results_t"),
        "task_id",
        "$1",
        &format!("task_status IN ({PROCESSED}, {FATAL}, {CANCELLED})"),
    );
    let list = id_list(ids);
    D::execute(pool, &sql, &[Arg::Text(Some(&list))]).await
}

/// Adds `entry` to the audit trail (its id is the table's).
pub(crate) async fn record<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    entry: &AuditEntry,
) -> Result<()> {
    let sql = format!(
        "INSERT INTO {} (audit_at_ts, audit_actor, audit_action, audit_target, audit_filter, audit_jobs)
         VALUES ($1, $2, $3, $4, $5, $6)",
        D::table(schema, "audit_t")
    );
    D::execute(
        pool,
        &sql,
        &[
            Arg::Time(entry.at),
            Arg::Text(Some(&entry.actor)),
            Arg::Text(Some(&entry.action)),
            Arg::Text(entry.target.as_deref()),
            Arg::Text(entry.filter.as_deref()),
            Arg::Int(entry.jobs),
        ],
    )
    .await?;
    Ok(())
}

/// The audit trail's entries before entry `before` (all, when `None`), newest first,
/// at most `limit`.
pub(crate) fn entries<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    before: Option<i64>,
    limit: i64,
) -> Boxed<'a, Vec<AuditEntry>>
where
    AuditEntry: for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT audit_id, audit_at_ts, {}, {}, {}, {}, audit_jobs FROM {}
             WHERE ($1 IS NULL OR audit_id < $1) ORDER BY audit_id DESC LIMIT $2",
            text_as::<D>("audit_actor"),
            text_as::<D>("audit_action"),
            text_as::<D>("audit_target"),
            text_as::<D>("audit_filter"),
            D::table(schema, "audit_t")
        );
        D::fetch_all(pool, &sql, &[Arg::Int(before), Arg::Int(Some(limit))]).await
    })
}

fn text_as<D: Dialect>(column: &str) -> String {
    format!("{} AS {column}", D::text(column))
}
