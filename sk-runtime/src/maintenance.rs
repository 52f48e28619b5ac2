//! Periodic upkeep: prune old results, write this worker's metrics.

use std::sync::Arc;

use crate::worker::Shared;

const PRUNE_BATCH: i64 = 10_000;

pub(crate) async fn run(shared: Arc<Shared>) {
    while shared.pause(shared.config.maintenance_interval).await {
        prune(&shared).await;
        write_metrics(&shared).await;
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
