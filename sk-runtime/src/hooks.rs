//! Code run on every job this process enqueues, before it is stored
//! ([`add_enqueue_hook`]): an application's conventions (a tenant, a correlation id,
//! metadata) set in one place, or a job refused, as Sidekiq's client middleware does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::model::check_name;
use crate::store::NewJob;

/// Code run on every job this process enqueues: by `.enqueue()`, `enqueue_many`, a
/// [`Workflow`](crate::Workflow), a job's [`JobContext::enqueue`](crate::JobContext::enqueue)
/// and [`Client::enqueue_json`](crate::Client::enqueue_json); not on the jobs a worker
/// posts for its schedules.
///
/// A hook sees the job as it is about to be stored and may change its queue, priority,
/// tenant, correlation id, metadata or arguments ([`Posting`]), or refuse it with a
/// reason: the enqueue then fails with [`Error::Invalid`] (`what`: `"enqueue hook"`) and
/// nothing of it, or of its batch, is stored. What a hook sets is checked as any
/// enqueue's. Hooks run in the order added.
///
/// ```
/// use sk_runtime::{EnqueueHook, Posting};
///
/// /// Every job carries the deploy it was posted by, and none may go to queue "legacy".
/// struct Conventions;
///
/// impl EnqueueHook for Conventions {
///     fn on_enqueue(&self, job: &mut Posting<'_>) -> Result<(), String> {
///         if job.queue() == "legacy" {
///             return Err("the legacy queue is closed".into());
///         }
///         job.set_metadata("deploy", "2026-11-28".into());
///         Ok(())
///     }
/// }
///
/// sk_runtime::add_enqueue_hook(Conventions);
/// ```
pub trait EnqueueHook: Send + Sync + 'static {
    /// Changes `job`, or refuses it with the reason.
    ///
    /// # Errors
    /// The reason the job is refused.
    fn on_enqueue(&self, job: &mut Posting<'_>) -> std::result::Result<(), String>;
}

/// The hooks of this process, in the order added.
static HOOKS: RwLock<Vec<Arc<dyn EnqueueHook>>> = RwLock::new(Vec::new());

/// Whether a hook was ever added: an enqueue without hooks takes no lock.
static ANY: AtomicBool = AtomicBool::new(false);

/// Runs `hook` on every job this process enqueues from now on, after the hooks added
/// before it. For the whole process, like a `tracing` subscriber: add it at start.
pub fn add_enqueue_hook(hook: impl EnqueueHook) {
    HOOKS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(Arc::new(hook));
    ANY.store(true, Ordering::Release);
}

/// A job about to be stored, as an [`EnqueueHook`] sees and changes it.
pub struct Posting<'a> {
    job: &'a mut NewJob,
}

impl std::fmt::Debug for Posting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Posting")
            .field("task_type", &self.job.task_type)
            .field("queue", &self.job.queue)
            .finish_non_exhaustive()
    }
}

impl Posting<'_> {
    /// Its task type.
    pub fn task_type(&self) -> &str {
        &self.job.task_type
    }

    /// Its queue.
    pub fn queue(&self) -> &str {
        &self.job.queue
    }

    /// Puts it on another queue.
    pub fn set_queue(&mut self, queue: impl Into<String>) {
        self.job.queue = queue.into();
    }

    /// Its priority (lower runs first).
    pub fn priority(&self) -> i32 {
        self.job.priority
    }

    /// Sets its priority.
    pub fn set_priority(&mut self, priority: i32) {
        self.job.priority = priority;
    }

    /// Its tenant.
    pub fn tenant(&self) -> Option<&str> {
        self.job.tenant.as_deref()
    }

    /// Sets or clears its tenant.
    pub fn set_tenant(&mut self, tenant: Option<String>) {
        self.job.tenant = tenant;
    }

    /// Its correlation id.
    pub fn correlation_id(&self) -> Option<&str> {
        self.job.correlation_id.as_deref()
    }

    /// Sets or clears its correlation id.
    pub fn set_correlation_id(&mut self, id: Option<String>) {
        self.job.correlation_id = id;
    }

    /// Its metadata (an empty map for none).
    pub fn metadata(&self) -> serde_json::Map<String, serde_json::Value> {
        self.job
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default()
    }

    /// Sets one field of its metadata.
    pub fn set_metadata(&mut self, key: &str, value: serde_json::Value) {
        let mut map = self.metadata();
        map.insert(key.to_owned(), value);
        self.job.metadata = Some(serde_json::Value::Object(map).to_string());
    }

    /// Its arguments, as JSON.
    pub fn payload(&self) -> serde_json::Value {
        serde_json::from_str(&self.job.payload).unwrap_or(serde_json::Value::Null)
    }

    /// Replaces its arguments (a worker deserializes them into the job's; arguments that
    /// do not fit fail the job for good when it runs).
    pub fn set_payload(&mut self, payload: &serde_json::Value) {
        self.job.payload = payload.to_string();
    }
}

/// Runs this process's hooks on `job`, and checks what they set.
///
/// # Errors
/// [`Error::Invalid`] when a hook refuses it or sets a bad name.
pub(crate) fn apply(job: &mut NewJob) -> Result<()> {
    if !ANY.load(Ordering::Acquire) {
        return Ok(());
    }
    let hooks = HOOKS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if hooks.is_empty() {
        return Ok(());
    }
    for hook in hooks {
        hook.on_enqueue(&mut Posting { job: &mut *job })
            .map_err(|why| {
                Error::invalid(
                    "enqueue hook",
                    format!("refused job `{}`: {why}", job.task_type),
                )
            })?;
    }
    check_name("queue name", &job.queue)?;
    if let Some(tenant) = &job.tenant {
        check_name("tenant", tenant)?;
    }
    if let Some(id) = &job.correlation_id {
        check_name("correlation id", id)?;
    }
    Ok(())
}
