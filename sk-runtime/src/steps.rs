//! Resumable steps ([`JobContext::step`]): each step's output is recorded on the job when
//! it succeeds, in its metadata under `steps`, so that a later run of the job (a retry
//! after a failure, a crash or a lost lease) skips it and receives the recorded output.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::JobError;
use crate::job::JobContext;

/// The largest output of one step, as JSON text.
pub const MAX_STEP_OUTPUT_BYTES: usize = 64 * 1024;

/// The largest record of all of a job's steps, as JSON text.
pub const MAX_STEPS_BYTES: usize = 1024 * 1024;

/// The longest step name, in characters.
const MAX_STEP_NAME_CHARS: usize = 128;

impl JobContext {
    /// Runs one step of a job that can resume: `work` runs only if no earlier run of
    /// this job finished a step of this `name`; its output is then recorded on the job
    /// before this returns, and every later run receives the recorded output instead
    /// of running `work` again. A two-hour import cut by a crash at step 3 of 5 resumes
    /// at step 3.
    ///
    /// ```
    /// use sk_runtime::{job, JobContext, JobError};
    ///
    /// #[job(max_attempts = 5)]
    /// async fn onboard(user_id: i64, ctx: JobContext) -> Result<(), JobError> {
    ///     // Runs once, even when a later step fails and the job is retried.
    ///     let account: String = ctx
    ///         .step("create account", async { Ok::<_, JobError>(format!("acct-{user_id}")) })
    ///         .await?;
    ///     ctx.step("send welcome", async {
    ///         // ... an e-mail sent to `account` ...
    ///         let _ = &account;
    ///         Ok::<_, JobError>(())
    ///     })
    ///     .await?;
    ///     Ok(())
    /// }
    /// ```
    ///
    /// A step is the unit that runs at least once: a crash after `work` succeeded but
    /// before its record was written runs it again. `work`'s error is returned as it is
    /// and nothing is recorded, so the step runs again on the retry.
    ///
    /// - Names are the job's own: one name is one step; a second step of the same name
    ///   in a job receives the first one's output. Give the steps of a loop their own
    ///   names (`format!("page {n}")`).
    /// - Recorded in the job's metadata under `steps` (an object of name → output),
    ///   shown by [`JobRecord::steps`](crate::JobRecord::steps), `sk job` and the
    ///   dashboard, and kept when the job ends. Each record rewrites that object: steps
    ///   suit a job of a handful to a few hundred stages, not one per row of a large
    ///   table (use a cursor step per page).
    /// - Written on the worker's pool at once, not in the job's transaction: a record in
    ///   that transaction would be seen only once the job had completed, by no retry.
    ///   A step whose work is the transaction's own writes needs no step: those writes
    ///   commit or roll back with the job.
    /// - In [`testing::Runner`](crate::testing::Runner), steps are kept in memory; give
    ///   the runner the metadata of an earlier run
    ///   (`.metadata(json!({"steps": {"create account": "acct-1"}}))`) to test a resume.
    ///
    /// # Errors
    /// `work`'s error, converted; a fatal [`JobError`] (kind `step`) for an empty or too
    /// long name, an output that does not serialize or is over
    /// [`MAX_STEP_OUTPUT_BYTES`], steps over [`MAX_STEPS_BYTES`] in all, a recorded
    /// output that does not read as `T` (the step's type changed since it was
    /// recorded), or a step in a job that takes a transaction on SQLite (whose one
    /// writer the transaction is); a recoverable one when the record cannot be written
    /// (the step then runs again on the retry) or this run no longer holds its job.
    pub async fn step<T, E, F>(&self, name: &str, work: F) -> Result<T, JobError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<JobError>,
        F: Future<Output = Result<T, E>>,
    {
        let refuse =
            |why: String| JobError::fatal(format!("step {name:?}: {why}")).with_kind("step");
        if name.is_empty() || name.chars().count() > MAX_STEP_NAME_CHARS {
            return Err(refuse(format!(
                "a step's name is 1 to {MAX_STEP_NAME_CHARS} characters"
            )));
        }
        let written = self.writes.leased && self.runtime.is_some();
        if written && self.writes.transaction && self.backend() == Some("SQLite") {
            return Err(refuse(
                "a job that takes a transaction on SQLite cannot record steps: the transaction holds SQLite's one write lock until the job ends".to_owned(),
            ));
        }
        let recorded = {
            let mut steps = self.writes.steps.lock().await;
            self.recorded_steps(&mut steps).get(name).cloned()
        };
        if let Some(output) = recorded {
            return serde_json::from_value(output).map_err(|e| {
                refuse(format!(
                    "its recorded output does not read as {}: {e} (did the step's type change since it was recorded?)",
                    std::any::type_name::<T>()
                ))
            });
        }
        let output = work.await.map_err(Into::into)?;
        let value = serde_json::to_value(&output)
            .map_err(|e| refuse(format!("its output does not serialize: {e}")))?;
        let size = value.to_string().len();
        if size > MAX_STEP_OUTPUT_BYTES {
            return Err(refuse(format!(
                "its output is {size} bytes of JSON, over the limit of {MAX_STEP_OUTPUT_BYTES}"
            )));
        }
        let mut steps = self.writes.steps.lock().await;
        let steps = self.recorded_steps(&mut steps);
        steps.insert(name.to_owned(), value);
        if written {
            let json = serde_json::Value::Object(steps.clone()).to_string();
            if json.len() > MAX_STEPS_BYTES {
                steps.remove(name);
                return Err(refuse(format!(
                    "the job's steps would be {} bytes of JSON, over the limit of {MAX_STEPS_BYTES}",
                    json.len()
                )));
            }
            if let Err(e) = self.record_steps(&json).await {
                steps.remove(name);
                return Err(e);
            }
        }
        Ok(output)
    }

    /// The steps recorded so far: those of the metadata the run began with, the first
    /// time.
    fn recorded_steps<'a>(
        &self,
        steps: &'a mut Option<serde_json::Map<String, serde_json::Value>>,
    ) -> &'a mut serde_json::Map<String, serde_json::Value> {
        steps.get_or_insert_with(|| {
            self.metadata
                .as_deref()
                .and_then(|m| m.get("steps"))
                .and_then(serde_json::Value::as_object)
                .cloned()
                .unwrap_or_default()
        })
    }

    /// Writes `json` as the job's steps while this run holds it.
    async fn record_steps(&self, json: &str) -> Result<(), JobError> {
        let Some(runtime) = &self.runtime else {
            return Ok(());
        };
        let run = (self.id, self.attempt);
        match runtime
            .pool
            .set_running_metadata(&runtime.schema, run, "steps", json, true)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(JobError::new(format!(
                "run {} of job {} no longer holds it (its lease was lost, or it was cancelled): its step's output is not recorded",
                self.attempt, self.id
            ))
            .with_kind("step")),
            Err(e) => Err(JobError::new(format!(
                "a step succeeded but its output could not be recorded, so it runs again on the retry: {e}"
            ))
            .with_kind("step")),
        }
    }

    /// The name of the backend the run's job is on, if it has one.
    fn backend(&self) -> Option<&'static str> {
        self.runtime.as_ref().map(|r| r.pool.backend_name())
    }
}
