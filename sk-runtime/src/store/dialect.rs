//! SQL written once for every backend: what a backend writes its own way in a statement
//! that is otherwise the same (a table's name, a conditional count, a cast, the newest id
//! of a group, placeholders) and how it binds a value (a time is a `timestamptz` on
//! PostgreSQL, fixed-width text on SQLite, a naive `DATETIME(6)` on MySQL).
//!
//! A statement is written with PostgreSQL's `$n` placeholders and the dialect's pieces;
//! its arguments are [`Arg`]s. On MySQL each `$n` becomes a `?` and its argument is
//! bound again at each place it is used. The statements written once live in `queries`
//! (the admin side) and `worker_rows` (a worker's own rows); each backend implements
//! [`Dialect`] in its own room with [`dialect_io!`].

use super::Schema;
use crate::error::Result;
use chrono::{DateTime, Utc};

/// A query's future, boxed: the queries that decode rows are generic over the row types
/// their backend decodes (`for<'r> FromRow<'r, _>`), which an `async fn` of a driver
/// trait cannot yet prove `Send` through (rust-lang/rust#100013).
pub(crate) type Boxed<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'a>>;

/// A value bound to a statement written once.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// A point in time, as the backend stores times.
    Time(DateTime<Utc>),
    Text(Option<&'a str>),
    Int(Option<i64>),
    Int4(Option<i32>),
    Bool(Option<bool>),
    Id(Option<uuid::Uuid>),
}

/// What a backend writes its own way. Implemented for `sqlx::Postgres`, `sqlx::Sqlite` and
/// `sqlx::MySql`.
pub(crate) trait Dialect: sqlx::Database {
    /// The table `name` (`tasks_queue_t`) of `schema`.
    fn table(schema: &Schema, name: &str) -> String;

    /// The number of a group's rows for which `condition` holds.
    fn count_if(condition: &str) -> String {
        format!("count(*) FILTER (WHERE {condition})")
    }

    /// `column` as text (MySQL reads binary collations as bytes; PostgreSQL's `citext`).
    fn text(column: &str) -> String;

    /// `column` as a 64-bit integer.
    fn bigint(column: &str) -> String;

    /// Whether a recursive query's step reads an index from its row's value (a skip
    /// scan in one statement). MariaDB reads a correlated subquery's range from the
    /// start of its constant prefix instead, so it takes one statement a step.
    const SKIP_SCAN_IN_ONE: bool = true;

    /// `column` compared and ordered byte by byte, as Rust orders strings (MySQL's
    /// `utf8mb4_bin` columns and SQLite's `BINARY` already are).
    fn bytewise(column: &str) -> String {
        column.to_owned()
    }

    /// Placeholder `p` where a JSON column takes it (PostgreSQL's `jsonb` takes no text).
    fn json(p: &str) -> String {
        p.to_owned()
    }

    /// The metadata of a row with `key` (a fixed name) set to the text `$1`: an object
    /// made if there was none.
    fn metadata_with(key: &str) -> String {
        format!("jsonb_set(coalesce(task_metadata, '{{}}'), '{{{key}}}', to_jsonb($1::text))")
    }

    /// The metadata of a row with `key` (a fixed name) set to the JSON text `$1`, as JSON.
    fn metadata_json_with(key: &str) -> String {
        format!("jsonb_set(coalesce(task_metadata, '{{}}'), '{{{key}}}', $1::jsonb)")
    }

    /// The text under `key` (a key of seed 002's fields, `JobFilter::seed_002`,
    /// never input) of the metadata of the row `alias` names in a table of sk's (`q`, `r`, or
    /// `""` for the table itself), written as its index on that key takes it.
    fn metadata_key(alias: &str, key: &str) -> String {
        format!("({alias}task_metadata ->> '{key}')")
    }

    /// A `SELECT` of one column `id`: the ids of the JSON array of simple hex ids bound at
    /// placeholder `p` (`store::batch::id_list`), for `IN (…)` and `INSERT … SELECT`.
    fn id_rows(p: &str) -> String {
        format!("SELECT value::uuid AS id FROM jsonb_array_elements_text({p}::jsonb)")
    }

    /// An `UPDATE` of `table` setting `set` in the rows whose `key` is among the ids at
    /// placeholder `p` ([`id_rows`](Self::id_rows)) and for which `filter` holds.
    fn update_listed(table: &str, set: &str, key: &str, p: &str, filter: &str) -> String {
        format!(
            "UPDATE {table} SET {set} WHERE {key} IN ({}) AND {filter}",
            Self::id_rows(p)
        )
    }

