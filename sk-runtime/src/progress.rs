//! How far a running job has come, in the application's own JSON
//! ([`JobContext::progress`]): kept in the job's metadata under `progress`, written at
//! most once per [`PROGRESS_EVERY`] per run, the latest value last.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use crate::job::{JobContext, RunWrites, Runtime};

/// The least time between two progress writes of one run.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The largest progress value, as JSON text.
pub const MAX_PROGRESS_BYTES: usize = 4096;

impl JobContext {
    /// Records how far this run has come, as any JSON (`{"done": 40, "of": 100}`):
    /// shown by [`Client::job`](crate::Client::job) ([`JobRecord::progress`](crate::JobRecord::progress)),
    /// `sk job` and the dashboard while it runs, and kept on its record after it ends.
    ///
    /// Cheap to call often: the first value is written at once, then at most one write
    /// per [`PROGRESS_EVERY`] (1 s), the latest value each time; the call does not wait
    /// for a write it puts off. A value still waiting when the handler returns is
    /// written then, before its outcome (not for a job that takes a transaction, whose
    /// success commits inside the handler). Kept in the job's metadata under `progress`; this
    /// context's [`metadata`](Self::metadata) still shows the metadata the run began with.
    /// A run that no longer holds its job (lease lost, cancelled) writes nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a value over
    /// [`MAX_PROGRESS_BYTES`] of JSON or one that does not serialize, or a context
    /// without a database; the database's error, for a write made at once.
    pub async fn progress(&self, value: impl serde::Serialize) -> crate::Result<()> {
        let json = serde_json::to_string(&value)
            .map_err(|e| crate::Error::invalid("progress", format!("does not serialize: {e}")))?;
        if json.len() > MAX_PROGRESS_BYTES {
            return Err(crate::Error::invalid(
                "progress",
                format!(
                    "is {} bytes of JSON, over the limit of {MAX_PROGRESS_BYTES}",
                    json.len()
                ),
            ));
        }
        let Some(runtime) = &self.runtime else {
            return Err(crate::Error::invalid(
                "job context",
                "this context has no database to write the progress to: give the test runner a pool (testing::Runner::pool)",
            ));
        };
        // `None`: write it now; else put it off by that long (or, already put off,
        // only keep it as the latest).
        let mut json = Some(json);
        let put_off: Option<Option<Duration>> = {
            let mut state = self
                .writes
                .progress
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match state.written_at {
                Some(at) if at.elapsed() < PROGRESS_EVERY => {
                    state.pending = json.take();
                    let first = !std::mem::replace(&mut state.armed, true);
                    Some(first.then(|| PROGRESS_EVERY - at.elapsed()))
                }
                _ => {
                    state.written_at = Some(Instant::now());
                    state.pending = None;
                    None
                }
            }
        };
        let wait = match put_off {
            None => {
                let json = json.unwrap_or_default();
                return write(runtime, (self.id, self.attempt), &json).await;
            }
            Some(None) => return Ok(()),
            Some(Some(wait)) => wait,
        };
        // The latest value, once the interval has passed.
        let (runtime, writes, run) = (
            Arc::clone(runtime),
            Arc::clone(&self.writes),
            (self.id, self.attempt),
        );
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let json = {
                let mut state = writes
                    .progress
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                state.armed = false;
                state.written_at = Some(Instant::now());
                state.pending.take()
            };
            if let Some(json) = json {
                if let Err(e) = write(&runtime, run, &json).await {
                    tracing::warn!(id = %run.0, attempt = run.1, "sk: cannot write the job's progress: {e}");
                }
            }
        });
        Ok(())
    }
}

/// Writes what run `run` reported last and has not written yet, as its handler returns,
/// so that its record keeps the latest value.
pub(crate) async fn flush(runtime: &Runtime, run: (uuid::Uuid, i32), writes: &RunWrites) {
    let json = writes
        .progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pending
        .take();
    if let Some(json) = json {
        if let Err(e) = write(runtime, run, &json).await {
            tracing::warn!(id = %run.0, attempt = run.1, "sk: cannot write the job's last progress: {e}");
        }
    }
}

/// Writes `json` as run `run`'s progress; a run that no longer holds its job writes
/// nothing.
async fn write(runtime: &Runtime, run: (uuid::Uuid, i32), json: &str) -> crate::Result<()> {
    let held = runtime
        .pool
        .set_running_metadata(&runtime.schema, run, "progress", json, true)
        .await?;
    if !held {
        tracing::debug!(id = %run.0, attempt = run.1, "sk: progress not written: the run no longer holds its job");
    }
    Ok(())
}
