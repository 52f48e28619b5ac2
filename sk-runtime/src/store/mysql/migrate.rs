//! The migrations, applied in order under a named lock.

use super::*;

/// Versioned migrations, applied in order; `__PREFIX__` is substituted.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "initial schema",
        include_str!("../../../migrations/mysql/0001_init.sql"),
    ),
    (
        2,
        "job control",
        include_str!("../../../migrations/mysql/0002_control.sql"),
    ),
    (
        3,
        "a concurrency limit per queue across workers",
        include_str!("../../../migrations/mysql/0003_global_limits.sql"),
    ),
    (
        4,
        "workflows: jobs that wait on other jobs",
        include_str!("../../../migrations/mysql/0004_workflows.sql"),
    ),
    (
        5,
        "a single enqueue in one statement",
        include_str!("../../../migrations/mysql/0005_enqueue_trigger.sql"),
    ),
    (
        6,
        "the queue table refuses a posting time sk could not read",
        include_str!("../../../migrations/mysql/0006_readable_queue_rows.sql"),
    ),
    (
        7,
        "less written per enqueued job: no enqueue trigger, no queue correlation index",
        include_str!("../../../migrations/mysql/0007_leaner_enqueue.sql"),
    ),
    (
        8,
        "three queue indexes: unique keys and leases in tables of their own",
        include_str!("../../../migrations/mysql/0008_three_queue_indexes.sql"),
    ),
    (
        9,
        "seed 002's retry group, external id and sub-state as columns",
        include_str!("../../../migrations/mysql/0009_seed_002_lookups.sql"),
    ),
    (
        10,
        "seed 002's version and updated_at",
        include_str!("../../../migrations/mysql/0010_version_and_updated_at.sql"),
    ),
    (
        11,
        "rate limits shared by every worker",
        include_str!("../../../migrations/mysql/0011_rate_limits.sql"),
    ),
    (
        12,
        "running jobs limited per tenant",
        include_str!("../../../migrations/mysql/0012_tenant_limits.sql"),
    ),
    (
        13,
        "rate limits per tenant",
        include_str!("../../../migrations/mysql/0013_tenant_rates.sql"),
    ),
    (
        14,
        "each running job's tenant counted apart",
        include_str!("../../../migrations/mysql/0014_running_tenants.sql"),
    ),
    (
        15,
        "fair claims stored per queue",
        include_str!("../../../migrations/mysql/0015_fair_queues.sql"),
    ),
    (
        16,
        "batches of jobs with callbacks",
        include_str!("../../../migrations/mysql/0016_batches.sql"),
    ),
    (
        17,
        "the audit trail, and the queues workers know",
        include_str!("../../../migrations/mysql/0017_audit.sql"),
    ),
    (
        18,
        "workflows on record",
        include_str!("../../../migrations/mysql/0018_workflows.sql"),
    ),
    (
        19,
        "the task types the workers run, with their schemas",
        include_str!("../../../migrations/mysql/0019_task_types.sql"),
    ),
];

pub(crate) async fn migrate_to(pool: &MySqlPool, schema: &Schema, target: i32) -> Result<()> {
    check_length(schema)?;
    let mut conn = pool.acquire().await?;
    let lock = format!("sk-migrate:{}", schema.flat_prefix());
    let locked: Option<i32> = sqlx::query_scalar("SELECT GET_LOCK(?, 60)")
        .bind(&lock)
        .fetch_one(&mut *conn)
        .await?;
    if locked != Some(1) {
        return Err(Error::invalid(
            "migration",
            "another process held the migration lock for 60 s",
        ));
    }
    let applied = apply(&mut conn, schema, target).await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await;
    applied?;
    released?;
    Ok(())
}

pub(super) async fn apply(conn: &mut MySqlConnection, schema: &Schema, target: i32) -> Result<()> {
    let versions = schema.flat_table("schema_migrations_t");
    (&mut *conn)
        .execute(
            format!(
                "CREATE TABLE IF NOT EXISTS {versions} (
                     version INT NOT NULL PRIMARY KEY,
                     description VARCHAR(255) NOT NULL,
                     applied_at DATETIME(6) NOT NULL
                 ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
            )
            .as_str(),
        )
        .await?;
    let current: Option<i32> = sqlx::query_scalar(&format!("SELECT max(version) FROM {versions}"))
        .fetch_one(&mut *conn)
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
        let sql = sql.replace("__PREFIX__", &schema.flat_prefix());
        (&mut *conn)
            .execute(sql.as_str())
            .await
            .map_err(|source| Error::Migration {
                version: *version,
                source,
            })?;
        sqlx::query(&format!(
            "INSERT INTO {versions} (version, description, applied_at) VALUES (?, ?, ?)"
        ))
        .bind(version)
        .bind(description)
        .bind(dt(Utc::now()))
        .execute(&mut *conn)
        .await?;
        tracing::info!(version, description, "sk: applied migration (MySQL)");
    }
    Ok(())
}
