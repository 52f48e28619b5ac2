//! The migrations, applied in order under an advisory lock, and the checks that refuse one whose rows would not fit.

use super::pooler::kept;
use super::*;
use crate::migrate::SeedKeys;

/// Versioned migrations, applied in order; `__SCHEMA__`/`__PREFIX__` are substituted.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "initial seed schema",
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "results table autovacuum",
        include_str!("../../../migrations/postgres/0002_results_autovacuum.sql"),
    ),
    (
        3,
        "lean writes per job",
        include_str!("../../../migrations/postgres/0003_lean_writes.sql"),
    ),
    (
        4,
        "the seeds' own contracts",
        include_str!("../../../migrations/postgres/0004_seed_contracts.sql"),
    ),
    (
        5,
        "results partitioned by time",
        include_str!("../../../migrations/postgres/0005_results_partitions.sql"),
    ),
    (
        6,
        "schedules stored in the database",
        include_str!("../../../migrations/postgres/0006_schedules.sql"),
    ),
    (
        7,
        "job control",
        include_str!("../../../migrations/postgres/0007_control.sql"),
    ),
    (
        8,
        "a concurrency limit per queue across workers",
        include_str!("../../../migrations/postgres/0008_global_limits.sql"),
    ),
    (
        9,
        "workflows: jobs that wait on other jobs",
        include_str!("../../../migrations/postgres/0009_workflows.sql"),
    ),
    (
        10,
        "only jobs waited on notify the done channel",
        include_str!("../../../migrations/postgres/0010_waited.sql"),
    ),
    (
        11,
        "every time in the queue and results tables is finite",
        include_str!("../../../migrations/postgres/0011_finite_times.sql"),
    ),
    (
        12,
        "the seed's dequeue: NULL filters take nothing, paused queues give nothing",
        include_str!("../../../migrations/postgres/0012_seed_dequeue.sql"),
    ),
    (
        13,
        "seed 000's name for the lock-handle sequence",
        include_str!("../../../migrations/postgres/0013_seed_000_sequence.sql"),
    ),
    (
        14,
        "seed 001's NULL priority",
        include_str!("../../../migrations/postgres/0014_null_priority.sql"),
    ),
    (
        15,
        "the seeds' column order in the results, metrics and stats tables",
        include_str!("../../../migrations/postgres/0015_seed_column_order.sql"),
    ),
    (
        16,
        "seed 002's retry group and external id, by index",
        include_str!("../../../migrations/postgres/0016_seed_002_lookups.sql"),
    ),
    (
        17,
        "seed 002's version and updated_at",
        include_str!("../../../migrations/postgres/0017_version_and_updated_at.sql"),
    ),
    (
        18,
        "rate limits shared by every worker",
        include_str!("../../../migrations/postgres/0018_rate_limits.sql"),
    ),
    (
        19,
        "fair claims across tenants",
        include_str!("../../../migrations/postgres/0019_fair_claims.sql"),
    ),
    (
        20,
        "running jobs limited per tenant",
        include_str!("../../../migrations/postgres/0020_tenant_limits.sql"),
    ),
    (
        21,
        "rate limits per tenant",
        include_str!("../../../migrations/postgres/0021_tenant_rates.sql"),
    ),
    (
        22,
        "fair claims stored per queue",
        include_str!("../../../migrations/postgres/0022_fair_queues.sql"),
    ),
    (
        23,
        "batches of jobs with callbacks",
        include_str!("../../../migrations/postgres/0023_batches.sql"),
    ),
    (
        24,
        "the audit trail, and the queues workers know",
        include_str!("../../../migrations/postgres/0024_audit.sql"),
    ),
    (
        25,
        "workflows on record",
        include_str!("../../../migrations/postgres/0025_workflows.sql"),
    ),
    (
        26,
        "the task types the workers run, with their schemas",
        include_str!("../../../migrations/postgres/0026_task_types.sql"),
    ),
    (
        27,
        "the seed's dequeue keeps the job's payload in its record",
        DEQUEUE,
    ),
];

/// The migration that defines sk's dequeue function last; `restore_dequeue` runs it again.
const DEQUEUE: &str = include_str!("../../../migrations/postgres/0027_seed_dequeue_record.sql");

/// The line of `DEQUEUE`'s body that marks the function as sk's.
const DEQUEUE_MARK: &str = "-- sk's dequeue function (migration 27)";

