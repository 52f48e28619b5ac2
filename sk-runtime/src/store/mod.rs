//! The storage boundary. All SQL lives below this module, one module per backend with
//! its own migrations folder; the worker and the client speak only in the
//! backend-neutral types defined here: `Pool` (the client's) and `Store` (a worker's),
//! which dispatch to the backend they hold through the driver contract (`driver`); the
//! rows they pass (`rows`), the tables' names (`schema`), the rules of jobs that wait on
//! others (`flow`), rate limits and a claim's take of them (`rates`), fair claims (`fair`), what the list
//! queries share (`listing`), `Client::wait`'s wake-up
//! (`wait`), and the `Backend` trait of enqueue and a job's transaction (`backend`).

mod backend;
pub(crate) mod batch;
pub(crate) mod bound;
mod bulk;
pub(crate) mod conformance;
mod dialect;
mod driver;
pub(crate) mod fair;
mod flow;
pub(crate) mod listing;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
mod pool;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod queries;
pub(crate) mod rates;
mod rows;
mod schema;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
mod task_types;
pub(crate) mod tenants;
mod wait;
mod worker_rows;
pub(crate) mod workflows;

pub(crate) use backend::with_keeps;
pub use backend::{Backend, Executor};
pub use pool::Pool;
pub use schema::Schema;

pub(crate) use flow::*;
pub(crate) use pool::*;
pub(crate) use rates::RatedClaim;
pub(crate) use rows::*;
pub(crate) use schema::*;
pub(crate) use wait::*;

use uuid::Uuid;

use crate::error::{Error, Result};

/// How sk reads a NULL `task_priority`, and records it where the column is NOT NULL (the
/// results): the last integer, since PostgreSQL sorts NULL after every priority in the
/// claim's `ORDER BY task_priority`, as seed 001's dequeue does (PostgreSQL migration 14).
pub(crate) const NULL_PRIORITY: i32 = i32::MAX;

/// Whether `error` says a table does not exist (PostgreSQL, MySQL or SQLite).
#[allow(dead_code)] // Not every backend combination reads it.
pub(crate) fn no_such_table(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(e) => {
            matches!(e.code().as_deref(), Some("42P01" | "42S02"))
                || e.message().contains("no such table")
        }
        _ => false,
    }
}

/// Why a direct connection attempt failed.
pub(crate) enum ProbeFailure {
    /// Waiting can cure it: refused, reset, timed out, the server starting up or full.
    Transient(Error),
    /// It needs a change of configuration: authentication, an unknown database, TLS.
    Permanent(Error),
}

/// The worker's store: one variant per backend (cargo features), each method a `match`,
/// so the worker's pipeline (claim, execute, finalize, heartbeats, schedules, upkeep) is
/// the same code on every backend, with static dispatch.
#[derive(Clone)]
pub(crate) enum Store {
    #[cfg(feature = "postgres")]
    Postgres(postgres::PgStore),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::SqliteStore),
    #[cfg(feature = "mysql")]
    MySql(mysql::MySqlStore),
}

