//! The statements of one schema, formatted once and reused.

use super::*;
use crate::model::status::{PROCESSED, PROCESSING, UNPROCESSED};

/// The statements of one schema, formatted once.
#[derive(Default)]
pub(crate) struct Statements {
    pub(super) queue: String,
    pub(super) results: String,
    /// The live jobs' unique keys (migration 8).
    pub(super) unique_keys: String,
    pub(super) insert_queue: String,
    /// `insert_queue` of a job without a results row yet (`enqueue_one`).
    pub(super) insert_plain: String,
    pub(super) insert_result: String,
    pub(super) enqueue_unique: String,
    pub(super) success: String,
    pub(super) success_again: String,
    pub(super) failure: String,
    pub(super) stats: String,
    pub(super) counts_by_status: String,
    pub(super) job: String,
}

/// The columns of a new queue row, in the order `bind_new!` binds them (`NEW_VALUES`),
/// then `task_has_result`: 1 when the results row is written with it, 0 when the job's
/// first outcome will write it.
pub(super) const NEW_COLUMNS: &str = "task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_tenant,
    task_correlation_id, task_metadata, task_unique_key, task_unique_mode, task_every_ms, task_timeout_ms,
    task_has_result";

pub(super) const NEW_VALUES: &str = "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?";

/// The columns of a new results row, in the order `bind_result!` binds them.
pub(super) const RESULT_COLUMNS: &str = "task_id, task_type, task_source, task_queue, task_priority,
    task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id, task_metadata,
    task_status";

/// What a results row repeats of its queue row.
pub(super) const JOB_COLUMNS: &str =
    "task_id, task_type, task_source, task_queue, task_priority, task_posted_at_ts,
    task_tenant, task_correlation_id, task_metadata";

/// A queue row as a finalization reads it (`Row`). A posting time that is no date (the
/// 30th of February, written under `ALLOW_INVALID_DATES` past the table's check, a day
/// past its month's last) is read as the claim's time, so the job's failure is recorded.
/// Metadata that is not JSON is read as a JSON string of its text: the results table's
/// virtual columns read it as JSON, and refused the whole batch of outcomes for it.
pub(super) const QUEUE_ROW: &str = "task_lock_handle_id, task_id, CAST(task_type AS CHAR) AS task_type, task_source,
    CAST(task_queue AS CHAR) AS task_queue, task_priority,
    IF(DAYOFMONTH(task_posted_at_ts) > DAYOFMONTH(LAST_DAY(task_posted_at_ts)), task_claimed_at_ts,
        task_posted_at_ts) AS task_posted_at_ts,
    CAST(task_tenant AS CHAR) AS task_tenant, CAST(task_correlation_id AS CHAR) AS task_correlation_id,
    IF(task_metadata IS NULL OR JSON_VALID(task_metadata), task_metadata, JSON_QUOTE(task_metadata))
        AS task_metadata,
    task_claimed_at_ts, task_lost_attempts, task_payload, task_max_attempts,
    CAST(task_unique_key AS CHAR) AS task_unique_key, task_unique_mode, task_rerun, task_every_ms,
    task_timeout_ms, task_dependants, task_waiting_on IS NOT NULL AS task_fed, task_has_result";

/// The upsert of a success into a results row (left to right: MySQL's assignments see the
/// values set before them, so nothing here reads a column set earlier in the list).
/// How a failure updates a results row that exists (`failure` rows, multi-row).
pub(super) const FAILURE_UPDATE: &str = "task_status = VALUES(task_status),
    task_error_count = task_error_count + VALUES(task_error_count),
    task_last_error_type = VALUES(task_last_error_type),
    task_last_error_message = VALUES(task_last_error_message),
    task_last_error_detail = VALUES(task_last_error_detail),
    task_last_error = VALUES(task_last_error),
    task_last_error_is_recoverable = VALUES(task_last_error_is_recoverable),
    task_processing_time_milliseconds = VALUES(task_processing_time_milliseconds),
    task_processing_finalized_at_ts = VALUES(task_processing_finalized_at_ts),
    task_payload = VALUES(task_payload),
    task_metadata = VALUES(task_metadata),
    task_last_locked_by = VALUES(task_last_locked_by),
    task_errors = VALUES(task_errors),
    task_output = NULL,
    task_max_attempts = VALUES(task_max_attempts),
    task_timeout_ms = VALUES(task_timeout_ms),
    task_first_processing_attempted_at_ts =
        coalesce(task_first_processing_attempted_at_ts, VALUES(task_first_processing_attempted_at_ts)),
    task_last_processing_attempted_at_ts = VALUES(task_last_processing_attempted_at_ts)";

