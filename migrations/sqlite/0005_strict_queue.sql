-- sk schema, version 5 (SQLite): the queue table refuses a row sk could not read.
--
-- SQLite keeps any value in any column of an ordinary table. One waiting row that another
-- producer wrote with, say, a text priority or an id of the wrong length made every claim
-- that took it fail to decode, and the claims were retried for ever: the whole queue
-- stalled behind one row. The table is now STRICT (a value of the wrong type is refused,
-- naming the table and column) and checks what a type cannot say: an id is a 16-byte
-- UUID, the posting time is a time in sk's one form (version 1), and the not-before time,
-- which the claim compares as text, has that form's shape (a time written as
-- `2026-11-26 23:00:00` would compare as before the whole day and run early). A bad row is
-- refused at its INSERT or UPDATE, with an error, and the queue goes on. Metadata must be
-- JSON, as the other backends' column types make it (the job list's metadata filter fails
-- with "malformed JSON" on a results row whose metadata is not). The not-before time is
-- checked with LIKE, not GLOB: it is written at every claim, and GLOB costs about
-- 0.3 µs a row against LIKE's 0.1 (SQLite 3.40, 100,000 rows).
--
-- SQLite cannot make a table STRICT in place: the table is copied into a new one. A row
-- already in the queue that breaks these rules fails this migration, which then changes
-- nothing, and the error names the row's column.

CREATE TABLE __PREFIX__tasks_queue_strict (
    task_lock_handle_id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id BLOB NOT NULL UNIQUE
        CONSTRAINT task_id_is_a_uuid CHECK (length(task_id) = 16),
    task_type TEXT NOT NULL,
    task_source TEXT NOT NULL DEFAULT 'app',
    task_payload TEXT NULL,
    task_priority INTEGER NOT NULL DEFAULT 0,
    task_posted_at_ts TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
        CONSTRAINT task_posted_at_ts_is_a_time CHECK (task_posted_at_ts GLOB
            '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    task_locked_until_ts TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
        CONSTRAINT task_locked_until_ts_is_a_time CHECK (task_locked_until_ts LIKE
            '____-__-__T__:__:__.______Z'),
    task_queue TEXT NOT NULL DEFAULT 'default',
    task_attempt INTEGER NOT NULL DEFAULT 0,
    task_max_attempts INTEGER NOT NULL DEFAULT 25,
    task_locked_by TEXT NULL,
    task_claimed_at_ts TEXT NULL,
    task_lost_attempts TEXT NULL,
    task_tenant TEXT NULL,
    task_correlation_id TEXT NULL,
    task_metadata TEXT NULL
        CONSTRAINT task_metadata_is_json CHECK (task_metadata IS NULL OR json_valid(task_metadata)),
    task_unique_key TEXT NULL,
    task_unique_mode INTEGER NULL,
    task_rerun INTEGER NOT NULL DEFAULT 0,
    task_every_ms INTEGER NULL,
    task_has_result INTEGER NOT NULL DEFAULT 0,
    task_timeout_ms INTEGER NULL,
    task_waiting_on INTEGER NULL,
    task_dependants INTEGER NOT NULL DEFAULT 0
) STRICT;

INSERT INTO __PREFIX__tasks_queue_strict
SELECT task_lock_handle_id, task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_attempt, task_max_attempts,
    task_locked_by, task_claimed_at_ts, task_lost_attempts, task_tenant, task_correlation_id,
    task_metadata, task_unique_key, task_unique_mode, task_rerun, task_every_ms,
    task_has_result, task_timeout_ms, task_waiting_on, task_dependants
FROM __PREFIX__tasks_queue_t;

-- Lock handles are never reused (version 1): the new table goes on from the old one's last.
DELETE FROM sqlite_sequence WHERE name = '__PREFIX__tasks_queue_strict';
INSERT INTO sqlite_sequence (name, seq)
SELECT '__PREFIX__tasks_queue_strict', seq FROM sqlite_sequence WHERE name = '__PREFIX__tasks_queue_t';

DROP TABLE __PREFIX__tasks_queue_t;
ALTER TABLE __PREFIX__tasks_queue_strict RENAME TO __PREFIX__tasks_queue_t;

CREATE INDEX __PREFIX__tasks_queue_dequeue_idx
    ON __PREFIX__tasks_queue_t (task_priority, task_locked_until_ts, task_lock_handle_id);
CREATE UNIQUE INDEX __PREFIX__tasks_queue_unique_key_idx
    ON __PREFIX__tasks_queue_t (task_unique_key) WHERE task_unique_key IS NOT NULL;
CREATE INDEX __PREFIX__tasks_queue_running_idx
    ON __PREFIX__tasks_queue_t (task_queue, task_locked_until_ts)
    WHERE task_locked_by IS NOT NULL;

-- As in version 1: sk's enqueue writes a job's results row through this trigger when it
-- marks the queue row `task_has_result` (a job with a unique key; a job without one has
-- its results row from its first outcome on).
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
