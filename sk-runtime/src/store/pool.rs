//! `Pool`: the client's handle on one database, whichever backend; its probe, the
//! explanation of its timeouts, and the queue controls it reads.

use chrono::{DateTime, Utc};

#[cfg(feature = "mysql")]
use super::mysql;
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "sqlite")]
use super::sqlite;
use super::{Backend, Schema, Store};
use crate::error::{Error, Result};

/// A pool's open connections, its most, and how long it waits for one.
pub(super) fn pool_state<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
) -> (u32, u32, std::time::Duration) {
    let options = pool.options();
    (
        pool.size(),
        options.get_max_connections(),
        options.get_acquire_timeout(),
    )
}

/// The error of a pool that gave no connection within `waited` while a direct connection
/// succeeds: exhausted when all its connections were open (and busy), stalled when it had
/// room (its new connections failed: "give the pool more connections" with 4 of 37 open
/// sent an operator the wrong way during an outage).
pub(crate) fn pool_timed_out(waited: std::time::Duration, size: u32, max: u32) -> Error {
    if size >= max {
        Error::PoolExhausted { waited, size, max }
    } else {
        Error::PoolStalled { waited, size, max }
    }
}

/// A connection pool of a [`Backend`]: what the worker, queue info, stored schedules and
/// [`migrate`](crate::migrate) take. Made from a `sqlx::PgPool`, `sqlx::SqlitePool` or
/// `sqlx::MySqlPool`
/// (pass the pool, or a reference); the backend follows from the pool.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Pool {
    /// PostgreSQL (cargo feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// SQLite (cargo feature `sqlite`).
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    /// MySQL 8 or MariaDB 10.6+ (cargo feature `mysql`).
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
}

/// `From` a backend's pool and a reference to it.
macro_rules! pool_from {
    ($feature:literal, $variant:ident, $pool:ty) => {
        #[cfg(feature = $feature)]
        impl From<$pool> for Pool {
            fn from(pool: $pool) -> Self {
                Pool::$variant(pool)
            }
        }

        #[cfg(feature = $feature)]
        impl From<&$pool> for Pool {
            fn from(pool: &$pool) -> Self {
                Pool::$variant(pool.clone())
            }
        }
    };
}

impl Pool {
    /// Connects to the database a URL names, on the backend its scheme says:
    /// `postgres://` (or `postgresql://`), `sqlite:` and `mysql://` (or `mariadb://`).
    /// For tools and scripts; an application usually builds its own sqlx pool.
    ///
    /// ```no_run
    /// # async fn f() -> sk_runtime::Result<()> {
    /// let pool = sk_runtime::Pool::connect("postgres://postgres@127.0.0.1:5432/app").await?;
    /// let client = sk_runtime::Client::new(pool);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a URL of no known scheme or of a
    /// backend this build leaves out (its cargo feature is off);
    /// [`Error::Connect`](crate::Error::Connect) when the database cannot be reached, with
    /// the address (never the password) and the cause.
    pub async fn connect(url: &str) -> Result<Pool> {
        let scheme = url.split(':').next().unwrap_or_default();
        let connect_error = |e: sqlx::Error| crate::Error::Connect {
            address: without_password(url),
            cause: e.to_string(),
        };
        // One direct connection first: a pool retries a refused connection in silence
        // until its timeout, this one says why at once.
        match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                // A URL may list several hosts (a replicated cluster): the pool follows
                // the writable one, and the probe wants one host that answers.
                let hosts = postgres::primary::Hosts::parse(url)?;
                // Of several, the first that takes writes, all asked at once: a host
                // that went silent costs no more than one bounded wait.
                let first = if hosts.several() {
                    postgres::primary::writable_hosts(&hosts)
                        .await
                        .into_iter()
                        .map(|(i, _)| i)
                        .min()
                } else {
                    None
                };
                if first.is_none() {
                    let mut failed = None;
                    for options in hosts.each() {
                        match probe_with::<sqlx::PgConnection>(options).await {
                            Ok(()) => {
                                failed = None;
                                break;
                            }
                            Err(e) => failed = failed.or(Some(e)),
                        }
                    }
                    if let Some(e) = failed {
                        return Err(connect_error(e));
                    }
                }
                Ok(Pool::Postgres(postgres::primary::primary_pool_from(
                    sqlx::postgres::PgPoolOptions::new(),
                    hosts,
                    first.unwrap_or(0),
                )?))
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                probe::<sqlx::SqliteConnection>(url)
                    .await
                    .map_err(connect_error)?;
                Ok(Pool::Sqlite(
                    sqlx::SqlitePool::connect_lazy(url).map_err(connect_error)?,
                ))
            }
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                probe::<sqlx::MySqlConnection>(&url)
                    .await
                    .map_err(connect_error)?;
                let options = super::bound::hooks::on(
                    sqlx::mysql::MySqlPoolOptions::new(),
                    super::bound::CALL_TIMEOUT,
                );
                let connect: sqlx::mysql::MySqlConnectOptions =
                    url.parse().map_err(connect_error)?;
                // As `primary_pool`: sk names a slow call itself.
                let connect = sqlx::ConnectOptions::disable_statement_logging(connect);
                Ok(Pool::MySql(options.connect_lazy_with(connect)))
            }
            // Reached only when the backend's feature is off.
            #[allow(unreachable_patterns)]
            "postgres" | "postgresql" | "sqlite" | "mysql" | "mariadb" => {
                Err(crate::Error::invalid(
                    "database url",
                    format!("this build of sk has no {scheme} backend (its cargo feature is off)"),
                ))
            }
            _ => Err(crate::Error::invalid(
                "database url",
                format!(
                    "{:?} names no known database: use postgres://, sqlite: or mysql://",
                    without_password(url)
                ),
            )),
        }
    }
}

