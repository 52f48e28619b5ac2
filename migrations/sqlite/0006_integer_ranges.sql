-- sk schema, version 6 (SQLite): every integer column of the queue and results tables
-- holds only what sk reads from it.
--
-- A STRICT INTEGER column takes any 64-bit integer, and sk reads a priority, an attempt or
-- a retry limit as a 32-bit one (as the other backends' INT columns hold them). One row
-- another producer wrote with `task_max_attempts = 3000000000` made every claim that took
-- it fail to decode its whole batch, after leasing it: the queue stalled and the other
-- jobs' attempts were used up without a run. Each such column now has a range check, and
-- a flag (0 or 1) or a unique mode (1 skip, 2 restart, 3 replace) its values; a row out of
-- range is refused at its INSERT or UPDATE, naming the check. The results table keeps its
-- column types (it is not STRICT) and gets the same checks.
--
-- SQLite cannot add a check in place: both tables are copied. sk looks for a row the new
-- tables would refuse before this file runs, and names it in the migration's error; the
-- migration then changes nothing.

CREATE TABLE __PREFIX__tasks_queue_checked (
    task_lock_handle_id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id BLOB NOT NULL UNIQUE
        CONSTRAINT task_id_is_a_uuid CHECK (length(task_id) = 16),
    task_type TEXT NOT NULL,
    task_source TEXT NOT NULL DEFAULT 'app',
    task_payload TEXT NULL,
    task_priority INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_priority_is_an_int4 CHECK (task_priority BETWEEN -2147483648 AND 2147483647),
    task_posted_at_ts TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
        CONSTRAINT task_posted_at_ts_is_a_time CHECK (task_posted_at_ts GLOB
            '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    task_locked_until_ts TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
        CONSTRAINT task_locked_until_ts_is_a_time CHECK (task_locked_until_ts LIKE
            '____-__-__T__:__:__.______Z'),
    task_queue TEXT NOT NULL DEFAULT 'default',
    task_attempt INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_attempt_is_an_int4 CHECK (task_attempt BETWEEN -2147483648 AND 2147483647),
    task_max_attempts INTEGER NOT NULL DEFAULT 25
        CONSTRAINT task_max_attempts_is_an_int4 CHECK (task_max_attempts BETWEEN -2147483648 AND 2147483647),
    task_locked_by TEXT NULL,
    task_claimed_at_ts TEXT NULL,
    task_lost_attempts TEXT NULL,
    task_tenant TEXT NULL,
    task_correlation_id TEXT NULL,
    task_metadata TEXT NULL
        CONSTRAINT task_metadata_is_json CHECK (task_metadata IS NULL OR json_valid(task_metadata)),
    task_unique_key TEXT NULL,
    task_unique_mode INTEGER NULL
        CONSTRAINT task_unique_mode_is_a_mode CHECK (task_unique_mode IN (1, 2, 3)),
    task_rerun INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_rerun_is_a_flag CHECK (task_rerun IN (0, 1)),
    task_every_ms INTEGER NULL,
    task_has_result INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_has_result_is_a_flag CHECK (task_has_result IN (0, 1)),
    task_timeout_ms INTEGER NULL,
    task_waiting_on INTEGER NULL
        CONSTRAINT task_waiting_on_is_an_int4 CHECK (task_waiting_on BETWEEN -2147483648 AND 2147483647),
    task_dependants INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_dependants_is_a_flag CHECK (task_dependants IN (0, 1))
) STRICT;

INSERT INTO __PREFIX__tasks_queue_checked
SELECT task_lock_handle_id, task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_attempt, task_max_attempts,
    task_locked_by, task_claimed_at_ts, task_lost_attempts, task_tenant, task_correlation_id,
    task_metadata, task_unique_key, task_unique_mode, task_rerun, task_every_ms,
    task_has_result, task_timeout_ms, task_waiting_on, task_dependants
FROM __PREFIX__tasks_queue_t;

-- Lock handles are never reused (version 1): the new table goes on from the old one's last.
DELETE FROM sqlite_sequence WHERE name = '__PREFIX__tasks_queue_checked';
INSERT INTO sqlite_sequence (name, seq)
SELECT '__PREFIX__tasks_queue_checked', seq FROM sqlite_sequence WHERE name = '__PREFIX__tasks_queue_t';

DROP TABLE __PREFIX__tasks_queue_t;
ALTER TABLE __PREFIX__tasks_queue_checked RENAME TO __PREFIX__tasks_queue_t;

CREATE INDEX __PREFIX__tasks_queue_dequeue_idx
    ON __PREFIX__tasks_queue_t (task_priority, task_locked_until_ts, task_lock_handle_id);
CREATE UNIQUE INDEX __PREFIX__tasks_queue_unique_key_idx
    ON __PREFIX__tasks_queue_t (task_unique_key) WHERE task_unique_key IS NOT NULL;
CREATE INDEX __PREFIX__tasks_queue_running_idx
    ON __PREFIX__tasks_queue_t (task_queue, task_locked_until_ts)
    WHERE task_locked_by IS NOT NULL;

CREATE TABLE __PREFIX__task_results_checked (
    task_id BLOB NOT NULL PRIMARY KEY,
    task_type TEXT NOT NULL,
    task_source TEXT NOT NULL,
    task_payload TEXT NULL,
    task_queue TEXT NOT NULL DEFAULT 'default',
    -- unprocessed 1, processing 2, processed 3, error 4, faulted 5, fatal 6, cancelled 7
    task_status INTEGER NOT NULL
        CONSTRAINT task_status_is_an_int4 CHECK (task_status BETWEEN -2147483648 AND 2147483647),
    task_priority INTEGER NOT NULL
        CONSTRAINT task_priority_is_an_int4 CHECK (task_priority BETWEEN -2147483648 AND 2147483647),
    task_unique_key TEXT NULL,
    task_unique_mode INTEGER NULL
        CONSTRAINT task_unique_mode_is_a_mode CHECK (task_unique_mode IN (1, 2, 3)),
    task_error_count INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_error_count_is_an_int4 CHECK (task_error_count BETWEEN -2147483648 AND 2147483647),
    task_last_error_type TEXT NULL,
    task_last_error_message TEXT NULL,
    task_last_error_detail TEXT NULL,
    task_last_error TEXT NULL,
    task_last_error_is_recoverable INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_last_error_is_recoverable_is_a_flag CHECK (task_last_error_is_recoverable IN (0, 1)),
    task_processing_time_milliseconds INTEGER NOT NULL DEFAULT 0
        CONSTRAINT task_processing_time_milliseconds_is_an_int8
            CHECK (task_processing_time_milliseconds BETWEEN -9223372036854775808 AND 9223372036854775807),
    task_posted_at_ts TEXT NOT NULL,
    task_first_processing_attempted_at_ts TEXT NULL,
    task_last_processing_attempted_at_ts TEXT NULL,
    task_processing_finalized_at_ts TEXT NULL,
    task_errors TEXT NOT NULL DEFAULT '[]',
    task_last_locked_by TEXT NULL,
    task_output TEXT NULL,
    task_tenant TEXT NULL,
    task_correlation_id TEXT NULL,
    task_metadata TEXT NULL,
    task_max_attempts INTEGER NULL
        CONSTRAINT task_max_attempts_is_an_int4 CHECK (task_max_attempts BETWEEN -2147483648 AND 2147483647),
    task_timeout_ms INTEGER NULL
        CONSTRAINT task_timeout_ms_is_an_int8
            CHECK (task_timeout_ms BETWEEN -9223372036854775808 AND 9223372036854775807)
);

INSERT INTO __PREFIX__task_results_checked
SELECT task_id, task_type, task_source, task_payload, task_queue, task_status, task_priority,
    task_unique_key, task_unique_mode, task_error_count, task_last_error_type,
    task_last_error_message, task_last_error_detail, task_last_error,
    task_last_error_is_recoverable, task_processing_time_milliseconds, task_posted_at_ts,
    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
    task_processing_finalized_at_ts, task_errors, task_last_locked_by, task_output,
    task_tenant, task_correlation_id, task_metadata, task_max_attempts, task_timeout_ms
FROM __PREFIX__task_results_t;

DROP TABLE __PREFIX__task_results_t;
ALTER TABLE __PREFIX__task_results_checked RENAME TO __PREFIX__task_results_t;

CREATE INDEX __PREFIX__task_results_type_idx ON __PREFIX__task_results_t (task_type)
    WHERE task_status NOT IN (1, 3);
CREATE INDEX __PREFIX__task_results_status_idx ON __PREFIX__task_results_t (task_status)
    WHERE task_status NOT IN (1, 3);
CREATE INDEX __PREFIX__task_results_tenant_idx ON __PREFIX__task_results_t (task_tenant)
    WHERE task_tenant IS NOT NULL;
CREATE INDEX __PREFIX__task_results_correlation_idx ON __PREFIX__task_results_t (task_correlation_id)
    WHERE task_correlation_id IS NOT NULL;
CREATE INDEX __PREFIX__task_results_finalized_idx
    ON __PREFIX__task_results_t (task_processing_finalized_at_ts)
    WHERE task_processing_finalized_at_ts IS NOT NULL;
CREATE INDEX __PREFIX__task_results_ended_queue_idx
    ON __PREFIX__task_results_t (task_queue, task_status) WHERE task_status IN (6, 7);
CREATE INDEX __PREFIX__task_results_ended_type_idx
    ON __PREFIX__task_results_t (task_type, task_status) WHERE task_status IN (6, 7);
CREATE INDEX __PREFIX__task_results_ended_tenant_idx
    ON __PREFIX__task_results_t (task_tenant, task_status)
    WHERE task_status IN (6, 7);

-- As in version 5 (dropped with the queue table).
CREATE TRIGGER __PREFIX__tasks_queue_results_row AFTER INSERT ON __PREFIX__tasks_queue_t
WHEN NEW.task_has_result
BEGIN
    INSERT INTO __PREFIX__task_results_t (task_id, task_type, task_source, task_queue, task_status,
        task_priority, task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant,
        task_correlation_id, task_metadata)
    VALUES (NEW.task_id, NEW.task_type, NEW.task_source, NEW.task_queue, 1, NEW.task_priority,
        NEW.task_unique_key, NEW.task_unique_mode, NEW.task_posted_at_ts, NEW.task_tenant,
        NEW.task_correlation_id, NEW.task_metadata)
    ON CONFLICT (task_id) DO NOTHING;
END;
