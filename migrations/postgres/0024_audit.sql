-- sk schema, version 24 (PostgreSQL): the audit trail of operator actions
-- (`Client::audit`, `sk audit`, the dashboard's Audit page), and the queues each worker
-- knows.
--
-- One row per action taken through `Client` (and so `sk` and `sk web`): a pause, resume,
-- limit change, retry, cancel, run now, delete or prune, with who took it (the client's
-- actor: the OS user, or the dashboard's user), when, on what (a queue, a job, a batch)
-- or with which filter, and how many jobs it changed. Rows are only ever added.
CREATE TABLE __SCHEMA__.__PREFIX__audit_t (
    audit_id bigserial PRIMARY KEY,
    audit_at_ts timestamptz NOT NULL,
    audit_actor text NOT NULL,
    audit_action text NOT NULL,
    audit_target text NULL,
    audit_filter text NULL,
    audit_jobs bigint NULL
);

-- The queues a worker's task types go to by default (`#[job(queue = ...)]`), as a JSON
-- list: a worker that serves every queue still names the queues it knows, so the
-- dashboard lists a queue whose jobs all succeeded.
ALTER TABLE __SCHEMA__.__PREFIX__workers_t ADD COLUMN worker_default_queues text NULL;
