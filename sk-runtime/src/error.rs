//! The one public error enum of the library, and the error a job handler returns.

use std::fmt;

/// What went wrong in sk itself (not inside a job).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database refused or failed a statement, or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The database could not be reached or refused the connection: the address and the
    /// cause in one line, e.g. `cannot reach the database at 127.0.0.1:5499/app: Connection
    /// refused (os error 111)`.
    #[error("cannot reach the database at {address}: {cause}")]
    Connect {
        /// `host:port/database`, or the socket path.
        address: String,
        /// Why, as the operating system or the server said it.
        cause: String,
    },
    /// A call to the database did not finish within its bound (`WorkerBuilder::call_timeout`
    /// and the bounds of `store::bound`): the host went silent, or the call was slower
    /// than its bound. sk dropped the call and closed its connection. `outcome` says, for
    /// a write, whether it is known: e.g. `enqueue on the database at 10.0.0.1:5432/app
    /// did not finish within 10s; sk closed its connection; it was not stored`.
    #[error("{call} on the database{} did not finish within {}; sk closed its connection{}", if address.is_empty() { String::new() } else { format!(" at {address}") }, humantime::format_duration(*bound), outcome.as_ref().map(|o| format!("; {o}")).unwrap_or_default())]
    TimedOut {
        /// What sk was doing: the driver's operation (`claim`, `complete`, `extend`,
        /// ...), `enqueue` or `commit`.
        call: &'static str,
        /// `host:port/database`, or the socket path or file; empty where the caller's
        /// connection does not say (an enqueue on the application's executor).
        address: String,
        /// The bound it ran past.
        bound: std::time::Duration,
        /// For a write whose outcome the caller must know: whether it took effect.
        outcome: Option<String>,
    },
    /// The database answers, but the pool had no free connection in time: the pool is too
    /// small for the worker's concurrency plus whatever else shares it.
    #[error("no free connection in the pool within {} ({size} open, at most {max}); give the pool more connections than the worker's concurrency needs", humantime::format_duration(*waited))]
    PoolExhausted {
        /// How long sk waited.
        waited: std::time::Duration,
        /// Connections the pool had open.
        size: u32,
        /// The pool's `max_connections`.
        max: u32,
    },
    /// The pool gave no connection in time though it had room for more: opening new
    /// ones failed or was slow, while a direct connection now succeeds (the database was
    /// away or refused connections a moment ago, or is at its own connection limit).
    #[error("no connection from the pool within {} though it had room ({size} open, at most {max}): opening new connections failed or was slow, and a direct connection now succeeds; the database was away or refused connections (its limit?) a moment ago", humantime::format_duration(*waited))]
    PoolStalled {
        /// How long sk waited.
        waited: std::time::Duration,
        /// Connections the pool had open.
        size: u32,
        /// The pool's `max_connections`.
        max: u32,
    },
    /// A job payload could not be serialized to JSON.
    #[error("cannot serialize the payload of job `{task_type}`: {source}")]
    Serialize {
        /// The job's task type.
        task_type: &'static str,
        /// Why serde refused it.
        source: serde_json::Error,
    },
    /// An argument was out of its allowed range (a name, a size, a cron expression, ...).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was invalid, e.g. "queue name".
        what: &'static str,
        /// Why, in words a user can act on.
        reason: String,
    },
    /// Two `#[job]` fns registered the same task type.
    #[error("task type `{task_type}` is registered twice: at {first} and at {second}; give one of them `name = \"...\"`")]
    DuplicateTaskType {
        /// The clashing name.
        task_type: String,
        /// Where the first registration is (`file:line`).
        first: String,
        /// Where the second registration is (`file:line`).
        second: String,
    },
    /// A job asks for `Data<T>` that the worker was not given.
    #[error("job `{task_type}` takes `Data<{type_name}>`, but the worker has no such data; add it with `Worker::builder(..).data(..)`")]
    MissingData {
        /// The job's task type.
        task_type: &'static str,
        /// The Rust type name of the missing data.
        type_name: &'static str,
    },
    /// Applying the schema migrations failed.
    #[error("migration {version} failed: {source}")]
    Migration {
        /// The migration's version number.
        version: i32,
        /// The database error.
        source: sqlx::Error,
    },
    /// A migration found a row its new checks would refuse, and changed nothing.
    #[error("migration {version} cannot be applied: {reason}")]
    MigrationRefused {
        /// The migration's version number.
        version: i32,
        /// The row and the value in it.
        reason: String,
    },
    /// [`Client::wait`](crate::Client::wait) gave up: the job had not finished in time.
    #[error("job {id} did not finish within {}", humantime::format_duration(*waited))]
    WaitTimedOut {
        /// The job waited for.
        id: uuid::Uuid,
        /// How long the call waited.
        waited: std::time::Duration,
    },
    /// No job with this id was ever posted (or its result was pruned).
    #[error("no job with id {0}")]
    JobNotFound(uuid::Uuid),
    /// One of the worker's own tasks (the producer that claims, the completer that records
    /// outcomes, the heartbeat that keeps leases) ended while the worker ran: a panic in
    /// it, or in code it called, such as a `tracing` layer or a metrics recorder. The
    /// worker stops at once without giving leases back; its jobs run again elsewhere once
    /// their leases run out.
    #[error("the worker's {task} stopped unexpectedly ({cause}); the worker stopped, and its jobs run again once their leases run out")]
    WorkerTask {
        /// Which task: `producer`, `completer` or `heartbeat`.
        task: &'static str,
        /// The panic's message.
        cause: String,
    },
    /// The database holds a schema newer than this sk version knows.
    #[error("the database schema is at version {found}, newer than this sk ({known}); upgrade sk")]
    SchemaTooNew {
        /// The version found in the database.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
}

