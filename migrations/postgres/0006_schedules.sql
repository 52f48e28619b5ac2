-- sk schema, version 6 (PostgreSQL): cron schedules stored in the database (seed 003's
-- periodic tasks, added and removed at run time). Every worker that runs the schedule's
-- task type reads this table once per poll interval and enqueues each tick once across
-- workers, as it does the schedules given in code (`sk_runtime::StoredSchedules`).
CREATE TABLE __SCHEMA__.__PREFIX__schedules_t (
    schedule_name varchar(255) NOT NULL PRIMARY KEY,
    task_type varchar(255) NOT NULL,
    -- The job's arguments as JSON, as in the queue table.
    task_payload text NOT NULL,
    -- 5, 6 or 7 fields, optionally after `CRON_TZ=<IANA zone> ` (UTC otherwise).
    schedule_cron varchar(255) NOT NULL,
    -- Whether a tick may start while the last one is still live.
    schedule_overlap boolean NOT NULL DEFAULT false,
    -- Ticks after this time are enqueued: a new or changed schedule starts from here.
    schedule_updated_at_ts timestamptz NOT NULL DEFAULT now()
);