/// How long `Pool::connect`'s first connection may take.
const CONNECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// `attempt`, or an I/O error "timed out" after [`CONNECT_WITHIN`].
async fn within(
    attempt: impl std::future::Future<Output = std::result::Result<(), sqlx::Error>>,
) -> std::result::Result<(), sqlx::Error> {
    tokio::time::timeout(CONNECT_WITHIN, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer within {}",
                    humantime::format_duration(CONNECT_WITHIN)
                ),
            )))
        })
}

/// Opens and closes one connection, within [`CONNECT_WITHIN`].
#[cfg(any(feature = "sqlite", feature = "mysql"))]
async fn probe<C: sqlx::Connection>(url: &str) -> std::result::Result<(), sqlx::Error> {
    within(async { C::connect(url).await?.close().await }).await
}

/// Opens and closes one connection with `options`, within [`CONNECT_WITHIN`].
#[cfg(feature = "postgres")]
async fn probe_with<C: sqlx::Connection>(
    options: &C::Options,
) -> std::result::Result<(), sqlx::Error> {
    within(async { C::connect_with(options).await?.close().await }).await
}

/// A database URL without its password, for messages.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}")
        }
        _ => url.to_owned(),
    }
}

/// What every claim obeys from the queues table, as a worker last read it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct QueueControls {
    /// Queues an operator paused: no claim takes their jobs.
    pub(crate) paused: Vec<String>,
    /// Queues with a concurrency limit across workers: each claimed on its own, under
    /// its row's lock.
    pub(crate) capped: Vec<String>,
    /// Queues with a rate limit: each claimed on its own, under its limit's row lock.
    pub(crate) rated: Vec<String>,
    /// Job types with a rate limit: each claimed on its own, under its limit's row lock.
    pub(crate) rated_types: Vec<String>,
    /// Queues with a limit of running jobs per tenant: each claimed on its own, under its
    /// row's lock, tenant by tenant (`store::fair::claim_per_tenant`).
    pub(crate) tenant_capped: Vec<String>,
    /// Of those, the queues with a rate limit per tenant (the others have a limit of
    /// running jobs per tenant only).
    pub(crate) tenant_rated: Vec<String>,
    /// Queues claimed fairly across their tenants (`Client::set_fair`): each claimed on
    /// its own, tenant by tenant.
    pub(crate) fair: Vec<String>,
}

/// Which limit of running jobs across workers a queue's row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueLimit {
    /// Of the whole queue (`Client::set_global_limit`).
    Global,
    /// Of each tenant of the queue (`Client::set_tenant_limit`).
    PerTenant,
}

impl QueueLimit {
    /// The column of the queues table that holds it.
    pub(crate) fn column(self) -> &'static str {
        match self {
            QueueLimit::Global => "queue_global_limit",
            QueueLimit::PerTenant => "queue_tenant_limit",
        }
    }
}

/// Which switch of a queue its row holds, as the time it was turned on (NULL: off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueFlag {
    /// Paused by an operator (`Client::pause`): no claim takes its jobs.
    Paused,
    /// Claimed fairly across its tenants (`Client::set_fair`).
    Fair,
}

impl QueueFlag {
    /// The column of the queues table that holds it.
    pub(crate) fn column(self) -> &'static str {
        match self {
            QueueFlag::Paused => "queue_paused_at_ts",
            QueueFlag::Fair => "queue_fair_at_ts",
        }
    }
}

