//! The results table's time partitions on MySQL (seed 002): `RANGE COLUMNS (task_id)`
//! partitions of the UUIDv7 id, so each holds the jobs posted in its period. Maintenance
//! splits the open-ended `p_future` into the next periods ahead of time, and retires a
//! partition past the retention whole: exchanged with an empty table (the rows leave the
//! results table at once), dropped, checked again for a live job, and only then dropped
//! or moved to the archive database.

use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::{Executor as _, MySql};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::dt;

use crate::error::Result;
use crate::store::PartitionSpan;
use crate::store::{id_floor, millis_of, time_of, Retired, Schema};

/// Partitions exist this many periods past the current one.
const AHEAD: i64 = 2;
/// DDL waits at most this long (seconds) for the results table's metadata lock, then
/// gives up until the next maintenance pass, so statements queued behind it never wait
/// longer.
const LOCK_WAIT: i64 = 2;
/// Rows deleted per statement where a partition is pruned by rows.
const ROW_BATCH: i64 = 10_000;

/// One partition with an upper bound: ids below `to` (and at or above the previous
/// partition's bound).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    name: String,
    from: Uuid,
    to: Uuid,
}

/// The partitions of the results table, in order; the last is `p_future` (no bound).
async fn ranges(conn: &mut MySqlConnection, schema: &Schema) -> Result<(Vec<Range>, bool)> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT PARTITION_NAME, PARTITION_DESCRIPTION FROM information_schema.PARTITIONS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL
         ORDER BY PARTITION_ORDINAL_POSITION",
    )
    .bind(schema.flat_table("task_results_t"))
    .fetch_all(&mut *conn)
    .await?;
    let mut ranges = Vec::new();
    let mut from = Uuid::nil();
    let mut future = false;
    for (name, bound) in rows {
        match parse_bound(&bound) {
            Some(to) => {
                ranges.push(Range { name, from, to });
                from = to;
            }
            None => future = true,
        }
    }
    Ok((ranges, future))
}

/// An upper bound as the server shows it (`_binary 0x0194…` on MariaDB, `0x0194…` on
/// MySQL); `None` for `MAXVALUE`.
fn parse_bound(bound: &str) -> Option<Uuid> {
    let hex = bound.rsplit("0x").next()?.trim().trim_matches('\'');
    if hex.len() != 32 || bound == hex {
        return None;
    }
    Uuid::try_parse(hex).ok()
}

/// Takes the schema's partition lock (a named lock of this session), or says another
/// worker holds it.
async fn lock(conn: &mut MySqlConnection, schema: &Schema) -> Result<bool> {
    let got: Option<i32> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(lock_name(schema))
        .fetch_one(&mut *conn)
        .await?;
    Ok(got == Some(1))
}

fn lock_name(schema: &Schema) -> String {
    format!("sk-partitions:{}", schema.flat_prefix())
}

/// A connection holding the partition lock, with DDL's lock wait bounded; `None` if
/// another worker holds the lock.
async fn lock_on(pool: &MySqlPool, schema: &Schema) -> Result<Option<PoolConnection<MySql>>> {
    let mut conn = pool.acquire().await?;
    if !lock(&mut conn, schema).await? {
        return Ok(None);
    }
    (&mut *conn)
        .execute(format!("SET SESSION lock_wait_timeout = {LOCK_WAIT}").as_str())
        .await?;
    Ok(Some(conn))
}

/// Releases the partition lock; the connection goes back to the pool as it came, or is
/// closed.
async fn unlock(mut conn: PoolConnection<MySql>, schema: &Schema) {
    let reset = (&mut *conn)
        .execute("SET SESSION lock_wait_timeout = DEFAULT")
        .await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(lock_name(schema))
        .execute(&mut *conn)
        .await;
    if reset.is_err() || released.is_err() {
        conn.close_on_drop();
    }
}

