//! What the long-running example programs share.

/// Resident memory of this process in kB, from /proc (Linux).
pub(crate) fn rss_kb() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A pool on `DATABASE_URL` (default: the local PostgreSQL) and `schema` made afresh: dropped
/// with everything in it, then migrated.
pub(crate) async fn fresh_schema(
    schema: &str,
    max_connections: u32,
) -> Result<(sqlx::PgPool, sk_runtime::Schema), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .connect(&url)
        .await?;
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&pool)
        .await?;
    let schema = sk_runtime::Schema::new(schema, "sk_")?;
    sk_runtime::migrate(&pool, &schema).await?;
    Ok((pool, schema))
}
