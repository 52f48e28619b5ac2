//! The results table's time partitions (migration 5): range partitions on the UUIDv7
//! `task_id`, created ahead by maintenance and retired whole once past the retention.

use std::sync::{Arc, PoisonError, RwLock};

use chrono::{DateTime, Utc};
use sqlx::{Executor as _, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::pooler::{kept, Held};
use crate::error::Result;
use crate::store::PartitionSpan;
use crate::store::{id_floor, millis_of, time_of, Retired, Schema};

/// The partitions `sk migrate` creates, before a worker says otherwise: a day each.
pub(crate) fn default_span() -> PartitionSpan {
    PartitionSpan::new(crate::store::RESULTS_PARTITION, chrono::Weekday::Mon)
}

/// Partitions exist this many periods past the current one.
const AHEAD: i64 = 2;
/// DDL waits at most this long for the results table's lock, then gives up until the next
/// maintenance pass, so the statements queued behind it never wait longer.
const LOCK_TIMEOUT: &str = "2s";
/// Rows deleted per statement where a partition is pruned by rows.
const ROW_BATCH: i64 = 10_000;

/// One range partition: the jobs posted in `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) name: String,
    pub(crate) from: Uuid,
    pub(crate) to: Uuid,
}

/// Parses `FOR VALUES FROM ('…') TO ('…')`; `None` for the default partition.
fn parse_bound(bound: &str) -> Option<(Uuid, Uuid)> {
    let mut quoted = bound.split('\'').skip(1).step_by(2);
    let from = quoted.next()?.parse().ok()?;
    let to = quoted.next()?.parse().ok()?;
    Some((from, to))
}

/// The range partitions of the results table, oldest first.
async fn ranges(conn: &mut PgConnection, schema: &Schema) -> Result<Vec<Range>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass",
    )
    .bind(schema.table("task_results_t"))
    .fetch_all(kept(&mut *conn))
    .await?;
    let mut ranges: Vec<Range> = rows
        .into_iter()
        .filter_map(|(name, bound)| parse_bound(&bound).map(|(from, to)| Range { name, from, to }))
        .collect();
    ranges.sort_by_key(|r| r.from);
    Ok(ranges)
}

/// The range partitions of the results table, oldest first.
pub(crate) async fn list(pool: &PgPool, schema: &Schema) -> Result<Vec<Range>> {
    let mut held = Held::of(pool).await?;
    let all = ranges(held.conn(), schema).await?;
    held.done().await?;
    Ok(all)
}

/// The partitions a worker's statements address directly, as maintenance last read them.
/// An UPDATE through the partitioned table locks every partition and each of its indexes
/// (a generic plan prunes only at run time): a completion of 8 jobs ran at 56 % of the
/// speed of the same statement on the partition, with a week of partitions.
#[derive(Default, Clone)]
pub(crate) struct Known {
    ranges: Arc<RwLock<Vec<Range>>>,
}

impl Known {
    pub(crate) fn set(&self, ranges: Vec<Range>) {
        *self.ranges.write().unwrap_or_else(PoisonError::into_inner) = ranges;
    }

    /// The partition that holds all of `ids` (sorted), if one does.
    pub(crate) fn of(&self, ids: &[Uuid]) -> Option<String> {
        let (first, last) = (ids.first()?, ids.last()?);
        let ranges = self.ranges.read().unwrap_or_else(PoisonError::into_inner);
        let i = ranges.partition_point(|r| r.to <= *first);
        let range = ranges.get(i)?;
        (range.from <= *first && *last < range.to).then(|| range.name.clone())
    }
}

/// The spans of `[from, to)` that no partition in `existing` covers.
fn uncovered(from: i64, to: i64, existing: &[Range]) -> Vec<(i64, i64)> {
    let mut gaps = Vec::new();
    let mut cursor = from;
    for range in existing {
        let (a, b) = (millis_of(range.from), millis_of(range.to));
        if b <= cursor || a >= to {
            continue;
        }
        if a > cursor {
            gaps.push((cursor, a));
        }
        cursor = cursor.max(b);
    }
    if cursor < to {
        gaps.push((cursor, to));
    }
    gaps
}

