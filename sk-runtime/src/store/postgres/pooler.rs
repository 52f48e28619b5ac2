//! Statements behind a transaction pooler (PgBouncer in `pool_mode = transaction`, as
//! Debian's 1.18 has it: no prepared statements across transactions).
//!
//! A transaction pooler gives a client a server connection for one transaction, then
//! hands that server to another client. Two things sqlx does then break: a named
//! statement it prepared and cached lives on a server the client no longer holds ("does
//! not exist", or another client's "already exists"), and its extended protocol sends the
//! Parse of a statement and its Bind in two exchanges, between which a statement outside
//! a transaction can change servers (and, unnamed, bind to another client's statement).
//!
//! sk treats a pool whose statement cache is off (`statement-cache-capacity=0` in the
//! URL, `PgConnectOptions::statement_cache_capacity(0)`: sqlx's advice for PgBouncer) as
//! behind a transaction pooler, and then runs every statement unnamed and inside a
//! transaction: [`Held`] is one operation's connection (a transaction behind a pooler),
//! [`on`] the executor that prepares unnamed statements when told to. On a direct pool
//! both are what sqlx does anyway: a pooled connection and cached named statements.

use crate::store::bound::Guarded;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use sqlx::postgres::{PgConnectOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Connection as _, Describe, Either, Execute, PgConnection, PgPool};
use sqlx::{Postgres, Transaction};

/// Whether connections made with `options` keep prepared statements (a direct server);
/// false when their statement cache is off, which sk reads as "behind a transaction
/// pooler". sqlx has no getter for the capacity; its options' `Debug` names it.
pub(crate) fn keeps_statements(options: &PgConnectOptions) -> bool {
    !format!("{options:?}").contains("statement_cache_capacity: 0,")
}

/// Whether `pool` keeps prepared statements ([`keeps_statements`] of its options).
pub(crate) fn pool_keeps(pool: &PgPool) -> bool {
    keeps_statements(&pool.connect_options())
}

/// Whether a connection sk did not open (the application's transaction) may keep
/// prepared statements: only if it has kept some already. A connection whose cache is
/// off never has; one of a direct pool that has not yet cached a statement prepares
/// sk's unnamed, which costs a parse and is right either way.
pub(crate) fn conn_keeps(conn: &PgConnection) -> bool {
    conn.cached_statements_size() > 0
}

/// An executor on `conn` that prepares statements as the connection has so far
/// ([`conn_keeps`]): for statements on a connection whose pool is not known here.
pub(crate) fn kept(conn: &mut PgConnection) -> On<'_> {
    let keep = conn_keeps(conn);
    on(conn, keep)
}

/// An executor on `conn` whose statements are prepared unnamed unless `keep`.
pub(crate) fn on(conn: &mut PgConnection, keep: bool) -> On<'_> {
    On { conn, keep }
}

/// See [`on`].
#[derive(Debug)]
pub(crate) struct On<'c> {
    conn: &'c mut PgConnection,
    keep: bool,
}

/// A statement that is prepared unnamed (and not cached) unless `keep`.
struct Unnamed<E> {
    inner: E,
    keep: bool,
}

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(&self) -> &'q str {
        self.inner.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.inner.statement()
    }

    fn take_arguments(
        &mut self,
    ) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.inner.take_arguments()
    }

    fn persistent(&self) -> bool {
        self.keep && self.inner.persistent()
    }
}

impl<'c> sqlx::Executor<'c> for On<'c> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let keep = self.keep;
        self.conn.fetch_many(Unnamed { inner: query, keep })
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let keep = self.keep;
        self.conn.fetch_optional(Unnamed { inner: query, keep })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.conn.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.conn.describe(sql)
    }
}

/// One operation's connection: a pooled connection on a direct pool; behind a
/// transaction pooler, a transaction on one, so the operation's statements stay on one
/// server ([`Held::done`] commits it; dropped, it rolls back).
pub(crate) enum Held {
    /// On a direct pool.
    Direct(Guarded<Postgres>),
    /// Behind a transaction pooler.
    Pooled(Transaction<'static, Postgres>),
}

impl Held {
    /// A connection of `pool` for one operation.
    pub(crate) async fn of(pool: &PgPool) -> sqlx::Result<Held> {
        Held::from(Guarded::new(pool.acquire().await?), pool_keeps(pool)).await
    }

    /// `conn`, in a transaction unless `keep` (a direct pool).
    pub(crate) async fn from(conn: Guarded<Postgres>, keep: bool) -> sqlx::Result<Held> {
        Ok(if keep {
            Held::Direct(conn)
        } else {
            Held::Pooled(Transaction::begin(conn.into_inner(), None).await?)
        })
    }

    /// Whether statements are prepared named and cached (a direct pool).
    pub(crate) fn keeps(&self) -> bool {
        matches!(self, Held::Direct(_))
    }

    /// The executor of the operation's statements.
    pub(crate) fn on(&mut self) -> On<'_> {
        let keep = self.keeps();
        match self {
            Held::Direct(conn) => on(conn, keep),
            Held::Pooled(tx) => on(tx, keep),
        }
    }

    /// The connection itself, for what begins its own transaction on it.
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        match self {
            Held::Direct(conn) => conn,
            Held::Pooled(tx) => tx,
        }
    }

    /// Ends the operation: commits its transaction behind a pooler.
    pub(crate) async fn done(self) -> sqlx::Result<()> {
        match self {
            Held::Direct(_) => Ok(()),
            Held::Pooled(tx) => tx.commit().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_whose_statement_cache_is_off_is_behind_a_pooler() {
        let direct: PgConnectOptions = "postgres://u@h/db".parse().unwrap();
        let pooled: PgConnectOptions = "postgres://u@h:6432/db?statement-cache-capacity=0"
            .parse()
            .unwrap();
        assert!(keeps_statements(&direct));
        assert!(!keeps_statements(&pooled));
        assert!(!keeps_statements(
            &direct.clone().statement_cache_capacity(0)
        ));
        assert!(keeps_statements(&direct.statement_cache_capacity(10)));
    }
}
