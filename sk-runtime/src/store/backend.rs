//! The `Backend` trait (sealed): what `.enqueue()` and a job's own transaction need of
//! a sqlx database type, filled for each backend by `backend!`.

use futures_util::future::BoxFuture;

use chrono::{DateTime, Utc};
use uuid::Uuid;

#[cfg(feature = "mysql")]
use super::mysql;
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "sqlite")]
use super::sqlite;
use super::{bound, check_dependants, NewJob, Pool, Schema, Store, Success};
use crate::error::Result;

mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
}

/// A database sk runs on, chosen by the pool or transaction you pass: `sqlx::Postgres`
/// (cargo feature `postgres`, the default), `sqlx::Sqlite` (feature `sqlite`) or
/// `sqlx::MySql` (feature `mysql`, for MySQL 8 and MariaDB 10.6+). Sealed:
/// its methods are sk's own store.
#[allow(private_interfaces)]
pub trait Backend: sqlx::Database + sealed::Sealed {
    // Boxed futures: an opaque future returned by a trait method could not be shown to be
    // `Send` for every lifetime, which an enqueue inside a spawned task needs.
    #[doc(hidden)]
    fn enqueue_one<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        job: NewJob,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Option<Uuid>>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    #[doc(hidden)]
    fn enqueue_unique<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<(Uuid, bool, bool)>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    #[doc(hidden)]
    fn enqueue_many<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        jobs: Vec<NewJob>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<Uuid>>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    /// Inserts jobs that wait on `deps` (all of them, in that order) in one transaction.
    #[doc(hidden)]
    fn enqueue_after<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        jobs: Vec<NewJob>,
        deps: Vec<Uuid>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<Uuid>>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    /// Records batch `id` of the jobs `ids`, inserted in this transaction (`executor`),
    /// with its callbacks.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn create_batch<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        id: Uuid,
        description: Option<String>,
        ids: Vec<Uuid>,
        callbacks: Vec<(crate::model::BatchEvent, NewJob)>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<()>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    /// Records workflow `id` of the jobs `stages`, inserted in this transaction
    /// (`executor`).
    #[doc(hidden)]
    fn create_workflow<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        id: Uuid,
        stages: Vec<Vec<Uuid>>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<()>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    /// The backend's name in messages.
    #[doc(hidden)]
    const NAME: &'static str;

    /// Whether `pool`'s connections keep prepared statements, where that can differ
    /// (PostgreSQL behind a transaction pooler: false); `None` elsewhere.
    #[doc(hidden)]
    fn pool_keeps(pool: &sqlx::Pool<Self>) -> Option<bool>;

    /// Begins a job's transaction on `pool`; `None` when the pool is of another backend.
    #[doc(hidden)]
    fn begin_job(
        pool: &Pool,
    ) -> Option<BoxFuture<'static, Result<sqlx::Transaction<'static, Self>>>>;

    /// Records a job's success inside its transaction; false when the lease was lost.
    #[doc(hidden)]
    fn complete_in<'a>(
        store: &'a Store,
        tx: &'a mut Self::Connection,
        done: &'a Success,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// What `.enqueue()` takes: a pool (`&pool`), a connection (`&mut conn`, or a pool's
/// `&mut pooled`) or a transaction (`&mut tx`, or `&mut *tx`) of a [`Backend`], so a job
/// can be enqueued inside the application's own transaction (it is stored, and its
/// workers woken, only if that transaction commits). A backend whose enqueue takes more
/// than one statement runs them on that one connection. A PostgreSQL pool also tells
/// whether it is behind a transaction pooler (its statement cache off), and sk's
/// statements on it then run unnamed, each enqueue in a transaction.
pub trait Executor<'e>: sqlx::Acquire<'e, Database: Backend> + Send {
    /// Whether the executor's connections keep prepared statements, where it can tell: a
    /// pool says (false behind a transaction pooler: PostgreSQL's `pooler`); a
    /// connection or transaction of the application's does not (`None`).
    #[doc(hidden)]
    fn keeps_statements(&self) -> Option<bool> {
        None
    }
}

impl<'e, DB: Backend> Executor<'e> for &'_ sqlx::Pool<DB> {
    fn keeps_statements(&self) -> Option<bool> {
        DB::pool_keeps(self)
    }
}

impl<'t, DB: Backend> Executor<'t> for &'t mut sqlx::Transaction<'_, DB> {}

impl<'c, DB: Backend> Executor<'c> for &'c mut sqlx::pool::PoolConnection<DB> {}

#[cfg(feature = "postgres")]
impl<'c> Executor<'c> for &'c mut sqlx::PgConnection {}

#[cfg(feature = "sqlite")]
impl<'c> Executor<'c> for &'c mut sqlx::SqliteConnection {}

#[cfg(feature = "mysql")]
impl<'c> Executor<'c> for &'c mut sqlx::MySqlConnection {}

tokio::task_local! {
    /// What an enqueue's executor said of its prepared statements, for the statements of
    /// the enqueue (`with_keeps`).
    static KEEPS: bool;
}