/// Puts sk's dequeue function back if the one of its name is another's: the seed's own
/// `CREATE OR REPLACE FUNCTION sk_try_dequeue_task` succeeds over an sk database, and then
/// every call failed ("Number of returned columns (28) does not match expected column
/// count (8)": its `RETURNING *` answers sk's wider row), while a second migrate said the
/// schema was up to date. Whether it restored the function.
async fn restore_dequeue(tx: &mut PgConnection, schema: &Schema) -> Result<bool> {
    let function = schema.table("try_dequeue_task");
    let body: Option<String> = sqlx::query_scalar(
        "SELECT prosrc FROM pg_proc
         WHERE oid = to_regprocedure($1 || '(character varying[], uuid[], timestamp with time zone)')",
    )
    .bind(&function)
    .fetch_optional(kept(&mut *tx))
    .await?;
    if body
        .as_deref()
        .is_some_and(|body| body.contains(DEQUEUE_MARK))
    {
        return Ok(false);
    }
    let sql = DEQUEUE
        .replace("__SCHEMA__", schema.schema_name())
        .replace("__PREFIX__", schema.prefix());
    (&mut *tx).execute(sql.as_str()).await?;
    tracing::warn!(
        "sk: the function {function} was not sk's (the seed's own text, which returns sk's whole queue row where it declares the seed's eight columns, fails at every call); sk's is back in its place, and answers the seed's consumers as the seed says"
    );
    Ok(true)
}

/// The first row of `schema`'s queue that migration 11's check would refuse, named with
/// its id, column and value (`None`: every row passes).
pub(super) async fn infinite_time(
    tx: &mut PgConnection,
    schema: &Schema,
) -> Result<Option<String>> {
    let table = schema.table("tasks_queue_t");
    let found: Option<(Uuid, String)> = sqlx::query_as(&format!(
        "SELECT task_id, CASE
             WHEN NOT isfinite(task_posted_at_ts) THEN 'task_posted_at_ts = ' || task_posted_at_ts
             WHEN NOT isfinite(task_locked_until_ts) THEN 'task_locked_until_ts = ' || task_locked_until_ts
             ELSE 'task_claimed_at_ts = ' || task_claimed_at_ts END
         FROM {table}
         WHERE NOT (isfinite(task_posted_at_ts) AND isfinite(task_locked_until_ts)
                    AND coalesce(isfinite(task_claimed_at_ts), true))
         LIMIT 1"
    ))
    .fetch_optional(kept(&mut *tx))
    .await?;
    Ok(found.map(|(id, value)| {
        format!(
            "the row of job {id} in {table} has {value}, which sk cannot read; correct or delete it, then migrate again"
        )
    }))
}

/// Applies the migrations up to `target` (tests use it to build an older schema).
pub(crate) async fn migrate_to(pool: &PgPool, schema: &Schema, target: i32) -> Result<()> {
    let mut tx = pool.begin().await?;
    // `CREATE ... IF NOT EXISTS` on an existing schema sends notices, which sqlx logs at
    // INFO on every worker start; they say nothing a user needs.
    sqlx::query("SET LOCAL client_min_messages = warning")
        .execute(kept(&mut tx))
        .await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(format!("sk-migrate:{}", schema.table("")))
        .execute(kept(&mut tx))
        .await?;
    let versions = schema.table("schema_migrations_t");
    let bootstrap = format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {versions} (
             version integer NOT NULL PRIMARY KEY,
             description text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
        s = schema.schema_name()
    );
    // A plain string runs through the simple protocol, which allows several statements.
    (&mut *tx).execute(bootstrap.as_str()).await?;
    let current: Option<i32> = sqlx::query_scalar(&format!("SELECT max(version) FROM {versions}"))
        .fetch_one(kept(&mut tx))
        .await?;
    let current = current.unwrap_or(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > known {
        return Err(Error::SchemaTooNew {
            found: current,
            known,
        });
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current && m.0 <= target)
    {
        if *version == 11 {
            if let Some(reason) = infinite_time(&mut tx, schema).await? {
                return Err(Error::MigrationRefused {
                    version: *version,
                    reason,
                });
            }
        }
        let sql = sql
            .replace("__SCHEMA__", schema.schema_name())
            .replace("__PREFIX__", schema.prefix());
        (&mut *tx)
            .execute(sql.as_str())
            .await
            .map_err(|source| Error::Migration {
                version: *version,
                source,
            })?;
        sqlx::query(&format!(
            "INSERT INTO {versions} (version, description) VALUES ($1, $2)"
        ))
        .bind(version)
        .bind(description)
        .execute(kept(&mut tx))
        .await?;
        tracing::info!(version, description, "sk: applied migration");
    }
    if target >= 27 {
        restore_dequeue(&mut tx, schema).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Keys the metrics and stats tables per process (seed 001) or per name (seed 000), in
/// one transaction.
pub(super) async fn set_seed_keys(pool: &PgPool, schema: &Schema, keys: SeedKeys) -> Result<()> {
    let sql = match keys {
        SeedKeys::PerProcess => include_str!("../../../migrations/postgres/seed_001_keys.sql"),
        SeedKeys::OnePerName => include_str!("../../../migrations/postgres/seed_000_keys.sql"),
    };
    let sql = sql
        .replace("__SCHEMA__", schema.schema_name())
        .replace("__PREFIX__", schema.prefix());
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL client_min_messages = warning")
        .execute(kept(&mut tx))
        .await?;
    (&mut *tx).execute(sql.as_str()).await?;
    tx.commit().await?;
    Ok(())
}
