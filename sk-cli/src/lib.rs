//! `sk`: the operator's command for sk's job queues, on PostgreSQL, SQLite or MySQL.
//!
//! Every command goes through `sk_runtime::Client`, the same control and insight API an
//! application uses, so the command holds no SQL of its own and works on every backend.
//! The binary is a thin shim over [`run`], which tests call in-process.

use std::io::Write;

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use futures_util::StreamExt as _;
use sk_runtime::{
    CancelOutcome, Client, CountBy, Error, JobFilter, JobStatus, Per, Pool, RescheduleOutcome,
    RetryOutcome, Schema,
};
use uuid::Uuid;

pub mod web;

const EXAMPLES: &str = "\
Examples:
  sk --database-url postgres://postgres@127.0.0.1/app status
  DATABASE_URL=sqlite:jobs.db sk jobs --state fatal --queue mail
  sk job 0193a5e2-7c1f-7d3e-9a51-2b7e8c7d1f00
  sk retry 0193a5e2-7c1f-7d3e-9a51-2b7e8c7d1f00
  sk retry --queue mail --state fatal --yes
  sk cancel --type send_email --state waiting
  sk pause mail
  sk prune --older-than 30d
  sk web --bind 127.0.0.1:8080
  sk errors --since 1h --json

Exit codes: 0 done, 1 failed (the database, bad input), 2 usage (or a bulk action\nnot confirmed without a terminal), 3 no such job.";

