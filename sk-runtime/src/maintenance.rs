//! Periodic upkeep: vacuum sk's hot tables when they fill with dead rows, prune old
//! results, write this worker's metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::worker::Shared;

const PRUNE_BATCH: i64 = 10_000;
/// How often dead tuples are checked; the check is one read of `pg_stat_user_tables`.
const VACUUM_CHECK: Duration = Duration::from_secs(5);
/// Vacuum once dead rows pass this many, and outnumber the live ones.
const VACUUM_MIN_DEAD: i64 = 5_000;

pub(crate) async fn run(shared: Arc<Shared>) {
    let mut last_upkeep = Instant::now();
    while shared
        .pause(VACUUM_CHECK.min(shared.config.maintenance_interval))
        .await
    {
        vacuum_if_needed(&shared).await;
        if last_upkeep.elapsed() >= shared.config.maintenance_interval {
            last_upkeep = Instant::now();
            prune(&shared).await;
            write_metrics(&shared).await;
        }
    }
}

/// Every job inserts, updates and deletes a queue row, so the queue table gathers dead
/// rows at several per job; left alone they slow every claim (the index scan walks them).
/// Autovacuum handles this when it is on and tuned (the migrations tune it for these
/// tables), but servers run with it off or too slow for this churn, so the worker checks
/// and vacuums itself. One worker at a time: the others skip while one holds the lock.
async fn vacuum_if_needed(shared: &Shared) {
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
    for table in tables
        .iter()
        .filter(|t| t.dead > VACUUM_MIN_DEAD && t.dead > t.live)
    {
        let started = Instant::now();
        match shared.store.vacuum(table.is_queue).await {
            Ok(true) => tracing::info!(
                table = if table.is_queue { "queue" } else { "results" },
                dead = table.dead,
                live = table.live,
                millis = started.elapsed().as_millis() as u64,
                "sk: vacuumed"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                "sk: vacuum failed (is the worker's database user the tables' owner?): {e}"
            ),
        }
    }
}

async fn prune(shared: &Shared) {
    let Some(cutoff) = chrono::Duration::from_std(shared.config.result_retention)
        .ok()
        .and_then(|keep| shared.now().checked_sub_signed(keep))
    else {
        return;
    };
    let mut total = 0;
    loop {
        match shared.store.prune(cutoff, PRUNE_BATCH).await {
            Ok(n) => {
                total += n;
                if n < PRUNE_BATCH as u64 || shared.stopping.is_cancelled() {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!("sk: cannot prune old results: {e}");
                break;
            }
        }
    }
    if total > 0 {
        tracing::info!(rows = total, %cutoff, "sk: pruned finished results");
    }
}

pub(crate) async fn write_metrics(shared: &Shared) {
    if let Err(e) = shared
        .store
        .write_metrics(&shared.metrics.snapshot(), shared.now())
        .await
    {
        tracing::warn!("sk: cannot write metrics: {e}");
    }
}
