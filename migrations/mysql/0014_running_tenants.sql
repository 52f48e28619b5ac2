-- sk schema, version 14 (MySQL / MariaDB): each running job's tenant in `running_t`.
--
-- A claim of a queue with a limit of running jobs per tenant counts each tenant's
-- running jobs. InnoDB has no partial index, so counting them in the queue table read
-- every row of the queue through the fair index (100,000 rows a claim under a backlog
-- of that size: 230-253 jobs/s at concurrency 16, against 16,974-17,503 without the
-- limit). `running_t` holds only the leased jobs, as PostgreSQL's and SQLite's partial
-- running-jobs indexes do; with the tenant in it, the count reads those rows only.
ALTER TABLE __PREFIX__running_t
    ADD COLUMN IF NOT EXISTS task_tenant VARCHAR(255) COLLATE utf8mb4_bin NULL;

DROP TRIGGER IF EXISTS __PREFIX__tasks_queue_leased;
CREATE TRIGGER __PREFIX__tasks_queue_leased AFTER UPDATE ON __PREFIX__tasks_queue_t
FOR EACH ROW
BEGIN
    IF NEW.task_locked_by IS NOT NULL THEN
        IF NOT (OLD.task_locked_by <=> NEW.task_locked_by
                AND OLD.task_locked_until_ts = NEW.task_locked_until_ts
                AND OLD.task_queue = NEW.task_queue
                AND OLD.task_tenant <=> NEW.task_tenant) THEN
            INSERT INTO __PREFIX__running_t (task_id, task_queue, task_tenant, task_locked_until_ts)
            VALUES (NEW.task_id, NEW.task_queue, NEW.task_tenant, NEW.task_locked_until_ts)
            ON DUPLICATE KEY UPDATE task_queue = NEW.task_queue,
                task_tenant = NEW.task_tenant,
                task_locked_until_ts = NEW.task_locked_until_ts;
        END IF;
    ELSEIF OLD.task_locked_by IS NOT NULL THEN
        DELETE FROM __PREFIX__running_t WHERE task_id = OLD.task_id;
    END IF;
END;

-- The jobs running now, as they are.
UPDATE __PREFIX__running_t r JOIN __PREFIX__tasks_queue_t q ON q.task_id = r.task_id
SET r.task_tenant = q.task_tenant;
