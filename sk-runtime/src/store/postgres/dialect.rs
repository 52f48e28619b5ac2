//! How PostgreSQL writes the statements written once (`store::queries`), and runs them:
//! on a pool, each in a connection of its own (a transaction behind a transaction
//! pooler); on a connection, as its statements are prepared (`pooler::on`).

use sqlx::{PgConnection, PgPool, Postgres};

use super::pooler::{conn_keeps, on, Held};
use crate::error::Result;
use crate::store::dialect::{dialect_arguments, Arg, Dialect};
use crate::store::Schema;

impl Dialect for Postgres {
    fn hour_text(column: &str) -> String {
        format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24')")
    }

    fn table(schema: &Schema, name: &str) -> String {
        schema.table(name)
    }

    fn text(column: &str) -> String {
        format!("{column}::text")
    }

    fn bigint(column: &str) -> String {
        format!("{column}::bigint")
    }

    fn bytewise(column: &str) -> String {
        format!("{column} COLLATE \"C\"")
    }

    fn json(p: &str) -> String {
        format!("{p}::jsonb")
    }

    fn newest_id(column: &str) -> String {
        format!("(array_agg({column} ORDER BY {column} DESC))[1]")
    }

    dialect_arguments!(Postgres, |t| t);

    async fn fetch_all<'a, T>(pool: &'a PgPool, sql: &'a str, args: &'a [Arg<'a>]) -> Result<Vec<T>>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin + 'a,
    {
        let (text, arguments) = Self::arguments(sql, args)?;
        let mut held = Held::of(pool).await?;
        let rows = sqlx::query_as_with::<Postgres, T, _>(&text, arguments)
            .fetch_all(held.on())
            .await?;
        held.done().await?;
        Ok(rows)
    }

    async fn fetch_all_on<'a, T>(
        conn: &'a mut PgConnection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> Result<Vec<T>>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin + 'a,
    {
        let (text, arguments) = Self::arguments(sql, args)?;
        let keep = conn_keeps(conn);
        Ok(sqlx::query_as_with::<Postgres, T, _>(&text, arguments)
            .fetch_all(on(conn, keep))
            .await?)
    }

    async fn execute<'a>(pool: &'a PgPool, sql: &'a str, args: &'a [Arg<'a>]) -> Result<u64> {
        let (text, arguments) = Self::arguments(sql, args)?;
        let mut held = Held::of(pool).await?;
        let done = sqlx::query_with::<Postgres, _>(&text, arguments)
            .execute(held.on())
            .await?;
        held.done().await?;
        Ok(done.rows_affected())
    }

    async fn execute_on<'a>(
        conn: &'a mut PgConnection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> Result<u64> {
        let (text, arguments) = Self::arguments(sql, args)?;
        let keep = conn_keeps(conn);
        Ok(sqlx::query_with::<Postgres, _>(&text, arguments)
            .execute(on(conn, keep))
            .await?
            .rows_affected())
    }
}
