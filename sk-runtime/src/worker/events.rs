//! What happens to a worker's jobs, as a stream an application subscribes to
//! ([`Worker::subscribe`](crate::Worker::subscribe)): each run's start and its recorded
//! outcome. Sent only while someone listens, after the outcome is written.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use uuid::Uuid;

/// What happened to a job ([`JobEvent::kind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobEventKind {
    /// Its handler started (attempt [`JobEvent::attempt`]).
    Started,
    /// It succeeded, and its success is recorded.
    Succeeded,
    /// It failed and runs again at this time.
    Retried {
        /// When its next attempt is due.
        at: DateTime<Utc>,
    },
    /// It failed for good (fatal, or its last attempt).
    Failed,
    /// An operator cancelled it while it ran ([`Client::cancel`](crate::Client::cancel)).
    Cancelled,
    /// It asked to run again later without using an attempt
    /// ([`JobError::snooze`](crate::JobError::snooze)).
    Snoozed {
        /// When it is due again.
        until: DateTime<Utc>,
    },
}

/// One thing that happened to one of a worker's jobs. The whole record is
/// [`Client::job`](crate::Client::job)`(event.id)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobEvent {
    /// What happened.
    pub kind: JobEventKind,
    /// The job.
    pub id: Uuid,
    /// Its attempt (from 1).
    pub attempt: i32,
    /// Its task type.
    pub task_type: &'static str,
    /// Its queue.
    pub queue: Arc<str>,
    /// How long the run took, for an outcome.
    pub millis: Option<i64>,
    /// The run's error message, for a retry or a failure.
    pub error: Option<String>,
    /// When the worker saw it happen.
    pub at: DateTime<Utc>,
}

/// The stream of a worker's job events: a bounded buffer per subscriber; one that falls
/// behind by more than the buffer misses the oldest, and its next
/// [`recv`](broadcast::Receiver::recv) says how many
/// ([`RecvError::Lagged`](broadcast::error::RecvError::Lagged)).
pub type JobEvents = broadcast::Receiver<JobEvent>;

/// Events each subscriber can fall behind by before it misses some.
pub(crate) const BUFFER: usize = 4096;

/// The sending side, in the worker's shared state, and whether anyone ever subscribed:
/// the channel counts its subscribers under its lock, which a worker nobody listens to
/// then never takes (two runs' events a job).
pub(crate) struct Sender(broadcast::Sender<JobEvent>, AtomicBool);

impl Default for Sender {
    fn default() -> Self {
        Sender(broadcast::channel(BUFFER).0, AtomicBool::new(false))
    }
}

impl Sender {
    pub(crate) fn subscribe(&self) -> JobEvents {
        self.1.store(true, Ordering::Release);
        self.0.subscribe()
    }

    /// Whether anyone listens: events are built only then.
    fn listened(&self) -> bool {
        self.1.load(Ordering::Acquire) && self.0.receiver_count() > 0
    }

    /// Sends what happened to run `lease` of a job of `task_type` in `queue`, if anyone
    /// listens.
    pub(crate) fn of_run(
        &self,
        kind: JobEventKind,
        lease: &crate::store::Lease,
        (task_type, queue): (&'static str, &Arc<str>),
        millis: Option<i64>,
        error: Option<&str>,
        at: DateTime<Utc>,
    ) {
        if self.listened() {
            let _ = self.0.send(JobEvent {
                kind,
                id: lease.id,
                attempt: lease.attempt,
                task_type,
                queue: Arc::clone(queue),
                millis,
                error: error.map(str::to_owned),
                at,
            });
        }
    }
}

/// An event as other processes receive it (`WorkerBuilder::publish_events`): a JSON
/// object of short keys, one `NOTIFY` payload holding an array of them.
#[cfg(feature = "postgres")]
pub(crate) fn to_wire(event: &JobEvent) -> serde_json::Value {
    let (kind, at) = match &event.kind {
        JobEventKind::Started => ("started", None),
        JobEventKind::Succeeded => ("succeeded", None),
        JobEventKind::Retried { at } => ("retried", Some(*at)),
        JobEventKind::Failed => ("failed", None),
        JobEventKind::Cancelled => ("cancelled", None),
        JobEventKind::Snoozed { until } => ("snoozed", Some(*until)),
    };
    serde_json::json!({
        "k": kind, "id": event.id, "a": event.attempt, "t": event.task_type,
        "q": &*event.queue, "ms": event.millis, "at": event.at, "next": at,
        // A payload holds at most 8,000 bytes: a long message is cut (the whole is in
        // the job's record).
        "e": event.error.as_deref().map(|e| e.chars().take(MAX_ERROR_CHARS).collect::<String>()),
    })
}

/// An event another process published ([`to_wire`]); `None` if it does not read as one.
#[cfg(feature = "postgres")]
pub(crate) fn from_wire(value: &serde_json::Value) -> Option<JobEvent> {
    let time = |key: &str| -> Option<DateTime<Utc>> {
        serde_json::from_value(value.get(key)?.clone()).ok()
    };
    let kind = match value.get("k")?.as_str()? {
        "started" => JobEventKind::Started,
        "succeeded" => JobEventKind::Succeeded,
        "retried" => JobEventKind::Retried { at: time("next")? },
        "failed" => JobEventKind::Failed,
        "cancelled" => JobEventKind::Cancelled,
        "snoozed" => JobEventKind::Snoozed {
            until: time("next")?,
        },
        _ => return None,
    };
    Some(JobEvent {
        kind,
        id: value.get("id")?.as_str()?.parse().ok()?,
        attempt: i32::try_from(value.get("a")?.as_i64()?).ok()?,
        task_type: interned(value.get("t")?.as_str()?),
        queue: Arc::from(value.get("q")?.as_str()?),
        millis: value.get("ms").and_then(serde_json::Value::as_i64),
        error: value
            .get("e")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        at: time("at")?,
    })
}

/// Task types another process names, kept once each for the process's life (an event's
/// `task_type` is `&'static str`): the linked job's own name, else a copy, at most
/// [`MAX_INTERNED`] of them; past that, `"(other)"`.
#[cfg(feature = "postgres")]
fn interned(name: &str) -> &'static str {
    if let Some(known) = crate::registry::find(name) {
        return known.task_type;
    }
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(kept) = names.iter().find(|n| **n == name) {
        return kept;
    }
    if names.len() >= MAX_INTERNED {
        return "(other)";
    }
    let kept: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(kept);
    kept
}

/// The characters of an error message an event published to other processes carries.
#[cfg(feature = "postgres")]
const MAX_ERROR_CHARS: usize = 500;

/// Task types not linked in this process that its subscriptions keep names of.
#[cfg(feature = "postgres")]
const MAX_INTERNED: usize = 1024;
