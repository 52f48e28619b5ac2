//! Publishing a worker's job events to other processes (`WorkerBuilder::publish_events`,
//! PostgreSQL): the events of [`Worker::subscribe`](crate::Worker::subscribe), gathered
//! for 50 ms and sent as `NOTIFY` payloads on the schema's events channel, outside the
//! jobs' transactions. `Client::subscribe` receives them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::events::{to_wire, JobEvents};
use super::Shared;

/// How long events gather before they are sent.
const GATHER: Duration = Duration::from_millis(50);

/// A `NOTIFY` payload's limit is 8,000 bytes; each payload stays below this.
const PAYLOAD_BYTES: usize = 7_800;

/// Sends the events of `events` until `done` is cancelled (after the completer has
/// recorded the last outcomes), then what is left.
pub(super) async fn run(shared: Arc<Shared>, mut events: JobEvents, done: CancellationToken) {
    loop {
        let mut gathered: Vec<serde_json::Value> = Vec::new();
        let first = tokio::select! {
            () = done.cancelled() => None,
            event = events.recv() => Some(event),
        };
        let Some(first) = first else { break };
        let deadline = tokio::time::sleep(GATHER);
        tokio::pin!(deadline);
        let mut next = Some(first);
        loop {
            match next.take() {
                Some(Ok(event)) => gathered.push(to_wire(&event)),
                Some(Err(RecvError::Lagged(n))) => {
                    tracing::warn!("sk: publishing job events fell behind and missed {n}");
                    gathered.push(serde_json::json!({ "k": "missed", "n": n }));
                }
                Some(Err(RecvError::Closed)) => break,
                None => {}
            }
            next = tokio::select! {
                () = &mut deadline => break,
                event = events.recv() => Some(event),
            };
        }
        send(&shared, gathered).await;
    }
    let mut rest = Vec::new();
    while let Ok(event) = events.try_recv() {
        rest.push(to_wire(&event));
    }
    send(&shared, rest).await;
}

/// Sends `events` in as few payloads as fit; a failure is logged (the events are lost:
/// a subscriber reads a job's state with `Client::job` when it must be sure).
async fn send(shared: &Shared, events: Vec<serde_json::Value>) {
    if events.is_empty() {
        return;
    }
    let mut payloads = Vec::new();
    let mut current = String::from("[");
    for event in events {
        let text = event.to_string();
        if current.len() + text.len() + 2 > PAYLOAD_BYTES && current.len() > 1 {
            current.push(']');
            payloads.push(std::mem::replace(&mut current, String::from("[")));
        }
        if current.len() > 1 {
            current.push(',');
        }
        current.push_str(&text);
    }
    current.push(']');
    payloads.push(current);
    if let Err(e) = shared.store.publish_events(&payloads).await {
        tracing::warn!("sk: cannot publish job events: {e}");
    }
}
