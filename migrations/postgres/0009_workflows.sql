-- sk schema, version 9 (PostgreSQL): workflows, jobs that wait on other jobs
-- (`Workflow`, `Enqueue::after`, docs/workflows.md).

-- A job that waits on others is a live queue row like any other, with a not-before time
-- no claim reaches (`store::WAITING_UNTIL`) and the number of its dependencies that have
-- not succeeded yet; the success of its last one makes it due. NULL: the job depends on
-- nothing; 0: it did, and they all succeeded (its inputs are in the dependency table).
-- A job others wait on is marked, so only such a job's outcome looks for its dependants.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ADD COLUMN task_waiting_on integer NULL,
    ADD COLUMN task_dependants boolean NOT NULL DEFAULT false;

-- One row per dependency of a job, in the order given (its inputs' order): whether it
-- succeeded, and its output then. A dependency that fails or is cancelled ends its
-- dependants (fatal or cancelled, naming it) instead. Rows go with the job's success;
-- those of a job that did not succeed stay for a retry and are pruned with its results.
CREATE TABLE __SCHEMA__.__PREFIX__task_deps_t (
    task_id uuid NOT NULL,
    dep_position integer NOT NULL,
    dep_task_id uuid NOT NULL,
    dep_done boolean NOT NULL DEFAULT false,
    dep_output text NULL,
    PRIMARY KEY (task_id, dep_position)
);
CREATE INDEX __PREFIX__task_deps_on_idx ON __SCHEMA__.__PREFIX__task_deps_t (dep_task_id);
