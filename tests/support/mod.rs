//! Helpers for sk's integration tests: a fresh database per test (PostgreSQL, SQLite or
//! MySQL/MariaDB),
//! a worker running in the background, and waiting for events under a timeout.

pub mod chaos;
pub mod cluster;
pub mod netns;
pub mod pgbouncer;

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sk_runtime::{JobRecord, QueueInfo, Schema, Worker, WorkerBuilder};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// The server the tests use; `DATABASE_URL` overrides it.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// The MySQL/MariaDB server the tests use; `MYSQL_URL` overrides it.
pub fn mysql_url() -> String {
    std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// A database sk's tests run on: PostgreSQL (`TestDb`), SQLite or MySQL, each test with a
/// database of its own. The behaviour tests run on every backend (`each_backend!` in the
/// test files); tests of one backend's own features name it.
pub trait TestBackend: sk_runtime::Backend + Sized {
    /// Its name in test names and messages.
    const BACKEND: &'static str;

    /// A fresh database with sk's schema applied.
    fn create() -> impl Future<Output = Db<Self>> + Send;

    /// The first column of the first row of `sql` (with `$1` bound to `bind`, if given)
    /// as an integer; `None` for SQL NULL, no row or an error. `sql` is written in the SQL
    /// all backends share (`CAST(x AS BIGINT)`, not `x::int8`).
    fn scalar<'a>(
        pool: &'a sqlx::Pool<Self>,
        sql: &'a str,
        bind: Option<&'a str>,
    ) -> BoxFuture<'a, Option<i64>>;

    /// As [`TestBackend::scalar`], for a time.
    fn time<'a>(
        pool: &'a sqlx::Pool<Self>,
        sql: &'a str,
        bind: Option<&'a str>,
    ) -> BoxFuture<'a, Option<DateTime<Utc>>>;

    /// Runs `sql`, which must succeed.
    fn execute<'a>(pool: &'a sqlx::Pool<Self>, sql: &'a str) -> BoxFuture<'a, ()>;

    /// Every row of `sql` as text.
    fn texts<'a>(pool: &'a sqlx::Pool<Self>, sql: &'a str) -> BoxFuture<'a, Vec<String>>;

    /// Every row of `sql` as text and time.
    fn text_and_time<'a>(
        pool: &'a sqlx::Pool<Self>,
        sql: &'a str,
    ) -> BoxFuture<'a, Vec<(String, DateTime<Utc>)>>;
}

