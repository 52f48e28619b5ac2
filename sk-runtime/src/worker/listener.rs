//! LISTEN on a dedicated connection that reconnects; every notification (and every
//! reconnect, since notifications may have been missed) wakes the producer. PostgreSQL's
//! own: a backend without LISTEN/NOTIFY wakes by its poll interval.

use std::sync::Arc;

use sqlx::postgres::PgListener;

use super::{producer, Shared};
use crate::store::postgres::PgStore;
use crate::store::Store;

pub(super) async fn run(shared: Arc<Shared>) {
    let store = match &shared.store {
        Store::Postgres(store) => store.clone(),
    };
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
