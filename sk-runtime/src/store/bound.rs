//! Every wait toward the database has a bound: each call of the driver contract
//! (`driver`) runs under a client-side deadline, and a call that runs past it is
//! abandoned, its connection closed rather than handed back to the pool.
//!
//! The deadline is sk's own (a timer around the call), not the socket's: sqlx 0.8 opens
//! its TCP connections itself and sets neither keepalive nor `TCP_USER_TIMEOUT` on them,
//! so a host that goes silent (its packets dropped, not refused) holds a statement until
//! the kernel's retransmissions give up, 15 minutes and more by default
//! (`net.ipv4.tcp_retries2`). With the deadline, sk knows within the bound.
//!
//! An abandoned call's connection may be anywhere in a statement. A pooled connection
//! that sqlx gets back that way is pinged before it goes back to the pool, with no bound
//! of sqlx's own, which keeps it (and its place in the pool) for as long as the kernel
//! keeps the socket. So sk closes it instead: the connections sk acquires itself
//! ([`Guarded`]) are detached from the pool when the deadline drops them; the pools sk
//! makes ([`hooks`]) ping a returning connection under the bound while a recent call
//! missed its deadline, and drop the connections opened before the primary last moved.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A worker's bound on one call to the database (claim, completion, heartbeat, ...),
/// unless `WorkerBuilder::call_timeout` sets another.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker's bound on one call of its upkeep (migrations, partitions, pruning, vacuum):
/// these may work through many rows.
pub const UPKEEP_TIMEOUT: Duration = Duration::from_secs(300);

/// The bound on one call of a [`Client`](crate::Client) or the dashboard (a listing, a
/// control, counts).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The bound on a migration run from a client (`sk migrate`, [`crate::migrate`]).
pub const MIGRATE_TIMEOUT: Duration = Duration::from_secs(3600);

/// A worker's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Each call of the pipeline.
    pub(crate) call: Duration,
    /// Each call of the upkeep.
    pub(crate) upkeep: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            call: CALL_TIMEOUT,
            upkeep: UPKEEP_TIMEOUT,
        }
    }
}

impl Bounds {
    /// The bound of the driver's operation `call` on a worker's store.
    pub(crate) fn of(&self, call: &str) -> Duration {
        match call {
            "migrate" | "ensure_partitions" | "retire_partitions" | "table_health" | "vacuum"
            | "prune_job_stats" | "prune_tenant_logs" => self.upkeep,
            _ => self.call,
        }
    }
}

/// The bound of the driver's operation `call` on a client's pool.
pub(crate) fn client_bound(call: &str) -> Duration {
    match call {
        "migrate" => MIGRATE_TIMEOUT,
        _ => CLIENT_TIMEOUT,
    }
}

thread_local! {
    /// Set while a call that ran past its bound is being dropped: what it held closes.
    static ABANDONING: Cell<bool> = const { Cell::new(false) };
}

/// The process's start, for the instants kept in atomics below.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

/// When a call last ran past its bound, in milliseconds after [`BASE`] plus one (0:
/// never).
static MISSED: AtomicU64 = AtomicU64::new(0);

/// When a pool of this process last moved to another primary (as [`MISSED`]).
static MOVED: AtomicU64 = AtomicU64::new(0);

fn stamp(at: &AtomicU64) {
    let ms = u64::try_from(BASE.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
    at.store(ms + 1, Ordering::Relaxed);
}

fn since(at: &AtomicU64) -> Option<Duration> {
    match at.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(BASE.elapsed().saturating_sub(Duration::from_millis(ms - 1))),
    }
}

/// Whether the call being dropped on this thread ran past its bound.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn abandoning() -> bool {
    ABANDONING.with(Cell::get)
}

/// Notes that a call did not answer in time though it ran under no bound of its own
/// (the primary's watch): returning connections are checked under a bound from now.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn missed() {
    stamp(&MISSED);
}

/// Bumped when a pool of this process moved away from a primary that had stopped
/// answering (`postgres::primary`'s watch): [`bounded`] calls still waiting are dropped.
/// Not at every move: at a start on a standby, or after a primary that refuses
/// connections, the calls in flight are not waiting on a silent host.
static LEFT_SILENT: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

