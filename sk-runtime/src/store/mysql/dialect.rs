//! How MySQL and MariaDB write the statements written once (`store::queries`): `?`
//! placeholders, `count(CASE …)`, `ON DUPLICATE KEY UPDATE`, tables without a schema,
//! text read through `CAST(… AS CHAR)` (binary collations read as bytes), and times as
//! naive UTC `DATETIME(6)` values (`dt`).

use sqlx::MySql;

use super::dt;
use crate::store::dialect::{dialect_io, question_marks, Dialect};
use crate::store::Schema;

impl Dialect for MySql {
    fn hour_text(column: &str) -> String {
        format!("CAST(DATE_FORMAT({column}, '%Y-%m-%d %H') AS CHAR)")
    }

    /// (A step's `task_tenant > k.tenant` read 200,000 index entries of the tenant
    /// before it: 103 ms, against 0.2 ms a step as a statement of its own.)
    const SKIP_SCAN_IN_ONE: bool = false;

    fn table(schema: &Schema, name: &str) -> String {
        schema.flat_table(name)
    }

    fn count_if(condition: &str) -> String {
        format!("count(CASE WHEN {condition} THEN 1 END)")
    }

    fn text(column: &str) -> String {
        format!("CAST({column} AS CHAR)")
    }

    fn bigint(column: &str) -> String {
        format!("CAST({column} AS SIGNED)")
    }

    /// From `running_t`, which holds only the leased jobs (migration 14): InnoDB has no
    /// partial index, and the queue table's would read every row of the queue.
    fn running_by_tenant(schema: &Schema) -> String {
        format!(
            "SELECT CAST(task_tenant AS CHAR), count(*) FROM {}
             WHERE task_queue = $1 AND task_locked_until_ts > $2 AND task_tenant IS NOT NULL
             GROUP BY task_tenant",
            schema.flat_table("running_t")
        )
    }

    /// The virtual column over that key, which its index is on (MariaDB uses an index on
    /// an expression only through such a column).
    fn metadata_key(alias: &str, key: &str) -> String {
        format!("{alias}task_{key}")
    }

    fn metadata_with(key: &str) -> String {
        format!("JSON_SET(coalesce(task_metadata, '{{}}'), '$.{key}', $1)")
    }

    fn metadata_json_with(key: &str) -> String {
        format!("JSON_SET(coalesce(task_metadata, '{{}}'), '$.{key}', JSON_EXTRACT($1, '$'))")
    }

    fn id_rows(p: &str) -> String {
        format!(
            "SELECT UNHEX(i) AS id FROM JSON_TABLE({p}, '$[*]' COLUMNS (i CHAR(32) PATH '$')) AS j"
        )
    }

    /// A join: MariaDB runs an `UPDATE … WHERE key IN (SELECT … JSON_TABLE …)` as a
    /// dependent subquery per row of the table (minutes for 10,000 ids in a table of
    /// 100,000 rows), where a join probes the key once per id.
    fn update_listed(table: &str, set: &str, key: &str, p: &str, filter: &str) -> String {
        format!(
            "UPDATE {table} JOIN ({}) AS listed ON {table}.{key} = listed.id SET {set} WHERE {filter}",
            Self::id_rows(p)
        )
    }

    fn delete_listed(table: &str, key: &str, p: &str, filter: &str) -> String {
        format!(
            "DELETE {table} FROM {table} JOIN ({}) AS listed ON {table}.{key} = listed.id WHERE {filter}",
            Self::id_rows(p)
        )
    }

    fn upsert(_key: &str, columns: &[&str]) -> String {
        let set: Vec<String> = columns
            .iter()
            .map(|c| format!("{c} = VALUES({c})"))
            .collect();
        format!("ON DUPLICATE KEY UPDATE {}", set.join(", "))
    }

    fn insert_or_ignore(table: &str, columns: &str, values: &str) -> String {
        format!("INSERT IGNORE INTO {table} ({columns}) VALUES ({values})")
    }

    fn placeholders(sql: &str) -> (String, Vec<usize>) {
        question_marks(sql)
    }

    dialect_io!(MySql, dt);
}
