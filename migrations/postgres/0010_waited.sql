-- sk schema, version 10 (PostgreSQL): a job someone waits on (`Client::wait`) is marked,
-- and only its completion notifies the done channel. PostgreSQL commits one notifying
-- transaction at a time (a global lock held through the commit's WAL flush), so a notice
-- in every completion held up workers on many hosts (docs/scaling.md).
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ADD COLUMN task_waited boolean NOT NULL DEFAULT false;