/// The host of the last [`left_silent_host`], which the calls it cut were waiting on.
static LEFT_FROM: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// What a call cut by [`left_silent_host`] says of its outcome.
pub(crate) const MOVED_AWAY: &str = "the primary moved to another host meanwhile";

/// Notes that a pool of this process moved away from `from`, a primary that stopped
/// answering.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn left_silent_host(from: String) {
    *LEFT_FROM
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = from;
    LEFT_SILENT.send_modify(|n| *n = n.wrapping_add(1));
}

/// Whether `e` is a call cut by a move away from a silent primary: its caller logs it at
/// DEBUG, the move itself being said once, at WARN, by the watch.
pub(crate) fn cut_by_a_move(e: &Error) -> bool {
    matches!(e, Error::TimedOut { outcome: Some(o), .. } if o == MOVED_AWAY)
}

/// `tracing::warn!`, or `debug!` when the error `$e` is a call cut by a move away from a
/// silent primary ([`cut_by_a_move`]).
macro_rules! warn_unless_moved {
    ($e:expr, $($arg:tt)+) => {
        if $crate::store::bound::cut_by_a_move($e) {
            tracing::debug!($($arg)+)
        } else {
            tracing::warn!($($arg)+)
        }
    };
}
pub(crate) use warn_unless_moved;

/// The error of a call that waited `started.elapsed()` (or its whole `bound`, unless
/// `moved`) and was dropped.
fn cut(
    call: &'static str,
    bound: Duration,
    address: impl FnOnce() -> String,
    moved: Option<Instant>,
) -> Error {
    match moved {
        Some(started) => Error::TimedOut {
            call,
            address: LEFT_FROM
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            // To the millisecond: sub-millisecond digits say nothing here.
            bound: Duration::from_millis(
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            ),
            outcome: Some(MOVED_AWAY.to_owned()),
        },
        None => Error::TimedOut {
            call,
            address: address(),
            bound,
            outcome: None,
        },
    }
}

/// Notes that a pool of this process moved to another primary: the connections opened
/// before now are to the old one.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn moved() {
    stamp(&MOVED);
}

/// How long ago a pool of this process last moved to another primary.
pub(crate) fn since_move() -> Option<Duration> {
    since(&MOVED)
}

/// What a bounded call returns: a result whose error can say that the call timed out.
pub(crate) trait Bounded: Sized {
    /// The call's result when it ran past its bound.
    fn timed_out(error: Error) -> Self;
}

impl<T> Bounded for Result<T> {
    fn timed_out(error: Error) -> Self {
        Err(error)
    }
}

impl Bounded for std::result::Result<(), super::ProbeFailure> {
    fn timed_out(error: Error) -> Self {
        Err(super::ProbeFailure::Transient(error))
    }
}

/// `future`, or within `bound` an [`Error::TimedOut`] naming `call` and `address`; a
/// call past its bound is dropped at once, and what it held marked abandoned
/// ([`abandoning`]). So is a call still waiting when a pool of this process moves away
/// from a primary that stopped answering ([`left_silent_host`]): it waits on that host,
/// which may never answer, and its caller can try again on the new one now rather than
/// at the end of the bound.
pub(crate) async fn bounded<R: Bounded>(
    call: &'static str,
    bound: Duration,
    address: impl FnOnce() -> String,
    future: impl Future<Output = R>,
) -> R {
    let mut moves = LEFT_SILENT.subscribe();
    moves.borrow_and_update();
    let started = Instant::now();
    let mut future = Box::pin(future);
    let moved = tokio::select! {
        ended = tokio::time::timeout(bound, &mut future) => match ended {
            Ok(result) => return result,
            Err(_) => false,
        },
        Ok(()) = moves.changed() => true,
    };
    abandon(future);
    R::timed_out(cut(call, bound, address, moved.then_some(started)))
}

