//! Extends the leases of jobs this worker holds, and notices leases it lost.

use std::sync::Arc;

use tokio::sync::mpsc::WeakUnboundedSender;
use tokio_util::sync::CancellationToken;

use super::completer::Completion;
use super::{RunState, Shared};
use crate::job::StopReason;
use crate::store::Lease;

/// `completions`: where a job given up (`give_up`) is handed back; weak, so the
/// completer still ends once the pipeline's senders are gone.
pub(super) async fn run(
    shared: Arc<Shared>,
    stop: CancellationToken,
    completions: WeakUnboundedSender<Completion>,
) {
    let every = shared
        .config
        .heartbeat
        .expect("build() sets the heartbeat interval");
    // At a move of the primary, the runs stuck on the old host are given up at once,
    // not at the next beat: a beat comes a third of the lease later (10 s by default),
    // and may itself wait on the old host for its bound.
    // It ends with this task, however this one ends (its guard is dropped with it).
    let moves_stop = stop.child_token();
    let _moves_guard = moves_stop.clone().drop_guard();
    tokio::spawn(give_up_at_moves(
        shared.clone(),
        moves_stop,
        completions.clone(),
    ));
    let mut depth_read: Option<std::time::Instant> = None;
    let mut queues_known = Vec::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // The leases first: on a database whose writers take turns (SQLite), each of
        // the other writes below may wait, and a lease that waits behind them may run out.
        give_up(&shared, &completions);
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

/// Runs [`give_up`] at each move of a pool of this process to another host, until `stop`.
async fn give_up_at_moves(
    shared: Arc<Shared>,
    stop: CancellationToken,
    completions: WeakUnboundedSender<Completion>,
) {
    let mut moves = crate::bus::moves();
    moves.borrow_and_update();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = moves.changed() => {
                if changed.is_err() {
                    return;
                }
                give_up(&shared, &completions);
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
        Err(e) => crate::store::bound::warn_unless_moved!(
            &e,
            jobs = leases.len(),
            "sk: heartbeat failed; leases run out at the latest {:?} after the last success unless it recovers: {e}",
            shared.config.lease
        ),
    }
}

/// Gives up the jobs this worker can no longer finish: those whose own transaction
/// began on a host before the primary moved away from it. That transaction cannot
/// commit, and its connection may wait on a silent host for as long as the kernel keeps
/// the socket; extending its lease would hold the job for as long. Its run is stopped
/// (its connection closes with it) and its lease handed back on a connection that works,
/// so the job runs again at once.
fn give_up(shared: &Shared, completions: &WeakUnboundedSender<Completion>) {
    let Some(moved) = crate::store::bound::since_move() else {
        return;
    };
    let mut lost = Vec::new();
    {
        let mut running = shared.running();
        for (lease, entry) in running.iter_mut() {
            let Some((began, host)) = &entry.transaction else {
                continue;
            };
            if !matches!(entry.state, RunState::Claimed | RunState::Started)
                || began.elapsed() <= moved
            {
                continue;
            }
            entry.state = RunState::GivenBack;
            if let Some(abort) = &entry.abort {
                abort.abort();
            }
            lost.push((*lease, host.clone()));
        }
    }
    if let Some((_, host)) = lost.first() {
        let ids: Vec<String> = lost.iter().take(5).map(|(l, _)| l.id.to_string()).collect();
        tracing::warn!(
            jobs = lost.len(),
            host = %host,
            "sk: {} jobs' transactions are on {host}, which the primary moved away from {} ago; they cannot commit there, so their runs are stopped and their leases handed back: they run again (jobs {}{})",
            lost.len(),
            crate::clock::shown(moved),
            ids.join(", "),
            if lost.len() > ids.len() { ", ..." } else { "" }
        );
    }
    let Some(completions) = completions.upgrade() else {
        return;
    };
    for (lease, _) in lost {
        let _ = completions.send(Completion::GiveBack { lease, slot: None });
    }
}
