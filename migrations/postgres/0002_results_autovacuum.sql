-- sk schema, version 2 (PostgreSQL).
-- The results table takes two updates per job (claim, finalize) plus the pruning deletes;
-- vacuum and analyze it well before the default 20% of dead rows. This only matters
-- where autovacuum runs; workers also vacuum sk's tables themselves when dead rows pile
-- up (docs/reliability.md), because some servers run with autovacuum off.
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t SET (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);