/// Operate sk's job queues.
#[derive(Parser)]
#[command(name = "sk", version, after_help = EXAMPLES)]
struct Cli {
    /// The database: a postgres://, sqlite: or mysql:// URL.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    /// sk's schema on PostgreSQL; elsewhere a prefix of its table names.
    #[arg(long, default_value = "public", global = true)]
    schema: String,
    /// The prefix of sk's table names.
    #[arg(long, default_value = "sk_", global = true)]
    prefix: String,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create sk's tables, or bring them to this version.
    Migrate {
        /// Only say which migrations the database has and which are pending.
        #[arg(long)]
        status: bool,
    },
    /// Jobs per queue and state, paused and limited queues, live workers.
    Status,
    /// Jobs, newest first, a page at a time.
    Jobs(ListArgs),
    /// One job's whole record: payload, output, every attempt.
    Job {
        /// The job's id.
        id: Uuid,
    },
    /// Run fatal or cancelled jobs again (a waiting job is made due now): by id, or every
    /// job a filter takes.
    Retry(BulkArgs),
    /// Cancel waiting or running jobs: by id, or every job a filter takes.
    Cancel(BulkArgs),
    /// Make waiting jobs due now: by id, or every job a filter takes.
    RunNow(BulkArgs),
    /// Delete the results of jobs that ended before a time (what the workers' retention
    /// does), and the run counts of that time.
    Prune {
        /// Jobs that ended longer ago than this, e.g. `30d`.
        #[arg(long)]
        older_than: humantime::Duration,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Stop every worker from starting jobs of a queue (running ones finish).
    ///
    /// A queue sk has never seen (no job, no paused or limited state, no worker that
    /// names it) is refused, as a typo would be, unless `--force` is given.
    Pause {
        /// The queue.
        queue: String,
        /// Pause it even if sk has never seen it (a queue whose jobs are yet to come).
        #[arg(long)]
        force: bool,
    },
    /// Let a paused queue run again.
    Resume {
        /// The queue.
        queue: String,
        /// Resume it even if sk has never seen it.
        #[arg(long)]
        force: bool,
    },
    /// Set a queue's concurrency limit across all workers, or remove it with `none`.
    Limit {
        /// The queue.
        queue: String,
        /// At most this many of its jobs at once, or `none`.
        limit: String,
    },
    /// Errors grouped by type and message.
    Errors {
        /// How far back, e.g. `1h`, `24h`, `7d`.
        #[arg(long, default_value = "24h")]
        since: humantime::Duration,
        /// At most this many groups.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Runs per hour (or minute) and task type: succeeded, failed, mean and p95 time.
    Stats {
        /// How far back.
        #[arg(long, default_value = "24h")]
        since: humantime::Duration,
        /// Rows per hour or per minute.
        #[arg(long, value_enum, default_value = "hour")]
        per: PerArg,
        /// Only this task type.
        #[arg(long = "type")]
        task_type: Option<String>,
    },
    /// Live workers and the jobs they run.
    Workers,
    /// Serve the dashboard (binds to loopback unless told otherwise).
    Web {
        /// Where to listen. Anywhere but loopback needs `--token` or `--read-only`.
        #[arg(long, default_value = "127.0.0.1:8080")]
        bind: std::net::SocketAddr,
        /// Show everything, change nothing.
        #[arg(long)]
        read_only: bool,
        /// Require this token of every request: basic auth's password, or a bearer token.
        #[arg(long, env = "SK_WEB_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Answer to this host name too (a reverse proxy's; `name` or `name:port`).
        /// Besides it, only the bound address, localhost, 127.0.0.1 and [::1] are served:
        /// a request naming another host is refused (421), against DNS rebinding.
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_hosts: Vec<String>,
    },
    /// Enqueue a job by task type and JSON arguments (the type is not checked here).
    Enqueue {
        /// The task type, as `#[job]` names it.
        task_type: String,
        /// The arguments as a JSON object, e.g. '{"user_id": 42}'.
        payload: String,
    },
}

#[derive(clap::Args)]
struct ListArgs {
    #[command(flatten)]
    filter: FilterArgs,
    /// The page after this job id (the `next` of the page before).
    #[arg(long)]
    after: Option<Uuid>,
    /// Jobs per page (at most 1,000).
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

#[derive(clap::Args)]
struct BulkArgs {
    /// Job ids; or none, and a filter.
    ids: Vec<Uuid>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Do not ask before acting on more than one job.
    #[arg(long)]
    yes: bool,
}

#[derive(clap::Args)]
struct FilterArgs {
    /// Only this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only this task type.
    #[arg(long = "type")]
    task_type: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Only this correlation id.
    #[arg(long)]
    correlation_id: Option<String>,
    /// Only jobs in this state.
    #[arg(long, value_enum)]
    state: Option<StateArg>,
    /// Only jobs whose metadata has KEY=VALUE.
    #[arg(long, value_name = "KEY=VALUE")]
    meta: Option<String>,
    /// Jobs posted within this long.
    #[arg(long)]
    since: Option<humantime::Duration>,
}

impl FilterArgs {
    fn given(&self) -> bool {
        self.queue.is_some()
            || self.task_type.is_some()
            || self.tenant.is_some()
            || self.correlation_id.is_some()
            || self.state.is_some()
            || self.meta.is_some()
            || self.since.is_some()
    }

    fn to_filter(&self) -> Result<JobFilter, Failure> {
        let mut filter = JobFilter::new();
        if let Some(q) = &self.queue {
            filter = filter.queue(q);
        }
        if let Some(t) = &self.task_type {
            filter = filter.task_type(t);
        }
        if let Some(t) = &self.tenant {
            filter = filter.tenant(t);
        }
        if let Some(c) = &self.correlation_id {
            filter = filter.correlation_id(c);
        }
        if let Some(s) = self.state {
            filter = filter.status(s.status());
        }
        if let Some(kv) = &self.meta {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| fail(format!("--meta {kv:?}: write KEY=VALUE"), 1))?;
            filter = filter.metadata(k, v);
        }
        if let Some(since) = self.since {
            filter = filter.posted(Some(ago(since)?), None);
        }
        Ok(filter)
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum StateArg {
    Waiting,
    /// Waiting on other jobs to succeed (a workflow's later stages).
    Pending,
    Running,
    Processed,
    Fatal,
    Cancelled,
}

impl StateArg {
    fn status(self) -> JobStatus {
        match self {
            StateArg::Waiting => JobStatus::Unprocessed,
            StateArg::Pending => JobStatus::Pending,
            StateArg::Running => JobStatus::Processing,
            StateArg::Processed => JobStatus::Processed,
            StateArg::Fatal => JobStatus::Fatal,
            StateArg::Cancelled => JobStatus::Cancelled,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum PerArg {
    Minute,
    Hour,
}

/// Why a command failed, with its exit code.
struct Failure {
    message: String,
    code: u8,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let message = e.to_string();
        let missing = ["no such table", "does not exist", "doesn't exist"]
            .iter()
            .any(|m| message.contains(m));
        let hint = match e {
            Error::Database(_) if missing => {
                " (sk's tables are not here: run `sk migrate`, or give the --schema and --prefix they were made with)"
            }
            // Most often tables older than this sk.
            Error::Database(_) => " (if sk's tables are older than this sk, run `sk migrate`)",
            _ => "",
        };
        let first = message.lines().next().unwrap_or_default();
        Failure {
            message: format!("{first}{hint}"),
            code: 1,
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure {
            message: format!("cannot write the output: {e}"),
            code: 1,
        }
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure {
            message: e.to_string(),
            code: 1,
        }
    }
}

fn fail(message: impl Into<String>, code: u8) -> Failure {
    Failure {
        message: message.into(),
        code,
    }
}

/// Runs the command line `args` (the program name first), writing its output to `out`
/// and its one-line error to `err`; returns the exit code: 0 done, 1 failed, 2 usage,
/// 3 no such job.
pub async fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let (out, err) = (&mut Inert(out), &mut Inert(err));
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` are output; a usage error is an error.
            if e.use_stderr() {
                let _ = write!(err, "{}", e.render());
                return 2;
            }
            let _ = write!(out, "{}", e.render());
            return 0;
        }
    };
    match command(cli, out).await {
        Ok(()) => 0,
        Err(f) => {
            // One line: the first line of the cause.
            let line = f.message.lines().next().unwrap_or_default();
            let _ = writeln!(err, "sk: error: {line}");
            f.code
        }
    }
}

async fn command(cli: Cli, out: &mut dyn Write) -> Result<(), Failure> {
    let url = cli.database_url.as_deref().ok_or_else(|| {
        fail(
            "no database: give --database-url or set DATABASE_URL (postgres://, sqlite: or mysql://)",
            1,
        )
    })?;
    let schema = Schema::new(&cli.schema, &cli.prefix)?;
    let pool = Pool::connect(url).await?;
    if let Command::Migrate { status: true } = cli.command {
        return migrations(pool, &schema, cli.json, out).await;
    }
    if let Command::Migrate { .. } = cli.command {
        sk_runtime::migrate(pool, &schema).await?;
        return say(
            out,
            cli.json,
            &serde_json::json!({ "migrated": true }),
            || "sk's tables are at this version".to_owned(),
        );
    }
    let client = Client::new(pool).schema(schema);
    let json = cli.json;
    match cli.command {
        Command::Migrate { .. } => Ok(()),
        Command::Status => status(&client, json, out).await,
        Command::Jobs(args) => jobs(&client, args, json, out).await,
        Command::Job { id } => job(&client, id, json, out).await,
        Command::Retry(args) => act(&client, args, json, Action::Retry, out).await,
        Command::Cancel(args) => act(&client, args, json, Action::Cancel, out).await,
        Command::RunNow(args) => act(&client, args, json, Action::RunNow, out).await,
        Command::Prune { older_than, yes } => {
            let before = ago(older_than)?;
            let question = format!(
                "delete the results of jobs that ended before {} (and their run counts)?",
                before.format("%F %T")
            );
            confirm(yes, &question)?;
            let pruned = client.prune(before).await?;
            if json {
                return print_json(out, &pruned);
            }
            writeln!(
                out,
                "pruned {} results row by row, {} partitions whole{}, {} run counts",
                pruned.rows,
                pruned.partitions.len(),
                if pruned.partitions.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", pruned.partitions.join(", "))
                },
                pruned.run_counts
            )?;
            Ok(())
        }
        Command::Pause { queue, force } => {
            if !force {
                known_queue(&client, &queue).await?;
            }
            let changed = client.pause(&queue).await?;
            let said = if changed {
                "paused"
            } else {
                "was paused already"
            };
            say(
                out,
                json,
                &serde_json::json!({ "queue": queue, "changed": changed }),
                || format!("{queue}: {said}"),
            )
        }
        Command::Resume { queue, force } => {
            if !force {
                known_queue(&client, &queue).await?;
            }
            let changed = client.resume(&queue).await?;
            let said = if changed { "resumed" } else { "was not paused" };
            say(
                out,
                json,
                &serde_json::json!({ "queue": queue, "changed": changed }),
                || format!("{queue}: {said}"),
            )
        }
        Command::Limit { queue, limit } => {
            let limit = match limit.as_str() {
                "none" => None,
                n => Some(
                    n.parse::<u32>()
                        .map_err(|_| fail(format!("limit {n:?}: a number from 1, or none"), 1))?,
                ),
            };
            client.set_global_limit(&queue, limit).await?;
            say(
                out,
                json,
                &serde_json::json!({ "queue": queue, "global_limit": limit }),
                || match limit {
                    Some(n) => format!("{queue}: at most {n} at once across all workers"),
                    None => format!("{queue}: no limit across workers"),
                },
            )
        }
        Command::Errors { since, limit } => {
            let groups = client.error_groups(ago(since)?, limit).await?;
            if json {
                return print_json(out, &groups);
            }
            let mut table = table(&[
                "count",
                "type",
                "message",
                "first seen",
                "last seen",
                "sample job",
            ]);
            for g in &groups {
                table.add_row(cells([
                    g.count.to_string(),
                    text(g.kind.as_deref()),
                    text(g.message.as_deref()),
                    time(g.first_seen),
                    time(g.last_seen),
                    g.sample.to_string(),
                ]));
            }
            print_table(out, table, groups.is_empty(), "no errors in that time")?;
            Ok(())
        }
        Command::Stats {
            since,
            per,
            task_type,
        } => {
            let per = match per {
                PerArg::Minute => Per::Minute,
                PerArg::Hour => Per::Hour,
            };
            let rows = client
                .throughput(ago(since)?, per, task_type.as_deref())
                .await?;
            if json {
                return print_json(out, &rows);
            }
            let mut table = table(&[
                "at",
                "task type",
                "succeeded",
                "failed",
                "mean ms",
                "p95 ms",
            ]);
            for r in &rows {
                table.add_row(cells([
                    time(Some(r.at)),
                    r.task_type.clone(),
                    r.processed.to_string(),
                    r.failed.to_string(),
                    format!("{:.1}", r.mean_ms),
                    format!("{:.1}", r.p95_ms),
                ]));
            }
            print_table(out, table, rows.is_empty(), "no runs in that time")?;
            Ok(())
        }
        Command::Workers => {
            let workers = client.workers().await?;
            if json {
                return print_json(out, &workers);
            }
            print_table(
                out,
                workers_table(&workers),
                workers.is_empty(),
                "no workers",
            )?;
            Ok(())
        }
        Command::Web {
            bind,
            read_only,
            token,
            allow_hosts,
        } => {
            if !bind.ip().is_loopback() && token.is_none() && !read_only {
                return Err(fail(
                    format!("{bind} is not loopback: give --token (or SK_WEB_TOKEN) or --read-only, so that nobody else can act on the jobs"),
                    2,
                ));
            }
            let listener = tokio::net::TcpListener::bind(bind)
                .await
                .map_err(|e| fail(format!("cannot listen on {bind}: {e}"), 1))?;
            let mode = if read_only { " (read-only)" } else { "" };
            writeln!(out, "sk web: http://{}{mode}", listener.local_addr()?)?;
            out.flush()?;
            let options = web::WebOptions {
                read_only,
                token,
                allow_hosts,
            };
            web::serve(client, listener, options)
                .await
                .map_err(|e| fail(format!("the dashboard stopped: {e}"), 1))
        }
        Command::Enqueue { task_type, payload } => {
            let payload: serde_json::Value = serde_json::from_str(&payload)
                .map_err(|e| fail(format!("the payload is not JSON: {e}"), 1))?;
            let id = client.enqueue_json_unchecked(&task_type, payload).await?;
            say(out, json, &serde_json::json!({ "id": id }), || {
                id.to_string()
            })
        }
    }
}

async fn status(client: &Client, json: bool, out: &mut dyn Write) -> Result<(), Failure> {
    let counts = client.count_by(CountBy::Queue).await?;
    let queues = client.queues().await?;
    let workers = client.workers().await?;
    if json {
        return print_json(
            out,
            &serde_json::json!({
                "queues": counts,
                "controls": queues,
                "workers": workers,
            }),
        );
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
        ]));
    }
    print_table(out, table, counts.is_empty(), "no jobs")?;
    writeln!(out)?;
    print_table(
        out,
        workers_table(&workers),
        workers.is_empty(),
        "no workers",
    )?;
    Ok(())
}

async fn jobs(
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

async fn job(client: &Client, id: Uuid, json: bool, out: &mut dyn Write) -> Result<(), Failure> {
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
        ("metadata", text(record.metadata.as_deref())),
        ("payload", text(record.payload.as_deref())),
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
enum Action {
    Retry,
    Cancel,
    RunNow,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Cancel => "cancel",
            Action::RunNow => "run now",
        }
    }
}

/// Runs `action` on one job: what happened, and whether the job exists.
async fn one(client: &Client, id: Uuid, action: Action) -> Result<(String, bool), Failure> {
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
    })
}

/// Runs `action` on each id; says what happened to each. Exits 3 when an id is unknown.
async fn each(
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

fn workers_table(workers: &[sk_runtime::WorkerInfo]) -> Table {
    let mut table = table(&[
        "worker",
        "host",
        "pid",
        "alive",
        "running",
        "concurrency",
        "queues",
        "started",
        "last seen",
    ]);
    for w in workers {
        table.add_row(cells([
            w.id.clone(),
            w.host.clone(),
            w.pid.to_string(),
            if w.alive { "yes" } else { "no" }.to_owned(),
            w.running.to_string(),
            w.concurrency.to_string(),
            w.queues
                .as_ref()
                .map_or_else(|| "all".to_owned(), |q| q.join(", ")),
            time(Some(w.started_at)),
            time(Some(w.seen_at)),
        ]));
    }
    table
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    table
}

fn print_table(out: &mut dyn Write, table: Table, empty: bool, none: &str) -> Result<(), Failure> {
    if empty {
        writeln!(out, "({none})")?;
    } else {
        writeln!(out, "{table}")?;
    }
    Ok(())
}

fn print_json<T: serde::Serialize + ?Sized>(out: &mut dyn Write, value: &T) -> Result<(), Failure> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

/// Prints `value` as JSON, or `human()` as a line.
fn say(
    out: &mut dyn Write,
    json: bool,
    value: &serde_json::Value,
    human: impl FnOnce() -> String,
) -> Result<(), Failure> {
    if json {
        print_json(out, value)
    } else {
        writeln!(out, "{}", human())?;
        Ok(())
    }
}

/// The time `span` before now.
fn ago(span: humantime::Duration) -> Result<DateTime<Utc>, Failure> {
    chrono::Duration::from_std(*span)
        .ok()
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .ok_or_else(|| fail(format!("{span} is too far back"), 1))
}

fn time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(String::new, |at| at.format("%F %T").to_string())
}

/// Outside text, or nothing. (Every cell is made inert in [`cells`].)
fn text(value: Option<&str>) -> String {
    value.unwrap_or_default().to_owned()
}

/// A table row: every cell with its control characters shown as escapes (see [`inert`]),
/// before the table measures it, so outside text (a queue name, a tenant, a payload, an
/// error message) can neither drive the terminal nor break the columns.
fn cells<const N: usize>(row: [String; N]) -> Vec<String> {
    row.iter().map(|c| inert(c)).collect()
}

/// `s` with its control characters but the newline (C0, DEL and C1, the ANSI escape and
/// the bell among them) written as escapes (`\u{1b}`).
fn inert(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Everything `sk` prints goes through this, the table cells already made inert and the
/// other lines (an error message, a job's outcome) here: none of the outside text reaches
/// the terminal as a control character. (JSON is unchanged: serde escapes control
/// characters itself.)
struct Inert<'a>(&'a mut dyn Write);

impl Write for Inert<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Formatted output arrives in whole characters; bytes that are not UTF-8 are
        // shown as the replacement character.
        let text = String::from_utf8_lossy(buf);
        if text.chars().any(|c| c.is_control() && c != '\n') {
            self.0.write_all(inert(&text).as_bytes())?;
        } else {
            self.0.write_all(text.as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

fn state(status: JobStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{status:?}"))
}

async fn migrations(
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
async fn known_queue(client: &Client, queue: &str) -> Result<(), Failure> {
    let mut known: Vec<String> = client
        .count_by(CountBy::Queue)
        .await?
        .into_iter()
        .filter_map(|g| g.key)
        .collect();
    known.extend(client.queues().await?.into_iter().map(|q| q.name));
    for worker in client.workers().await? {
        known.extend(worker.queues.unwrap_or_default());
    }
    if known.iter().any(|k| k == queue) {
        return Ok(());
    }
    // Last, the slow check: a queue whose every job succeeded.
    let filter = JobFilter::new().queue(queue);
    if !client.jobs(&filter, None, 1).await?.jobs.is_empty() {
        return Ok(());
    }
    known.sort();
    known.dedup();
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
fn confirm(yes: bool, question: &str) -> Result<(), Failure> {
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
fn applies(action: Action, status: JobStatus) -> bool {
    match action {
        Action::Retry => matches!(
            status,
            JobStatus::Fatal | JobStatus::Cancelled | JobStatus::Unprocessed
        ),
        Action::Cancel => matches!(status, JobStatus::Unprocessed | JobStatus::Processing),
        Action::RunNow => status == JobStatus::Unprocessed,
    }
}

/// Retry, cancel or run now: the ids given, or every job the filter takes, counted and
/// confirmed first, then acted on one by one (each as `sk retry ID` would) with a
/// progress bar on a terminal.
async fn act(
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
