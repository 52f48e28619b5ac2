//! `Client::wait`'s wake-up: jobs finished in this process at once, and on PostgreSQL
//! those of any process through the done channel.

use super::{Pool, Schema};

/// Wakes `Client::wait` when jobs finish: those of this process's workers at once; on
/// PostgreSQL, those of any process through the done channel.
pub(crate) struct Finished {
    local: tokio::sync::watch::Receiver<u64>,
    #[cfg(feature = "postgres")]
    remote: Option<sqlx::postgres::PgListener>,
}

impl Finished {
    /// Starts listening (before the waiter's first look, so nothing is missed). Without a
    /// listener (another backend, or it cannot connect) the waiter polls.
    pub(crate) async fn new(pool: &Pool, schema: &Schema) -> Self {
        #[cfg(feature = "postgres")]
        let remote = match pool {
            // Behind a transaction pooler a LISTEN would stay on a server that goes to
            // other clients: poll.
            Pool::Postgres(pool) if !crate::store::postgres::pooler::pool_keeps(pool) => None,
            Pool::Postgres(pool) => {
                let listen = async {
                    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
                    listener.listen(&schema.done_channel()).await?;
                    Ok::<_, sqlx::Error>(listener)
                };
                listen
                    .await
                    .inspect_err(|e| tracing::debug!("sk: wait polls, cannot listen: {e}"))
                    .ok()
            }
            #[allow(unreachable_patterns)]
            _ => None,
        };
        #[cfg(not(feature = "postgres"))]
        let _ = (pool, schema);
        Finished {
            local: crate::bus::finished(),
            #[cfg(feature = "postgres")]
            remote,
        }
    }

    /// Marks job `id` as waited on, so that its completion notifies the done channel
    /// (PostgreSQL; the others have no notifications). Without the mark (the job is
    /// finished already, or the database fails) the waiter still looks after each poll.
    pub(crate) async fn mark(&self, pool: &Pool, schema: &Schema, id: uuid::Uuid) {
        #[cfg(feature = "postgres")]
        if let (Pool::Postgres(pool), Some(_)) = (pool, &self.remote) {
            let marked = sqlx::query(&format!(
                "UPDATE {} SET task_waited = true WHERE task_id = $1 AND NOT task_waited",
                schema.table("tasks_queue_t")
            ))
            .bind(id)
            .execute(pool)
            .await;
            if let Err(e) = marked {
                tracing::debug!("sk: wait polls, cannot mark job {id} as waited on: {e}");
            }
        }
        #[cfg(not(feature = "postgres"))]
        let _ = (pool, schema, id);
    }

    /// Returns when jobs finished somewhere, or after `at_most`.
    pub(crate) async fn next(&mut self, at_most: std::time::Duration) {
        let local = &mut self.local;
        #[cfg(feature = "postgres")]
        let slot = &mut self.remote;
        #[cfg(feature = "postgres")]
        let remote = async move {
            match slot.as_mut() {
                Some(listener) => {
                    if listener.try_recv().await.is_err() {
                        // Polls from now on.
                        *slot = None;
                    }
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(not(feature = "postgres"))]
        let remote = std::future::pending::<()>();
        tokio::select! {
            _ = local.changed() => {}
            () = remote => {}
            () = tokio::time::sleep(at_most) => {}
        }
    }
}
