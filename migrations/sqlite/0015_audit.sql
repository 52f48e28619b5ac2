-- sk schema, version 15 (SQLite): the audit trail of operator actions; see the
-- PostgreSQL migration 0024.
CREATE TABLE __PREFIX__audit_t (
    audit_id INTEGER PRIMARY KEY,
    audit_at_ts TEXT NOT NULL,
    audit_actor TEXT NOT NULL,
    audit_action TEXT NOT NULL,
    audit_target TEXT NULL,
    audit_filter TEXT NULL,
    audit_jobs INTEGER NULL
) STRICT;

-- The queues a worker's task types go to by default (`#[job(queue = ...)]`), as a JSON
-- list: a worker that serves every queue still names the queues it knows, so the
-- dashboard lists a queue whose jobs all succeeded.
ALTER TABLE __PREFIX__workers_t ADD COLUMN worker_default_queues TEXT NULL;
