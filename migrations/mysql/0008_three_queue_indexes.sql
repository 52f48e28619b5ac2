-- sk schema, version 8 (MySQL / MariaDB): a waiting job enters three indexes, not six.
--
-- InnoDB has no partial index: every queue row entered the unique-key index, the tenant's
-- claim index and the running-jobs index, though few jobs have a key and only running
-- jobs are counted. Each index entry costs every enqueued row (six indexes made a bulk
-- enqueue 0.56 of the same rows into a table with three; docs/performance.md). The queue
-- table keeps its lock handle, its id and the claim order; what the other three indexes
-- served moves to two small tables that hold only the rows that need them, as
-- PostgreSQL's and SQLite's partial indexes do:
--
-- - `unique_keys_t`: one row per live job with a unique key (modes skip, restart,
--   replace). sk's enqueue writes it in the job's transaction; a deleted queue row
--   takes its key with it (the trigger below). A key whose job is gone without the
--   trigger (a `TRUNCATE` of the queue) is free again: the enqueue checks the holder.
-- - `running_t`: one row per leased job, its queue and lease expiry, written by the
--   triggers below whenever a queue row's lease is set, extended, cleared or deleted.
--   A queue's limit across workers counts it.
-- - A claim by tenant reads the claim order and skips the other tenants' rows, as on
--   PostgreSQL and SQLite, whose queue tables have no tenant index either.
--
-- A row trigger on UPDATE and DELETE only: an enqueue's INSERT runs none.
CREATE TABLE IF NOT EXISTS __PREFIX__unique_keys_t (
    task_unique_key VARCHAR(512) COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    task_id BINARY(16) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS __PREFIX__running_t (
    task_id BINARY(16) NOT NULL PRIMARY KEY,
    task_queue VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    task_locked_until_ts DATETIME(6) NOT NULL,
    KEY __PREFIX__running_queue (task_queue, task_locked_until_ts)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

DROP TRIGGER IF EXISTS __PREFIX__tasks_queue_leased;
CREATE TRIGGER __PREFIX__tasks_queue_leased AFTER UPDATE ON __PREFIX__tasks_queue_t
FOR EACH ROW
BEGIN
    IF NEW.task_locked_by IS NOT NULL THEN
        IF NOT (OLD.task_locked_by <=> NEW.task_locked_by
                AND OLD.task_locked_until_ts = NEW.task_locked_until_ts
                AND OLD.task_queue = NEW.task_queue) THEN
            INSERT INTO __PREFIX__running_t (task_id, task_queue, task_locked_until_ts)
            VALUES (NEW.task_id, NEW.task_queue, NEW.task_locked_until_ts)
            ON DUPLICATE KEY UPDATE task_queue = NEW.task_queue,
                task_locked_until_ts = NEW.task_locked_until_ts;
        END IF;
    ELSEIF OLD.task_locked_by IS NOT NULL THEN
        DELETE FROM __PREFIX__running_t WHERE task_id = OLD.task_id;
    END IF;
END;

DROP TRIGGER IF EXISTS __PREFIX__tasks_queue_gone;
CREATE TRIGGER __PREFIX__tasks_queue_gone AFTER DELETE ON __PREFIX__tasks_queue_t
FOR EACH ROW
BEGIN
    IF OLD.task_locked_by IS NOT NULL THEN
        DELETE FROM __PREFIX__running_t WHERE task_id = OLD.task_id;
    END IF;
    IF OLD.task_unique_key IS NOT NULL THEN
        DELETE FROM __PREFIX__unique_keys_t
        WHERE task_unique_key = OLD.task_unique_key AND task_id = OLD.task_id;
    END IF;
END;

-- The live jobs' keys and leases as they are (`IGNORE`, `REPLACE`: a run cut off after
-- them is completed by the next).
INSERT IGNORE INTO __PREFIX__unique_keys_t (task_unique_key, task_id)
SELECT task_unique_key, task_id FROM __PREFIX__tasks_queue_t WHERE task_unique_key IS NOT NULL;
REPLACE INTO __PREFIX__running_t (task_id, task_queue, task_locked_until_ts)
SELECT task_id, task_queue, task_locked_until_ts FROM __PREFIX__tasks_queue_t
WHERE task_locked_by IS NOT NULL;

ALTER TABLE __PREFIX__tasks_queue_t
    DROP INDEX IF EXISTS __PREFIX__tasks_queue_unique_key,
    DROP INDEX IF EXISTS __PREFIX__tasks_queue_tenant,
    DROP INDEX IF EXISTS __PREFIX__tasks_queue_running;