/// The generic queries of [`TestBackend`], the same text for every backend. Each in a
/// transaction of its own with an unnamed statement, as a transaction pooler needs
/// (`Db::through_pgbouncer`).
macro_rules! queries {
    ($db:ty) => {
        queries!($db, |sql: &str| sql.to_owned(), String);
    };
    ($db:ty, $translate:expr, $text:ty) => {
        fn scalar<'a>(
            pool: &'a sqlx::Pool<$db>,
            sql: &'a str,
            bind: Option<&'a str>,
        ) -> BoxFuture<'a, Option<i64>> {
            Box::pin(async move {
                let sql = $translate(sql);
                let mut query = sqlx::query_scalar::<_, Option<i64>>(&sql).persistent(false);
                if let Some(bind) = bind {
                    query = query.bind(bind);
                }
                let mut tx = pool.begin().await.ok()?;
                let value = query
                    .fetch_optional(&mut *tx)
                    .await
                    .ok()
                    .flatten()
                    .flatten();
                tx.commit().await.ok()?;
                value
            })
        }

        fn time<'a>(
            pool: &'a sqlx::Pool<$db>,
            sql: &'a str,
            bind: Option<&'a str>,
        ) -> BoxFuture<'a, Option<DateTime<Utc>>> {
            Box::pin(async move {
                let sql = $translate(sql);
                let mut query =
                    sqlx::query_scalar::<_, Option<DateTime<Utc>>>(&sql).persistent(false);
                if let Some(bind) = bind {
                    query = query.bind(bind);
                }
                let mut tx = pool.begin().await.ok()?;
                let value = query
                    .fetch_optional(&mut *tx)
                    .await
                    .ok()
                    .flatten()
                    .flatten();
                tx.commit().await.ok()?;
                value
            })
        }

        fn execute<'a>(pool: &'a sqlx::Pool<$db>, sql: &'a str) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                let sql = $translate(sql);
                let mut tx = pool.begin().await.expect("a transaction");
                sqlx::query(&sql)
                    .persistent(false)
                    .execute(&mut *tx)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                tx.commit().await.expect("commit");
            })
        }

        fn texts<'a>(pool: &'a sqlx::Pool<$db>, sql: &'a str) -> BoxFuture<'a, Vec<String>> {
            Box::pin(async move {
                let sql = $translate(sql);
                let mut tx = pool.begin().await.expect("a transaction");
                let rows: Vec<$text> = sqlx::query_scalar(&sql)
                    .persistent(false)
                    .fetch_all(&mut *tx)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                tx.commit().await.expect("commit");
                rows.into_iter().map(Text::text).collect()
            })
        }

        fn text_and_time<'a>(
            pool: &'a sqlx::Pool<$db>,
            sql: &'a str,
        ) -> BoxFuture<'a, Vec<(String, DateTime<Utc>)>> {
            Box::pin(async move {
                let sql = $translate(sql);
                let mut tx = pool.begin().await.expect("a transaction");
                let rows: Vec<($text, DateTime<Utc>)> = sqlx::query_as(&sql)
                    .persistent(false)
                    .fetch_all(&mut *tx)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                tx.commit().await.expect("commit");
                rows.into_iter().map(|(t, at)| (t.text(), at)).collect()
            })
        }
    };
}

/// Text as a backend returns it: MySQL sends a column of a binary collation as bytes.
trait Text {
    fn text(self) -> String;
}

impl Text for String {
    fn text(self) -> String {
        self
    }
}

impl Text for Vec<u8> {
    fn text(self) -> String {
        String::from_utf8_lossy(&self).into_owned()
    }
}

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A database of its own for one test, with sk's schema applied; removed by [`Db::drop`].
pub struct Db<B: TestBackend> {
    /// A pool on the test database.
    pub pool: sqlx::Pool<B>,
    /// The test database's URL, for worker processes.
    pub url: String,
    place: Place,
}

/// Where a test database lives, to remove it.
enum Place {
    Server {
        name: String,
        admin: PgPool,
    },
    MySql {
        name: String,
        admin: sqlx::MySqlPool,
    },
    File(std::path::PathBuf),
    /// A server the test started and removes itself (`cluster::Cluster`).
    Elsewhere,
    /// A database of the tests' server reached through a PgBouncer of its own.
    Bounced {
        name: String,
        admin: PgPool,
        /// Killed when the database goes.
        _bouncer: pgbouncer::PgBouncer,
    },
}

/// A PostgreSQL test database (most tests).
pub type TestDb = Db<sqlx::Postgres>;