impl QueueControls {
    /// From rows of the queues table, (name, paused, has a global limit, has a limit per
    /// tenant, fair), and the names of the queues and of the job types with a rate limit.
    pub(crate) fn from_rows(
        rows: Vec<(String, bool, bool, bool, bool)>,
        rated: Vec<String>,
        rated_types: Vec<String>,
    ) -> Self {
        let mut controls = QueueControls {
            rated,
            rated_types,
            ..QueueControls::default()
        };
        for (name, paused, capped, tenant_capped, fair) in rows {
            if fair {
                controls.fair.push(name.clone());
            }
            if capped {
                controls.capped.push(name.clone());
            }
            if tenant_capped {
                controls.tenant_capped.push(name.clone());
            }
            if paused {
                controls.paused.push(name);
            }
        }
        controls
    }
}

/// Checks a limit of running jobs (`what`: "global limit") and turns it into the
/// column's value.
pub(crate) fn running_limit_value(what: &'static str, limit: Option<u32>) -> Result<Option<i32>> {
    limit
        .map(|n| match i32::try_from(n) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(crate::Error::invalid(
                what,
                format!("{n} is not between 1 and {}", i32::MAX),
            )),
        })
        .transpose()
}

/// A queues table's row as insight reads it: name, pause time, global limit, limit per
/// tenant, time fair claims began.
pub(crate) type ControlRow = (
    String,
    Option<DateTime<Utc>>,
    Option<i64>,
    Option<i64>,
    Option<DateTime<Utc>>,
);

/// Queue states from live counts per queue (available, scheduled, running) and the
/// queues table's rows ([`ControlRow`]) and the queues'
/// rate limits (of the queue, of each tenant), by name.
pub(crate) fn merge_queue_states(
    live: Vec<(String, i64, i64, i64, i64)>,
    controlled: Vec<ControlRow>,
    rates: Vec<(String, crate::model::RateState)>,
    tenant_rates: Vec<(String, crate::model::RateState)>,
) -> Vec<crate::model::QueueState> {
    fn empty(name: String) -> crate::model::QueueState {
        crate::model::QueueState {
            name,
            paused_at: None,
            fair_since: None,
            global_limit: None,
            tenant_limit: None,
            tenant_rate_limit: None,
            rate_limit: None,
            available: 0,
            scheduled: 0,
            running: 0,
            pending: 0,
        }
    }
    let mut by_name: std::collections::BTreeMap<String, crate::model::QueueState> = live
        .into_iter()
        .map(|(name, available, scheduled, running, pending)| {
            let state = crate::model::QueueState {
                available,
                scheduled,
                running,
                pending,
                ..empty(name.clone())
            };
            (name, state)
        })
        .collect();
    for (name, paused_at, global_limit, tenant_limit, fair_since) in controlled {
        let state = by_name.entry(name.clone()).or_insert_with(|| empty(name));
        state.paused_at = paused_at;
        state.fair_since = fair_since;
        state.global_limit = global_limit.and_then(|n| u32::try_from(n).ok());
        state.tenant_limit = tenant_limit.and_then(|n| u32::try_from(n).ok());
    }
    for (name, rate) in rates {
        let state = by_name.entry(name.clone()).or_insert_with(|| empty(name));
        state.rate_limit = Some(rate);
    }
    for (name, rate) in tenant_rates {
        let state = by_name.entry(name.clone()).or_insert_with(|| empty(name));
        state.tenant_rate_limit = Some(rate.limit);
    }
    by_name.into_values().collect()
}

/// `$body` with `$pool` bound to the backend's own pool, whichever `$on` holds: a call of
/// a statement written once (`store::queries`) that no backend writes its own way.
macro_rules! on_backend {
    ($on:expr, $pool:ident => $body:expr) => {
        match $on {
            #[cfg(feature = "postgres")]
            Pool::Postgres($pool) => $body,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite($pool) => $body,
            #[cfg(feature = "mysql")]
            Pool::MySql($pool) => $body,
        }
    };
}

impl Pool {
    /// Sets metadata `key` of a running job while run `attempt` holds it: its sub-state
    /// (seed 002, text) or its progress (`json`); whether it still did.
    pub(crate) async fn set_running_metadata(
        &self,
        schema: &Schema,
        run: (uuid::Uuid, i32),
        key: &'static str,
        value: &str,
        json: bool,
    ) -> crate::error::Result<bool> {
        on_backend!(self, pool => super::queries::set_running_metadata(pool, schema, run, key, value, json).await)
    }

