//! Job events of workers in other processes, on the client handle (PostgreSQL's
//! LISTEN/NOTIFY): what the workers that publish them (`WorkerBuilder::publish_events`)
//! see happen to their jobs.

use super::Client;
use crate::error::{Error, Result};
use crate::worker::events::{JobEvent, JobEvents};

impl Client {
    /// The job events of every worker on this database that publishes them
    /// ([`WorkerBuilder::publish_events`](crate::WorkerBuilder::publish_events)), from now
    /// on: each run's start and recorded outcome, as [`Worker::subscribe`](crate::Worker::subscribe)
    /// gives them in the worker's own process. Events arrive within about 50 ms of their
    /// outcome, in each worker's order. The stream is bounded as the worker's is: a
    /// subscriber more than 4,096 events behind misses the oldest, and its next `recv`
    /// says how many (`RecvError::Lagged(n)`); a publishing worker that fell behind logs
    /// how many it missed, here and in its own process. Events are not stored: those of a moment the subscription's
    /// connection was down are missed (it reconnects), and `Client::job` reads a job's
    /// state when it must be sure. The subscription holds one connection of its own, given
    /// back once every receiver is dropped and the next event (or a minute) comes.
    ///
    /// # Errors
    /// [`Error::Invalid`] on SQLite and MySQL, which cannot notify another process (a
    /// worker's own process subscribes with `Worker::subscribe`), and on a PostgreSQL
    /// pool behind a transaction pooler (PgBouncer); the database fails. A client across
    /// several databases subscribes on each one, into one stream.
    pub async fn subscribe(&self) -> Result<JobEvents> {
        let (tx, rx) = tokio::sync::broadcast::channel(crate::worker::events::BUFFER);
        for part in self.parts() {
            part.listen(tx.clone()).await?;
        }
        Ok(rx)
    }

    /// Sends the job events of this client's (one) database to `tx`.
    async fn listen(
        &self,
        #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
        tx: tokio::sync::broadcast::Sender<JobEvent>,
    ) -> Result<()> {
        match &self.pool {
            #[cfg(feature = "postgres")]
            crate::Pool::Postgres(pool) if !crate::store::postgres::pooler::pool_keeps(pool) => {
                Err(Error::invalid(
                    "events",
                    "this pool is behind a transaction pooler (its statement cache is off), where LISTEN does not hold: subscribe on a Client of a direct connection to the database",
                ))
            }
            #[cfg(feature = "postgres")]
            crate::Pool::Postgres(pool) => {
                let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
                listener.listen(&self.schema.events_channel()).await?;
                tokio::spawn(forward(listener, tx));
                Ok(())
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::invalid(
                "events",
                "another process's job events need PostgreSQL's LISTEN/NOTIFY; on SQLite and MySQL, subscribe in the worker's process (Worker::subscribe)",
            )),
        }
    }
}

/// Sends each published event to the subscribers until none is left.
#[cfg(feature = "postgres")]
async fn forward(
    mut listener: sqlx::postgres::PgListener,
    tx: tokio::sync::broadcast::Sender<JobEvent>,
) {
    loop {
        let message =
            tokio::time::timeout(std::time::Duration::from_secs(60), listener.try_recv()).await;
        if tx.receiver_count() == 0 {
            return;
        }
        let payload = match message {
            Err(_) => continue,
            Ok(Ok(Some(n))) => n.payload().to_owned(),
            // The connection dropped: the next `try_recv` reconnects.
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => {
                tracing::warn!("sk: the job events' subscription failed: {e}");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        let Ok(serde_json::Value::Array(events)) = serde_json::from_str(&payload) else {
            tracing::warn!("sk: a job events payload that does not read as one");
            continue;
        };
        for event in &events {
            if let Some(event) = crate::worker::events::from_wire(event) {
                let _ = tx.send(event);
            } else if let Some(n) = event.get("n").filter(|_| event["k"] == "missed") {
                tracing::warn!("sk: a worker publishing job events fell behind and missed {n}");
            }
        }
    }
}