fn init_logs() {
    // RUST_LOG=sk_runtime=debug shows the worker's logs in a failing test's output.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A new database of the tests' PostgreSQL: the server's URL, an admin pool on it (to
/// remove the database), and the database's name.
///
/// # Panics
/// When PostgreSQL cannot be reached: the tests need a real server and say so.
async fn fresh_database() -> (String, PgPool, String) {
    init_logs();
    let url = database_url();
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("the tests need PostgreSQL at {url} (set DATABASE_URL): {e}"));
    let name = format!("sk_test_{}", Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .expect("create the test database");
    (url, admin, name)
}

impl TestBackend for sqlx::Postgres {
    const BACKEND: &'static str = "PostgreSQL";

    async fn create() -> Db<Self> {
        let (url, admin, name) = fresh_database().await;
        let options: PgConnectOptions = url
            .parse::<PgConnectOptions>()
            .expect("a valid DATABASE_URL")
            .database(&name);
        // Migrated on a connection of its own whose table statistics are flushed before it
        // closes: an idle backend flushes its counts up to 10 s late, and a test that reads
        // pg_stat_user_tables must not see the migrations' scans arrive in the middle of it.
        let migrating = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .expect("connect to the test database");
        sk_runtime::migrate(&migrating, &Schema::default())
            .await
            .expect("migrate the test database");
        // Flushed before the reply to this statement is sent.
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(&migrating)
            .await
            .expect("flush the migrations' statistics");
        migrating.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .connect_with(options.clone())
            .await
            .expect("connect to the test database");
        Db {
            pool,
            url: with_database(&url, &name),
            place: Place::Server { name, admin },
        }
    }

    queries!(sqlx::Postgres);
}

impl TestBackend for sqlx::Sqlite {
    const BACKEND: &'static str = "SQLite";

    /// A file in the temp dir, in WAL mode.
    async fn create() -> Db<Self> {
        init_logs();
        let path = std::env::temp_dir().join(format!("sk_test_{}.sqlite", Uuid::new_v4().simple()));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(sqlite_options(&path))
            .await
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        sk_runtime::migrate(&pool, &Schema::default())
            .await
            .expect("migrate the test database");
        Db {
            pool,
            url: format!("sqlite://{}", path.display()),
            place: Place::File(path),
        }
    }

    queries!(sqlx::Sqlite);
}

impl TestBackend for sqlx::MySql {
    const BACKEND: &'static str = "MySQL";

    /// # Panics
    /// When MySQL/MariaDB cannot be reached: the tests need a real server and say so.
    async fn create() -> Db<Self> {
        init_logs();
        let url = mysql_url();
        let admin = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .unwrap_or_else(|e| {
                panic!("the tests need MySQL or MariaDB at {url} (set MYSQL_URL): {e}")
            });
        let name = format!("sk_test_{}", Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("create the test database");
        let url = with_database(&url, &name);
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(20)
            .connect(&url)
            .await
            .expect("connect to the test database");
        sk_runtime::migrate(&pool, &Schema::default())
            .await
            .expect("migrate the test database");
        Db {
            pool,
            url,
            place: Place::MySql { name, admin },
        }
    }

    queries!(sqlx::MySql, mysql_sql, Vec<u8>);
}

/// The tests' shared SQL in MySQL's dialect: `?` for `$1`, `SIGNED` for `BIGINT`.
fn mysql_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out.replace("AS BIGINT)", "AS SIGNED)")
}

/// The options sk's docs give for a SQLite file: WAL, `synchronous = NORMAL`.
pub fn sqlite_options(path: &std::path::Path) -> sqlx::sqlite::SqliteConnectOptions {
    sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
}

impl<B: TestBackend> Db<B>
where
    sqlx::Pool<B>: Into<sk_runtime::Pool>,
{
    /// Creates the database and migrates it.
    pub async fn new() -> Self {
        B::create().await
    }

    /// Queue info on this database.
    pub fn info(&self) -> QueueInfo {
        QueueInfo::new(self.pool.clone())
    }

    /// The record of job `id`, which must exist.
    pub async fn job(&self, id: Uuid) -> JobRecord {
        self.info()
            .job(id)
            .await
            .expect("read the job")
            .expect("the job exists")
    }

    /// Waits until the record of `id` satisfies `done`, or panics after `timeout`.
    pub async fn wait_job(
        &self,
        id: Uuid,
        timeout: Duration,
        done: impl Fn(&JobRecord) -> bool,
    ) -> JobRecord {
        let info = self.info();
        wait_until(&format!("job {id}"), timeout, || async {
            info.job(id).await.ok().flatten().filter(|r| done(r))
        })
        .await
    }

    /// Waits until worker `id` has started (it announces itself in `sk_metrics_t`).
    pub async fn wait_worker_up(&self, id: &str) {
        wait_until(
            &format!("worker {id} to start"),
            Duration::from_secs(20),
            || async {
                self.scalar(
                    "SELECT count(*) FROM sk_metrics_t WHERE metric_owner_process_id = $1",
                    Some(id),
                )
                .await
                .filter(|n| *n > 0)
            },
        )
        .await;
    }

    /// [`TestBackend::scalar`] on this database.
    pub async fn scalar(&self, sql: &str, bind: Option<&str>) -> Option<i64> {
        B::scalar(&self.pool, sql, bind).await
    }

    /// [`TestBackend::time`] on this database.
    pub async fn time(&self, sql: &str, bind: Option<&str>) -> Option<DateTime<Utc>> {
        B::time(&self.pool, sql, bind).await
    }

    /// [`TestBackend::execute`] on this database.
    pub async fn execute(&self, sql: &str) {
        B::execute(&self.pool, sql).await
    }

    /// [`TestBackend::texts`] on this database.
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        B::texts(&self.pool, sql).await
    }

    /// [`TestBackend::text_and_time`] on this database.
    pub async fn text_and_time(&self, sql: &str) -> Vec<(String, DateTime<Utc>)> {
        B::text_and_time(&self.pool, sql).await
    }

    /// Another pool on the same database, as a second worker process would have.
    pub async fn second_pool(&self) -> sqlx::Pool<B> {
        let options = self.pool.connect_options();
        sqlx::pool::PoolOptions::<B>::new()
            .max_connections(20)
            .connect_with((*options).clone())
            .await
            .expect("connect again")
    }

    /// Removes the database.
    pub async fn drop(self) {
        self.pool.close().await;
        match self.place {
            Place::Server { name, admin, .. } => {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&admin)
                    .await;
            }
            Place::MySql { name, admin } => {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
                    .execute(&admin)
                    .await;
            }
            Place::Elsewhere => {}
            Place::Bounced { name, admin, .. } => {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&admin)
                    .await;
            }
            Place::File(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut name = path.clone().into_os_string();
                    name.push(suffix);
                    let _ = std::fs::remove_file(name);
                }
            }
        }
    }
}

