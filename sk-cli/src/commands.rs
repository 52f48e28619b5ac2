//! The commands that read (status, jobs, job, migrations) and those that act on jobs or queues (retry, cancel, pause…), with their confirmations.

use std::io::Write;

use futures_util::StreamExt as _;

use sk_runtime::{
    CancelOutcome, Client, JobStatus, Pool, ReprioritizeOutcome, RescheduleOutcome, RetryOutcome,
    Schema,
};
use uuid::Uuid;

use crate::args::{BulkArgs, ListArgs};
use crate::limits::{held_tenants, per_tenant_cell};
use crate::output::{
    cells, print_json, print_table, rate_cell, say, state, table, text, time, workers_table,
};
use crate::{fail, Failure};

pub(crate) async fn status(
    client: &Client,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let rows = crate::queues::every_queue(client).await?;
    let counts: Vec<sk_runtime::GroupCounts> = rows
        .iter()
        .map(|row| {
            let mut counts = row.counts.clone();
            counts.key = Some(row.name.clone());
            counts
        })
        .collect();
    let queues: Vec<sk_runtime::QueueState> =
        rows.iter().filter_map(|row| row.state.clone()).collect();
    // Successes leave no count of their own (a count of them would read the whole results
    // table): the last hour's runs per task type say how many succeeded, and failed.
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let last_hour = client
        .throughput(hour_ago, sk_runtime::Per::Whole, None)
        .await?;
    let type_limits = client.task_type_rate_limits().await?;
    let workers = client.workers().await?;
    let held = held_tenants(client, &queues).await?;
    let lag = client.replica_lag().await?;
    if json {
        let type_limits: serde_json::Map<String, serde_json::Value> = type_limits
            .iter()
            .map(|(t, rate)| Ok((t.clone(), serde_json::to_value(rate)?)))
            .collect::<Result<_, serde_json::Error>>()?;
        return print_json(
            out,
            &serde_json::json!({
                "queues": counts,
                "controls": queues,
                "last_hour": last_hour,
                "task_type_rate_limits": type_limits,
                "tenants_held": held,
                "workers": workers,
                "replica_lag_s": lag.map(|l| l.as_secs_f64()),
                "databases": client.databases(),
            }),
        );
    }
    if client.databases() > 1 {
        writeln!(out, "over {} databases, summed\n", client.databases())?;
    }
    if let Some(lag) = lag {
        writeln!(
            out,
            "read from a replica, {:.1} s behind the primary\n",
            lag.as_secs_f64()
        )?;
    }
    let mut table = table(&[
        "queue",
        "available",
        "scheduled",
        "pending",
        "retrying",
        "running",
        "fatal",
        "cancelled",
        "paused",
        "limit",
        "per tenant",
        "rate",
    ]);
    for c in &counts {
        let name = c.key.clone().unwrap_or_default();
        let control = queues.iter().find(|q| q.name == name);
        table.add_row(cells([
            name,
            c.available.to_string(),
            c.scheduled.to_string(),
            c.pending.to_string(),
            c.retrying.to_string(),
            c.running.to_string(),
            c.fatal.to_string(),
            c.cancelled.to_string(),
            control
                .and_then(|q| q.paused_at)
                .map_or_else(String::new, |at| format!("since {}", at.format("%F %T"))),
            control
                .and_then(|q| q.global_limit)
                .map_or_else(String::new, |n| n.to_string()),
            control.map_or_else(String::new, |q| match held.get(&q.name) {
                Some(n) => format!("{}; {n} held", per_tenant_cell(q)),
                None => per_tenant_cell(q),
            }),
            control
                .and_then(|q| q.rate_limit.as_ref())
                .map_or_else(String::new, rate_cell),
        ]));
    }
    print_table(out, table, counts.is_empty(), "no queues")?;
    writeln!(out)?;
    let mut runs = crate::output::table(&["task type", "processed 1h", "failed 1h", "p95 ms"]);
    for t in &last_hour {
        runs.add_row(cells([
            t.task_type.clone(),
            t.processed.to_string(),
            t.failed.to_string(),
            format!("{:.1}", t.p95_ms),
        ]));
    }
    print_table(out, runs, last_hour.is_empty(), "no runs in the last hour")?;
    if !type_limits.is_empty() {
        writeln!(out)?;
        let mut rates = crate::output::table(&["task type", "rate"]);
        for (task_type, rate) in &type_limits {
            rates.add_row(cells([task_type.clone(), rate_cell(rate)]));
        }
        print_table(out, rates, false, "")?;
    }
    writeln!(out)?;
    print_table(
        out,
        workers_table(&workers),
        workers.is_empty(),
        "no workers",
    )?;
    Ok(())
}

