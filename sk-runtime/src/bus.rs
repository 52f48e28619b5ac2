//! The in-process bus: what one part of a process tells the others at once, without the
//! database. An enqueue wakes the workers (SQLite, MySQL), a cancel stops a running job,
//! finished jobs wake `Client::wait`, a pause makes the workers read the queues again,
//! a pool that moved to a new primary cuts the workers' waits before a retry short.

use std::sync::LazyLock;

use uuid::Uuid;

/// Wakes this process's workers on backends without notifications (SQLite, MySQL):
/// every enqueue bumps it, every such worker's listener watches it. One for all databases
/// of the process: a wake-up for another database costs a worker one claim that finds
/// nothing.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
static WAKE: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn wake() {
    WAKE.send_modify(|n| *n = n.wrapping_add(1));
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn wake_ups() -> tokio::sync::watch::Receiver<u64> {
    WAKE.subscribe()
}

/// Cancelled jobs, for this process's workers to stop them at once if they run them (on
/// every backend; PostgreSQL tells other processes by a notification on
/// `Schema::control_channel`, the others by the next heartbeat).
static CANCELS: LazyLock<tokio::sync::broadcast::Sender<Uuid>> =
    LazyLock::new(|| tokio::sync::broadcast::channel(1024).0);

pub(crate) fn cancelled(ids: &[Uuid]) {
    for id in ids {
        let _ = CANCELS.send(*id);
    }
    // Cancelled jobs are final.
    jobs_finished();
}

pub(crate) fn cancels() -> tokio::sync::broadcast::Receiver<Uuid> {
    CANCELS.subscribe()
}

/// Bumped when a worker or a cancel of this process records final outcomes, so
/// `Client::wait` in this process looks again at once.
static FINISHED: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

pub(crate) fn jobs_finished() {
    FINISHED.send_modify(|n| *n = n.wrapping_add(1));
}

/// Bumped when this process pauses or resumes a queue or sets its global limit, so its
/// workers read the queues table again at once (PostgreSQL also tells other processes, on the control channel).
static PAUSES: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

pub(crate) fn pauses_changed() {
    PAUSES.send_modify(|n| *n = n.wrapping_add(1));
}

pub(crate) fn pauses() -> tokio::sync::watch::Receiver<u64> {
    PAUSES.subscribe()
}

/// Bumped when a pool of this process moved to another host (`postgres::primary`, a
/// failover), so the workers waiting to retry a failed statement try again at once
/// instead of at the end of their backoff.
static MOVED: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn database_moved() {
    MOVED.send_modify(|n| *n = n.wrapping_add(1));
}

/// A receiver of the moves of this process's pools to another host (`database_moved`).
pub(crate) fn moves() -> tokio::sync::watch::Receiver<u64> {
    MOVED.subscribe()
}

/// Sleeps for `d`, or until a pool of this process moves to another host
/// (`database_moved`): the wait before retrying a failed statement.
pub(crate) async fn backoff(d: std::time::Duration) {
    let mut moved = MOVED.subscribe();
    moved.borrow_and_update();
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        _ = moved.changed() => {}
    }
}

/// A receiver of the finished jobs' count (`jobs_finished`).
pub(crate) fn finished() -> tokio::sync::watch::Receiver<u64> {
    FINISHED.subscribe()
}
