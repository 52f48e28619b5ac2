//! Enqueue by task type name, with the arguments as JSON: checked against the `#[job]`
//! this binary links, else against the schema the workers published (`task_types_t`,
//! `sk_runtime::schema`), which [`Client::published_schema`] reads.

use uuid::Uuid;

use super::Client;
use crate::error::{Error, Result};
use crate::store::NewJob;

/// What a job posted by name gets, from its `#[job]` or its published schema.
struct Defaults {
    queue: String,
    priority: i32,
    max_attempts: i32,
    encrypted: bool,
}

impl Client {
    /// Enqueues a job by its task type name and its arguments as a JSON object (for
    /// scripts, other languages and the CLI), with the type's `#[job]` defaults. A task
    /// type this binary does not link is checked against the schema its workers
    /// published ([`Client::published_schema`]), with cargo feature `json-schema`.
    ///
    /// ```no_run
    /// # async fn f(client: sk_runtime::Client) -> sk_runtime::Result<()> {
    /// let id = client
    ///     .enqueue_json("send_welcome", serde_json::json!({"user_id": 42, "template": "hi"}))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] when neither a linked `#[job]` nor a published schema has this
    /// task type (use [`Client::enqueue_json_unchecked`] to post it all the same), when
    /// the payload is not a JSON object, or when it does not fit the job's arguments (the
    /// error names the field); the database fails.
    pub async fn enqueue_json(&self, task_type: &str, payload: serde_json::Value) -> Result<Uuid> {
        let Some(registration) = crate::registry::find(task_type) else {
            return self.enqueue_published(task_type, payload).await;
        };
        let payload = json_object(payload)?;
        let tenant = (registration.validate)(&payload).map_err(|e| {
            Error::invalid(
                "payload",
                format!("does not fit the arguments of `{task_type}`: {e}"),
            )
        })?;
        if let Some(tenant) = &tenant {
            crate::model::check_name("tenant", tenant)?;
        }
        let options = registration.options;
        let defaults = Defaults {
            queue: options.queue.to_owned(),
            priority: options.priority,
            max_attempts: options.max_attempts,
            encrypted: options.encrypted,
        };
        self.post(task_type.to_owned(), payload, defaults, tenant)
            .await
    }

    /// As [`Client::enqueue_json`], for a task type neither linked nor published: the
    /// job gets queue `"default"`, priority 0 and the default attempt limit, and a worker
    /// that runs the type checks its payload.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or a payload that is not a JSON object; the
    /// database fails.
    pub async fn enqueue_json_unchecked(
        &self,
        task_type: &str,
        payload: serde_json::Value,
    ) -> Result<Uuid> {
        crate::model::check_name("task type", task_type)?;
        let payload = json_object(payload)?;
        let defaults = Defaults {
            queue: "default".to_owned(),
            priority: 0,
            max_attempts: crate::DEFAULT_MAX_ATTEMPTS,
            encrypted: false,
        };
        self.post(task_type.to_owned(), payload, defaults, None)
            .await
    }

    /// The schema document of the task types the workers published at start
    /// (`WorkerBuilder::publish_schemas`), as [`crate::schema`] makes it for the linked
    /// ones: what `sk schema --from-database` prints and the clients in other languages
    /// read.
    ///
    /// # Errors
    /// The database fails, or holds a row that is not a JSON document.
    pub async fn published_schema(&self) -> Result<serde_json::Value> {
        let mut jobs = serde_json::Map::new();
        for (name, document) in self.pool.task_types(&self.schema).await? {
            let entry: serde_json::Value = serde_json::from_str(&document).map_err(|e| {
                Error::invalid(
                    "task type schema",
                    format!("the published schema of `{name}` is not JSON: {e}"),
                )
            })?;
            jobs.insert(name, entry);
        }
        Ok(serde_json::json!({ "format": crate::SCHEMA_FORMAT, "jobs": jobs }))
    }