/// `task` run on a task of its own and waited for at most `bound`: past it, the caller
/// gets [`Error::TimedOut`] and the task runs on to its end, never cut midway. For what
/// owns a pooled connection that sk cannot close itself (a job's transaction): sqlx's
/// futures are not safe to drop midway (MySQL's `BEGIN` cut after it was sent leaves the
/// server in a transaction sqlx does not know of, and the connection goes back to its
/// pool that way), so such a call is let finish, late, rather than dropped.
///
/// It runs on until the primary moves away from its host, no longer: its connection is
/// then to the old host, which may never answer, and would hold a slot of its pool for
/// as long as the kernel keeps the socket (a pool full of them was a worker stalled
/// after a failover). Aborted then, the task drops its connection, which its pool closes
/// rather than hands out (`hooks`: opened before the move); only PostgreSQL pools move.
/// A move away from a host that stopped answering ([`left_silent_host`]) ends the wait
/// at once, as in [`bounded`].
pub(crate) async fn detached<T: Send + 'static>(
    call: &'static str,
    bound: Duration,
    address: impl FnOnce() -> String,
    task: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let mut moves = crate::bus::moves();
    moves.borrow_and_update();
    let mut silent = LEFT_SILENT.subscribe();
    silent.borrow_and_update();
    let started = Instant::now();
    let mut running = tokio::spawn(task);
    let moved = tokio::select! {
        ended = tokio::time::timeout(bound, &mut running) => match ended {
            Ok(Ok(result)) => return result,
            Ok(Err(join)) => {
                return Err(Error::invalid(
                    call,
                    format!("its task ended without a result: {join}"),
                ))
            }
            Err(_) => false,
        },
        Ok(()) = silent.changed() => true,
    };
    stamp(&MISSED);
    if moved {
        running.abort();
    } else {
        tokio::spawn(async move {
            tokio::select! {
                _ = &mut running => {}
                changed = moves.changed() => {
                    if changed.is_ok() {
                        running.abort();
                    }
                }
            }
        });
    }
    Err(cut(call, bound, address, moved.then_some(started)))
}

/// The bound of an enqueue of one job.
pub(crate) const ENQUEUE_ONE: Duration = CALL_TIMEOUT;

/// The bound of an enqueue of many jobs, a batch or a workflow.
pub(crate) const ENQUEUE_MANY: Duration = CLIENT_TIMEOUT;

/// An enqueue's write under `bound`, in two steps whose outcome differs: the
/// connection (`acquire`; past the bound nothing was sent, so nothing is stored), then
/// the statement (`write`; past the bound it may have been stored, by `ids`).
pub(crate) async fn enqueue<C, T, A, W, F>(
    bound: Duration,
    ids: &[uuid::Uuid],
    acquire: A,
    write: W,
) -> Result<T>
where
    A: Future<Output = std::result::Result<C, sqlx::Error>>,
    W: FnOnce(C) -> F,
    F: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + bound;
    let timed_out = |outcome: String| Error::TimedOut {
        call: "enqueue",
        address: String::new(),
        bound,
        outcome: Some(outcome),
    };
    let mut acquire = Box::pin(acquire);
    let conn = match tokio::time::timeout_at(deadline, &mut acquire).await {
        Ok(conn) => conn?,
        Err(_) => {
            abandon(acquire);
            return Err(timed_out("nothing was sent: not stored".to_owned()));
        }
    };
    let mut write = Box::pin(write(conn));
    match tokio::time::timeout_at(deadline, &mut write).await {
        Ok(result) => result,
        Err(_) => {
            abandon(write);
            let ids = match ids {
                [one] => format!("job {one}"),
                [first, .., last] => format!("its {} jobs, {first} to {last},", ids.len()),
                [] => "the jobs".to_owned(),
            };
            Err(timed_out(format!(
                "the statement was sent, so whether {ids} were stored is unknown: look \
                 them up by id (in the application's own transaction, that transaction \
                 cannot commit)"
            )))
        }
    }
}

/// Drops a call that ran past its bound, so that what it holds closes.
pub(crate) fn abandon<F>(future: F) {
    stamp(&MISSED);
    ABANDONING.with(|a| a.set(true));
    drop(future);
    ABANDONING.with(|a| a.set(false));
}

/// Whether a call missed its bound within the last `window`: returning connections are
/// then checked under a bound.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn missed_within(window: Duration) -> bool {
    since(&MISSED).is_some_and(|ago| ago < window)
}

/// A pooled connection that sk acquired itself: as `PoolConnection`, but dropped by a
/// call that ran past its bound it is detached from the pool and its socket closed, so
/// the pool opens a new one instead of waiting on the old one's ping.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) struct Guarded<DB: sqlx::Database>(Option<sqlx::pool::PoolConnection<DB>>);

