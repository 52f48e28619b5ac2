//! Migrations: bring a database's schema to this build's version, and list them.

use crate::error::Result;
use crate::store::Schema;

/// Applies sk's migrations (what a worker does at start unless `auto_migrate(false)`).
///
/// # Errors
/// The database fails, or holds a schema newer than this build knows.
pub async fn migrate(pool: impl Into<crate::Pool>, schema: &Schema) -> Result<()> {
    pool.into().migrate(schema).await
}

/// One migration of this build ([`migrations`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Migration {
    /// Its version, from 1.
    pub version: i32,
    /// What it does.
    pub description: &'static str,
    /// When it was applied to this schema; `None` while it is pending.
    pub applied_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// This build's migrations and which of them the database has (`sk migrate --status`).
/// A database without sk's tables has them all pending.
///
/// # Errors
/// The database fails.
pub async fn migrations(pool: impl Into<crate::Pool>, schema: &Schema) -> Result<Vec<Migration>> {
    Ok(pool
        .into()
        .migrations(schema)
        .await?
        .into_iter()
        .map(|(version, description, applied_at)| Migration {
            version,
            description,
            applied_at,
        })
        .collect())
}

/// How the metrics and execution-stats tables are keyed, for code written against one of
/// the two Stakhanovise pages (PostgreSQL only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum SeedKeys {
    /// Seed 001's keys, the default: one row per metric (or payload type) and owner
    /// process. Each worker writes its own rows, so workers never wait on each other.
    PerProcess,
    /// Seed 000's keys: one row per metric id and per payload type, unique on that column
    /// alone, so seed 000's `ON CONFLICT (metric_id)` and `ON CONFLICT (et_payload_type)`
    /// work. Every writer's rows are folded into that one row (its owner column `''`): a
    /// seed-001 writer and sk's workers go on working, the stats adding up across them,
    /// and completions of one task type on several workers update one shared row.
    OnePerName,
}

/// Keys the metrics and execution-stats tables as `keys` says ([`SeedKeys`]); switching
/// to [`SeedKeys::OnePerName`] folds the rows already there into one per name (the
/// stats added up, the newest value of each metric kept).
///
/// # Errors
/// The database fails; SQLite and MySQL, whose seeds name no such keys, take only
/// [`SeedKeys::PerProcess`].
pub async fn set_seed_keys(
    pool: impl Into<crate::Pool>,
    schema: &Schema,
    keys: SeedKeys,
) -> Result<()> {
    pool.into().set_seed_keys(schema, keys).await
}

/// What SQLite and MySQL answer to [`set_seed_keys`]: their tables are keyed per process.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn per_process_only(keys: SeedKeys) -> Result<()> {
    match keys {
        SeedKeys::PerProcess => Ok(()),
        SeedKeys::OnePerName => Err(crate::Error::Invalid {
            what: "seed keys",
            reason: "seed 000's one row per metric id is a PostgreSQL contract; SQLite and MySQL keep seed 001's row per process".into(),
        }),
    }
}
