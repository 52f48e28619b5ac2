//! Workflows on record, written once over the dialect: the workflow and the stage of each
//! of its jobs, stored with them (`Workflow::enqueue`), read back with each job's state
//! (`Client::workflow_jobs`), and forgotten once its jobs' results are pruned.

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use super::batch::{id_list, IDS_PER_STATEMENT};
use super::dialect::{Arg, Boxed, Dialect};
use super::Schema;
use crate::error::{Error, Result};
use crate::model::status::{PENDING, PROCESSING, UNPROCESSED};
use crate::model::{WorkflowJobRow, WorkflowRecord};

/// Records workflow `id` of the jobs `stages` (inserted in this transaction), stage by
/// stage.
pub(crate) fn create<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    id: Uuid,
    stages: &'a [Vec<Uuid>],
    now: DateTime<Utc>,
) -> Boxed<'a, ()> {
    Box::pin(async move {
        let too_big = || Error::invalid("workflow", "a workflow holds at most 2,147,483,647 jobs");
        let jobs =
            i32::try_from(stages.iter().map(Vec::len).sum::<usize>()).map_err(|_| too_big())?;
        let count = i32::try_from(stages.len()).map_err(|_| too_big())?;
        let sql = format!(
            "INSERT INTO {} (workflow_id, workflow_stages, workflow_jobs, workflow_created_at_ts)
             VALUES ($1, $2, $3, $4)",
            D::table(schema, "workflows_t")
        );
        let args = [
            Arg::Id(Some(id)),
            Arg::Int4(Some(count)),
            Arg::Int4(Some(jobs)),
            Arg::Time(now),
        ];
        D::execute_on(conn, &sql, &args).await?;
        let members = format!(
            "INSERT INTO {} (task_id, workflow_id, workflow_stage) SELECT i.id, $2, $3 FROM ({}) AS i",
            D::table(schema, "workflow_jobs_t"),
            D::id_rows("$1")
        );
        for (stage, ids) in (0..).zip(stages) {
            for chunk in ids.chunks(IDS_PER_STATEMENT) {
                let list = id_list(chunk);
                let args = [
                    Arg::Text(Some(&list)),
                    Arg::Id(Some(id)),
                    Arg::Int4(Some(stage)),
                ];
                D::execute_on(conn, &members, &args).await?;
            }
        }
        Ok(())
    })
}

/// Workflow `id` (or, without one, the newest `limit`), newest first.
pub(crate) fn records<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    id: Option<Uuid>,
    limit: i64,
) -> Boxed<'a, Vec<WorkflowRecord>>
where
    WorkflowRecord: for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT workflow_id, {} AS workflow_stages, {} AS workflow_jobs, workflow_created_at_ts FROM {}
             WHERE ($1 IS NULL OR workflow_id = $1)
             ORDER BY workflow_created_at_ts DESC, workflow_id DESC LIMIT $2",
            D::bigint("workflow_stages"),
            D::bigint("workflow_jobs"),
            D::table(schema, "workflows_t")
        );
        D::fetch_all(pool, &sql, &[Arg::Id(id), Arg::Int(Some(limit))]).await
    })
}

/// The jobs of workflow `id` by stage, each with its state now: running while a worker
/// holds it, pending while it waits on others, else its results' status; none once
/// pruned.
pub(crate) fn jobs<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    id: Uuid,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<WorkflowJobRow>>
where
    WorkflowJobRow: for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT w.task_id, {stage} AS workflow_stage, {task_type} AS task_type,
                CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > $2 THEN {PROCESSING}
                     WHEN q.task_waiting_on > 0 THEN {PENDING}
                     WHEN r.task_status IS NOT NULL THEN r.task_status
                     WHEN q.task_id IS NOT NULL THEN {UNPROCESSED} END AS task_status
             FROM {w} w LEFT JOIN {r} r ON r.task_id = w.task_id LEFT JOIN {q} q ON q.task_id = w.task_id
             WHERE w.workflow_id = $1 ORDER BY w.workflow_stage, w.task_id",
            stage = D::bigint("w.workflow_stage"),
            task_type = D::text("coalesce(r.task_type, q.task_type)"),
            w = D::table(schema, "workflow_jobs_t"),
            r = D::table(schema, "task_results_t"),
            q = D::table(schema, "tasks_queue_t"),
        );
        D::fetch_all(pool, &sql, &[Arg::Id(Some(id)), Arg::Time(now)]).await
    })
}

/// Forgets the jobs of workflows whose results and queue rows are gone (pruned), then
/// the workflows left without a job; how many workflows.
pub(crate) async fn forget_pruned<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
) -> Result<u64> {
    let (w, j) = (
        D::table(schema, "workflows_t"),
        D::table(schema, "workflow_jobs_t"),
    );
    let jobs = format!(
        "DELETE FROM {j} WHERE NOT EXISTS (SELECT 1 FROM {r} r WHERE r.task_id = {j}.task_id)
            AND NOT EXISTS (SELECT 1 FROM {q} q WHERE q.task_id = {j}.task_id)",
        r = D::table(schema, "task_results_t"),
        q = D::table(schema, "tasks_queue_t"),
    );
    D::execute(pool, &jobs, &[]).await?;
    let workflows = format!(
        "DELETE FROM {w} WHERE NOT EXISTS (SELECT 1 FROM {j} j WHERE j.workflow_id = {w}.workflow_id)"
    );
    D::execute(pool, &workflows, &[]).await
}
