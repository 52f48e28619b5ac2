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
        let leases: Vec<Lease> = shared.running().keys().copied().collect();
        if leases.is_empty() {
            continue;
        }
        let until = crate::clock::add(shared.now(), shared.config.lease);
        match shared.store.extend(&leases, until).await {
            Ok(held) if held.len() < leases.len() => {
                let running = shared.running();
                for lease in leases.iter().filter(|l| !held.contains(&l.id)) {
                    // A finished job may have been finalized since the keys were read.
                    if let Some(entry) = running.get(lease).filter(|e| e.state != RunState::Finished) {
                        if entry.stop.set(StopReason::LeaseLost).is_ok() {
                            tracing::warn!(id = %lease.id, attempt = lease.attempt, "sk: lease lost (to another worker, or the job was cancelled); asking the job to stop");
                        }
                        entry.cancel.cancel();
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                jobs = leases.len(),
                "sk: heartbeat failed; leases run out at the latest {:?} after the last success unless it recovers: {e}",
                shared.config.lease
            ),
        }
    }
}
