//! Wake-ups and control signals from outside the worker. PostgreSQL: LISTEN on a
//! dedicated connection that reconnects (one of the pool's, or a direct one past a
//! transaction pooler, `WorkerBuilder::listen_on`; behind a pooler without it, none:
//! the worker polls); every notification on the queue's channel (and
//! every reconnect, since notifications may have been missed) wakes the producer, and
//! every one on the control channel names jobs cancelled by an operator. SQLite and MySQL
//! have no notifications: enqueues in this process wake the worker at once, others are
//! found by the poll interval; a job cancelled in another process stops at this worker's
//! next heartbeat. On every backend, a cancel in this process stops the job at once.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;

use super::Shared;
use crate::job::StopReason;
use crate::store::Store;

pub(super) async fn run(shared: Arc<Shared>) {
    let cancels = cancels(&shared);
    match &shared.store {
        #[cfg(feature = "postgres")]
        Store::Postgres(store) => {
            tokio::join!(postgres::run(store.clone(), &shared), cancels);
        }
        #[cfg(feature = "sqlite")]
        Store::Sqlite(_) => {
            tokio::join!(in_process(&shared), cancels);
        }
        #[cfg(feature = "mysql")]
        Store::MySql(_) => {
            tokio::join!(in_process(&shared), cancels);
        }
    }
}

/// Stops the jobs cancelled in this process (`store::cancelled`) that this worker runs.
async fn cancels(shared: &Shared) {
    let mut cancels = crate::bus::cancels();
    loop {
        tokio::select! {
            () = shared.stopping.cancelled() => return,
            id = cancels.recv() => match id {
                Ok(id) => signal(shared, id),
                // Missed some: the heartbeat finds those (their rows are gone).
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    }
}

fn signal(shared: &Shared, id: uuid::Uuid) {
    if shared.signal(id, StopReason::Cancelled) {
        tracing::info!(%id, "sk: job cancelled by an operator; asking it to stop");
    }
}

/// Wakes the producer whenever this process enqueues on SQLite or MySQL (`store::wake`).
#[cfg(any(feature = "sqlite", feature = "mysql"))]
async fn in_process(shared: &Shared) {
    let mut wake_ups = crate::bus::wake_ups();
    loop {
        tokio::select! {
            () = shared.stopping.cancelled() => return,
            changed = wake_ups.changed() => match changed {
                Ok(()) => shared.posted_wake(),
                Err(_) => return,
            }
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::atomic::Ordering;

    use sqlx::postgres::PgListener;

    use super::super::Shared;
    use crate::store::postgres::PgStore;

    pub(super) async fn run(store: PgStore, shared: &Shared) {
        let channel = store.schema.channel();
        let control = store.schema.control_channel();
        let direct = shared.config.listen_on.clone();
        if !store.keep && direct.is_none() {
            tracing::info!(
                poll = ?shared.config.poll_interval,
                "sk: the pool is behind a transaction pooler and no direct connection is given \
                 to LISTEN on (WorkerBuilder::listen_on): the worker polls, and sees another \
                 process's cancels at its heartbeat"
            );
            return;
        }
        let mut failures = 0u32;
        while !shared.stopping.is_cancelled() {
            let connecting = connect(&store, direct.as_deref(), &channel, &control);
            let bound = store.bounds.call;
            match crate::store::bound::bounded("listen", bound, || store.address(), connecting)
                .await
            {
                Ok(mut listener) => {
                    if failures > 0 {
                        tracing::info!("sk: listener reconnected after {failures} failed attempts");
                    }
                    failures = 0;
                    shared.posted_wake();
                    let mut moves = crate::bus::moves();
                    moves.borrow_and_update();
                    loop {
                        tokio::select! {
                            () = shared.stopping.cancelled() => return,
                            // Its connection may be to the old primary, which may be
                            // silent: nothing would tell it so.
                            _ = moves.changed() => {
                                tracing::info!("sk: the primary moved; the listener reconnects to the new one");
                                break;
                            }
                            message = listener.try_recv() => match message {
                                Ok(Some(n)) if n.channel() == control => {
                                    if n.payload() == "pauses" {
                                        shared.pauses_stale.store(true, Ordering::Relaxed);
                                        shared.posted_wake();
                                    }
                                    // `cancel:<id>,<id>,...`
                                    let ids = n.payload().strip_prefix("cancel:").unwrap_or_default();
                                    for id in ids.split(',').filter_map(|id| id.parse().ok()) {
                                        super::signal(shared, id);
                                    }
                                }
                                Ok(Some(_)) => shared.posted_wake(),
                                // The connection dropped; the next try_recv reconnects.
                                Ok(None) => {
                                    tracing::warn!("sk: listener connection lost; reconnecting");
                                    shared.posted_wake();
                                }
                                Err(e) => {
                                    // Its reconnect waits on the pool, whose timeout names
                                    // no cause: a direct connection says why.
                                    let e = shared.store.explained(e.into()).await;
                                    tracing::warn!("sk: listener failed: {e}");
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(
                        "sk: listener cannot connect (attempt {failures}); polling meanwhile: {e}"
                    );
                }
            }
            if !shared
                .pause(crate::retry::database_backoff(failures.max(1)))
                .await
            {
                return;
            }
        }
    }

    async fn connect(
        store: &PgStore,
        direct: Option<&str>,
        channel: &str,
        control: &str,
    ) -> crate::Result<PgListener> {
        let mut listener = match direct {
            // A direct connection past the transaction pooler (`listen_on`): to the
            // writable host of a host list, within the worker's call bound.
            Some(url) => {
                let bound = store.bounds.call;
                let connected = tokio::time::timeout(bound, direct_listener(url)).await;
                let cause = match connected {
                    Ok(Ok(listener)) => Ok(listener),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {}", crate::clock::shown(bound))),
                };
                cause.map_err(|cause| crate::Error::Connect {
                    address: crate::store::without_password(url),
                    cause,
                })?
            }
            None => {
                // The listener takes its connection from the pool: one the store hands
                // out, so an outage is named as it is everywhere else.
                drop(store.acquire().await?);
                PgListener::connect_with(&store.pool).await?
            }
        };
        listener.listen_all([channel, control]).await?;
        Ok(listener)
    }

    /// A listener on `url`'s host, or of a host list, on the first host that takes
    /// writes (where the workers' notifications are sent).
    async fn direct_listener(url: &str) -> crate::Result<PgListener> {
        use crate::store::postgres::primary::{writable_hosts, Hosts};
        let hosts = Hosts::parse(url)?;
        let options = match hosts.several() {
            true => writable_hosts(&hosts)
                .await
                .into_iter()
                .map(|(i, _)| i)
                .min()
                .and_then(|i| hosts.each().nth(i).cloned())
                .ok_or_else(|| {
                    crate::Error::invalid("listen_on", "no host of the list takes writes")
                })?,
            false => hosts.first(),
        };
        // As `PgListener::connect`'s own pool.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(options);
        Ok(PgListener::connect_with(&pool).await?)
    }
}
