-- sk schema, version 17 (PostgreSQL): seed 002's `version` and `updated_at`.
--
-- `task_version` counts an application's changes to a waiting job (`Client::update`,
-- `reschedule`, `reprioritize`), which can name the version they read and are refused if
-- it has moved (compare and set). `task_updated_at_ts`, on both tables, is when the row
-- last changed, as the seed's `ON UPDATE CURRENT_TIMESTAMP`: sk's own hot statements
-- (claim, lease extension, completion, failure) set it themselves, and a trigger sets it
-- for every other writer's UPDATE that leaves it as it was (its WHEN clause is checked
-- without calling the function, so sk's statements pay nothing for it).
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ADD COLUMN task_version integer NOT NULL DEFAULT 0,
    ADD COLUMN task_updated_at_ts timestamptz NOT NULL DEFAULT now();
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ADD COLUMN task_updated_at_ts timestamptz NOT NULL DEFAULT now();

CREATE FUNCTION __SCHEMA__.__PREFIX__touch_updated_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.task_updated_at_ts := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER __PREFIX__tasks_queue_touch
    BEFORE UPDATE ON __SCHEMA__.__PREFIX__tasks_queue_t
    FOR EACH ROW WHEN (NEW.task_updated_at_ts = OLD.task_updated_at_ts)
    EXECUTE FUNCTION __SCHEMA__.__PREFIX__touch_updated_at();
CREATE TRIGGER __PREFIX__task_results_touch
    BEFORE UPDATE ON __SCHEMA__.__PREFIX__task_results_t
    FOR EACH ROW WHEN (NEW.task_updated_at_ts = OLD.task_updated_at_ts)
    EXECUTE FUNCTION __SCHEMA__.__PREFIX__touch_updated_at();