impl Db<sqlx::Postgres> {
    /// A fresh database of the tests' server, with sk's schema, whose pool and URL go
    /// through a PgBouncer of its own in transaction mode (`pgbouncer`), the pool's
    /// statement cache off: everything the test does, migrations included, goes through
    /// the pooler.
    pub async fn through_pgbouncer() -> Self {
        let (url, admin, name) = fresh_database().await;
        let direct: PgConnectOptions = url.parse().expect("a valid DATABASE_URL");
        let upstream = format!("{}:{}", direct.get_host(), direct.get_port());
        let bouncer = pgbouncer::PgBouncer::start(&upstream, 10);
        let url = bouncer.url_of(&with_database(&url, &name));
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .connect(&url)
            .await
            .expect("connect through pgbouncer");
        sk_runtime::migrate(&pool, &Schema::default())
            .await
            .expect("migrate through pgbouncer");
        Db {
            pool,
            url,
            place: Place::Bounced {
                name,
                admin,
                _bouncer: bouncer,
            },
        }
    }

    /// sk's schema on the database `url` names, which may list several hosts (the pool
    /// follows the writable one: `sk_runtime::primary_pool`); the server is the test's
    /// to remove.
    pub async fn on(url: &str) -> Self {
        init_logs();
        let pool = sk_runtime::primary_pool(PgPoolOptions::new().max_connections(20), url)
            .expect("a valid URL");
        sk_runtime::migrate(&pool, &Schema::default())
            .await
            .expect("migrate the cluster's database");
        Db {
            pool,
            url: url.to_owned(),
            place: Place::Elsewhere,
        }
    }

    fn options(&self) -> PgConnectOptions {
        (*self.pool.connect_options()).clone()
    }