pub(crate) async fn jobs(
    client: &Client,
    args: ListArgs,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let filter = args.filter.to_filter()?;
    let page = client.jobs(&filter, args.after, args.limit).await?;
    if json {
        return print_json(out, &page);
    }
    let mut table = table(&[
        "id",
        "type",
        "queue",
        "state",
        "attempt",
        "posted",
        "last error",
    ]);
    for j in &page.jobs {
        table.add_row(cells([
            j.id.to_string(),
            j.task_type.clone(),
            j.queue.clone(),
            state(j.status()),
            j.attempt.map_or_else(String::new, |a| a.to_string()),
            time(Some(j.posted_at)),
            text(j.last_error_message.as_deref()),
        ]));
    }
    print_table(out, table, page.jobs.is_empty(), "no jobs")?;
    if let Some(next) = page.next {
        writeln!(out, "more: --after {next}")?;
    }
    Ok(())
}

pub(crate) async fn job(
    client: &Client,
    id: Uuid,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let record = client
        .job(id)
        .await?
        .ok_or_else(|| fail(format!("no job {id}"), 3))?;
    if json {
        let mut value = serde_json::to_value(&record)?;
        value["status"] = serde_json::to_value(record.status())?;
        value["attempts"] = serde_json::to_value(record.attempts())?;
        return print_json(out, &value);
    }
    let mut table = table(&["field", "value"]);
    let rows = [
        ("id", record.id.to_string()),
        ("type", record.task_type.clone()),
        ("queue", record.queue.clone()),
        ("state", state(record.status())),
        ("priority", record.priority.to_string()),
        ("posted", time(Some(record.posted_at))),
        ("finished", time(record.finalized_at)),
        ("tenant", text(record.tenant.as_deref())),
        ("correlation id", text(record.correlation_id.as_deref())),
        (
            "progress",
            text(record.progress().map(|p| p.to_string()).as_deref()),
        ),
        (
            "steps done",
            text(crate::output::steps_done(&record).as_deref()),
        ),
        ("metadata", text(record.metadata.as_deref())),
        (
            "payload",
            text(crate::output::payload_shown(&record).as_deref()),
        ),
        ("output", text(record.output_json.as_deref())),
        (
            "worker",
            text(
                record
                    .locked_by
                    .as_deref()
                    .or(record.last_worker.as_deref()),
            ),
        ),
    ];
    for (k, v) in rows {
        table.add_row(cells([k.to_owned(), v]));
    }
    writeln!(out, "{table}")?;
    let attempts = record.attempts();
    let mut table = self::table(&["attempt", "outcome", "worker", "started", "ended", "error"]);
    for a in &attempts {
        let error = match (&a.kind, &a.message) {
            (Some(k), Some(m)) => format!("{k}: {m}"),
            (None, Some(m)) => m.clone(),
            _ => String::new(),
        };
        table.add_row(cells([
            a.attempt.to_string(),
            format!("{:?}", a.outcome).to_lowercase(),
            text(a.worker.as_deref()),
            time(a.started_at),
            time(a.ended_at),
            error,
        ]));
    }
    print_table(out, table, attempts.is_empty(), "no attempt yet")?;
    Ok(())
}

#[derive(Clone, Copy)]
pub(crate) enum Action {
    Retry,
    Cancel,
    RunNow,
    /// Set the priority to this.
    Priority(i32),
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Cancel => "cancel",
            Action::RunNow => "run now",
            Action::Priority(_) => "reprioritize",
        }
    }
}

/// Runs `action` on one job: what happened, and whether the job exists.
pub(crate) async fn one(
    client: &Client,
    id: Uuid,
    action: Action,
) -> Result<(String, bool), Failure> {
    Ok(match action {
        Action::Retry => {
            let outcome = client.retry(id).await?;
            (format!("{outcome:?}"), outcome != RetryOutcome::NotFound)
        }
        Action::Cancel => {
            let outcome = client.cancel(id).await?;
            (format!("{outcome:?}"), outcome != CancelOutcome::NotFound)
        }
        Action::RunNow => {
            let outcome = client.run_now(id).await?;
            (
                format!("{outcome:?}"),
                outcome != RescheduleOutcome::NotFound,
            )
        }
        Action::Priority(priority) => {
            let outcome = client.reprioritize(id, priority).await?;
            (
                format!("{outcome:?}"),
                outcome != ReprioritizeOutcome::NotFound,
            )
        }
    })
}

/// Runs `action` on each id; says what happened to each. Exits 3 when an id is unknown.
pub(crate) async fn each(
    client: &Client,
    ids: &[Uuid],
    json: bool,
    action: Action,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let mut results = Vec::new();
    let mut missing = 0;
    for &id in ids {
        let (said, found) = one(client, id, action).await?;
        if !found {
            missing += 1;
        }
        results.push((id, said));
    }
    if json {
        let rows: Vec<_> = results
            .iter()
            .map(|(id, said)| serde_json::json!({ "id": id, "outcome": said }))
            .collect();
        print_json(out, &rows)?;
    } else {
        for (id, said) in &results {
            writeln!(out, "{id}: {said}")?;
        }
    }
    if missing > 0 {
        return Err(fail(
            format!("{missing} of {} ids name no job", ids.len()),
            3,
        ));
    }
    Ok(())
}

