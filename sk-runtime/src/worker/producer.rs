//! Claims up to the free slots and the prefetch whenever woken (notification, poll tick,
//! freed slot).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc::UnboundedSender;

use super::completer::Completion;
use super::{executor, Metrics, Shared};
use crate::store::{ClaimedJob, Lease, QueueControls};

/// The most jobs one claim takes.
pub(super) const MAX_CLAIM_BATCH: usize = 1000;

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
    let mut controls = Controls::new();
    // Claims whose rate limits let nothing more start, until when they open (at most a
    // control interval ahead, so a raised limit is met within it).
    let mut held: HashMap<Key, DateTime<Utc>> = HashMap::new();
    // Until when claims of queues claimed alone wait for more slots to free (`GATHER`).
    let mut gather: Option<Instant> = None;
    // Claims that found every due job: each runs again only when jobs were posted (a
    // notification, an enqueue in this process), a control changed or the poll interval
    // passed, not at every end of another claim's job (the claim of the queues claimed
    // together skips those claimed alone, and so read the whole queue's index past
    // their jobs each time).
    let mut idle: std::collections::HashSet<Key> = std::collections::HashSet::new();
    let mut polled = false;
    // The worker's job types without a rate limit, as last worked out from the controls.
    let mut plain = Plain::default();
    // Per fair queue (or with a limit per tenant), the tenant its next claim's turn
    // begins after.
    let mut turns: HashMap<String, String> = HashMap::new();
    loop {
        if shared.stopping.is_cancelled() {
            return;
        }
        // Results written since may leave room for waiting jobs to start.
        executor::dispatch(&shared, &completions);
        let known = controls.refresh(&shared).await;
        if shared.posted.swap(false, Ordering::Relaxed) | std::mem::take(&mut polled) {
            idle.clear();
            // A queue limited per tenant held back by its tenants' rates may have jobs of
            // another tenant now.
            held.retain(|key, _| !known.tenant_capped.contains(&key.0));
        }
        // `more`: claim again at once; `later`: claim again when a slot frees.
        let (mut more, mut later) = (false, false);
        let mut failed = None;
        let now = shared.now();
        held.retain(|_, until| *until > now);
        let alone = |q: &String| Alone {
            capped: known.capped.contains(q),
            rated: known.rated.contains(q),
            fair: known.fair.contains(q),
            tenant_capped: known.tenant_capped.contains(q),
            tenant_rated: known.tenant_rated.contains(q),
        };
        // Each queue limited in this worker up to its free slots, each queue limited
        // across workers on its own, then the rest up to the worker's free slots; each
        // for the job types without a rate limit, then for each rated type on its own.
        let mut groups: Vec<Group<'_>> = Vec::new();
        for queue in &limited {
            let free = shared.queue_limits[*queue].available_permits();
            let queues = Some(std::slice::from_ref(*queue));
            groups.push((Some(*queue), queues, alone(queue), free));
        }
        let mut own: Vec<&String> = known
            .capped
            .iter()
            .chain(&known.rated)
            .chain(&known.tenant_capped)
            .chain(&known.fair)
            .collect();
        own.sort();
        own.dedup();
        for queue in own.into_iter().filter(|q| {
            !shared.queue_limits.contains_key(*q)
                && shared.queues.as_ref().is_none_or(|all| all.contains(q))
        }) {
            let queues = Some(std::slice::from_ref(queue));
            groups.push((Some(queue), queues, alone(queue), usize::MAX));
        }
        if shared_queues.as_ref().is_none_or(|q| !q.is_empty()) {
            groups.push((None, shared_queues.as_deref(), Alone::default(), usize::MAX));
        }
        let (plain_types, rated_types) = plain.of(&shared.task_types, &known.rated_types);
        for (label, queues, alone, cap) in groups {
            let types = (!plain_types.is_empty())
                .then_some((plain_types, None))
                .into_iter()
                .chain(
                    rated_types
                        .iter()
                        .map(|t| (std::slice::from_ref(t), Some(t))),
                );
            for (task_types, rated_type) in types {
                // (A queue's name is never empty: "" is the queues claimed together, or
                // the job types without a rate limit.)
                let key: Key = (
                    label.cloned().unwrap_or_default(),
                    rated_type.cloned().unwrap_or_default(),
                );
                if idle.contains(&key) || held.contains_key(&key) {
                    continue;
                }
                let turn = match label {
                    Some(queue) if alone.fair || alone.tenant_capped => {
                        Some(turns.entry(queue.clone()).or_default())
                    }
                    _ => None,
                };
                let request = Request {
                    queues,
                    alone,
                    cap,
                    task_types,
                    rated_type,
                };
                let claimed =
                    claim(&shared, &known, &request, turn, &mut gather, &completions).await;
                if matches!(claimed, Ok(Claimed::All)) {
                    idle.insert(key.clone());
                } else {
                    idle.remove(&key);
                }
                match claimed {
                    Ok(Claimed::Full) => more = true,
                    Ok(Claimed::NoSlot | Claimed::Capped | Claimed::Gathering) => later = true,
                    Ok(Claimed::Held(until)) => {
                        later = true;
                        held.insert(key, until.min(crate::clock::add(now, Controls::EVERY)));
                    }
                    Ok(Claimed::All) => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if failed.is_some() {
                break;
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
                let wait = crate::retry::database_backoff(errors);
                crate::store::bound::warn_unless_moved!(
                    &e,
                    "sk: claim failed (attempt {errors}), retrying in {}: {e}",
                    crate::clock::shown(wait)
                );
                if !shared.pause(wait).await {
                    return;
                }
                continue;
            }
        }
        let mut local = controls.local.clone();
        // The next opening of a rate limit that held a claim back, if sooner.
        let opens = held
            .values()
            .min()
            .and_then(|at| (*at - shared.now()).to_std().ok())
            .unwrap_or(Duration::MAX)
            .min(gather.map_or(Duration::MAX, |at| {
                at.saturating_duration_since(Instant::now())
            }));
        tokio::select! {
            () = shared.stopping.cancelled() => return,
            () = shared.wake.notified() => {}
            // A pause, resume or limit in this process: read them again (a resume has jobs).
            Ok(()) = local.changed() => {
                held.clear();
                polled = true;
            }
            () = tokio::time::sleep(shared.config.poll_interval.min(Controls::EVERY).min(opens)) => polled = true,
        }
    }
}

/// The paused queues every claim skips and the queues with a global limit, read again
/// before a claim when this process changed them, when PostgreSQL said another process
/// did, and at least once a second (an operator's pause holds within a second on every
/// backend).
struct Controls {
    local: tokio::sync::watch::Receiver<u64>,
    read_at: Option<Instant>,
}

impl Controls {
    const EVERY: Duration = Duration::from_secs(1);

    fn new() -> Self {
        Controls {
            local: crate::bus::pauses(),
            read_at: None,
        }
    }

    /// The controls to claim with: read again when due, else as last read.
    async fn refresh(&mut self, shared: &Shared) -> QueueControls {
        let changed = self.local.has_changed().unwrap_or(false)
            | shared.pauses_stale.swap(false, Ordering::Relaxed);
        if changed || self.read_at.is_none_or(|at| at.elapsed() >= Self::EVERY) {
            self.local.mark_unchanged();
            match shared.store.queue_controls().await {
                Ok(read) => {
                    self.read_at = Some(Instant::now());
                    let mut known = shared
                        .controls
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if *known != read {
                        tracing::info!(paused = ?read.paused, global_limits = ?read.capped, rate_limits = ?read.rated, tenant_limits = ?read.tenant_capped, fair = ?read.fair, "sk: queue controls");
                        *known = read;
                    }
                }
                // Claims go on with the controls known; the claim's own error follows.
                Err(e) => tracing::debug!("sk: cannot read the paused and limited queues: {e}"),
            }
        }
        shared
            .controls
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
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
    /// Fewer, of a queue with a global limit: the limit may have held it back, so it
    /// tries again when one of this worker's jobs ends (other workers' ends are seen at
    /// the next poll).
    Capped,
    /// Fewer, of a queue with a rate limit that let no more start: it tries again when
    /// the limit opens, at this time.
    Held(DateTime<Utc>),
    /// None yet, of a queue claimed alone: few slots are free and more free soon.
    Gathering,
}

/// How long a claim of a queue claimed alone (a global or a rate limit: no prefetch)
/// waits for more slots to free while few are and this worker's other jobs run. Without
/// it, short jobs ending one by one made a claim each: 930 jobs/s at concurrency 16 on
/// PostgreSQL, a claim costing the server about 1 ms whatever its size.
const GATHER: Duration = Duration::from_millis(2);

/// Why a queue is claimed on its own: a concurrency limit across workers (of the queue,
/// or of each of its tenants), a rate limit (of the queue, or of each of its tenants:
/// `tenant_rated`, with `tenant_capped`), fair claims across its tenants.
#[derive(Debug, Default, Clone, Copy)]
struct Alone {
    capped: bool,
    rated: bool,
    fair: bool,
    tenant_capped: bool,
    tenant_rated: bool,
}

impl Alone {
    fn any(self) -> bool {
        self.capped || self.rated || self.fair || self.tenant_capped
    }
}

/// Queues claimed together or one claimed alone: (the queue claimed alone, or `None`;
/// the queues, `None` for every one; why alone; at most this many).
type Group<'a> = (Option<&'a String>, Option<&'a [String]>, Alone, usize);

/// A claim's identity in the producer's `idle` and `held`: the queue claimed alone and
/// the rated job type claimed alone ("" for none).
type Key = (String, String);

/// The worker's job types without a rate limit and those with one, worked out again
/// only when the rated types change.
#[derive(Default)]
struct Plain {
    rated_seen: Vec<String>,
    plain: Vec<String>,
    rated: Vec<String>,
}

impl Plain {
    /// (types without a rate limit, rated types) of `all`, given the rated types.
    fn of(&mut self, all: &[String], rated: &[String]) -> (&[String], &[String]) {
        if self.plain.is_empty() && self.rated.is_empty() || self.rated_seen != rated {
            self.rated_seen = rated.to_vec();
            (self.rated, self.plain) = all.iter().cloned().partition(|t| rated.contains(t));
        }
        (&self.plain, &self.rated)
    }
}

/// What one claim asks for.
struct Request<'a> {
    /// The queues (`None`: every queue).
    queues: Option<&'a [String]>,
    /// Why `queues` is one queue claimed alone, if it is.
    alone: Alone,
    /// At most this many (a queue's own free slots in this worker).
    cap: usize,
    task_types: &'a [String],
    /// The one job type of the claim, when it has a rate limit.
    rated_type: Option<&'a String>,
}

/// Claims up to `cap` jobs of `queues` (and the worker's free slots) and starts them.
/// `alone`: `queues` is one queue with a global or a rate limit, or a fair queue; else the
/// claim skips those. `turn`: a fair queue's tenant to begin after, moved on past the
/// tenants served.
async fn claim(
    shared: &Arc<Shared>,
    known: &QueueControls,
    request: &Request<'_>,
    turn: Option<&mut String>,
    gather: &mut Option<Instant>,
    completions: &UnboundedSender<Completion>,
) -> crate::Result<Claimed> {
    let Request {
        queues,
        alone,
        cap,
        task_types,
        rated_type,
    } = *request;
    // The free slots plus the prefetch, less the jobs waiting already; with every slot
    // busy, nothing until the local queue is down to half its bound, so claims stay large.
    // (A slot is free to start a job only with room for its result, `held`.)
    let slots = shared
        .slots
        .available_permits()
        .min(shared.held.available_permits());
    // A rate counts a job's start as it is claimed (and lets it start within
    // `model::START_ALLOWANCE` of that only), so a claim under one (of the queue, of its
    // tenants or of a job type) takes free slots only: a job waiting here would start
    // later than counted. A limit of running jobs (of the queue, or of each tenant)
    // counts every lease, waiting or running, so what waits here stays within it; but it
    // holds room another worker's free slot could use, so such a claim prefetches at
    // most the worker's concurrency. (A fair queue's claims prefetch as any: a tenant's
    // share can wait behind the jobs of earlier claims, at most the prefetch.)
    let rated = alone.rated || alone.tenant_rated || rated_type.is_some();
    let capped = rated || alone.capped || alone.tenant_capped;
    let prefetch = if rated {
        0
    } else if capped {
        shared.prefetch().min(shared.config.concurrency)
    } else {
        shared.prefetch()
    };
    let waiting = shared.waiting().len();
    if slots == 0 && waiting > prefetch / 2 {
        return Ok(Claimed::NoSlot);
    }
    let free = (slots + prefetch)
        .saturating_sub(waiting)
        .min(cap)
        .min(MAX_CLAIM_BATCH);
    if free == 0 {
        return Ok(Claimed::NoSlot);
    }
    // Claimed alone, with fewer than half the slots free, no cap of the queue's own
    // binding and jobs of this worker running (whose ends will wake the producer): wait
    // up to `GATHER` for more to free, so the claim is larger.
    let busy = shared.config.concurrency > slots;
    if capped && busy && free < (shared.config.concurrency / 2).max(1) && free < cap {
        match *gather {
            None => {
                *gather = Some(Instant::now() + GATHER);
                return Ok(Claimed::Gathering);
            }
            Some(until) if Instant::now() < until => return Ok(Claimed::Gathering),
            Some(_) => {}
        }
    }
    if capped {
        *gather = None;
    }
    let now = shared.now();
    let lease_until = crate::clock::add(now, shared.config.lease);
    let limit = i64::try_from(free).unwrap_or(i64::MAX);
    let skipped;
    let alone_elsewhere = !known.capped.is_empty()
        || !known.rated.is_empty()
        || !known.tenant_capped.is_empty()
        || !known.fair.is_empty();
    let paused = if !alone.any() && alone_elsewhere {
        skipped = [
            &known.paused[..],
            &known.capped[..],
            &known.rated[..],
            &known.tenant_capped[..],
            &known.fair[..],
        ]
        .concat();
        &skipped[..]
    } else {
        &known.paused[..]
    };
    let request = crate::store::Claim {
        task_types,
        queues,
        tenants: shared.tenants.as_deref(),
        paused,
        capped: alone.capped,
        fair: turn.as_deref().map(String::as_str),
        tenant_capped: alone.tenant_capped,
        untenanted: false,
        limit,
        now,
        lease_until,
    };
    // The rate limits the claim takes: its queue's, then its job type's.
    let mut keys: Vec<(&'static str, &str)> = Vec::new();
    if let Some(queue) = queues.and_then(|q| q.first()).filter(|_| alone.rated) {
        keys.push((crate::store::rates::QUEUE, queue));
    }
    if let Some(task_type) = rated_type {
        keys.push((crate::store::rates::TYPE, task_type));
    }
    let (jobs, opens_at, next_turn, claimed_at) = if keys.is_empty() && !alone.tenant_capped {
        (shared.store.claim(&request).await?, None, None, now)
    } else {
        let claimed = shared.store.claim_rated(&request, &keys).await?;
        if claimed.held_tenants > 0 {
            Metrics::add(&shared.metrics.tenant_held, claimed.held_tenants as u64);
            crate::telemetry::tenant_held(
                queues.and_then(|q| q.first()).map_or("", String::as_str),
            );
        }
        (claimed.jobs, claimed.opens_at, claimed.turn, claimed.at)
    };
    // Under a rate, each handler starts within the allowance after the time the claim
    // counted its start, or not at all (`executor::in_time`).
    let start_by = rated.then(|| {
        let allowance = chrono::Duration::from_std(crate::model::START_ALLOWANCE)
            .expect("the allowance is a few milliseconds");
        claimed_at + allowance
    });
    let full = jobs.len() == free;
    if opens_at.is_some() && !full {
        Metrics::add(&shared.metrics.rate_held, 1);
        crate::telemetry::rate_held(
            queues
                .and_then(|q| q.first())
                .filter(|_| alone.rated)
                .map_or("", String::as_str),
            rated_type.map_or("", String::as_str),
        );
    }
    Metrics::add(&shared.metrics.claimed, jobs.len() as u64);
    if let Some(turn) = turn {
        *turn = next_turn.unwrap_or_else(|| {
            let served = jobs.iter().filter_map(|job| job.task_tenant.as_deref());
            crate::store::fair::next_after(turn, served)
        });
    }
    if shared.late(lease_until) && !jobs.is_empty() {
        give_back_late(shared, &jobs, lease_until).await;
        // Their rows are claimable again: claim afresh, with a lease from now.
        return Ok(Claimed::Full);
    }
    // A queue limited in this worker: each job takes one of the queue's slots (the
    // claim took no more than were free) and keeps it while it waits.
    let limit = queues
        .and_then(|q| q.first())
        .and_then(|q| shared.queue_limits.get(q));
    let jobs = jobs
        .into_iter()
        .map(|mut job| {
            job.claimed_at = Some(claimed_at);
            let queue_slot = limit.map(|limit| {
                Arc::clone(limit)
                    .try_acquire_owned()
                    .expect("the claim takes no more jobs than the queue's free slots")
            });
            (job, queue_slot)
        })
        .collect();
    executor::admit(
        shared,
        jobs,
        (lease_until, start_by),
        alone.fair,
        completions,
    );
    Ok(match (full, opens_at, capped) {
        (true, _, _) => Claimed::Full,
        (false, Some(at), _) => Claimed::Held(at),
        (false, None, true) => Claimed::Capped,
        (false, None, false) => Claimed::All,
    })
}

/// Hands back, unstarted and with their attempts intact, the jobs of a claim that came
/// back late (`Shared::late`); a job another worker claimed meanwhile is left to it (the give
/// back is fenced by attempt and worker). If the database refuses, the leases run out on
/// their own.
async fn give_back_late(shared: &Shared, jobs: &[ClaimedJob], lease_until: DateTime<Utc>) {
    let leases: Vec<Lease> = jobs
        .iter()
        .map(|job| Lease {
            id: job.task_id,
            attempt: job.task_attempt,
        })
        .collect();
    let now = shared.now();
    let over = (now - lease_until).to_std().map_or_else(
        |_| "less than a heartbeat interval left".to_owned(),
        |d| format!("{} past it", humantime::format_duration(d)),
    );
    match shared.store.give_back(&leases, now).await {
        Ok(n) => {
            Metrics::add(&shared.metrics.given_back, n);
            tracing::warn!(jobs = leases.len(), given_back = n, "sk: a claim came back too late for its lease ({over}); its jobs were handed back unstarted");
        }
        Err(e) => tracing::warn!(
            jobs = leases.len(),
            "sk: a claim came back too late for its lease ({over}), and handing its jobs back failed (their leases run out on their own): {e}"
        ),
    }
}
