//! Helpers for sk's integration tests: a fresh PostgreSQL database per test, a worker
//! running in the background, and waiting for events under a timeout.

use std::future::Future;
use std::time::{Duration, Instant};

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

/// A database of its own for one test, with sk's schema applied; dropped by [`TestDb::drop`].
pub struct TestDb {
    /// A pool on the test database.
    pub pool: PgPool,
    /// The test database's URL, for worker processes.
    pub url: String,
    name: String,
    admin: PgPool,
    options: PgConnectOptions,
}

impl TestDb {
    /// Creates the database and migrates it.
    ///
    /// # Panics
    /// When PostgreSQL cannot be reached: the tests need a real server and say so.
    pub async fn new() -> TestDb {
        // RUST_LOG=sk_runtime=debug shows the worker's logs in a failing test's output.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let url = database_url();
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .unwrap_or_else(|e| {
                panic!("the tests need PostgreSQL at {url} (set DATABASE_URL): {e}")
            });
        let name = format!("sk_test_{}", Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("create the test database");
        let options: PgConnectOptions = url
            .parse::<PgConnectOptions>()
            .expect("a valid DATABASE_URL")
            .database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .connect_with(options.clone())
            .await
            .expect("connect to the test database");
        sk_runtime::migrate(&pool, &Schema::default())
            .await
            .expect("migrate the test database");
        TestDb {
            pool,
            url: with_database(&url, &name),
            name,
            admin,
            options,
        }
    }

    /// Another pool on the same database, as a second worker process would have.
    pub async fn second_pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(20)
            .connect_with(self.options.clone())
            .await
            .expect("connect again")
    }

    /// A pool whose connections carry `application_name`, so a test can wait for them to
    /// be gone (see [`TestDb::wait_disconnected`]).
    pub async fn named_pool(&self, application_name: &str, max_connections: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(self.options.clone().application_name(application_name))
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
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM sk_metrics_t WHERE metric_owner_process_id = $1",
                )
                .bind(id)
                .fetch_one(&self.pool)
                .await
                .ok()?;
                (n > 0).then_some(())
            },
        )
        .await;
    }

    /// Drops the database.
    pub async fn drop(self) {
        self.pool.close().await;
        let _ = sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&self.admin)
        .await;
    }
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
        let worker: Worker = builder.build().expect("a valid worker");
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
