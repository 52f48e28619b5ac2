//! How PostgreSQL writes the statements written once (`store::queries`).

use sqlx::Postgres;

use crate::store::dialect::{dialect_io, Dialect};
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

    dialect_io!(Postgres, |t| t);
}
