//! Every queue the database knows, with its jobs by state and its controls: what `sk
//! status` and the dashboard list.

use std::collections::BTreeMap;

use sk_runtime::{Client, CountBy, GroupCounts, JobFilter, QueueState};

/// A queue as `sk status` and the dashboard show it: its jobs by state and its controls.
pub(crate) struct QueueRow {
    pub(crate) name: String,
    pub(crate) counts: GroupCounts,
    pub(crate) state: Option<QueueState>,
}

/// Every queue the database knows: with jobs in any state, paused or limited, or named
/// by a live worker; by name.
pub(crate) async fn every_queue(client: &Client) -> sk_runtime::Result<Vec<QueueRow>> {
    let mut rows: BTreeMap<String, QueueRow> = BTreeMap::new();
    let row = |name: String| QueueRow {
        name,
        counts: GroupCounts::default(),
        state: None,
    };
    for c in client.count_by(CountBy::Queue).await? {
        let name = c.key.clone().unwrap_or_default();
        rows.entry(name.clone()).or_insert_with(|| row(name)).counts = c;
    }
    for q in client.queues().await? {
        let name = q.name.clone();
        rows.entry(name.clone()).or_insert_with(|| row(name)).state = Some(q);
    }
    for w in client.workers().await?.into_iter().filter(|w| w.alive) {
        for name in w
            .queues
            .unwrap_or_default()
            .into_iter()
            .chain(w.default_queues)
        {
            rows.entry(name.clone()).or_insert_with(|| row(name));
        }
    }
    Ok(rows.into_values().collect())
}

/// Whether `queue` is one the database knows (`every_queue`'s, or one whose every job
/// succeeded); if not, the names it knows, to say so. An action on an unknown name
/// would make a queue of it: the dashboard's pause made queues named `\u{1}`, a space,
/// a newline or a bidirectional override from a hand-written URL.
pub(crate) async fn known(
    client: &Client,
    queue: &str,
) -> sk_runtime::Result<Result<(), Vec<String>>> {
    // A name sk refuses outright (a NUL, past 255 bytes) is left to the action, whose
    // error says why.
    if queue.contains('\0') || queue.len() > 255 {
        return Ok(Ok(()));
    }
    let names: Vec<String> = every_queue(client)
        .await?
        .into_iter()
        .map(|row| row.name)
        .collect();
    if names.iter().any(|name| name == queue) {
        return Ok(Ok(()));
    }
    // Last, the slow check: a queue whose every job succeeded.
    let filter = JobFilter::new().queue(queue);
    if !client.jobs(&filter, None, 1).await?.jobs.is_empty() {
        return Ok(Ok(()));
    }
    Ok(Err(names))
}