pub(crate) async fn migrations(
    pool: Pool,
    schema: &Schema,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let all = sk_runtime::migrations(pool, schema).await?;
    if json {
        return print_json(out, &all);
    }
    let mut table = table(&["version", "migration", "applied"]);
    for m in &all {
        table.add_row(cells([
            m.version.to_string(),
            m.description.to_owned(),
            m.applied_at
                .map_or_else(|| "pending".to_owned(), |at| time(Some(at))),
        ]));
    }
    writeln!(out, "{table}")?;
    let pending = all.iter().filter(|m| m.applied_at.is_none()).count();
    if pending > 0 {
        writeln!(out, "{pending} pending: run `sk migrate`")?;
    } else {
        writeln!(out, "up to date")?;
    }
    Ok(())
}

/// Refuses (exit 2) a queue sk has never seen: no job of it in the queue or the results,
/// no paused or limited state, no worker that names it. `sk pause paymnets` (a typo) paused
/// a queue that never existed while `payments` ran on.
pub(crate) async fn known_queue(client: &Client, queue: &str) -> Result<(), Failure> {
    let Err(known) = crate::queues::known(client, queue).await? else {
        return Ok(());
    };
    let listed = if known.is_empty() {
        "sk knows no queue yet".to_owned()
    } else {
        format!("known queues: {}", known.join(", "))
    };
    Err(fail(
        format!(
            "no queue {queue:?}: no job of it, not paused or limited, and no worker names it ({listed}); add --force to act on it anyway"
        ),
        2,
    ))
}

/// Asks on the terminal, unless `yes`; without a terminal to ask on, refuses (exit 2).
pub(crate) fn confirm(yes: bool, question: &str) -> Result<(), Failure> {
    use std::io::IsTerminal as _;
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(fail(
            format!("{question} Not asked without a terminal: add --yes"),
            2,
        ));
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    stdin.read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(fail("not confirmed: nothing done", 1))
    }
}

/// Whether `action` can apply to a job in `status` (so that the count asked about is
/// the count acted on).
pub(crate) fn applies(action: Action, status: JobStatus) -> bool {
    match action {
        Action::Retry => matches!(
            status,
            JobStatus::Fatal | JobStatus::Cancelled | JobStatus::Unprocessed
        ),
        Action::Cancel => matches!(status, JobStatus::Unprocessed | JobStatus::Processing),
        Action::RunNow => status == JobStatus::Unprocessed,
        Action::Priority(_) => !status.is_final(),
    }
}

/// Retry, cancel, run now or reprioritize: the ids given, or every job the filter takes, counted and
/// confirmed first, then acted on one by one (each as `sk retry ID` would) with a
/// progress bar on a terminal.
pub(crate) async fn act(
    client: &Client,
    args: BulkArgs,
    json: bool,
    action: Action,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    match (args.ids.is_empty(), args.filter.given()) {
        (false, false) => return each(client, &args.ids, json, action, out).await,
        (false, true) => {
            return Err(fail(
                "give job ids or a filter (--queue, --type, --state, ...), not both",
                2,
            ))
        }
        (true, false) => {
            return Err(fail(
                "give job ids, or a filter (--queue, --type, --state, ...) to act on every job it takes",
                2,
            ))
        }
        (true, true) => {}
    }
    let filter = args.filter.to_filter()?;
    let finding = indicatif::ProgressBar::new_spinner().with_message("finding jobs");
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = client.jobs(&filter, after, sk_runtime::MAX_PAGE).await?;
        ids.extend(
            page.jobs
                .iter()
                .filter(|j| applies(action, j.status()))
                .map(|j| j.id),
        );
        finding.set_message(format!("found {} jobs", ids.len()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    finding.finish_and_clear();
    let verb = action.verb();
    if ids.is_empty() {
        return say(
            out,
            json,
            &serde_json::json!({ "matched": 0, "outcomes": {} }),
            || format!("no job to {verb}"),
        );
    }
    // Whatever the count: a filter that takes one job today may take thousands tomorrow,
    // and a script without --yes should fail the same way both days.
    let jobs = if ids.len() == 1 { "job" } else { "jobs" };
    confirm(args.yes, &format!("{verb} {} {jobs}?", ids.len()))?;
    let bar = indicatif::ProgressBar::new(ids.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut outcomes: std::collections::BTreeMap<String, u64> = Default::default();
    let mut done = futures_util::stream::iter(ids.iter().map(|&id| one(client, id, action)))
        .buffer_unordered(8);
    while let Some(result) = done.next().await {
        let (said, _) = result?;
        *outcomes.entry(said).or_default() += 1;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if json {
        return print_json(
            out,
            &serde_json::json!({ "matched": ids.len(), "outcomes": outcomes }),
        );
    }
    let jobs = if ids.len() == 1 { "job" } else { "jobs" };
    writeln!(out, "{} {jobs}:", ids.len())?;
    for (said, n) in &outcomes {
        writeln!(out, "  {said}: {n}")?;
    }
    Ok(())
}
