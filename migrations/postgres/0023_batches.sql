-- sk schema, version 23 (PostgreSQL): batches of jobs with callbacks (`Batch`,
-- docs/workflows.md "Batches").
--
-- One row per batch, with its jobs counted by state. A job of a batch is marked as a job
-- others wait on (`task_dependants`), so its outcome, in the transaction that records
-- it, moves its row below from one state to another and the batch's counts with it
-- (`store::batch::tally`): no round trip per job. `batch_finished_at_ts`: when no job
-- of the batch was live any more (NULL again if a retry brings one back).
CREATE TABLE __SCHEMA__.__PREFIX__batches_t (
    batch_id uuid PRIMARY KEY,
    batch_description text NULL,
    batch_total integer NOT NULL,
    batch_pending integer NOT NULL,
    batch_succeeded integer NOT NULL DEFAULT 0,
    batch_failed integer NOT NULL DEFAULT 0,
    batch_cancelled integer NOT NULL DEFAULT 0,
    batch_created_at_ts timestamptz NOT NULL,
    batch_finished_at_ts timestamptz NULL
);
CREATE INDEX __PREFIX__batches_created_idx ON __SCHEMA__.__PREFIX__batches_t (batch_created_at_ts);

-- The jobs of each batch, with the state each was last counted in: 1 live, 3 succeeded,
-- 6 failed for good, 7 cancelled (the results table's codes).
CREATE TABLE __SCHEMA__.__PREFIX__batch_jobs_t (
    task_id uuid PRIMARY KEY,
    batch_id uuid NOT NULL,
    job_status smallint NOT NULL
);
CREATE INDEX __PREFIX__batch_jobs_batch_idx ON __SCHEMA__.__PREFIX__batch_jobs_t (batch_id);

-- A batch's callbacks, a job each to post once when the batch's event comes (1 success,
-- 2 complete, 3 death): `callback_job` is the job as JSON, its id chosen at the batch's
-- enqueue; `callback_fired_at_ts` when it was posted, in the transaction that counted
-- the job that brought the event.
CREATE TABLE __SCHEMA__.__PREFIX__batch_callbacks_t (
    batch_id uuid NOT NULL,
    callback_event smallint NOT NULL,
    task_id uuid NOT NULL,
    task_type text NOT NULL,
    callback_job text NOT NULL,
    callback_fired_at_ts timestamptz NULL,
    PRIMARY KEY (batch_id, callback_event)
);