    /// A pool whose connections carry `application_name`, so a test can wait for them to
    /// be gone (see [`Db::wait_disconnected`]).
    pub async fn named_pool(&self, application_name: &str, max_connections: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(self.options().application_name(application_name))
            .await
            .expect("connect again")
    }

    /// Waits until no connection named `application_name` is left on the server. A
    /// backend flushes its statistics (deadlocks among them) before it leaves
    /// `pg_stat_activity`, so the counters read after this include its work.
    pub async fn wait_disconnected(&self, application_name: &str) {
        wait_until(
            &format!("the {application_name} connections to close"),
            Duration::from_secs(20),
            || async {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
                )
                .bind(application_name)
                .fetch_one(&self.pool)
                .await
                .ok()?;
                (n == 0).then_some(())
            },
        )
        .await;
    }

    /// Deadlocks the server has detected in this database so far.
    pub async fn deadlocks(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&self.pool)
        .await
        .expect("read pg_stat_database")
    }
}

/// Runs a test body once per backend: `name::postgres`, `name::sqlite` and `name::mysql`, each with
/// `$db` a fresh [`Db`] of that backend, on a runtime of two threads; after
/// `current_thread;`, on the test's own thread (where a `tracing` default subscriber set by
/// the test sees every task's lines).
#[macro_export]
macro_rules! each_backend {
    (current_thread; $(#[doc = $doc:literal])* async fn $name:ident($db:ident) $body:block) => {
        $crate::each_backend!(@ [] $(#[doc = $doc])* async fn $name($db) $body);
    };
    ($(#[doc = $doc:literal])* async fn $name:ident($db:ident) $body:block) => {
        $crate::each_backend!(@ [flavor = "multi_thread", worker_threads = 2] $(#[doc = $doc])* async fn $name($db) $body);
    };
    (@ [$($flavor:tt)*] $(#[doc = $doc:literal])* async fn $name:ident($db:ident) $body:block) => {
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test($($flavor)*)]
            async fn postgres() {
                let $db = $crate::Db::<sqlx::Postgres>::new().await;
                $body
            }

            #[tokio::test($($flavor)*)]
            async fn sqlite() {
                let $db = $crate::Db::<sqlx::Sqlite>::new().await;
                $body
            }

            #[tokio::test($($flavor)*)]
            async fn mysql() {
                let $db = $crate::Db::<sqlx::MySql>::new().await;
                $body
            }

            /// PostgreSQL through PgBouncer in transaction mode.
            #[tokio::test($($flavor)*)]
            async fn pgbouncer() {
                let $db = $crate::Db::<sqlx::Postgres>::through_pgbouncer().await;
                $body
            }
        }
    };
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let prefix = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{prefix}/{name}?{q}"),
        None => format!("{prefix}/{name}"),
    }
}

/// Polls `check` (a database read) until it yields `Some`, or panics naming `what`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A worker running in the background until [`RunningWorker::stop`].
pub struct RunningWorker {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<sk_runtime::Result<()>>,
    /// The worker's id.
    pub id: String,
}

impl RunningWorker {
    /// Builds and starts the worker.
    pub fn start(builder: WorkerBuilder) -> RunningWorker {
        RunningWorker::from_worker(builder.build().expect("a valid worker"))
    }

    /// Starts a worker built already (one a test subscribed to first).
    pub fn from_worker(worker: Worker) -> RunningWorker {
        let id = worker.id().to_owned();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(worker.run_until(async move {
            let _ = rx.await;
        }));
        RunningWorker {
            stop: Some(tx),
            task,
            id,
        }
    }

    /// Asks for a graceful stop and waits until the worker has stopped.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task)
            .await
            .expect("the worker task did not panic")
            .expect("the worker ran without error");
    }
}

/// Receives the next value from `rx`, or panics naming `what` after `timeout`.
pub async fn recv<T>(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>,
    what: &str,
    timeout: Duration,
) -> T {
    tokio::time::timeout(timeout, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for {what}"))
        .unwrap_or_else(|| panic!("channel closed while waiting for {what}"))
}
