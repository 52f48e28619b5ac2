-- sk schema, version 11 (PostgreSQL): every time in the queue and results tables is a
-- finite one. PostgreSQL's `infinity` is past any time sk (chrono) can hold: a row holding
-- one could not be read. sk checks the queue's rows before this migration and names one
-- that breaks the check; the results table's check holds for new rows only (NOT VALID:
-- no scan of the whole history while the table is locked).
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ADD CONSTRAINT __PREFIX__tasks_queue_times_are_finite CHECK (
        isfinite(task_posted_at_ts) AND isfinite(task_locked_until_ts)
        AND isfinite(task_claimed_at_ts)
    );
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ADD CONSTRAINT __PREFIX__task_results_times_are_finite CHECK (
        isfinite(task_posted_at_ts) AND isfinite(task_first_processing_attempted_at_ts)
        AND isfinite(task_last_processing_attempted_at_ts)
        AND isfinite(task_processing_finalized_at_ts)
    ) NOT VALID;