    /// The UTC hour of the time `column` as text, `YYYY-MM-DD HH` (SQLite's text times
    /// may have a `T` for the space).
    fn hour_text(column: &str) -> String;

    /// A `DELETE` from `table` of the rows whose `key` is among the ids at placeholder `p`
    /// ([`id_rows`](Self::id_rows)) and for which `filter` holds.
    fn delete_listed(table: &str, key: &str, p: &str, filter: &str) -> String {
        format!(
            "DELETE FROM {table} WHERE {key} IN ({}) AND {filter}",
            Self::id_rows(p)
        )
    }

    /// The greatest of a group's ids (PostgreSQL has no `max(uuid)`).
    fn newest_id(column: &str) -> String {
        format!("max({column})")
    }

    /// What follows an `INSERT` whose row replaces the row of the same `key`: `columns`
    /// set from the new row.
    fn upsert(key: &str, columns: &[&str]) -> String {
        let set: Vec<String> = columns
            .iter()
            .map(|c| format!("{c} = excluded.{c}"))
            .collect();
        format!("ON CONFLICT ({key}) DO UPDATE SET {}", set.join(", "))
    }

    /// An `INSERT` of `values` into `columns` of `table` that does nothing where the row's
    /// key is taken.
    fn insert_or_ignore(table: &str, columns: &str, values: &str) -> String {
        format!("INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT DO NOTHING")
    }

    /// `sql` with its `$n` placeholders as this backend writes them, and the index of the
    /// argument each placeholder takes, in order: here `$n` as it is, taking the `n`th
    /// argument wherever it appears, so arguments `1..=n` are bound once each.
    fn placeholders(sql: &str) -> (String, Vec<usize>) {
        let highest = numbered(sql).map(|(_, _, n)| n + 1).max().unwrap_or(0);
        (sql.to_owned(), (0..highest).collect())
    }

    /// `sql` in this backend's form and `args` bound in the order its placeholders take
    /// them.
    fn arguments<'q>(
        sql: &str,
        args: &[Arg<'q>],
    ) -> Result<(String, <Self as sqlx::Database>::Arguments<'q>)>;

    /// Every row `sql` returns with `args`, each as a `T`.
    fn fetch_all<'a, T>(
        pool: &'a sqlx::Pool<Self>,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl std::future::Future<Output = Result<Vec<T>>> + Send + 'a
    where
        T: for<'r> sqlx::FromRow<'r, Self::Row> + Send + Unpin + 'a;

    /// Runs `sql` with `args`; the rows it changed.
    fn execute<'a>(
        pool: &'a sqlx::Pool<Self>,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl std::future::Future<Output = Result<u64>> + Send + 'a;

    /// `fetch_all` on a connection (inside a transaction).
    fn fetch_all_on<'a, T>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl std::future::Future<Output = Result<Vec<T>>> + Send + 'a
    where
        T: for<'r> sqlx::FromRow<'r, Self::Row> + Send + Unpin + 'a;

    /// Each tenant's running jobs (leases that hold at `$2`) of queue `$1`: (tenant,
    /// count), through the running-jobs index (PostgreSQL migration 8, SQLite 3).
    fn running_by_tenant(schema: &Schema) -> String {
        format!(
            "SELECT {}, {} FROM {} WHERE task_queue = $1 AND task_locked_by IS NOT NULL
                AND task_locked_until_ts > $2 AND task_tenant IS NOT NULL
             GROUP BY task_tenant",
            Self::text("task_tenant"),
            Self::bigint("count(*)"),
            Self::table(schema, "tasks_queue_t")
        )
    }

    /// What follows a `SELECT` of rows the transaction then changes, to lock them until it
    /// ends (SQLite's write transaction locks the whole database: nothing).
    fn for_update() -> &'static str {
        " FOR UPDATE"
    }

    /// `execute` on a connection (inside a transaction).
    fn execute_on<'a>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl std::future::Future<Output = Result<u64>> + Send + 'a;
}

/// The `$n` placeholders of `sql` outside quotes: (start, end, n - 1).
fn numbered(sql: &str) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let bytes = sql.as_bytes();
    let mut quoted = false;
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            i += 1;
            if c == b'\'' {
                quoted = !quoted;
            } else if c == b'$' && !quoted {
                let start = i - 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                if let Ok(n) = sql[start + 1..i].parse::<usize>() {
                    if n > 0 {
                        return Some((start, i, n - 1));
                    }
                }
            }
        }
        None
    })
}

