//! What the backends' list and count queries share: the job list's filter and branches,
//! the group counts' merge and the workers' rows.

use chrono::{DateTime, Utc};

use crate::model::{from_row, CountBy, GroupCounts, WorkerInfo};

/// Group counts from live counts per key (available, scheduled, retrying, running) and
/// ended ones (fatal, cancelled), sorted by key.
pub(crate) fn merge_group_counts(
    live: Vec<(Option<String>, i64, i64, i64, i64, i64)>,
    ended: Vec<(Option<String>, i64, i64)>,
) -> Vec<GroupCounts> {
    let mut by_key: std::collections::BTreeMap<Option<String>, GroupCounts> = Default::default();
    for (key, available, scheduled, retrying, running, pending) in live {
        let entry = by_key.entry(key.clone()).or_insert_with(|| GroupCounts {
            key,
            ..GroupCounts::default()
        });
        entry.available += available;
        entry.scheduled += scheduled;
        entry.retrying += retrying;
        entry.running += running;
        entry.pending += pending;
    }
    for (key, fatal, cancelled) in ended {
        let entry = by_key.entry(key.clone()).or_insert_with(|| GroupCounts {
            key,
            ..GroupCounts::default()
        });
        entry.fatal += fatal;
        entry.cancelled += cancelled;
    }
    by_key.into_values().collect()
}

/// The column a [`CountBy`] groups by (a fixed name, never input).
pub(crate) fn group_column(by: CountBy) -> &'static str {
    match by {
        CountBy::Queue => "task_queue",
        CountBy::TaskType => "task_type",
        CountBy::Tenant => "task_tenant",
    }
}

/// Appends `filter`'s conditions on the results row `r` (and the queue row `q`) of the
/// job list to `$query`, a `QueryBuilder` of any backend; `$now` is the time bound as the
/// backend stores it, `$metadata` pushes the metadata condition.
macro_rules! push_list_filter {
    ($query:expr, $filter:expr, $after:expr, $now:expr, |$q:ident, $key:ident, $value:ident| $metadata:block) => {{
        let filter: &$crate::model::JobFilter = $filter;
        if let Some(after) = $after {
            $query.push(" AND r.task_id < ").push_bind(after);
        }
        for (column, value) in [
            ("r.task_queue", &filter.queue),
            ("r.task_type", &filter.task_type),
            ("r.task_tenant", &filter.tenant),
            ("r.task_correlation_id", &filter.correlation_id),
        ] {
            if let Some(value) = value {
                $query
                    .push(format!(" AND {column} = "))
                    .push_bind(value.clone());
            }
        }
        if let Some(($key, $value)) = filter.metadata.clone() {
            let $q = &mut $query;
            $metadata
        }
        for (key, value) in filter.seed_002() {
            let ($key, $value) = (key.to_owned(), value.to_owned());
            let $q = &mut $query;
            $metadata
        }
        if let Some(kind) = &filter.error_kind {
            $query
                .push(" AND r.task_last_error_type = ")
                .push_bind(kind.clone());
        }
        if let Some(pattern) = &filter.error_pattern {
            $query
                .push(" AND coalesce(r.task_last_error_message, r.task_last_error) LIKE ")
                .push_bind($crate::model::like_of(pattern))
                .push(" ESCAPE '!'");
            if filter.status.is_none() {
                $query.push(format!(
                    " AND r.task_status IN ({}, {}, {})",
                    $crate::model::status::ERROR,
                    $crate::model::status::FAULTED,
                    $crate::model::status::FATAL
                ));
            }
        }
        if let Some(from) = filter.posted_after {
            $query
                .push(" AND r.task_id >= ")
                .push_bind($crate::store::id_floor(from));
        }
        if let Some(to) = filter.posted_before {
            $query
                .push(" AND r.task_id < ")
                .push_bind($crate::store::id_floor(to));
        }
        match filter.status {
            None => {}
            Some($crate::model::JobStatus::Processing) => {
                $query
                    .push(" AND q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > ")
                    .push_bind($now.clone());
            }
            Some(status) => {
                $query
                    .push(" AND r.task_status = ")
                    .push_bind(status as i32);
                if !status.is_final() {
                    $query
                        .push(" AND (q.task_locked_by IS NULL OR q.task_locked_until_ts <= ")
                        .push_bind($now.clone())
                        .push(")");
                }
            }
        }
    }};
}

pub(crate) use push_list_filter;

