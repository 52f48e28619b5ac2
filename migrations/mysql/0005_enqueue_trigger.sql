-- sk schema, version 5 (MySQL / MariaDB): a new job's results row written by its queue
-- row's insert, so that a single enqueue is one statement (one round trip and no explicit
-- transaction, as PostgreSQL's one statement with two CTEs) instead of BEGIN, two inserts
-- and COMMIT. A row inserted with `task_has_result = 2` gets its results row here and is
-- stored with 1; a row inserted otherwise (sk's other paths, or code that writes the
-- queue table itself) is left alone. A BEFORE trigger runs inside its statement: if the
-- queue row then fails (a duplicate id), its results row is undone with it, and in a
-- caller's transaction only that statement is.
DROP TRIGGER IF EXISTS __PREFIX__tasks_queue_enqueue;
CREATE TRIGGER __PREFIX__tasks_queue_enqueue BEFORE INSERT ON __PREFIX__tasks_queue_t
FOR EACH ROW
BEGIN
    IF NEW.task_has_result = 2 THEN
        INSERT INTO __PREFIX__task_results_t (task_id, task_type, task_source, task_queue,
            task_priority, task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant,
            task_correlation_id, task_metadata, task_status)
        VALUES (NEW.task_id, NEW.task_type, NEW.task_source, NEW.task_queue, NEW.task_priority,
            NEW.task_unique_key, NEW.task_unique_mode, NEW.task_posted_at_ts, NEW.task_tenant,
            NEW.task_correlation_id, NEW.task_metadata, 1);
        SET NEW.task_has_result = 1;
    END IF;
END;
