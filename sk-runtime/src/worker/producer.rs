//! Claims up to the free slots whenever woken (notification, poll tick, freed slot).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::completer::Completion;
use super::{executor, Metrics, Shared};

const MAX_CLAIM_BATCH: usize = 1000;

pub(super) async fn run(shared: Arc<Shared>, completions: UnboundedSender<Completion>) {
    let mut errors = 0u32;
    // Queues the worker serves without a limit of their own, claimed together.
    let shared_queues: Option<Vec<String>> = shared.queues.as_ref().map(|queues| {
        queues
            .iter()
            .filter(|q| !shared.queue_limits.contains_key(*q))
            .cloned()
            .collect()
    });
    let mut limited: Vec<&String> = shared.queue_limits.keys().collect();
    limited.sort();
    let mut pauses = Pauses::new();
    loop {
        if shared.stopping.is_cancelled() {
            return;
        }
        pauses.refresh(&shared).await;
        // `more`: claim again at once; `later`: claim again when a slot frees.
        let (mut more, mut later) = (false, false);
        let mut failed = None;
        // Each limited queue up to its free slots, then the rest up to the worker's.
        for queue in &limited {
            let free = shared.queue_limits[*queue].available_permits();
            match claim(
                &shared,
                Some(std::slice::from_ref(*queue)),
                free,
                &completions,
            )
            .await
            {
                Ok(Claimed::Full) => more = true,
                Ok(Claimed::NoSlot) => later = true,
                Ok(Claimed::All) => {}
                Err(e) => failed = Some(e),
            }
        }
        if failed.is_none() && shared_queues.as_ref().is_none_or(|q| !q.is_empty()) {
            match claim(&shared, shared_queues.as_deref(), usize::MAX, &completions).await {
                Ok(Claimed::Full) => more = true,
                Ok(Claimed::NoSlot) => later = true,
                Ok(Claimed::All) => {}
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            None => {
                if errors > 0 {
                    tracing::info!("sk: claiming works again after {errors} failed attempts");
                }
                errors = 0;
                shared.maybe_more.store(more || later, Ordering::Relaxed);
                if more {
                    continue;
                }
            }
            Some(e) => {
                errors += 1;
                Metrics::add(&shared.metrics.claim_errors, 1);
                let wait = backoff(errors);
                tracing::warn!("sk: claim failed (attempt {errors}), retrying in {wait:?}: {e}");
                if !shared.pause(wait).await {
                    return;
                }
                continue;
            }
        }
        let mut local = pauses.local.clone();
        tokio::select! {
            () = shared.stopping.cancelled() => return,
            () = shared.wake.notified() => {}
            // A pause or resume in this process: read them again (a resume has jobs).
            Ok(()) = local.changed() => {}
            () = tokio::time::sleep(shared.config.poll_interval.min(Pauses::EVERY)) => {}
        }
    }
}

/// The paused queues every claim skips, read again before a claim when this process
/// paused or resumed a queue, when PostgreSQL said another process did, and at least
/// once a second (an operator's pause holds within a second on every backend).
struct Pauses {
    local: tokio::sync::watch::Receiver<u64>,
    read_at: Option<Instant>,
}

impl Pauses {
    const EVERY: Duration = Duration::from_secs(1);

    fn new() -> Self {
        Pauses {
            local: crate::store::pauses(),
            read_at: None,
        }
    }

    async fn refresh(&mut self, shared: &Shared) {
        let changed = self.local.has_changed().unwrap_or(false)
            | shared.pauses_stale.swap(false, Ordering::Relaxed);
        if !changed && self.read_at.is_some_and(|at| at.elapsed() < Self::EVERY) {
            return;
        }
        self.local.mark_unchanged();
        match shared.store.paused_queues().await {
            Ok(paused) => {
                self.read_at = Some(Instant::now());
                let mut known = shared
                    .paused
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *known != paused {
                    tracing::info!(?paused, "sk: paused queues");
                    *known = paused;
                }
            }
            // Claims go on with the queues known paused; the claim's own error follows.
            Err(e) => tracing::debug!("sk: cannot read the paused queues: {e}"),
        }
    }
}

/// What a claim found.
enum Claimed {
    /// As many jobs as it asked for: more may be waiting.
    Full,
    /// Fewer: every due job is taken.
    All,
    /// It asked for none: no free slot.
    NoSlot,
}

/// Claims up to `cap` jobs of `queues` (and the worker's free slots) and starts them.
async fn claim(
    shared: &Arc<Shared>,
    queues: Option<&[String]>,
    cap: usize,
    completions: &UnboundedSender<Completion>,
) -> crate::Result<Claimed> {
    let free = shared
        .slots
        .available_permits()
        .min(cap)
        .min(MAX_CLAIM_BATCH);
    if free == 0 {
        return Ok(Claimed::NoSlot);
    }
    let now = shared.now();
    let lease_until = crate::clock::add(now, shared.config.lease);
    let limit = i64::try_from(free).unwrap_or(i64::MAX);
    let paused = shared
        .paused
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let jobs = shared
        .store
        .claim(&crate::store::Claim {
            task_types: &shared.task_types,
            queues,
            tenants: shared.tenants.as_deref(),
            paused: &paused,
            limit,
            now,
            lease_until,
        })
        .await?;
    let full = jobs.len() == free;
    Metrics::add(&shared.metrics.claimed, jobs.len() as u64);
    for job in jobs {
        executor::spawn(shared, job, completions);
    }
    Ok(if full { Claimed::Full } else { Claimed::All })
}

/// 100 ms doubling to 5 s: a worker whose database is down keeps trying without spinning.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(6);
    Duration::from_millis(100 * (1u64 << exp)).min(Duration::from_secs(5))
}