/// Builds the job list into `$query` (a `QueryBuilder` opened with `SELECT * FROM (`): one
/// branch per `FROM` clause of `$branches` (each selecting `r`, the results row or what
/// stands in for it, and `q`, the queue row, and ending in a `WHERE`), each filtered,
/// newest first and limited, merged under the same order and limit. `$text` wraps a text
/// column for reading (MySQL reads its binary-collated names through `CAST(… AS CHAR)`,
/// which also gives both branches one collation).
macro_rules! push_job_list {
    ($query:expr, $branches:expr, $text:expr, $filter:expr, $after:expr, $limit:expr, $now:expr,
     |$q:ident, $key:ident, $value:ident| $metadata:block) => {{
        let text: fn(&str) -> String = $text;
        for (i, from) in $branches.into_iter().enumerate() {
            if i > 0 {
                $query.push(") a UNION ALL SELECT * FROM (");
            }
            $query
                .push(format!(
                    "SELECT r.task_id, {} AS task_type, {} AS task_queue,
                        CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > ",
                    text("r.task_type"),
                    text("r.task_queue")
                ))
                .push_bind($now.clone())
                .push(format!(
                    " THEN {processing} ELSE r.task_status END AS task_status,
                        coalesce(q.task_priority, r.task_priority, {null_priority}) AS task_priority, q.task_attempt,
                        {} AS task_tenant, {} AS task_correlation_id, r.task_posted_at_ts, q.task_locked_until_ts,
                        r.task_processing_finalized_at_ts, r.task_error_count,
                        {} AS task_last_error_type, {} AS task_last_error_message
                     FROM ",
                    text("r.task_tenant"),
                    text("r.task_correlation_id"),
                    text("r.task_last_error_type"),
                    text("coalesce(r.task_last_error_message, r.task_last_error)"),
                    processing = $crate::model::status::PROCESSING,
                    null_priority = $crate::store::NULL_PRIORITY,
                ))
                .push(from);
            $crate::store::listing::push_list_filter!($query, $filter, $after, $now, |$q, $key, $value| $metadata);
            $query
                .push(" ORDER BY r.task_id DESC LIMIT ")
                .push_bind($limit);
        }
        $query
            .push(") b ORDER BY task_id DESC LIMIT ")
            .push_bind($limit);
    }};
}

pub(crate) use push_job_list;

from_row! {
/// A worker's row as the store reads it.
pub(crate) struct WorkerRow {
    pub(crate) worker_id: String = "worker_id",
    pub(crate) worker_host: String = "worker_host",
    pub(crate) worker_pid: i32 = "worker_pid",
    pub(crate) worker_queues: Option<String> = "worker_queues",
    pub(crate) worker_task_types: String = "worker_task_types",
    pub(crate) worker_default_queues: Option<String> = "worker_default_queues",
    pub(crate) worker_concurrency: i32 = "worker_concurrency",
    pub(crate) worker_heartbeat_ms: i64 = "worker_heartbeat_ms",
    pub(crate) worker_started_at_ts: DateTime<Utc> = "worker_started_at_ts",
    pub(crate) worker_seen_at_ts: DateTime<Utc> = "worker_seen_at_ts",
}
}

/// Workers from their rows and the running jobs per worker id, by id.
pub(crate) fn workers_of(
    rows: Vec<WorkerRow>,
    running: Vec<(String, i64)>,
    now: DateTime<Utc>,
) -> Vec<WorkerInfo> {
    let running: std::collections::HashMap<String, i64> = running.into_iter().collect();
    let mut workers: Vec<WorkerInfo> = rows
        .into_iter()
        .map(|r| WorkerInfo {
            alive: r.worker_seen_at_ts
                + chrono::Duration::milliseconds(r.worker_heartbeat_ms.saturating_mul(3))
                > now,
            running: running.get(&r.worker_id).copied().unwrap_or(0),
            queues: r
                .worker_queues
                .as_deref()
                .and_then(|q| serde_json::from_str(q).ok()),
            task_types: serde_json::from_str(&r.worker_task_types).unwrap_or_default(),
            default_queues: r
                .worker_default_queues
                .as_deref()
                .and_then(|q| serde_json::from_str(q).ok())
                .unwrap_or_default(),
            id: r.worker_id,
            host: r.worker_host,
            pid: r.worker_pid,
            concurrency: r.worker_concurrency,
            started_at: r.worker_started_at_ts,
            seen_at: r.worker_seen_at_ts,
        })
        .collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    workers
}