/// Whether a DDL statement gave up waiting for the table's metadata lock (1205).
fn busy(error: &sqlx::Error) -> bool {
    matches!(
        error
            .as_database_error()
            .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
            .map(sqlx::mysql::MySqlDatabaseError::number),
        Some(1205)
    )
}

fn literal(id: Uuid) -> String {
    format!("X'{}'", id.simple())
}

/// Splits `p_future` into partitions for the periods from the current one to [`AHEAD`]
/// past it, aligned to whole periods since the span's origin (`PartitionSpan`); the first time, a
/// `p_before` below them takes everything older. Rows `p_future` holds for a new span move
/// into it. One worker at a time; the others return at once.
pub(super) async fn ensure(
    pool: &MySqlPool,
    schema: &Schema,
    now: DateTime<Utc>,
    span: PartitionSpan,
) -> Result<Vec<String>> {
    let period = span.period;
    let start = span.start_of(now.timestamp_millis());
    let horizon = start.saturating_add(period.saturating_mul(AHEAD + 1));
    let table = schema.flat_table("task_results_t");
    let Some(mut conn) = lock_on(pool, schema).await? else {
        return Ok(Vec::new());
    };
    let created: Result<Vec<String>> = async {
        let conn: &mut MySqlConnection = &mut conn;
        let (existing, future) = ranges(conn, schema).await?;
        if !future {
            return Ok(Vec::new());
        }
        // New spans start where the last bounded partition ends (or, the first time,
        // at the current period, with `p_before` below it).
        let mut parts = Vec::new();
        let first = match existing.last() {
            Some(last) => millis_of(last.to),
            None => {
                parts.push(format!(
                    "PARTITION p_before VALUES LESS THAN ({})",
                    literal(id_floor(time_of(start)))
                ));
                start
            }
        };
        let mut names = Vec::new();
        for (from, to) in spans(first, horizon, span) {
            let name = format!("p{}", time_of(from).format("%Y%m%d_%H%M"));
            parts.push(format!(
                "PARTITION {name} VALUES LESS THAN ({})",
                literal(id_floor(time_of(to)))
            ));
            names.push(name);
        }
        if names.is_empty() {
            return Ok(Vec::new());
        }
        parts.push("PARTITION p_future VALUES LESS THAN (MAXVALUE)".to_owned());
        let statement = format!(
            "ALTER TABLE {table} REORGANIZE PARTITION p_future INTO ({})",
            parts.join(", ")
        );
        match (&mut *conn).execute(statement.as_str()).await {
            Ok(_) => Ok(names),
            // Created on a later pass; meanwhile `p_future` takes the rows.
            Err(e) if busy(&e) => {
                tracing::debug!("sk: results table busy, partitions created on a later pass");
                Ok(Vec::new())
            }
            Err(e) => Err(e.into()),
        }
    }
    .await;
    unlock(conn, schema).await;
    created
}

/// The spans from `first` to `horizon`, each up to the next whole span since its origin
/// (the first may be shorter, if `first` is not aligned: a changed period or origin).
fn spans(first: i64, horizon: i64, span: PartitionSpan) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut cursor = first;
    while cursor < horizon {
        let end = span.end_of(cursor);
        out.push((cursor, end));
        cursor = end;
    }
    out
}