/// `sql` with each `$n` outside quotes as `?`, and the argument each takes (MySQL).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn question_marks(sql: &str) -> (String, Vec<usize>) {
    let mut text = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut from = 0;
    for (start, end, n) in numbered(sql) {
        text.push_str(&sql[from..start]);
        text.push('?');
        order.push(n);
        from = end;
    }
    text.push_str(&sql[from..]);
    (text, order)
}

/// The dialect's `arguments`, `fetch_all`, `execute` and `execute_on` for a backend
/// (`$db`), binding an [`Arg::Time`] as `$time` turns it.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
macro_rules! dialect_io {
    ($db:ty, $time:expr) => {
        $crate::store::dialect::dialect_arguments!($db, $time);

        fn fetch_all<'a, T>(
            pool: &'a sqlx::Pool<Self>,
            sql: &'a str,
            args: &'a [$crate::store::dialect::Arg<'a>],
        ) -> impl std::future::Future<Output = $crate::error::Result<Vec<T>>> + Send + 'a
        where
            T: for<'r> sqlx::FromRow<'r, <Self as sqlx::Database>::Row> + Send + Unpin + 'a,
        {
            async move {
                let (text, arguments) = Self::arguments(sql, args)?;
                Ok(sqlx::query_as_with::<$db, T, _>(&text, arguments)
                    .fetch_all(pool)
                    .await?)
            }
        }

        fn fetch_all_on<'a, T>(
            conn: &'a mut <Self as sqlx::Database>::Connection,
            sql: &'a str,
            args: &'a [$crate::store::dialect::Arg<'a>],
        ) -> impl std::future::Future<Output = $crate::error::Result<Vec<T>>> + Send + 'a
        where
            T: for<'r> sqlx::FromRow<'r, <Self as sqlx::Database>::Row> + Send + Unpin + 'a,
        {
            async move {
                let (text, arguments) = Self::arguments(sql, args)?;
                Ok(sqlx::query_as_with::<$db, T, _>(&text, arguments)
                    .fetch_all(&mut *conn)
                    .await?)
            }
        }

        fn execute<'a>(
            pool: &'a sqlx::Pool<Self>,
            sql: &'a str,
            args: &'a [$crate::store::dialect::Arg<'a>],
        ) -> impl std::future::Future<Output = $crate::error::Result<u64>> + Send + 'a {
            async move {
                let (text, arguments) = Self::arguments(sql, args)?;
                Ok(sqlx::query_with::<$db, _>(&text, arguments)
                    .execute(pool)
                    .await?
                    .rows_affected())
            }
        }

        fn execute_on<'a>(
            conn: &'a mut <Self as sqlx::Database>::Connection,
            sql: &'a str,
            args: &'a [$crate::store::dialect::Arg<'a>],
        ) -> impl std::future::Future<Output = $crate::error::Result<u64>> + Send + 'a {
            async move {
                let (text, arguments) = Self::arguments(sql, args)?;
                Ok(sqlx::query_with::<$db, _>(&text, arguments)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected())
            }
        }
    };
}
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) use dialect_io;

/// The dialect's `arguments` for a backend (`$db`), binding an [`Arg::Time`] as `$time`
/// turns it (PostgreSQL writes its own `fetch_all` and `execute`: `postgres::dialect`).
macro_rules! dialect_arguments {
    ($db:ty, $time:expr) => {
        fn arguments<'q>(
            sql: &str,
            args: &[$crate::store::dialect::Arg<'q>],
        ) -> $crate::error::Result<(String, <$db as sqlx::Database>::Arguments<'q>)> {
            use sqlx::Arguments as _;
            use $crate::store::dialect::Arg;
            let (text, order) = <Self as $crate::store::dialect::Dialect>::placeholders(sql);
            let mut arguments = <$db as sqlx::Database>::Arguments::<'q>::default();
            for i in order {
                match args[i] {
                    Arg::Time(t) => arguments.add(($time)(t)),
                    Arg::Text(v) => arguments.add(v),
                    Arg::Int(v) => arguments.add(v),
                    Arg::Int4(v) => arguments.add(v),
                    Arg::Bool(v) => arguments.add(v),
                    Arg::Id(v) => arguments.add(v),
                }
                .map_err(sqlx::Error::Encode)?;
            }
            Ok((text, arguments))
        }
    };
}
pub(crate) use dialect_arguments;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_outside_quotes_become_question_marks() {
        let (text, order) = question_marks(
            "SELECT '$1', a FROM t WHERE b > $2 AND c <= $2 AND json = '$.x' LIMIT $10",
        );
        assert_eq!(
            text,
            "SELECT '$1', a FROM t WHERE b > ? AND c <= ? AND json = '$.x' LIMIT ?"
        );
        assert_eq!(order, [1, 1, 9]);
    }
}
