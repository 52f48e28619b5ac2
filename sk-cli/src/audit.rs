//! The commands an incident is worked with besides the job commands: `sk errors` (the
//! error groups, what varies in a message masked) and `sk audit` (the operator actions
//! taken, by whom).

use std::io::Write;

use sk_runtime::Client;

use crate::output::{ago, cells, print_json, print_table, table, text, time};
use crate::Failure;

/// `sk errors`: the error groups of the last `since`.
pub(crate) async fn errors(
    client: &Client,
    since: humantime::Duration,
    limit: u32,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let groups = client.error_groups(ago(since)?, limit).await?;
    if json {
        return print_json(out, &groups);
    }
    let mut table = table(&[
        "group",
        "count",
        "task type",
        "error",
        "message",
        "queues",
        "first seen",
        "last seen",
        "sample job",
    ]);
    for g in &groups {
        table.add_row(cells([
            g.fingerprint.clone(),
            g.count.to_string(),
            g.task_type.clone(),
            text(g.kind.as_deref()),
            g.pattern.clone(),
            g.queues.join(", "),
            time(g.first_seen),
            time(g.last_seen),
            g.sample.to_string(),
        ]));
    }
    print_table(out, table, groups.is_empty(), "no errors in that time")
}

/// `sk audit`: the newest `limit` operator actions.
pub(crate) async fn audit(
    client: &Client,
    limit: u32,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let entries = client.audit(None, limit).await?;
    if json {
        return print_json(out, &entries);
    }
    let mut table = table(&["at", "who", "action", "on", "filter", "jobs"]);
    for e in &entries {
        table.add_row(cells([
            time(Some(e.at)),
            e.actor.clone(),
            e.action.clone(),
            text(e.target.as_deref()),
            text(e.filter.as_deref()),
            e.jobs.map_or_else(String::new, |n| n.to_string()),
        ]));
    }
    print_table(out, table, entries.is_empty(), "no actions recorded")
}