/// Retires the period partitions whose jobs were all posted and finished before `cutoff`:
/// dropped, or moved to database `archive` as a table of their own. A partition past the
/// cutoff that still holds a live job (in the queue table), or a job finished since,
/// stays, and only its rows finished before `cutoff` are deleted. `p_before` and
/// `p_future` are pruned by rows, by finalization time.
///
/// With `within` (a retention shorter than the partitions' span), the partition the
/// cutoff falls in is pruned by rows too: jobs posted and finished before the cutoff.
pub(crate) async fn retire(
    pool: &MySqlPool,
    schema: &Schema,
    cutoff: DateTime<Utc>,
    archive: Option<&str>,
    within: bool,
    stopping: &CancellationToken,
) -> Result<Retired> {
    let (all, _) = ranges(&mut *pool.acquire().await?, schema).await?;
    let bound = id_floor(cutoff);
    let mut retired = Retired::default();
    for range in &all {
        let period = range.name != "p_before";
        if !period {
            continue;
        }
        if within && range.from < bound && bound < range.to {
            retired.rows +=
                prune_rows(pool, schema, &range.name, cutoff, Some(bound), stopping).await?;
        }
        if range.to > bound {
            continue;
        }
        if !live(pool, schema, range, cutoff).await?
            && retire_one(pool, schema, range, archive).await?
        {
            if archive.is_some() {
                retired.archived.push(range.name.clone());
            } else {
                retired.dropped.push(range.name.clone());
            }
            continue;
        }
        retired.rows +=
            prune_rows(pool, schema, &range.name, cutoff, Some(bound), stopping).await?;
        retired.held.push(range.name.clone());
    }
    for name in ["p_before", "p_future"] {
        if name == "p_future" || all.iter().any(|r| r.name == name) {
            retired.rows += prune_rows(pool, schema, name, cutoff, None, stopping).await?;
        }
    }
    Ok(retired)
}

/// Whether a partition holds a job that is live (in the queue table, or taken by another
/// consumer and not finished) or finished at or after `cutoff`.
async fn live(
    pool: &MySqlPool,
    schema: &Schema,
    range: &Range,
    cutoff: DateTime<Utc>,
) -> Result<bool> {
    let live: i64 = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {q} WHERE task_id >= ? AND task_id < ?)
             OR EXISTS (SELECT 1 FROM {r} PARTITION ({p})
                        WHERE task_processing_finalized_at_ts IS NULL OR task_processing_finalized_at_ts >= ?)",
        q = schema.flat_table("tasks_queue_t"),
        r = schema.flat_table("task_results_t"),
        p = range.name,
    ))
    .bind(range.from)
    .bind(range.to)
    .bind(dt(cutoff))
    .fetch_one(pool)
    .await?;
    Ok(live != 0)
}