    /// Changes a waiting job, at `expected` version if given (compare and set).
    pub(crate) async fn update_waiting(
        &self,
        schema: &Schema,
        id: uuid::Uuid,
        expected: Option<i32>,
        change: &super::queries::WaitingChange<'_>,
    ) -> crate::error::Result<crate::model::UpdateOutcome> {
        on_backend!(self, pool => super::queries::update_waiting(pool, schema, id, expected, change).await)
    }

    /// Holds `queue`'s rate limit shut until `until` (a handler's
    /// `JobError::rate_limited`); whether the queue has a rate limit to hold.
    pub(crate) async fn hold_rate_limit(
        &self,
        schema: &Schema,
        queue: &str,
        until: DateTime<Utc>,
    ) -> crate::error::Result<bool> {
        on_backend!(self, pool => super::rates::hold(pool, schema, super::rates::QUEUE, queue, until).await)
    }

    /// Holds `tenant`'s rate limit in `queue` shut until `until` (a handler's
    /// `JobError::rate_limited`); whether the queue has a rate limit per tenant.
    pub(crate) async fn hold_tenant_rate_limit(
        &self,
        schema: &Schema,
        queue: &str,
        tenant: &str,
        until: DateTime<Utc>,
    ) -> crate::error::Result<bool> {
        on_backend!(self, pool => super::tenants::hold(pool, schema, queue, tenant, until).await)
    }

    /// The rate limits of job types (`#[job(rate = "...")]`) as they stand at `now`, by
    /// type.
    pub(crate) async fn type_rate_limits(
        &self,
        schema: &Schema,
        now: DateTime<Utc>,
    ) -> crate::error::Result<Vec<(String, crate::model::RateState)>> {
        on_backend!(self, pool => super::rates::states(pool, schema, super::rates::TYPE, now).await)
    }

    /// How far a streaming replica's replay is behind its primary: `None` on a server
    /// that is not a replica (or a backend without them); zero while it has replayed all
    /// it received, else the time since the last transaction it replayed committed.
    pub(crate) async fn replay_lag(&self) -> crate::error::Result<Option<std::time::Duration>> {
        match self {
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => postgres::replay_lag(pool).await,
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }

    /// The bound of the driver's operation `call` from a client (`store::bound`).
    pub(crate) fn bound_of(&self, call: &str) -> std::time::Duration {
        super::bound::client_bound(call)
    }

    /// Where the pool connects, for messages: `host:port/database`, or the file.
    pub(crate) fn address(&self) -> String {
        match self {
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => postgres::address(&pool.connect_options()),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => sqlite::address(&pool.connect_options()),
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => mysql::address(&pool.connect_options()),
        }
    }

    /// The backend's name in messages.
    pub(crate) fn backend_name(&self) -> &'static str {
        match self {
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => <sqlx::Postgres as Backend>::NAME,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => <sqlx::Sqlite as Backend>::NAME,
            #[cfg(feature = "mysql")]
            Pool::MySql(_) => <sqlx::MySql as Backend>::NAME,
        }
    }

    /// How often a worker polls unless told otherwise: on MySQL, without notifications
    /// from other processes, more often.
    pub(crate) fn default_poll_interval(&self) -> std::time::Duration {
        match self {
            #[cfg(feature = "mysql")]
            Pool::MySql(_) => std::time::Duration::from_millis(200),
            // Behind a transaction pooler a worker may have no LISTEN (`listen_on`).
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) if !postgres::pooler::pool_keeps(pool) => {
                std::time::Duration::from_millis(200)
            }
            #[allow(unreachable_patterns)]
            _ => std::time::Duration::from_secs(1),
        }
    }

    /// The worker's store on this pool.
    pub(crate) fn store(
        self,
        schema: Schema,
        worker_id: String,
        bounds: super::bound::Bounds,
    ) -> Store {
        match self {
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => Store::Postgres(postgres::PgStore {
                keep: postgres::pooler::pool_keeps(&pool),
                pool,
                schema,
                worker_id,
                bounds,
                partitions: Default::default(),
                in_doubt: Default::default(),
            }),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => Store::Sqlite(sqlite::SqliteStore {
                pool,
                schema,
                worker_id,
                bounds,
                writer: Default::default(),
                checkpointing: Default::default(),
                since_checkpoint: Default::default(),
            }),
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => Store::MySql(mysql::MySqlStore {
                pool,
                schema,
                worker_id,
                bounds,
                fair_index: std::sync::Arc::default(),
            }),
        }
    }
}

pool_from!("postgres", Postgres, sqlx::PgPool);

pool_from!("sqlite", Sqlite, sqlx::SqlitePool);

pool_from!("mysql", MySql, sqlx::MySqlPool);
