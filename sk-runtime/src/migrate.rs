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
