//! What one run of a job came to, as the worker recorded it: the testing kit's `drain`
//! reports each run so (the testing kit re-exports these).

use std::time::Duration;

use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::error::JobError;
use crate::job::JobOutcome;

use super::completer::Completion;

/// What a run came to, and what the worker does next.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// It succeeded; its output as JSON (`None` for `()`).
    Succeeded {
        /// The handler's `Ok` value.
        output: Option<serde_json::Value>,
    },
    /// It failed and runs again `after` this long (the backoff curve, before jitter).
    Retry {
        /// Why it failed.
        error: JobError,
        /// The delay before the next attempt.
        after: Duration,
    },
    /// It failed for good: a fatal error, or its last attempt.
    Failed {
        /// Why it failed.
        error: JobError,
    },
    /// It asked to run again `after` this long, keeping its attempt.
    Snoozed {
        /// The delay.
        after: Duration,
    },
    /// It stopped when asked and is handed back, keeping its attempt.
    Interrupted,
}

impl Outcome {
    pub(crate) fn of(
        result: JobOutcome,
        attempt: i32,
        max_attempts: i32,
        backoff: &crate::retry::Backoff,
    ) -> Self {
        match result {
            Ok(output) => Outcome::Succeeded {
                output: output.map(|json| {
                    serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json))
                }),
            },
            Err(error) => match error.snooze {
                Some(after) => Outcome::Snoozed { after },
                None if error.interrupted => Outcome::Interrupted,
                None if crate::retry::retries(&error, attempt, max_attempts) => Outcome::Retry {
                    error,
                    after: backoff.delay(u32::try_from(attempt).unwrap_or(1)),
                },
                None => Outcome::Failed { error },
            },
        }
    }

    /// Whether the run succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Succeeded { .. })
    }

    /// The output of a successful run, typed; `None` for a failed run, `()` or an output
    /// that is not a `T`.
    pub fn output<T: DeserializeOwned>(&self) -> Option<T> {
        match self {
            Outcome::Succeeded {
                output: Some(output),
            } => serde_json::from_value(output.clone()).ok(),
            _ => None,
        }
    }

    /// The error of a failed run.
    pub fn error(&self) -> Option<&JobError> {
        match self {
            Outcome::Retry { error, .. } | Outcome::Failed { error } => Some(error),
            _ => None,
        }
    }
}

/// One run of `testing::drain`.
#[derive(Debug)]
#[non_exhaustive]
pub struct Run {
    /// The job's id.
    pub id: Uuid,
    /// Its task type.
    pub task_type: String,
    /// The attempt this run was.
    pub attempt: i32,
    /// What it came to (as recorded by the worker).
    pub outcome: Outcome,
}

/// What a completion records, for a test's drain.
pub(crate) fn outcome_of(completion: &Completion) -> Outcome {
    match completion {
        Completion::GiveBack { .. } => Outcome::Interrupted,
        Completion::Finished {
            lease,
            max_attempts,
            registration,
            result,
            ..
        } => Outcome::of(
            result.clone(),
            lease.attempt,
            *max_attempts,
            &registration.options.backoff,
        ),
    }
}
