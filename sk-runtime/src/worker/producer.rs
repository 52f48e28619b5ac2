//! Claims up to the free slots whenever woken (notification, poll tick, freed slot).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::completer::Completion;
use super::{executor, Metrics, Shared};

const MAX_CLAIM_BATCH: usize = 1000;

pub(super) async fn run(shared: Arc<Shared>, completions: UnboundedSender<Completion>) {
    let mut errors = 0u32;
    loop {
        if shared.stopping.is_cancelled() {
            return;
        }
        let free = shared.slots.available_permits().min(MAX_CLAIM_BATCH);
        if free > 0 {
            let now = shared.now();
            let lease_until = crate::clock::add(now, shared.config.lease);
            let limit = i64::try_from(free).unwrap_or(i64::MAX);
            match shared
                .store
                .claim(
                    &shared.task_types,
                    shared.queues.as_deref(),
                    shared.tenants.as_deref(),
                    limit,
                    now,
                    lease_until,
                )
                .await
            {
                Ok(jobs) => {
                    if errors > 0 {
                        tracing::info!("sk: claiming works again after {errors} failed attempts");
                    }
                    errors = 0;
                    let full = jobs.len() == free;
                    shared.maybe_more.store(full, Ordering::Relaxed);
                    Metrics::add(&shared.metrics.claimed, jobs.len() as u64);
                    for job in jobs {
                        executor::spawn(&shared, job, &completions);
                    }
                    if full {
                        continue;
                    }
                }
                Err(e) => {
                    errors += 1;
                    Metrics::add(&shared.metrics.claim_errors, 1);
                    let wait = backoff(errors);
                    tracing::warn!(
                        "sk: claim failed (attempt {errors}), retrying in {wait:?}: {e}"
                    );
                    if !shared.pause(wait).await {
                        return;
                    }
                    continue;
                }
            }
        }
        tokio::select! {
            () = shared.stopping.cancelled() => return,
            () = shared.wake.notified() => {}
            () = tokio::time::sleep(shared.config.poll_interval) => {}
        }
    }
}

/// 100 ms doubling to 5 s: a worker whose database is down keeps trying without spinning.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(6);
    Duration::from_millis(100 * (1u64 << exp)).min(Duration::from_secs(5))
}