impl Error {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            reason: reason.into(),
        }
    }
}

/// `Result` with sk's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error a job returns. Recoverable (retried with the job's backoff) unless made
/// fatal with [`JobError::fatal`]; any `std::error::Error` converts into a recoverable one,
/// so `?` works in handlers.
///
/// What is stored is bounded: a kind over 255 bytes, a message over 8 KiB or a detail over
/// 32 KiB is stored cut at a character boundary to that size, ending with how many bytes
/// were left out (`… [57366 bytes more]` for a 64 KiB message), so a failing job cannot
/// fill the tables with its errors. A NUL character in them is stored as U+FFFD (`�`) on
/// every backend, as PostgreSQL's text cannot hold one.
///
/// ```
/// use sk_runtime::JobError;
///
/// fn check(amount: i64) -> Result<(), JobError> {
///     if amount < 0 {
///         return Err(JobError::fatal("negative amount: will never succeed"));
///     }
///     let _n: i32 = "42".parse()?; // a ParseIntError becomes a recoverable JobError
///     Ok(())
/// }
/// # check(1).unwrap();
/// ```
#[derive(Clone)]
pub struct JobError {
    pub(crate) kind: String,
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
    pub(crate) fatal: bool,
    pub(crate) interrupted: bool,
    pub(crate) snooze: Option<std::time::Duration>,
    /// A snooze that also holds the job's queue's rate limit (`rate_limited`).
    pub(crate) hold: bool,
}

impl JobError {
    /// A recoverable error: the job is retried after its backoff until `max_attempts`.
    pub fn new(message: impl fmt::Display) -> Self {
        JobError {
            kind: "error".into(),
            message: message.to_string(),
            detail: None,
            fatal: false,
            interrupted: false,
            snooze: None,
            hold: false,
        }
    }

    /// Not a failure: run the job again after `delay`, without using an attempt and
    /// without recording an error ("the remote side is not ready yet, look again in 5
    /// minutes"). The job keeps its place in its queue's order by its new not-before time.
    /// A delay that ends after 9999-12-31T23:59:59.999999Z, the latest time sk stores,
    /// waits until then.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sk_runtime::{job, JobError};
    ///
    /// #[job]
    /// async fn poll_export(export_id: i64) -> Result<(), JobError> {
    ///     let ready = export_id % 2 == 0; // ... ask the remote side ...
    ///     if !ready {
    ///         return Err(JobError::snooze(Duration::from_secs(300)));
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn snooze(delay: std::time::Duration) -> Self {
        JobError {
            snooze: Some(delay),
            ..JobError::new(format!("snoozed for {}", humantime::format_duration(delay)))
                .with_kind("snooze")
        }
    }