#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
impl<DB: sqlx::Database> Guarded<DB> {
    pub(crate) fn new(conn: sqlx::pool::PoolConnection<DB>) -> Self {
        Guarded(Some(conn))
    }

    /// The pooled connection itself (for a transaction that owns it).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn into_inner(mut self) -> sqlx::pool::PoolConnection<DB> {
        self.0
            .take()
            .expect("a guarded connection is held until dropped")
    }
}

impl<DB: sqlx::Database> std::ops::Deref for Guarded<DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        self.0
            .as_ref()
            .expect("a guarded connection is held until dropped")
    }
}

impl<DB: sqlx::Database> std::ops::DerefMut for Guarded<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.0
            .as_mut()
            .expect("a guarded connection is held until dropped")
    }
}

impl<DB: sqlx::Database> Drop for Guarded<DB> {
    fn drop(&mut self) {
        if abandoning() {
            if let Some(conn) = self.0.take() {
                // Dropping the connection itself closes its socket; the pool may open
                // another in its place.
                drop(conn.detach());
            }
        }
    }
}

/// The hooks of a pool sk makes: a connection opened before the primary last moved is
/// not handed out again (`before_acquire`) nor taken back (`after_release`), and while
/// calls miss their bound, a returning connection must answer a ping within `bound` to
/// be taken back (sqlx's own ping before that has no bound).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) mod hooks {
    use super::*;

    /// How long after a missed bound returning connections are checked.
    const CHECK_FOR: Duration = Duration::from_secs(60);

    /// Whether a connection `age` old was opened before the primary last moved.
    pub(crate) fn before_the_move(age: Duration) -> bool {
        since_move().is_some_and(|ago| age > ago)
    }

    /// Whether a returning connection `age` old goes back to the pool.
    pub(crate) async fn take_back<C: sqlx::Connection>(
        conn: &mut C,
        age: Duration,
        bound: Duration,
    ) -> bool {
        if before_the_move(age) {
            return false;
        }
        if !missed_within(CHECK_FOR) {
            return true;
        }
        matches!(tokio::time::timeout(bound, conn.ping()).await, Ok(Ok(())))
    }

    /// `options` with the hooks, and sqlx's slow-acquire warning at DEBUG.
    pub(crate) fn on<DB: sqlx::Database>(
        options: sqlx::pool::PoolOptions<DB>,
        bound: Duration,
    ) -> sqlx::pool::PoolOptions<DB> {
        options
            // A slow acquire is what a move or a silent host costs every task at once:
            // sk says so once, in the error of the call that could not get a
            // connection, not sqlx in a line per task.
            .acquire_slow_level(log::LevelFilter::Debug)
            .before_acquire(|_, meta| Box::pin(async move { Ok(!before_the_move(meta.age)) }))
            .after_release(move |conn, meta| {
                Box::pin(async move { Ok(take_back(conn, meta.age, bound).await) })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upkeep_calls_have_the_longer_bound() {
        let bounds = Bounds {
            call: Duration::from_secs(2),
            upkeep: Duration::from_secs(60),
        };
        assert_eq!(bounds.of("claim"), Duration::from_secs(2));
        assert_eq!(bounds.of("extend"), Duration::from_secs(2));
        assert_eq!(bounds.of("vacuum"), Duration::from_secs(60));
        assert_eq!(client_bound("list_jobs"), CLIENT_TIMEOUT);
        assert_eq!(client_bound("migrate"), MIGRATE_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_bound_is_dropped_and_named() {
        struct Marks(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Marks {
            fn drop(&mut self) {
                self.0.store(abandoning(), Ordering::SeqCst);
            }
        }
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Marks(seen.clone());
        let e: Error = bounded::<Result<()>>(
            "claim",
            Duration::from_secs(2),
            || "db:5432/app".to_owned(),
            async move {
                let _held = held;
                std::future::pending::<()>().await;
                Ok(())
            },
        )
        .await
        .unwrap_err();
        assert!(seen.load(Ordering::SeqCst), "dropped as abandoned");
        assert!(!abandoning());
        assert_eq!(
            e.to_string(),
            "claim on the database at db:5432/app did not finish within 2s; sk closed its \
             connection"
        );
        let ok: Result<i32> = bounded("claim", Duration::from_secs(2), String::new, async {
            Ok(7)
        })
        .await;
        assert_eq!(ok.unwrap(), 7);
    }
}
