//! Extends the leases of jobs this worker holds, and notices leases it lost.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{RunState, Shared};
use crate::job::StopReason;
use crate::store::Lease;

pub(super) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let every = shared
        .config
        .heartbeat
        .expect("build() sets the heartbeat interval");
    let mut depth_read: Option<std::time::Instant> = None;
    let mut queues_known = Vec::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // The leases first: on a database whose writers take turns (SQLite), each of
        // the other writes below may wait, and a lease that waits behind them may run out.
        extend(&shared).await;
        if let Err(e) = shared.store.worker_seen(shared.now()).await {
            tracing::debug!("sk: cannot stamp this worker's row: {e}");
        }
        shared.flush_job_stats().await;
        if let Some(depth_every) = shared.config.queue_depth_every {
            if depth_read.is_none_or(|at| at.elapsed() >= depth_every) {
                depth_read = Some(std::time::Instant::now());
                let (pool, schema) = shared.store.client_side();
                match pool
                    .count_by(schema, crate::CountBy::Queue, shared.now())
                    .await
                {
                    Ok(counts) => crate::telemetry::depth(&counts, &mut queues_known),
                    Err(e) => tracing::debug!("sk: cannot read the queue depth: {e}"),
                }
            }
        }
    }
}

/// Extends the leases this worker holds; asks the jobs whose lease was lost to stop, and
/// notes the new expiry of the others.
async fn extend(shared: &Shared) {
    let leases: Vec<Lease> = shared.running().keys().copied().collect();
    if leases.is_empty() {
        return;
    }
    let until = crate::clock::add(shared.now(), shared.config.lease);
    match shared.store.extend(&leases, until).await {
        Ok(held) => {
            let held: std::collections::HashSet<uuid::Uuid> = held.into_iter().collect();
            let mut running = shared.running();
            for lease in &leases {
                // A finished job may have been finalized since the keys were read.
                let Some(entry) = running.get_mut(lease) else {
                    continue;
                };
                if held.contains(&lease.id) {
                    // What the store holds now, even when it is sooner than before: a
                    // lease written while this worker's clock was ahead ends later than
                    // this one, which the store just wrote over it. Kept at the later
                    // time, a job waiting for a slot would start on a lease another
                    // worker may take once this one runs out (chaos-sqlite, seed
                    // 42862683).
                    entry.lease_until = until;
                } else if entry.state != RunState::Finished {
                    if entry.stop.set(StopReason::LeaseLost).is_ok() {
                        tracing::warn!(id = %lease.id, attempt = lease.attempt, "sk: lease lost (it ran out before this heartbeat, and another claim may have taken the job, or an operator cancelled, retried or deleted it); asking the job to stop");
                    }
                    entry.cancel.cancel();
                }
            }
        }
        Err(e) => tracing::warn!(
            jobs = leases.len(),
            "sk: heartbeat failed; leases run out at the latest {:?} after the last success unless it recovers: {e}",
            shared.config.lease
        ),
    }
}
