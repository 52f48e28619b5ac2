-- sk schema, version 8 (PostgreSQL): a concurrency limit per queue across all workers
-- (`Client::set_global_limit`, docs/operations.md).

-- At most this many jobs of the queue run at once, over every worker; NULL: no limit.
ALTER TABLE __SCHEMA__.__PREFIX__queues_t ADD COLUMN queue_global_limit integer NULL;

-- The running jobs of a queue, counted by a claim of a queue with a global limit. Only
-- leased rows enter it: waiting jobs and enqueues write nothing here.
CREATE INDEX __PREFIX__tasks_queue_running_idx
    ON __SCHEMA__.__PREFIX__tasks_queue_t (task_queue, task_locked_until_ts)
    WHERE task_locked_by IS NOT NULL;

-- How many more jobs of a queue a claim may take: its global limit less its running
-- jobs (NULL: the queue has no limit). Called by the claim of a limited queue, it first
-- locks the queue's row, so claims of that queue take turns until each commits; being
-- VOLATILE, its count runs on a snapshot taken after the lock, which sees the claims
-- committed before it (the claim's own snapshot predates the lock).
CREATE FUNCTION __SCHEMA__.__PREFIX__queue_room(p_queue varchar, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_limit integer;
BEGIN
    SELECT queue_global_limit INTO v_limit FROM __SCHEMA__.__PREFIX__queues_t
        WHERE queue_name = p_queue FOR UPDATE;
    IF v_limit IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN greatest(0, v_limit - (SELECT count(*) FROM __SCHEMA__.__PREFIX__tasks_queue_t
        WHERE task_queue = p_queue AND task_locked_by IS NOT NULL AND task_locked_until_ts > p_now));
END
$fn$;