/// Takes the schema's partition lock for this transaction, or says another worker holds it.
async fn lock(conn: &mut PgConnection, schema: &Schema) -> Result<bool> {
    (&mut *conn)
        .execute(format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'").as_str())
        .await?;
    Ok(
        sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext($1))")
            .bind(format!("sk-partitions:{}", schema.table("task_results_t")))
            .fetch_one(kept(&mut *conn))
            .await?,
    )
}

/// Creates the partitions for the periods from the current one to [`AHEAD`] past it,
/// aligned to whole periods since the span's origin (`PartitionSpan`), where none exists yet; returns
/// their names. Rows the default partition took for a new partition's span (posted while
/// it did not exist) move into it. One worker at a time; the others return at once.
///
/// `known` (the worker's map of partitions, if any) gets the partitions as they are once
/// this commits: set before the commit, so that whoever sees a new partition knows the
/// map has it (a map naming a partition that is not there costs a retry through the
/// partitioned table, never a wrong write).
pub(crate) async fn ensure(
    pool: &PgPool,
    schema: &Schema,
    now: DateTime<Utc>,
    span: PartitionSpan,
    known: Option<&Known>,
) -> Result<Vec<String>> {
    let period = span.period;
    let start = span.start_of(now.timestamp_millis());
    let horizon = start.saturating_add(period.saturating_mul(AHEAD + 1));
    let mut tx = pool.begin().await?;
    if !lock(&mut tx, schema).await? {
        drop(tx);
        if let Some(known) = known {
            known.set(list(pool, schema).await?);
        }
        return Ok(Vec::new());
    }
    let existing = ranges(&mut tx, schema).await?;
    let mut after = existing.clone();
    let r = schema.table("task_results_t");
    let default = schema.table("task_results_default");
    let mut created = Vec::new();
    let mut slot = start;
    while slot < horizon {
        let slot_end = slot.saturating_add(period);
        for (from, to) in uncovered(slot, slot_end, &existing) {
            let name = format!(
                "{}task_results_p{}",
                schema.prefix(),
                time_of(from).format("%Y%m%d_%H%M")
            );
            let table = format!("{}.{name}", schema.schema_name());
            let (lo, hi) = (id_floor(time_of(from)), id_floor(time_of(to)));
            (&mut *tx)
                .execute(
                    format!(
                        "CREATE TABLE {table} (LIKE {r} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
                         WITH (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05)"
                    )
                    .as_str(),
                )
                .await?;
            sqlx::query(&format!(
                "WITH moved AS (DELETE FROM {default} WHERE task_id >= $1 AND task_id < $2 RETURNING *)
                 INSERT INTO {table} SELECT * FROM moved"
            ))
            .bind(lo)
            .bind(hi)
            .execute(kept(&mut tx))
            .await?;
            let attached = (&mut *tx)
                .execute(
                    format!("ALTER TABLE {r} ATTACH PARTITION {table} FOR VALUES FROM ('{lo}') TO ('{hi}')")
                        .as_str(),
                )
                .await;
            match attached {
                Ok(_) => {
                    after.push(Range {
                        name: name.clone(),
                        from: lo,
                        to: hi,
                    });
                    created.push(name);
                }
                // Created on a later pass; meanwhile the default partition takes the rows.
                Err(e) if busy(&e) => {
                    tracing::debug!(partition = %name, "sk: results table busy, partition created on a later pass");
                    return Ok(Vec::new());
                }
                Err(e) => return Err(e.into()),
            }
        }
        slot = slot_end;
    }
    if let Some(known) = known {
        after.sort_by_key(|r| r.from);
        known.set(after);
    }
    tx.commit().await?;
    Ok(created)
}

