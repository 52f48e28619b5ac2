//! Periodic upkeep: vacuum sk's hot tables when they fill with dead rows, create and
//! retire results partitions, write this worker's metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::worker::Shared;

/// How often dead tuples are checked; the check is one read of `pg_stat_user_tables`.
const VACUUM_CHECK: Duration = Duration::from_secs(1);
/// Vacuum (and analyze) the queue table once it holds this many dead rows, or this many
/// rows changed since its statistics were taken, however many live ones.
const QUEUE_VACUUM_ROWS: i64 = 2_000;
/// Vacuum the results table once dead rows pass this many and outnumber the live ones.
const RESULTS_VACUUM_DEAD: i64 = 5_000;
/// A vacuum of the queue table waits this many times the last one's duration after it,
/// so vacuuming never takes more than a fifth of one connection's time.
const VACUUM_SPACING: u32 = 4;

pub(crate) async fn run(shared: Arc<Shared>) {
    let mut last_upkeep: Option<Instant> = None;
    let mut queue_vacuum = Spacing::default();
    // The first check and upkeep come at once: a backlog enqueued before the worker
    // started may have no statistics yet, and the partitions follow this worker's span.
    loop {
        vacuum_if_needed(&shared, &mut queue_vacuum).await;
        if last_upkeep.is_none_or(|at| at.elapsed() >= shared.config.maintenance_interval) {
            last_upkeep = Some(Instant::now());
            // One time for the whole pass: the metrics' stamp says which time it ran at.
            let now = shared.now();
            partitions(&shared, now).await;
            write_metrics(&shared, now).await;
        }
        if !shared
            .pause(VACUUM_CHECK.min(shared.config.maintenance_interval))
            .await
        {
            return;
        }
    }
}

/// When the queue table's last vacuum ended and how long it took.
#[derive(Default)]
struct Spacing {
    last: Option<(Instant, Duration)>,
}

impl Spacing {
    fn ready(&self) -> bool {
        self.last
            .is_none_or(|(ended, took)| ended.elapsed() >= took * VACUUM_SPACING)
    }
}

/// Every job inserts, updates and deletes a queue row, so the queue table gathers dead
/// rows at two or more per job; left alone they slow every claim (the index scan walks
/// them). Autovacuum handles this when it is on and tuned (the migrations tune it for
/// these tables), but servers run with it off or too slow for this churn, so the worker
/// checks every second and vacuums itself.
///
/// The queue table is vacuumed by the rate at which its rows change, not by the share of
/// dead ones: a fixed number of dead or changed rows, checked every second (and at once
/// if it never had statistics), so a busy queue is vacuumed often however long its
/// backlog, and a backlog enqueued in bulk gets statistics before its first claims.
/// Without them the planner scans and sorts the whole queue for every claim: a backlog of
/// 20,000 jobs ran at a fifth of its speed until dead rows outnumbered it
/// (docs/reliability.md). The table holds live jobs only, so each vacuum is short;
/// [`VACUUM_SPACING`] bounds their share of time.
/// The results table, which keeps history, is vacuumed once dead rows outnumber live ones.
/// One worker at a time: the others skip while one holds the lock.
async fn vacuum_if_needed(shared: &Shared, queue_vacuum: &mut Spacing) {
    if !shared.config.vacuum {
        return;
    }
    let tables = match shared.store.table_health().await {
        Ok(tables) => tables,
        Err(e) => {
            tracing::debug!("sk: cannot read table statistics: {e}");
            return;
        }
    };
    let queue_ready = queue_vacuum.ready();
    for table in tables.iter().filter(|t| {
        if t.is_queue {
            (t.dead >= QUEUE_VACUUM_ROWS || t.changed >= QUEUE_VACUUM_ROWS || !t.analyzed)
                && queue_ready
        } else {
            t.dead > RESULTS_VACUUM_DEAD && t.dead > t.live
        }
    }) {
        let started = Instant::now();
        match shared.store.vacuum(&table.name).await {
            Ok(true) => {
                let took = started.elapsed();
                if table.is_queue {
                    queue_vacuum.last = Some((Instant::now(), took));
                }
                tracing::debug!(
                    table = table.name,
                    dead = table.dead,
                    live = table.live,
                    millis = took.as_millis() as u64,
                    "sk: vacuumed"
                );
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(
                "sk: vacuum failed (is the worker's database user the tables' owner?): {e}"
            ),
        }
    }
}

/// Creates the results partitions ahead (also done at start) and retires those past the
/// retention (docs/reliability.md, "Results"), with the run counts of those times; deletes
/// the logs of tenants' starts idle for a longest rate window.
pub(crate) async fn partitions(shared: &Shared, now: chrono::DateTime<chrono::Utc>) {
    let store = &shared.store;
    match store
        .ensure_partitions(
            now,
            crate::store::PartitionSpan::new(
                shared.config.results_partition,
                shared.config.results_week_start,
            ),
        )
        .await
    {
        Ok(created) if !created.is_empty() => {
            tracing::info!(partitions = ?created, "sk: created results partitions");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("sk: cannot create results partitions: {e}"),
    }
    // A tenant's log of starts idle for a longest window holds no start in any window.
    if let Some(before) = chrono::Duration::from_std(crate::MAX_RATE_WINDOW)
        .ok()
        .and_then(|window| now.checked_sub_signed(window))
    {
        match store.prune_tenant_logs(before, now).await {
            Ok(rows) if rows > 0 => tracing::info!(rows, "sk: pruned idle logs of tenants' starts"),
            Ok(_) => {}
            Err(e) => tracing::warn!("sk: cannot prune idle logs of tenants' starts: {e}"),
        }
    }
    let Some(cutoff) = chrono::Duration::from_std(shared.config.result_retention)
        .ok()
        .and_then(|keep| now.checked_sub_signed(keep))
    else {
        return;
    };
    // The run counts per minute (`Client::throughput`) are kept as long as the results.
    match store.prune_job_stats(cutoff).await {
        Ok(rows) if rows > 0 => tracing::info!(rows, %cutoff, "sk: pruned run counts"),
        Ok(_) => {}
        Err(e) => tracing::warn!("sk: cannot prune old run counts: {e}"),
    }
    let archive = shared.config.archive_results_to.as_deref();
    // A retention shorter than a partition's span cannot wait for whole partitions.
    let within = shared.config.result_retention < shared.config.results_partition;
    match store
        .retire_partitions(cutoff, archive, within, &shared.stopping)
        .await
    {
        Ok(retired) => {
            if !retired.dropped.is_empty() {
                tracing::info!(partitions = ?retired.dropped, %cutoff, "sk: dropped results partitions");
            }
            if !retired.archived.is_empty() {
                tracing::info!(partitions = ?retired.archived, schema = archive, %cutoff, "sk: archived results partitions");
            }
            if !retired.held.is_empty() {
                tracing::debug!(partitions = ?retired.held, %cutoff, "sk: kept results partitions past the retention for their live jobs");
            }
            if retired.rows > 0 {
                tracing::info!(rows = retired.rows, %cutoff, "sk: pruned finished results");
            }
        }
        Err(e) => tracing::warn!("sk: cannot prune old results: {e}"),
    }
}

pub(crate) async fn write_metrics(shared: &Shared, now: chrono::DateTime<chrono::Utc>) {
    if let Err(e) = shared
        .store
        .write_metrics(&shared.metrics.snapshot(), now)
        .await
    {
        tracing::warn!("sk: cannot write metrics: {e}");
    }
}