pub(super) const SUCCESS_UPDATE: &str = "task_status = VALUES(task_status),
    task_processing_time_milliseconds = VALUES(task_processing_time_milliseconds),
    task_processing_finalized_at_ts = VALUES(task_processing_finalized_at_ts),
    task_last_locked_by = VALUES(task_last_locked_by),
    task_output = VALUES(task_output),
    task_first_processing_attempted_at_ts =
        coalesce(task_first_processing_attempted_at_ts, VALUES(task_first_processing_attempted_at_ts)),
    task_last_processing_attempted_at_ts = VALUES(task_last_processing_attempted_at_ts),
    task_payload = VALUES(task_payload),
    task_metadata = VALUES(task_metadata)";

impl Statements {
    pub(crate) fn new(schema: &Schema) -> Self {
        let q = schema.flat_table("tasks_queue_t");
        let r = schema.flat_table("task_results_t");
        let s = schema.flat_table("task_execution_time_stats_t");
        Statements {
            queue: q.clone(),
            results: r.clone(),
            unique_keys: schema.flat_table("unique_keys_t"),
            insert_queue: format!("INSERT INTO {q} ({NEW_COLUMNS}) VALUES ({NEW_VALUES}, 1)"),
            insert_plain: format!("INSERT INTO {q} ({NEW_COLUMNS}) VALUES ({NEW_VALUES}, 0)"),
            insert_result: format!(
                "INSERT INTO {r} ({RESULT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"
            ),
            // The live job holding a key is changed as the new job's mode says
            // (`UniqueMode`). Binds: mode, mode, mode, payload, mode, not-before,
            // every, id. No assignment reads a column assigned before it.
            enqueue_unique: format!(
                "UPDATE {q} SET
                    task_rerun = task_rerun OR (? = 2 AND task_locked_by IS NOT NULL),
                    task_payload = CASE WHEN (? = 3 AND task_locked_by IS NULL) OR ? = 2
                        THEN ? ELSE task_payload END,
                    task_locked_until_ts = CASE WHEN ? = 3 AND task_locked_by IS NULL
                        THEN ? ELSE task_locked_until_ts END,
                    task_every_ms = coalesce(?, task_every_ms)
                 WHERE task_id = ?"
            ),
            success: format!(
                "INSERT INTO {r} ({JOB_COLUMNS}, task_status, task_processing_time_milliseconds,
                    task_processing_finalized_at_ts, task_last_locked_by, task_output,
                    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts, task_payload)"
            ),
            // A success after lost attempts: their count and the whole list of failed
            // attempts (`errors_with`) go into the record too.
            success_again: format!(
                "INSERT INTO {r} ({JOB_COLUMNS}, task_status, task_processing_time_milliseconds,
                    task_processing_finalized_at_ts, task_last_locked_by, task_output,
                    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
                    task_error_count, task_errors, task_payload)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {PROCESSED}, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON DUPLICATE KEY UPDATE task_error_count = task_error_count + VALUES(task_error_count),
                    task_errors = VALUES(task_errors), {SUCCESS_UPDATE}"
            ),
            failure: format!(
                "INSERT INTO {r} ({JOB_COLUMNS}, task_status, task_error_count, task_last_error_type,
                    task_last_error_message, task_last_error_detail, task_last_error, task_last_error_is_recoverable,
                    task_processing_time_milliseconds, task_processing_finalized_at_ts, task_payload,
                    task_last_locked_by, task_errors, task_output, task_first_processing_attempted_at_ts,
                    task_last_processing_attempted_at_ts, task_max_attempts, task_timeout_ms)"
            ),
            // The average first: it reads the totals before they are added to.
            stats: format!(
                "INSERT INTO {s} (et_payload_type, et_owner_process_id, et_avg_execution_time,
                    et_fastest_execution_time, et_longest_execution_time, et_total_execution_time,
                    et_n_execution_cycles, et_last_execution_time, et_last_updated_ts)
                 VALUES (?, ?, ? DIV ?, ?, ?, ?, ?, ?, ?)
                 ON DUPLICATE KEY UPDATE
                    et_avg_execution_time = (et_total_execution_time + VALUES(et_total_execution_time))
                        DIV (et_n_execution_cycles + VALUES(et_n_execution_cycles)),
                    et_total_execution_time = et_total_execution_time + VALUES(et_total_execution_time),
                    et_n_execution_cycles = et_n_execution_cycles + VALUES(et_n_execution_cycles),
                    et_fastest_execution_time = LEAST(et_fastest_execution_time, VALUES(et_fastest_execution_time)),
                    et_longest_execution_time = GREATEST(et_longest_execution_time, VALUES(et_longest_execution_time)),
                    et_last_execution_time = VALUES(et_last_execution_time),
                    et_last_updated_ts = VALUES(et_last_updated_ts)"
            ),
            // The jobs waiting for their first outcome without a results row count as
            // unprocessed (as on PostgreSQL).
            counts_by_status: format!(
                "SELECT task_status, CAST(sum(n) AS SIGNED) FROM (
                    SELECT task_status, count(*) AS n FROM {r} GROUP BY task_status
                    UNION ALL SELECT 1, count(*) FROM {q} WHERE task_has_result = 0
                 ) c GROUP BY task_status HAVING sum(n) > 0"
            ),
            // As on PostgreSQL: a leased queue row means the job runs now; results hold
            // what happened before. The queue row's lost attempts follow the recorded ones
            // (`lost`, appended in `job`). Binds: id, now.
            job: format!(
                "SELECT k.id AS task_id, CAST(coalesce(r.task_type, q.task_type) AS CHAR) AS task_type,
                    coalesce(r.task_source, q.task_source) AS task_source,
                    CAST(coalesce(r.task_queue, q.task_queue) AS CHAR) AS task_queue,
                    coalesce(q.task_payload, r.task_payload) AS task_payload,
                    CAST(CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > ? THEN {PROCESSING}
                         ELSE coalesce(r.task_status, {UNPROCESSED}) END AS SIGNED) AS task_status,
                    coalesce(q.task_priority, r.task_priority) AS task_priority,
                    CAST(coalesce(r.task_error_count, 0) + coalesce(JSON_LENGTH(q.task_lost_attempts), 0) AS SIGNED)
                        AS task_error_count, r.task_last_error_type,
                    coalesce(r.task_last_error_message, r.task_last_error) AS task_last_error_message, r.task_last_error_detail,
                    r.task_last_error_is_recoverable,
                    coalesce(r.task_processing_time_milliseconds, 0) AS task_processing_time_milliseconds,
                    coalesce(r.task_posted_at_ts, q.task_posted_at_ts) AS task_posted_at_ts,
                    coalesce(r.task_first_processing_attempted_at_ts,
                        STR_TO_DATE(JSON_UNQUOTE(JSON_EXTRACT(q.task_lost_attempts, '$[0].started_at')), {SQL_TS}),
                        q.task_claimed_at_ts) AS task_first_processing_attempted_at_ts,
                    CASE WHEN q.task_locked_by IS NOT NULL THEN q.task_claimed_at_ts
                         ELSE r.task_last_processing_attempted_at_ts END AS task_last_processing_attempted_at_ts,
                    r.task_processing_finalized_at_ts,
                    q.task_attempt, q.task_max_attempts, q.task_locked_until_ts, q.task_locked_by,
                    coalesce(r.task_errors, '[]') AS task_errors, q.task_lost_attempts AS lost,
                    r.task_last_locked_by, r.task_output,
                    CAST(coalesce(r.task_tenant, q.task_tenant) AS CHAR) AS task_tenant,
                    CAST(coalesce(r.task_correlation_id, q.task_correlation_id) AS CHAR) AS task_correlation_id,
                    coalesce(q.task_metadata, r.task_metadata) AS task_metadata,
                    CAST(coalesce(r.task_unique_key, q.task_unique_key) AS CHAR) AS task_unique_key,
                    coalesce(r.task_unique_mode, q.task_unique_mode) AS task_unique_mode,
                    q.task_version,
                    CONVERT_TZ(coalesce(q.task_updated_at_ts, r.task_updated_at_ts), @@session.time_zone, '+00:00')
                        AS task_updated_at_ts
                 FROM (SELECT ? AS id) k
                 LEFT JOIN {r} r ON r.task_id = k.id
                 LEFT JOIN {q} q ON q.task_id = k.id
                 WHERE r.task_id IS NOT NULL OR q.task_id IS NOT NULL"
            ),
        }
    }
}
