//! Wake-ups from outside the worker. PostgreSQL: LISTEN on a dedicated connection that
//! reconnects; every notification (and every reconnect, since notifications may have
//! been missed) wakes the producer. SQLite and MySQL have no notifications: enqueues in
//! this process wake the worker at once, others are found by the poll interval.

use std::sync::Arc;

use super::Shared;
use crate::store::Store;

pub(super) async fn run(shared: Arc<Shared>) {
    match &shared.store {
        #[cfg(feature = "postgres")]
        Store::Postgres(store) => postgres::run(store.clone(), &shared).await,
        #[cfg(feature = "sqlite")]
        Store::Sqlite(_) => in_process(&shared).await,
        #[cfg(feature = "mysql")]
        Store::MySql(_) => in_process(&shared).await,
    }
}

/// Wakes the producer whenever this process enqueues on SQLite or MySQL (`store::wake`).
#[cfg(any(feature = "sqlite", feature = "mysql"))]
async fn in_process(shared: &Shared) {
    let mut wake_ups = crate::store::wake_ups();
    loop {
        tokio::select! {
            () = shared.stopping.cancelled() => return,
            changed = wake_ups.changed() => match changed {
                Ok(()) => shared.wake.notify_one(),
                Err(_) => return,
            }
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use sqlx::postgres::PgListener;

    use super::super::{producer, Shared};
    use crate::store::postgres::PgStore;

    pub(super) async fn run(store: PgStore, shared: &Shared) {
        let channel = store.schema.channel();
        let mut failures = 0u32;
        while !shared.stopping.is_cancelled() {
            match connect(&store, &channel).await {
                Ok(mut listener) => {
                    if failures > 0 {
                        tracing::info!("sk: listener reconnected after {failures} failed attempts");
                    }
                    failures = 0;
                    shared.wake.notify_one();
                    loop {
                        tokio::select! {
                            () = shared.stopping.cancelled() => return,
                            message = listener.try_recv() => match message {
                                Ok(Some(_)) => shared.wake.notify_one(),
                                // The connection dropped; the next try_recv reconnects.
                                Ok(None) => {
                                    tracing::warn!("sk: listener connection lost; reconnecting");
                                    shared.wake.notify_one();
                                }
                                Err(e) => {
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
            if !shared.pause(producer::backoff(failures.max(1))).await {
                return;
            }
        }
    }

    async fn connect(store: &PgStore, channel: &str) -> crate::Result<PgListener> {
        // The listener takes its connection from the pool: one the store hands out, so an
        // outage is named as it is everywhere else.
        drop(store.acquire().await?);
        let mut listener = PgListener::connect_with(&store.pool).await?;
        listener.listen(channel).await?;
        Ok(listener)
    }
}