impl Store {
    /// The store's pool and schema, for the client calls a worker makes itself.
    pub(crate) fn client_side(&self) -> (Pool, &Schema) {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => (Pool::Postgres(s.pool.clone()), &s.schema),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(s) => (Pool::Sqlite(s.pool.clone()), &s.schema),
            #[cfg(feature = "mysql")]
            Store::MySql(s) => (Pool::MySql(s.pool.clone()), &s.schema),
        }
    }

    /// The bound of the driver's operation `call` (`store::bound`).
    pub(crate) fn bound_of(&self, call: &str) -> std::time::Duration {
        self.bounds().of(call)
    }

    /// The worker's bounds.
    pub(crate) fn bounds(&self) -> &bound::Bounds {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => &store.bounds,
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => &store.bounds,
            #[cfg(feature = "mysql")]
            Store::MySql(store) => &store.bounds,
        }
    }

    /// This worker's id, as stored in leases and metrics.
    pub(crate) fn worker_id(&self) -> &str {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => &store.worker_id,
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => &store.worker_id,
            #[cfg(feature = "mysql")]
            Store::MySql(store) => &store.worker_id,
        }
    }

    /// Sends `payloads` on the schema's events channel (`WorkerBuilder::publish_events`,
    /// which only PostgreSQL builds: elsewhere nothing is sent).
    #[cfg(feature = "postgres")]
    pub(crate) async fn publish_events(&self, payloads: &[String]) -> Result<()> {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => {
                let mut held = store.held().await?;
                sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
                    .bind(store.schema.events_channel())
                    .bind(payloads)
                    .execute(held.on())
                    .await?;
                held.done().await?;
                Ok(())
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = payloads;
                Ok(())
            }
        }
    }

    /// The server's connection limit for clients like sk and how many connections it
    /// has open now (`None` for SQLite, which has no server).
    pub(crate) async fn connection_room(&self) -> Result<Option<(i64, i64)>> {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.connection_room().await.map(Some),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(_) => Ok(None),
            #[cfg(feature = "mysql")]
            Store::MySql(store) => store.connection_room().await.map(Some),
        }
    }

    /// `error` with its cause, when it is a pool's timeout (sqlx's says only that it timed
    /// out, as the listener's reconnect and a read of the stored schedules met it): the
    /// database's own error from a direct connection, or how the pool stood.
    pub(crate) async fn explained(&self, error: Error) -> Error {
        if !matches!(error, Error::Database(sqlx::Error::PoolTimedOut)) {
            return error;
        }
        match self.probe().await {
            Err(ProbeFailure::Transient(e) | ProbeFailure::Permanent(e)) => e,
            Ok(()) => {
                let (size, max, waited) = match self {
                    #[cfg(feature = "postgres")]
                    Store::Postgres(s) => pool_state(&s.pool),
                    #[cfg(feature = "sqlite")]
                    Store::Sqlite(s) => pool_state(&s.pool),
                    #[cfg(feature = "mysql")]
                    Store::MySql(s) => pool_state(&s.pool),
                };
                pool_timed_out(waited, size, max)
            }
        }
    }

    /// Which of `ids` this worker recorded as succeeded: a completion retried after its
    /// reply was lost (a dropped connection after the commit) finds its own result, not a
    /// lease lost to another worker. Results rows by primary key.
    pub(crate) async fn succeeded_here(&self, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let ids: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
        let list = serde_json::to_string(&ids).unwrap_or_else(|_| "[]".to_owned());
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => s.succeeded_here(&list).await,
            #[cfg(feature = "sqlite")]
            Store::Sqlite(s) => s.succeeded_here(&list).await,
            #[cfg(feature = "mysql")]
            Store::MySql(s) => s.succeeded_here(&list).await,
        }
    }

    /// How many connections the store's pool may open.
    pub(crate) fn pool_max(&self) -> u32 {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.pool.options().get_max_connections(),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.pool.options().get_max_connections(),
            #[cfg(feature = "mysql")]
            Store::MySql(store) => store.pool.options().get_max_connections(),
        }
    }

    /// Where the store connects, for messages.
    pub(crate) fn address(&self) -> String {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.address(),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.address(),
            #[cfg(feature = "mysql")]
            Store::MySql(store) => store.address(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::pool_timed_out;
    use crate::error::Error;

    /// A pool with room that gave no connection is not "too small": during an outage the
    /// line said "give the pool more connections" with 4 of 37 open.
    #[test]
    fn a_pool_with_room_is_not_called_too_small() {
        let wait = Duration::from_secs(2);
        assert!(matches!(
            pool_timed_out(wait, 37, 37),
            Error::PoolExhausted {
                size: 37,
                max: 37,
                ..
            }
        ));
        let stalled = pool_timed_out(wait, 4, 37);
        assert!(matches!(
            stalled,
            Error::PoolStalled {
                size: 4,
                max: 37,
                ..
            }
        ));
        let said = stalled.to_string();
        assert!(
            said.contains("though it had room (4 open, at most 37)"),
            "{said}"
        );
        assert!(!said.contains("more connections"), "{said}");
    }

    /// sqlx's bare "pool timed out" (the listener's reconnect, a read of the stored
    /// schedules) is explained by a direct connection: here the database is away.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_pool_timeout_is_explained_by_its_cause() {
        let pool = sqlx::PgPool::connect_lazy("postgres://sk@127.0.0.1:1/app").unwrap();
        let store = super::Pool::from(pool).store(
            super::Schema::default(),
            "w".into(),
            super::bound::Bounds::default(),
        );
        let said = store
            .explained(Error::Database(sqlx::Error::PoolTimedOut))
            .await
            .to_string();
        assert!(
            said.starts_with("cannot reach the database at 127.0.0.1:1/app: ")
                && said.contains("refused"),
            "{said}"
        );
        let other = store.explained(Error::JobNotFound(uuid::Uuid::nil())).await;
        assert!(matches!(other, Error::JobNotFound(_)), "{other}");
    }
}
