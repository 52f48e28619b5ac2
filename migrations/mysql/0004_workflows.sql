-- sk schema, version 4 (MySQL / MariaDB): workflows, jobs that wait on other jobs, as
-- the PostgreSQL schema's version 9.

-- NULL: the job depends on nothing; above 0: the dependencies that have not succeeded
-- yet (its not-before time is `store::WAITING_UNTIL` meanwhile); 0: they all succeeded.
-- `task_dependants`: other jobs wait on this one.
ALTER TABLE __PREFIX__tasks_queue_t
    ADD COLUMN IF NOT EXISTS task_waiting_on INT NULL,
    ADD COLUMN IF NOT EXISTS task_dependants BOOLEAN NOT NULL DEFAULT FALSE;

-- One row per dependency of a job, in the order given: whether it succeeded, and its
-- output then.
CREATE TABLE IF NOT EXISTS __PREFIX__task_deps_t (
    task_id BINARY(16) NOT NULL,
    dep_position INT NOT NULL,
    dep_task_id BINARY(16) NOT NULL,
    dep_done BOOLEAN NOT NULL DEFAULT FALSE,
    dep_output LONGTEXT NULL,
    PRIMARY KEY (task_id, dep_position),
    KEY __PREFIX__task_deps_on (dep_task_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
