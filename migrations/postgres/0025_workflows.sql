-- sk schema, version 25 (PostgreSQL): workflows on record (`Workflow::enqueue`,
-- `Client::workflow`, the dashboard's workflow pages).
--
-- One row per workflow and one per job of it with its stage, written in the transaction
-- that enqueues the workflow: a job's dependency rows go when it succeeds, these stay
-- until the jobs' results are pruned, so a finished workflow can still be drawn.
CREATE TABLE __SCHEMA__.__PREFIX__workflows_t (
    workflow_id uuid PRIMARY KEY,
    workflow_stages integer NOT NULL,
    workflow_jobs integer NOT NULL,
    workflow_created_at_ts timestamptz NOT NULL
);
CREATE INDEX __PREFIX__workflows_created_idx ON __SCHEMA__.__PREFIX__workflows_t (workflow_created_at_ts);

CREATE TABLE __SCHEMA__.__PREFIX__workflow_jobs_t (
    task_id uuid PRIMARY KEY,
    workflow_id uuid NOT NULL,
    workflow_stage integer NOT NULL
);
CREATE INDEX __PREFIX__workflow_jobs_workflow_idx ON __SCHEMA__.__PREFIX__workflow_jobs_t (workflow_id);