/// Takes one partition out of the results table (exchanged with an empty table, then
/// dropped, its span joining the next partition's), checks again that no job in the queue
/// has its results row there, and drops the rows or moves them to the archive. If a job
/// was posted meanwhile, its rows go back into the results table. False if it stays.
async fn retire_one(
    pool: &MySqlPool,
    schema: &Schema,
    range: &Range,
    archive: Option<&str>,
) -> Result<bool> {
    let r = schema.flat_table("task_results_t");
    let q = schema.flat_table("tasks_queue_t");
    let held = schema.flat_table(&format!("task_results_{}", range.name));
    let Some(mut conn) = lock_on(pool, schema).await? else {
        return Ok(false);
    };
    let done: Result<bool> = async {
        let conn: &mut MySqlConnection = &mut conn;
            for statement in [
                format!("DROP TABLE IF EXISTS {held}"),
                format!("CREATE TABLE {held} LIKE {r}"),
                format!("ALTER TABLE {held} REMOVE PARTITIONING"),
            ] {
                (&mut *conn).execute(statement.as_str()).await?;
            }
            let exchanged = (&mut *conn)
                .execute(format!("ALTER TABLE {r} EXCHANGE PARTITION {} WITH TABLE {held}", range.name).as_str())
                .await;
            match exchanged {
                Ok(_) => {}
                Err(e) if busy(&e) => {
                    tracing::debug!(partition = %range.name, "sk: results partition busy, retired on a later pass");
                    (&mut *conn).execute(format!("DROP TABLE {held}").as_str()).await?;
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
            // Empty now; a job posted with an id of its span from here on lands in the
            // next partition.
            (&mut *conn)
                .execute(format!("ALTER TABLE {r} DROP PARTITION {}", range.name).as_str())
                .await?;
            let live: i64 = sqlx::query_scalar(&format!(
                "SELECT EXISTS (SELECT 1 FROM {q} WHERE task_id >= ? AND task_id < ?)"
            ))
            .bind(range.from)
            .bind(range.to)
            .fetch_one(&mut *conn)
            .await?;
            if live != 0 {
                // The stored columns only: a value for a virtual one (migration 9) is an
                // error in strict mode.
                let columns: String = sqlx::query_scalar(
                    "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND IS_GENERATED = 'NEVER'",
                )
                .bind(&r)
                .fetch_one(&mut *conn)
                .await?;
                (&mut *conn)
                    .execute(
                        format!("INSERT INTO {r} ({columns}) SELECT {columns} FROM {held}").as_str(),
                    )
                    .await?;
                (&mut *conn).execute(format!("DROP TABLE {held}").as_str()).await?;
                return Ok(false);
            }
            let statement = match archive {
                Some(archive) => format!(
                    "CREATE DATABASE IF NOT EXISTS {archive}; RENAME TABLE {held} TO {archive}.{held}"
                ),
                None => format!("DROP TABLE {held}"),
            };
            (&mut *conn).execute(statement.as_str()).await?;
            Ok(true)
    }
    .await;
    unlock(conn, schema).await;
    done
}

/// Deletes the rows of partition `name` finished before `cutoff`, in batches, until none
/// is left or the worker stops. With `below` (the smallest UUIDv7 of the cutoff), only
/// ids below it: jobs posted before the cutoff.
async fn prune_rows(
    pool: &MySqlPool,
    schema: &Schema,
    name: &str,
    cutoff: DateTime<Utc>,
    below: Option<Uuid>,
    stopping: &CancellationToken,
) -> Result<u64> {
    let statement = format!(
        "DELETE FROM {} PARTITION ({name})
         WHERE (? IS NULL OR task_id < ?) AND task_processing_finalized_at_ts < ?
         LIMIT {ROW_BATCH}",
        schema.flat_table("task_results_t")
    );
    let mut total = 0;
    loop {
        let n = sqlx::query(&statement)
            .bind(below)
            .bind(below)
            .bind(dt(cutoff))
            .execute(pool)
            .await?
            .rows_affected();
        total += n;
        if n < ROW_BATCH as u64 || stopping.is_cancelled() {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse_as_either_server_shows_them() {
        let id = Uuid::parse_str("019a0000-0000-0000-0000-000000000000").unwrap();
        assert_eq!(
            parse_bound("_binary 0x019a0000000000000000000000000000"),
            Some(id)
        );
        assert_eq!(parse_bound("0x019a0000000000000000000000000000"), Some(id));
        assert_eq!(parse_bound("MAXVALUE"), None);
        assert_eq!(literal(id), "X'019a0000000000000000000000000000'");
        assert_eq!(millis_of(id), 0x019a_0000_0000);
    }

    #[test]
    fn new_spans_follow_the_last_partition_to_whole_periods() {
        let span = PartitionSpan {
            period: 100,
            origin_ms: 0,
        };
        assert_eq!(spans(0, 300, span), vec![(0, 100), (100, 200), (200, 300)]);
        assert_eq!(spans(150, 300, span), vec![(150, 200), (200, 300)]);
        assert_eq!(spans(300, 300, span), vec![]);
        // Weeks from a Monday (1970-01-05): the first span ends on the next Monday.
        let week = PartitionSpan::new(
            std::time::Duration::from_secs(7 * 86_400),
            chrono::Weekday::Mon,
        );
        let thursday = 1_796_256_000_000; // 2026-12-03 00:00 UTC
        let monday = 1_796_601_600_000; // 2026-12-07 00:00 UTC
        assert_eq!(
            spans(thursday, monday + 1, week),
            vec![(thursday, monday), (monday, monday + 7 * 86_400_000)]
        );
    }
}
