//! How SQLite writes the statements written once (`store::queries`): PostgreSQL's
//! placeholders, conditional counts and upserts, tables without a schema, and times as
//! fixed-width text (`ts`).

use sqlx::Sqlite;

use super::ts;
use crate::store::dialect::{dialect_io, Dialect};
use crate::store::Schema;

impl Dialect for Sqlite {
    fn hour_text(column: &str) -> String {
        format!("substr({column}, 1, 13)")
    }

    fn table(schema: &Schema, name: &str) -> String {
        schema.flat_table(name)
    }

    fn text(column: &str) -> String {
        column.to_owned()
    }

    fn bigint(column: &str) -> String {
        column.to_owned()
    }

    fn metadata_with(key: &str) -> String {
        format!("json_set(coalesce(task_metadata, '{{}}'), '$.{key}', $1)")
    }

    fn metadata_json_with(key: &str) -> String {
        format!("json_set(coalesce(task_metadata, '{{}}'), '$.{key}', json($1))")
    }

    fn metadata_key(alias: &str, key: &str) -> String {
        format!("json_extract({alias}task_metadata, '$.{key}')")
    }

    fn id_rows(p: &str) -> String {
        format!("SELECT unhex(value) AS id FROM json_each({p})")
    }

    fn for_update() -> &'static str {
        ""
    }

    dialect_io!(Sqlite, ts);
}