    /// The downstream said "too many requests" (an HTTP 429 with `Retry-After`): run the
    /// job again after `retry_after` without using an attempt, as [`JobError::snooze`],
    /// and hold its queue's rate limit shut until then, so no worker starts another job
    /// of that queue before the downstream is ready ("holds the key, not just the job").
    /// Other queues run on. In a queue with a rate limit per tenant
    /// (`Client::set_tenant_rate_limit`), the job's tenant's limit is held too, and the
    /// other tenants run on. A queue without a rate limit (`Client::set_rate_limit`) has
    /// no limit to hold: then only this job waits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sk_runtime::{job, JobError};
    ///
    /// #[job(queue = "partner_api")]
    /// async fn push_order(order_id: i64) -> Result<(), JobError> {
    ///     let status = 429; // ... call the partner's API ...
    ///     if status == 429 {
    ///         return Err(JobError::rate_limited(Duration::from_secs(30)));
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn rate_limited(retry_after: std::time::Duration) -> Self {
        JobError {
            snooze: Some(retry_after),
            hold: true,
            ..JobError::new(format!(
                "rate limited downstream for {}",
                humantime::format_duration(retry_after)
            ))
            .with_kind("rate_limited")
        }
    }

    /// The job stopped because the worker asked it to ([`JobContext::is_cancelled`]: a
    /// graceful stop began, or the job's lease was lost). The worker gives the job back at
    /// once, as it does with a job still running at the end of the grace period: no
    /// attempt is used and no error is recorded, so a job interrupted by every deploy
    /// keeps its whole attempt budget.
    ///
    /// Returned when the worker did not ask the job to stop, it is an ordinary
    /// recoverable error that says so.
    ///
    /// [`JobContext::is_cancelled`]: crate::JobContext::is_cancelled
    pub fn interrupted() -> Self {
        JobError {
            interrupted: true,
            ..JobError::new("stopped when the worker asked it to").with_kind("interrupted")
        }
    }

    /// A fatal error: the job is not retried.
    pub fn fatal(message: impl fmt::Display) -> Self {
        JobError::new(message).into_fatal()
    }

    /// Makes this error fatal.
    #[must_use]
    pub fn into_fatal(mut self) -> Self {
        self.fatal = true;
        self
    }

    /// Sets the error type recorded in `task_last_error_type`.
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = kind.into();
        self
    }

    /// Sets the longer detail recorded in `task_last_error_detail`.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Whether the job will not be retried.
    pub fn is_fatal(&self) -> bool {
        self.fatal
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The kind, as recorded with the failure: `"error"` unless set, or what sk gives
    /// the failures it makes (`"panic"`, `"timeout"`, `"payload"`, `"transaction"`, ...).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The detail (a source chain, a backtrace), if any.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    pub(crate) fn payload(task_type: &str, error: &serde_json::Error) -> Self {
        JobError::fatal(format!(
            "payload of `{task_type}` does not deserialize: {error}"
        ))
        .with_kind("payload")
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("fatal", &self.fatal)
            .field("interrupted", &self.interrupted)
            .field("snooze", &self.snooze)
            .field("hold", &self.hold)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(error: E) -> Self {
        let mut detail = String::new();
        let mut source = error.source();
        while let Some(s) = source {
            detail.push_str("caused by: ");
            detail.push_str(&s.to_string());
            detail.push('\n');
            source = s.source();
        }
        JobError {
            kind: std::any::type_name::<E>().to_owned(),
            message: error.to_string(),
            detail: (!detail.is_empty()).then_some(detail),
            fatal: false,
            interrupted: false,
            snooze: None,
            hold: false,
        }
    }
}

/// A panic as a run's failure (kind `panic`).
pub(crate) fn panic_error(panic: &(dyn std::any::Any + Send)) -> JobError {
    JobError::new(format!("panicked: {}", panic_message(panic))).with_kind("panic")
}

/// A panic's message, when it has one.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}