/// Retires the partitions whose jobs were all posted and finished before `cutoff`:
/// dropped, or detached and moved to schema `archive`. A partition past the cutoff that
/// still holds live jobs (in the queue table), or jobs finished since, stays, and only its
/// rows finished before `cutoff` are deleted. The default partition is pruned by rows, by
/// finalization time. A partition whose lock is busy is tried again on the next pass.
///
/// With `within` (a retention shorter than the partitions' span, which whole partitions
/// cannot follow), the partition the cutoff falls in is pruned by rows too, as before
/// partitioning: jobs posted and finished before the cutoff.
pub(crate) async fn retire(
    pool: &PgPool,
    schema: &Schema,
    cutoff: DateTime<Utc>,
    archive: Option<&str>,
    within: bool,
    stopping: &CancellationToken,
) -> Result<Retired> {
    let all = list(pool, schema).await?;
    let bound = id_floor(cutoff);
    let mut retired = Retired::default();
    if within {
        for range in all.iter().filter(|r| r.from < bound && bound < r.to) {
            let table = format!("{}.{}", schema.schema_name(), range.name);
            retired.rows += prune_rows(pool, &table, cutoff, Some(bound), stopping).await?;
        }
    }
    for range in all.iter().filter(|r| r.to <= bound) {
        let table = format!("{}.{}", schema.schema_name(), range.name);
        if !live(pool, schema, range, &table, cutoff).await?
            && retire_one(pool, schema, range, archive).await?
        {
            if archive.is_some() {
                retired.archived.push(range.name.clone());
            } else {
                retired.dropped.push(range.name.clone());
            }
            continue;
        }
        retired.rows += prune_rows(pool, &table, cutoff, Some(bound), stopping).await?;
        retired.held.push(range.name.clone());
    }
    let default = schema.table("task_results_default");
    retired.rows += prune_rows(pool, &default, cutoff, None, stopping).await?;
    Ok(retired)
}

/// Whether a partition holds a job that is live (in the queue table, or taken by a seed
/// consumer and not finished) or finished at or after `cutoff`. Reads the partition
/// through, once, when it comes past the retention (it goes right after), and again on
/// each pass while it stays (by then pruned down to those jobs).
async fn live(
    pool: &PgPool,
    schema: &Schema,
    range: &Range,
    table: &str,
    cutoff: DateTime<Utc>,
) -> Result<bool> {
    let mut held = Held::of(pool).await?;
    let live = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {q} WHERE task_id >= $1 AND task_id < $2)
             OR EXISTS (SELECT 1 FROM {table}
                        WHERE task_processing_finalized_at_ts IS NULL OR task_processing_finalized_at_ts >= $3)",
        q = schema.table("tasks_queue_t")
    ))
    .bind(range.from)
    .bind(range.to)
    .bind(cutoff)
    .fetch_one(held.on())
    .await?;
    held.done().await?;
    Ok(live)
}

/// Detaches one partition, checks again (now that no statement can reach it) that no job
/// in the queue has its results row there, and drops or archives it. False if it stays:
/// a job posted meanwhile, another worker retiring, or a lock not granted in time.
async fn retire_one(
    pool: &PgPool,
    schema: &Schema,
    range: &Range,
    archive: Option<&str>,
) -> Result<bool> {
    let r = schema.table("task_results_t");
    let q = schema.table("tasks_queue_t");
    let table = format!("{}.{}", schema.schema_name(), range.name);
    let mut tx = pool.begin().await?;
    if !lock(&mut tx, schema).await? {
        return Ok(false);
    }
    let detached = (&mut *tx)
        .execute(format!("ALTER TABLE {r} DETACH PARTITION {table}").as_str())
        .await;
    match detached {
        Ok(_) => {}
        Err(e) if busy(&e) => {
            tracing::debug!(partition = %range.name, "sk: results partition busy, retired on a later pass");
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    }
    let live: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {q} WHERE task_id >= $1 AND task_id < $2)"
    ))
    .bind(range.from)
    .bind(range.to)
    .fetch_one(kept(&mut tx))
    .await?;
    if live {
        return Ok(false);
    }
    let statement = match archive {
        Some(archive) => format!(
            "CREATE SCHEMA IF NOT EXISTS {archive}; ALTER TABLE {table} SET SCHEMA {archive}"
        ),
        None => format!("DROP TABLE {table}"),
    };
    (&mut *tx).execute(statement.as_str()).await?;
    tx.commit().await?;
    Ok(true)
}

/// A lock not granted within [`LOCK_TIMEOUT`] (55P03).
fn busy(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.code().as_deref() == Some("55P03"))
}

