//! An application's change to a waiting job, compared and set on its version (seed 002's
//! `version`): the payload, the not-before time, the priority, the metadata.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::audit::On;
use super::Client;
use crate::error::{Error, Result};
use crate::model::UpdateOutcome;
use crate::store::queries::WaitingChange;

/// What [`Client::update`] changes in a waiting job; what is not given stays.
///
/// ```no_run
/// # async fn f(client: sk_runtime::Client, id: uuid::Uuid) -> sk_runtime::Result<()> {
/// use sk_runtime::{JobUpdate, UpdateOutcome};
///
/// let job = client.job(id).await?.expect("a job");
/// let change = JobUpdate::new()
///     .if_version(job.version.unwrap_or(0))
///     .payload(serde_json::json!({"user_id": 42, "template": "reminder"}));
/// match client.update(id, &change).await? {
///     UpdateOutcome::Updated { version } => println!("now at version {version}"),
///     UpdateOutcome::VersionChanged { .. } => println!("changed meanwhile: read it again"),
///     other => println!("not changed: {other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct JobUpdate {
    version: Option<i32>,
    payload: Option<serde_json::Value>,
    run_at: Option<DateTime<Utc>>,
    priority: Option<i32>,
    metadata: Option<serde_json::Value>,
}

impl JobUpdate {
    /// A change that changes nothing yet.
    pub fn new() -> Self {
        JobUpdate::default()
    }

    /// Applies only if the job is still at `version` (as read in
    /// [`JobRecord::version`](crate::JobRecord::version)).
    pub fn if_version(mut self, version: i32) -> Self {
        self.version = Some(version);
        self
    }

    /// New arguments, a JSON object (checked against the job's `#[job]` when this binary
    /// links it).
    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = Some(payload);
        self
    }

    /// A new not-before time.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// A new priority (lower runs first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// New metadata, a JSON object, in place of the old (seed 002's fields in it too).
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

impl Client {
    /// Changes a waiting job (seed 002's optimistic update): with
    /// [`JobUpdate::if_version`], only if no other change came since that version was
    /// read. Every change (this, [`Client::reschedule`], [`Client::reprioritize`]) adds
    /// one to the job's version; a worker's claim does not, and a job a worker runs is
    /// not changed.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a payload or metadata that is not a JSON object (or, for
    /// metadata, holds a NUL character, as at enqueue), a payload
    /// the linked `#[job]` cannot take, or a time past the last sk stores; the database
    /// fails.
    pub async fn update(&self, id: Uuid, change: &JobUpdate) -> Result<UpdateOutcome> {
        if self.spread() {
            return Box::pin(self.home_of_job(id).await?.update(id, change)).await;
        }
        let payload = match &change.payload {
            None => None,
            Some(payload) => Some(self.checked_payload(id, payload.clone()).await?),
        };
        let metadata = change
            .metadata
            .clone()
            .map(crate::enqueue::metadata_map)
            .transpose()?
            .map(|map| serde_json::Value::Object(map).to_string());
        let run_at = change
            .run_at
            .map(|at| crate::clock::storable("run at", at))
            .transpose()?;
        let waiting = WaitingChange {
            payload: payload.as_deref(),
            run_at,
            priority: change.priority,
            metadata: metadata.as_deref(),
        };
        let outcome = self
            .pool
            .update_waiting(&self.schema, id, change.version, &waiting)
            .await?;
        let changed = matches!(outcome, UpdateOutcome::Updated { .. });
        self.record("update", On::Target(id.to_string()), Some(changed.into()))
            .await?;
        Ok(outcome)
    }

    /// `payload` as stored, checked against job `id`'s `#[job]` when this binary links
    /// its task type.
    async fn checked_payload(&self, id: Uuid, payload: serde_json::Value) -> Result<String> {
        let payload = super::by_name::json_object(payload)?;
        if let Some(job) = self.primary_job(id).await? {
            if let Some(registration) = crate::registry::find(&job.task_type) {
                // (The tenant the new arguments would give it is not applied: a job's
                // tenant is set when it is enqueued.)
                (registration.validate)(&payload).map_err(|e| {
                    Error::invalid(
                        "payload",
                        format!("does not fit the arguments of `{}`: {e}", job.task_type),
                    )
                })?;
                let encrypted = registration.options.encrypted;
                return crate::sealed::seal_payload(&job.task_type, payload, encrypted);
            }
        }
        Ok(payload)
    }
}
