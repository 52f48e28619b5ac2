-- sk schema, version 13 (PostgreSQL): seed 000's name for the lock-handle sequence.
-- Seed 001 names it `<prefix>tasks_queue_t_task_lock_handle_id_seq` (the queue's default
-- draws from it); seed 000 names it `<prefix>processing_queues_task_lock_handle_id_seq`.
-- PostgreSQL has no second name for one sequence, so both exist and share the handles:
-- from here seed 001's gives odd handles and seed 000's even ones, both counting up from
-- past every handle given so far (with a gap of 1,000 for what other writers draw while
-- this runs). A handle from either is unique; each name's grow. (The claim orders by
-- priority, then not-before time, then handle: the handle breaks ties of one microsecond.)
DO $migration$
DECLARE
    start bigint;
BEGIN
    SELECT last_value + 1000 INTO start
    FROM __SCHEMA__.__PREFIX__tasks_queue_t_task_lock_handle_id_seq;
    start := start + (start % 2 = 0)::int;
    ALTER SEQUENCE __SCHEMA__.__PREFIX__tasks_queue_t_task_lock_handle_id_seq INCREMENT BY 2;
    EXECUTE format('ALTER SEQUENCE __SCHEMA__.__PREFIX__tasks_queue_t_task_lock_handle_id_seq RESTART WITH %s',
        start);
    EXECUTE format('CREATE SEQUENCE __SCHEMA__.__PREFIX__processing_queues_task_lock_handle_id_seq
        INCREMENT BY 2 START WITH %s OWNED BY __SCHEMA__.__PREFIX__tasks_queue_t.task_lock_handle_id',
        start + 1);
END
$migration$;
