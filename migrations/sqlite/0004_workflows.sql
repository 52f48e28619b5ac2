-- sk schema, version 4 (SQLite): workflows, jobs that wait on other jobs, as the
-- PostgreSQL schema's version 9.

-- NULL: the job depends on nothing; above 0: the dependencies that have not succeeded
-- yet (its not-before time is `store::WAITING_UNTIL` meanwhile); 0: they all succeeded.
ALTER TABLE __PREFIX__tasks_queue_t ADD COLUMN task_waiting_on INTEGER NULL;
-- Other jobs wait on this one.
ALTER TABLE __PREFIX__tasks_queue_t ADD COLUMN task_dependants INTEGER NOT NULL DEFAULT 0;

-- One row per dependency of a job, in the order given: whether it succeeded, and its
-- output then.
CREATE TABLE __PREFIX__task_deps_t (
    task_id BLOB NOT NULL,
    dep_position INTEGER NOT NULL,
    dep_task_id BLOB NOT NULL,
    dep_done INTEGER NOT NULL DEFAULT 0,
    dep_output TEXT NULL,
    PRIMARY KEY (task_id, dep_position)
);
CREATE INDEX __PREFIX__task_deps_on_idx ON __PREFIX__task_deps_t (dep_task_id);