/// Deletes the rows of `table` (a partition) finished before `cutoff`, in batches, until
/// none is left or the worker stops. With `below` (the smallest UUIDv7 of the cutoff),
/// only ids below it: jobs posted before the cutoff, found by walking the primary key;
/// without (the default partition, whose ids need not be v7), by its index on the
/// finalization time.
async fn prune_rows(
    pool: &PgPool,
    table: &str,
    cutoff: DateTime<Utc>,
    below: Option<Uuid>,
    stopping: &CancellationToken,
) -> Result<u64> {
    let statement = format!(
        "DELETE FROM {table} WHERE task_id IN (
            SELECT task_id FROM {table}
            WHERE ($3::uuid IS NULL OR task_id < $3) AND task_processing_finalized_at_ts < $1
            LIMIT $2)"
    );
    let mut total = 0;
    loop {
        let mut held = Held::of(pool).await?;
        let n = sqlx::query(&statement)
            .bind(cutoff)
            .bind(ROW_BATCH)
            .bind(below)
            .execute(held.on())
            .await?
            .rows_affected();
        held.done().await?;
        total += n;
        if n < ROW_BATCH as u64 || stopping.is_cancelled() {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    #[test]
    fn bounds_sort_every_id_of_a_span_inside_it() {
        let at = Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 0).unwrap();
        let floor = id_floor(at);
        assert_eq!(millis_of(floor), at.timestamp_millis());
        let just_before = uuid::Builder::from_unix_timestamp_millis(
            u64::try_from(at.timestamp_millis() - 1).unwrap(),
            &[0xff; 10],
        )
        .into_uuid();
        let first = uuid::Builder::from_unix_timestamp_millis(
            u64::try_from(at.timestamp_millis()).unwrap(),
            &[0; 10],
        )
        .into_uuid();
        assert!(just_before < floor && floor <= first);
        assert_eq!(
            parse_bound(&format!("FOR VALUES FROM ('{floor}') TO ('{first}')")),
            Some((floor, first))
        );
        assert_eq!(parse_bound("DEFAULT"), None);
    }

    #[test]
    fn a_batch_goes_to_the_partition_that_holds_all_of_it() {
        let range = |name: &str, from: i64, to: i64| Range {
            name: name.into(),
            from: id_floor(time_of(from)),
            to: id_floor(time_of(to)),
        };
        let id = |millis: i64| {
            uuid::Builder::from_unix_timestamp_millis(u64::try_from(millis).unwrap(), &[7; 10])
                .into_uuid()
        };
        let known = Known::default();
        assert_eq!(known.of(&[id(5)]), None);
        known.set(vec![range("a", 0, 100), range("b", 100, 200)]);
        assert_eq!(known.of(&[id(5), id(99)]).as_deref(), Some("a"));
        assert_eq!(known.of(&[id(100), id(150)]).as_deref(), Some("b"));
        assert_eq!(known.of(&[id(99), id(100)]), None, "two partitions");
        assert_eq!(known.of(&[id(250)]), None, "none");
        assert_eq!(known.of(&[Uuid::from_u128(u128::MAX)]), None);
        assert_eq!(known.of(&[]), None);
    }

    #[test]
    fn a_completion_addresses_the_partition_itself() {
        let schema = Schema::new("jobs", "app_").unwrap();
        let sql = schema
            .sql
            .complete_in(&schema, "app_task_results_p20261122_0000", true);
        assert!(sql.contains("UPDATE jobs.app_task_results_p20261122_0000 r SET task_status = 3,"));
        assert!(!sql.contains("UPDATE jobs.app_task_results_t r"));
        // Both inserts of new results rows: the plain one and the keyed jobs' upsert.
        let into = "INSERT INTO jobs.app_task_results_p20261122_0000 AS r (";
        assert_eq!(sql.matches(into).count(), 2);
        assert!(!sql.contains("INSERT INTO jobs.app_task_results_t AS r"));
    }

    #[test]
    fn only_spans_no_partition_covers_are_created() {
        let range = |from: i64, to: i64| Range {
            name: String::new(),
            from: id_floor(time_of(from)),
            to: id_floor(time_of(to)),
        };
        assert_eq!(uncovered(0, 100, &[]), vec![(0, 100)]);
        assert_eq!(uncovered(0, 100, &[range(0, 100)]), vec![]);
        assert_eq!(
            uncovered(0, 100, &[range(20, 40), range(60, 70)]),
            vec![(0, 20), (40, 60), (70, 100)]
        );
        assert_eq!(uncovered(100, 200, &[range(0, 150)]), vec![(150, 200)]);
        assert!(crate::store::check_period(std::time::Duration::from_secs(3600)).is_ok());
        assert!(crate::store::check_period(std::time::Duration::from_secs(59)).is_err());
        assert!(crate::store::check_period(std::time::Duration::from_millis(3_600_500)).is_err());
    }
}
