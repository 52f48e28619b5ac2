//! The rules of jobs that wait on others, the same on every backend: when a dependant
//! becomes due or fails, and what its error says.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::NewJob;
use crate::error::Result;
use crate::model::status::{CANCELLED, FATAL, PENDING};

/// The not-before time of a job that waits on others (a workflow's later stage): later
/// than any claim reaches. The success of its last dependency makes it due then.
pub(crate) const WAITING_UNTIL: DateTime<Utc> = match DateTime::from_timestamp(253_402_214_400, 0) {
    // 9999-12-31, within every backend's timestamp type.
    Some(at) => at,
    None => DateTime::<Utc>::MAX_UTC,
};

/// What became of each dependency of a job being enqueued, in order: `Some(output)` for
/// one that succeeded already, `None` for one still live. `live` are the ids among
/// `deps` still in the queue (now marked as having dependants); `ended` the results rows
/// of the others: id, task type, status, output.
///
/// # Errors
/// A dependency that failed or was cancelled already, or that does not exist.
pub(crate) fn dependency_states(
    deps: &[Uuid],
    live: &[Uuid],
    ended: &[(Uuid, String, i32, Option<String>)],
) -> Result<Vec<Option<Option<String>>>> {
    deps.iter()
        .map(|dep| {
            if live.contains(dep) {
                return Ok(None);
            }
            match ended.iter().find(|e| e.0 == *dep) {
                Some((_, _, 3, output)) => Ok(Some(output.clone())),
                Some((_, task_type, status, _)) => Err(crate::Error::invalid(
                    "dependency",
                    format!(
                        "job {dep} ({task_type}) cannot be waited on: it {}",
                        match crate::model::JobStatus::from_code(*status) {
                            crate::model::JobStatus::Fatal => "failed for good",
                            crate::model::JobStatus::Cancelled => "was cancelled",
                            _ => "left the queue without succeeding (taken by a seed consumer)",
                        }
                    ),
                )),
                None => Err(crate::Error::invalid(
                    "dependency",
                    format!("there is no job {dep} to wait on"),
                )),
            }
        })
        .collect()
}

/// Checks the jobs of one stage that wait on `deps` (deduplicated in place, first
/// place kept): no unique key, period or run-at time of their own.
pub(crate) fn check_dependants(
    jobs: &[NewJob],
    deps: &mut Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    deps.retain(|d| seen.insert(*d));
    for job in jobs {
        let what = if job.unique_key.is_some() {
            "a unique key"
        } else if job.every_ms.is_some() {
            "a period"
        } else if job.run_at > now {
            "a run-at time"
        } else {
            continue;
        };
        return Err(crate::Error::invalid(
            "dependency",
            format!(
                "job `{}` waits on other jobs and runs when they have succeeded; it cannot also have {what}",
                job.task_type
            ),
        ));
    }
    Ok(())
}

/// The message a dependant records when its dependency `id` of `task_type` ended with
/// `status` (fatal or cancelled) for `reason`.
pub(crate) fn dependency_message(
    id: Uuid,
    task_type: &str,
    cancelled: bool,
    reason: &str,
) -> String {
    if cancelled {
        format!("dependency {id} ({task_type}) was cancelled: {reason}")
    } else {
        format!("dependency {id} ({task_type}) failed: {reason}")
    }
}

/// The error kind a dependant records when a dependency ended without succeeding.
pub(crate) fn dependency_kind(cancelled: bool) -> &'static str {
    if cancelled {
        "dependency_cancelled"
    } else {
        "dependency_failed"
    }
}

/// The statements that make the jobs just put back by a healing retry wait on the
/// dependencies they have not received yet (a dependant retried with, or before, the
/// job it waits on), instead of running without their inputs; each also marks the jobs
/// that others wait on. `ids` is the backend's test of `task_id` against the retried
/// ids and `due` its placeholder for [`WAITING_UNTIL`] (bound first on MySQL, second
/// elsewhere): the queue's `UPDATE`, then the results' (bound with the ids alone).
pub(crate) fn wait_again_sql(q: &str, r: &str, d: &str, ids: &str, due: &str) -> [String; 2] {
    let pending =
        format!("(SELECT count(*) FROM {d} w WHERE w.task_id = {q}.task_id AND NOT w.dep_done)");
    [
        format!(
            "UPDATE {q} SET
                task_dependants = task_dependants OR EXISTS (SELECT 1 FROM {d} a WHERE a.dep_task_id = {q}.task_id),
                task_locked_until_ts = CASE WHEN {pending} > 0 THEN {due} ELSE task_locked_until_ts END,
                task_waiting_on = CASE WHEN {pending} > 0 THEN {pending} ELSE task_waiting_on END
             WHERE {ids}"
        ),
        format!(
            "UPDATE {r} SET task_status = {PENDING}
             WHERE {ids} AND task_id IN (SELECT task_id FROM {q} WHERE task_waiting_on > 0)"
        ),
    ]
}

/// The jobs that a dependency among the retried ones ended (`deps`: the backend's test of
/// `d.dep_task_id` against them) and that can wait again: each dependency they have not
/// received is live. A healing retry revives them (`flow::revive` of each backend).
pub(crate) fn revivable_sql(q: &str, r: &str, d: &str, deps: &str) -> String {
    format!(
        "SELECT DISTINCT d.task_id FROM {d} d JOIN {r} r ON r.task_id = d.task_id
         WHERE {deps} AND r.task_status IN ({FATAL}, {CANCELLED})
            AND r.task_last_error_type IN ('{failed}', '{cancelled}') AND r.task_payload IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM {d} o WHERE o.task_id = d.task_id AND NOT o.dep_done
                AND NOT EXISTS (SELECT 1 FROM {q} l WHERE l.task_id = o.dep_task_id))",
        failed = dependency_kind(false),
        cancelled = dependency_kind(true),
    )
}