/// Runs `f` (an enqueue on one executor) knowing whether its connection keeps prepared
/// statements, when the executor could tell ([`Executor::keeps_statements`]).
pub(crate) async fn with_keeps<F: std::future::Future>(keep: Option<bool>, f: F) -> F::Output {
    match keep {
        Some(keep) => KEEPS.scope(keep, f).await,
        None => f.await,
    }
}

/// What [`with_keeps`] was told, within it.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn keeps_known() -> Option<bool> {
    KEEPS.try_with(|keep| *keep).ok()
}

/// `Backend` for a sqlx database, by the enqueue functions of its store module.
macro_rules! backend {
    ($feature:literal, $db:ty, $module:ident, $variant:ident, $name:literal, $begin:expr) => {
        #[cfg(feature = $feature)]
        #[allow(private_interfaces)]
        impl Backend for $db {
            const NAME: &'static str = $name;

            fn pool_keeps(pool: &sqlx::Pool<Self>) -> Option<bool> {
                $module::pool_keeps(pool)
            }

            fn begin_job(
                pool: &Pool,
            ) -> Option<BoxFuture<'static, Result<sqlx::Transaction<'static, Self>>>> {
                #[allow(unreachable_patterns)]
                match pool {
                    Pool::$variant(pool) => {
                        let pool = pool.clone();
                        Some(Box::pin(async move { Ok(pool.begin_with($begin).await?) }))
                    }
                    _ => None,
                }
            }

            fn complete_in<'a>(
                store: &'a Store,
                tx: &'a mut Self::Connection,
                done: &'a Success,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<bool>> {
                Box::pin(async move {
                    #[allow(unreachable_patterns)]
                    match store {
                        Store::$variant(store) => store.complete_in(tx, done, now).await,
                        _ => Err(crate::Error::invalid(
                            "transaction",
                            concat!(
                                "a job's ",
                                $name,
                                " transaction on a worker of another backend"
                            ),
                        )),
                    }
                })
            }

            fn enqueue_one<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                job: NewJob,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<Option<Uuid>>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                let ids = [job.id];
                Box::pin(async move {
                    bound::enqueue(bound::ENQUEUE_ONE, &ids, executor.acquire(), |mut conn| async move {
                        $module::post_one(&mut *conn, schema, job, now).await
                    })
                    .await
                })
            }

            fn enqueue_unique<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                job: NewJob,
                mode: crate::model::UniqueMode,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<(Uuid, bool, bool)>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                let ids = [job.id];
                Box::pin(async move {
                    bound::enqueue(bound::ENQUEUE_ONE, &ids, executor.acquire(), |mut conn| async move {
                        $module::post_unique(&mut *conn, schema, job, mode, now).await
                    })
                    .await
                })
            }

            fn enqueue_many<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                jobs: Vec<NewJob>,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<Vec<Uuid>>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                let ids: Vec<Uuid> = jobs.iter().map(|j| j.id).collect();
                Box::pin(async move {
                    bound::enqueue(bound::ENQUEUE_MANY, &ids, executor.acquire(), |mut conn| async move {
                        $module::post_many(&mut *conn, schema, jobs, now).await
                    })
                    .await
                })
            }

            fn create_workflow<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                id: Uuid,
                stages: Vec<Vec<Uuid>>,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<()>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                Box::pin(async move {
                    bound::enqueue(bound::ENQUEUE_MANY, &[id], executor.acquire(), |mut conn| async move {
                        super::workflows::create::<$db>(&mut *conn, schema, id, &stages, now).await
                    })
                    .await
                })
            }

            fn create_batch<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                id: Uuid,
                description: Option<String>,
                ids: Vec<Uuid>,
                callbacks: Vec<(crate::model::BatchEvent, NewJob)>,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<()>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                Box::pin(async move {
                    bound::enqueue(bound::ENQUEUE_MANY, &[id], executor.acquire(), |mut conn| async move {
                        super::batch::create::<$db>(
                            &mut *conn,
                            schema,
                            id,
                            description.as_deref(),
                            &ids,
                            &callbacks,
                            now,
                        )
                        .await
                    })
                    .await
                })
            }

            fn enqueue_after<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                jobs: Vec<NewJob>,
                mut deps: Vec<Uuid>,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<Vec<Uuid>>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                let ids: Vec<Uuid> = jobs.iter().map(|j| j.id).collect();
                Box::pin(async move {
                    check_dependants(&jobs, &mut deps, now)?;
                    bound::enqueue(bound::ENQUEUE_MANY, &ids, executor.acquire(), |mut conn| async move {
                        $module::flow::enqueue_after(&mut *conn, schema, jobs, deps, now).await
                    })
                    .await
                })
            }
        }
    };
}

backend!(
    "postgres",
    sqlx::Postgres,
    postgres,
    Postgres,
    "PostgreSQL",
    "BEGIN"
);

// The write lock from the start: a deferred transaction that reads, then writes after
// another connection committed, fails at once (SQLITE_BUSY_SNAPSHOT).
backend!(
    "sqlite",
    sqlx::Sqlite,
    sqlite,
    Sqlite,
    "SQLite",
    "BEGIN IMMEDIATE"
);

// READ COMMITTED, as every worker transaction (the mysql module's docs).
backend!("mysql", sqlx::MySql, mysql, MySql, "MySQL", mysql::BEGIN);