    /// `enqueue_json` of a task type this binary does not link: by its published schema.
    async fn enqueue_published(&self, task_type: &str, payload: serde_json::Value) -> Result<Uuid> {
        let document = self.published_schema().await?;
        let Some(entry) = document["jobs"].get(task_type) else {
            let mut known: Vec<String> = crate::registry::names()
                .into_iter()
                .map(str::to_owned)
                .collect();
            if let Some(jobs) = document["jobs"].as_object() {
                known.extend(jobs.keys().cloned());
            }
            known.sort();
            known.dedup();
            return Err(Error::invalid(
                "task type",
                format!(
                    "no #[job] named {task_type:?} is linked into this binary or published by a worker (known: {}); \
                     Client::enqueue_json_unchecked takes any name",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
            ));
        };
        check_payload(task_type, &entry["args"], &payload)?;
        let tenant = entry["tenant_from"]
            .as_str()
            .and_then(|field| match payload.get(field) {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(serde_json::Value::Number(n)) => Some(n.to_string()),
                _ => None,
            });
        if let Some(tenant) = &tenant {
            crate::model::check_name("tenant", tenant)?;
        }
        let number = |key: &str, or: i64| entry[key].as_i64().unwrap_or(or);
        let defaults = Defaults {
            queue: entry["queue"].as_str().unwrap_or("default").to_owned(),
            priority: i32::try_from(number("priority", 0)).unwrap_or(0),
            max_attempts: i32::try_from(number("max_attempts", 25))
                .unwrap_or(crate::DEFAULT_MAX_ATTEMPTS),
            encrypted: entry["encrypted"].as_bool().unwrap_or(false),
        };
        let payload = json_object(payload)?;
        self.post(task_type.to_owned(), payload, defaults, tenant)
            .await
    }

    /// Posts a job of `task_type` with `defaults`, for `tenant`.
    async fn post(
        &self,
        task_type: String,
        payload: String,
        defaults: Defaults,
        tenant: Option<String>,
    ) -> Result<Uuid> {
        if self.spread() {
            let home = self.home_for(&defaults.queue, tenant.as_deref());
            return Box::pin(home.post(task_type, payload, defaults, tenant)).await;
        }
        let now = self.now();
        let mut job = NewJob {
            id: Uuid::now_v7(),
            task_type: task_type.into(),
            source: "client".to_owned(),
            payload,
            queue: defaults.queue,
            priority: defaults.priority,
            run_at: now,
            max_attempts: defaults.max_attempts,
            unique_key: None,
            unique_mode: None,
            tenant,
            correlation_id: None,
            metadata: None,
            every_ms: None,
            timeout_ms: None,
        };
        crate::hooks::apply(&mut job)?;
        crate::sealed::seal_new_job(&mut job, defaults.encrypted)?;
        let id = job.id;
        let labels = (job.task_type.clone(), job.queue.clone());
        self.pool.post(&self.schema, job, now).await?;
        crate::telemetry::enqueued(&labels.0, &labels.1, 1);
        Ok(id)
    }
}

/// Checks `payload` against a published job's argument schema; the error names the
/// first field that does not fit.
#[cfg(feature = "json-schema")]
fn check_payload(
    task_type: &str,
    args: &serde_json::Value,
    payload: &serde_json::Value,
) -> Result<()> {
    let validator = jsonschema::validator_for(args).map_err(|e| {
        Error::invalid(
            "task type schema",
            format!("the published schema of `{task_type}` is not a JSON Schema: {e}"),
        )
    })?;
    let first = validator.iter_errors(payload).next().map(|error| {
        let field = error.instance_path().to_string();
        let at = field.trim_start_matches('/').replace('/', ".");
        let at = if at.is_empty() {
            String::new()
        } else {
            format!("field `{at}`: ")
        };
        format!("does not fit the published schema of `{task_type}`: {at}{error}")
    });
    match first {
        None => Ok(()),
        Some(reason) => Err(Error::invalid("payload", reason)),
    }
}

/// Without feature `json-schema`, a payload of a published task type is not posted.
#[cfg(not(feature = "json-schema"))]
fn check_payload(task_type: &str, _: &serde_json::Value, _: &serde_json::Value) -> Result<()> {
    Err(Error::invalid(
        "task type",
        format!(
            "`{task_type}` is not linked into this binary, and checking a payload against the schema its workers \
             published needs sk-runtime's cargo feature `json-schema`; Client::enqueue_json_unchecked posts it unchecked"
        ),
    ))
}

/// The payload as stored: a JSON object's text.
pub(super) fn json_object(payload: serde_json::Value) -> Result<String> {
    match payload {
        serde_json::Value::Object(_) => Ok(payload.to_string()),
        other => Err(Error::invalid(
            "payload",
            format!("must be a JSON object of the job's arguments, not {other}"),
        )),
    }
}
