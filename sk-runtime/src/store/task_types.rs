//! The task types the workers run, each with its schema document (`task_types_t`,
//! `sk_runtime::schema`), written once over the [`Dialect`]: a worker publishes its own at
//! start, a client reads them all.

use chrono::{DateTime, Utc};

use super::dialect::{Arg, Dialect};
use super::Schema;
use crate::error::Result;
use crate::store::queries::Boxed;

/// Writes each (task type, schema document) of worker `id`, over an older row of the type.
pub(crate) async fn publish<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    id: &str,
    types: &[(String, String)],
    now: DateTime<Utc>,
) -> Result<()> {
    let sql = format!(
        "INSERT INTO {} (type_name, type_schema, type_published_by, type_published_at_ts)
         VALUES ($1, $2, $3, $4) {}",
        D::table(schema, "task_types_t"),
        D::upsert(
            "type_name",
            &["type_schema", "type_published_by", "type_published_at_ts"]
        )
    );
    for (name, document) in types {
        let args = [
            Arg::Text(Some(name)),
            Arg::Text(Some(document)),
            Arg::Text(Some(id)),
            Arg::Time(now),
        ];
        D::execute(pool, &sql, &args).await?;
    }
    Ok(())
}

/// Every published (task type, schema document), by name.
pub(crate) fn list<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
) -> Boxed<'a, Vec<(String, String)>>
where
    (String, String): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT {}, {} FROM {} ORDER BY type_name",
            D::text("type_name"),
            D::text("type_schema"),
            D::table(schema, "task_types_t")
        );
        D::fetch_all(pool, &sql, &[]).await
    })
}
