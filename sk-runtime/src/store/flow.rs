//! The rules of jobs that wait on others, the same on every backend: when a dependant
//! becomes due or fails, and what its error says.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::NewJob;
use crate::error::Result;

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
