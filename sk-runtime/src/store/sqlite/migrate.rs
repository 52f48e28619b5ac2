//! The migrations, applied in order under the write lock, and the range checks that refuse a table whose rows would not fit.

use super::*;

/// Versioned migrations, applied in order; `__PREFIX__` is substituted.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "initial schema",
        include_str!("../../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "job control",
        include_str!("../../../migrations/sqlite/0002_control.sql"),
    ),
    (
        3,
        "a concurrency limit per queue across workers",
        include_str!("../../../migrations/sqlite/0003_global_limits.sql"),
    ),
    (
        4,
        "workflows: jobs that wait on other jobs",
        include_str!("../../../migrations/sqlite/0004_workflows.sql"),
    ),
    (
        5,
        "the queue table refuses a row sk could not read",
        include_str!("../../../migrations/sqlite/0005_strict_queue.sql"),
    ),
    (
        6,
        "integer columns hold only what sk reads from them",
        include_str!("../../../migrations/sqlite/0006_integer_ranges.sql"),
    ),
    (
        7,
        "seed 002's retry group and external id, by index",
        include_str!("../../../migrations/sqlite/0007_seed_002_lookups.sql"),
    ),
    (
        8,
        "seed 002's version",
        include_str!("../../../migrations/sqlite/0008_version.sql"),
    ),
    (
        9,
        "rate limits shared by every worker",
        include_str!("../../../migrations/sqlite/0009_rate_limits.sql"),
    ),
    (
        10,
        "fair claims across tenants",
        include_str!("../../../migrations/sqlite/0010_fair_claims.sql"),
    ),
    (
        11,
        "running jobs limited per tenant",
        include_str!("../../../migrations/sqlite/0011_tenant_limits.sql"),
    ),
    (
        12,
        "rate limits per tenant",
        include_str!("../../../migrations/sqlite/0012_tenant_rates.sql"),
    ),
    (
        13,
        "fair claims stored per queue",
        include_str!("../../../migrations/sqlite/0013_fair_queues.sql"),
    ),
    (
        14,
        "batches of jobs with callbacks",
        include_str!("../../../migrations/sqlite/0014_batches.sql"),
    ),
    (
        15,
        "the audit trail, and the queues workers know",
        include_str!("../../../migrations/sqlite/0015_audit.sql"),
    ),
    (
        16,
        "workflows on record",
        include_str!("../../../migrations/sqlite/0016_workflows.sql"),
    ),
    (
        17,
        "the task types the workers run, with their schemas",
        include_str!("../../../migrations/sqlite/0017_task_types.sql"),
    ),
];

/// Migration 6's checks, as (table, the value a row's column must meet, per column):
/// [`out_of_range`] names a row that breaks one before the migration runs.
pub(super) const RANGES: &[(&str, &[(&str, &str)])] = &[
    (
        "tasks_queue_t",
        &[
            ("task_priority", INT4),
            ("task_attempt", INT4),
            ("task_max_attempts", INT4),
            ("task_unique_mode", MODE),
            ("task_rerun", FLAG),
            ("task_has_result", FLAG),
            ("task_waiting_on", INT4),
            ("task_dependants", FLAG),
        ],
    ),
    (
        "task_results_t",
        &[
            ("task_status", INT4),
            ("task_priority", INT4),
            ("task_unique_mode", MODE),
            ("task_error_count", INT4),
            ("task_last_error_is_recoverable", FLAG),
            ("task_processing_time_milliseconds", INT8),
            ("task_max_attempts", INT4),
            ("task_timeout_ms", INT8),
        ],
    ),
];

pub(super) const INT4: &str = "BETWEEN -2147483648 AND 2147483647";

pub(super) const INT8: &str = "BETWEEN -9223372036854775808 AND 9223372036854775807";

pub(super) const FLAG: &str = "IN (0, 1)";

pub(super) const MODE: &str = "IN (1, 2, 3)";

/// The first row of `schema`'s queue or results table that migration 6's checks would
/// refuse, named with its id, column and value (`None`: every row passes).
pub(super) async fn out_of_range(
    tx: &mut SqliteConnection,
    schema: &Schema,
) -> Result<Option<String>> {
    for (table, columns) in RANGES {
        let breaks = |(column, check): &(&str, &str)| format!("NOT ({column} {check})");
        let which: Vec<String> = columns
            .iter()
            .map(|c| format!("WHEN {} THEN '{} = ' || quote({})", breaks(c), c.0, c.0))
            .collect();
        let any: Vec<String> = columns.iter().map(breaks).collect();
        let table = schema.flat_table(table);
        let found: Option<(String, String)> = sqlx::query_as(&format!(
            "SELECT hex(task_id), CASE {} END FROM {table} WHERE {} LIMIT 1",
            which.join(" "),
            any.join(" OR ")
        ))
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((id, value)) = found {
            return Ok(Some(format!(
                "the row of job {} in {table} has {value}, which sk cannot read; correct or delete it, then migrate again",
                id.to_lowercase()
            )));
        }
    }
    Ok(None)
}

pub(crate) async fn migrate_to(pool: &SqlitePool, schema: &Schema, target: i32) -> Result<()> {
    let mut conn = pool.acquire().await?;
    // An in-memory database answers "memory", and keeps it.
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&mut *conn)
        .await?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let versions = schema.flat_table("schema_migrations_t");
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {versions} (
             version INTEGER NOT NULL PRIMARY KEY,
             description TEXT NOT NULL,
             applied_at TEXT NOT NULL
         )"
    ))
    .execute(&mut *tx)
    .await?;
    let current: Option<i32> = sqlx::query_scalar(&format!("SELECT max(version) FROM {versions}"))
        .fetch_one(&mut *tx)
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
        if *version == 6 {
            if let Some(reason) = out_of_range(&mut tx, schema).await? {
                return Err(Error::MigrationRefused {
                    version: *version,
                    reason,
                });
            }
        }
        let sql = sql.replace("__PREFIX__", &schema.flat_prefix());
        (&mut *tx)
            .execute(sql.as_str())
            .await
            .map_err(|source| Error::Migration {
                version: *version,
                source,
            })?;
        sqlx::query(&format!(
            "INSERT INTO {versions} (version, description, applied_at) VALUES ($1, $2, $3)"
        ))
        .bind(version)
        .bind(description)
        .bind(ts(Utc::now()))
        .execute(&mut *tx)
        .await?;
        tracing::info!(version, description, "sk: applied migration (SQLite)");
    }
    tx.commit().await?;
    Ok(())
}
