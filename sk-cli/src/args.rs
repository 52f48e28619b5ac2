//! The command line: the commands, their arguments and filters (clap).

use clap::{Parser, Subcommand, ValueEnum};
use sk_runtime::{JobFilter, JobStatus};
use uuid::Uuid;

use crate::output::ago;
use crate::{fail, Failure};

pub(crate) const EXAMPLES: &str = "\
Examples:
  sk --database-url postgres://postgres@127.0.0.1/app status
  sk --database-url postgres://db-a/app --database-url postgres://db-b/app status
  DATABASE_URL=sqlite:jobs.db sk jobs --state fatal --queue mail
  sk job 0193a5e2-7c1f-7d3e-9a51-2b7e8c7d1f00
  sk retry 0193a5e2-7c1f-7d3e-9a51-2b7e8c7d1f00
  sk retry --queue mail --state fatal --yes
  sk cancel --type send_email --state waiting
  sk pause mail
  sk prune --older-than 30d
  sk web --bind 127.0.0.1:8080
  sk errors --since 1h --json
  sk schema > sk-schema.json

Exit codes: 0 done, 1 failed (the database, bad input), 2 usage (or a bulk action\nnot confirmed without a terminal), 3 no such job.";

/// Operate sk's job queues.
#[derive(Parser)]
#[command(name = "sk", version, after_help = EXAMPLES)]
pub(crate) struct Cli {
    /// The database: a postgres://, sqlite: or mysql:// URL. Given more than once, the
    /// databases of a router, database 0 first: counts are summed, lists merged, and
    /// each action goes to the database that holds its job.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Vec<String>,
    /// With several databases: the home database of a queue's jobs, as QUEUE=N (the
    /// router's `pin`), for `sk enqueue`; may be given more than once.
    #[arg(long, global = true, value_name = "QUEUE=N")]
    pub(crate) pin: Vec<String>,
    /// With several databases: route the queues not pinned by a hash of the job's
    /// tenant instead of its queue's name, for `sk enqueue`.
    #[arg(long, global = true)]
    pub(crate) route_by_tenant: bool,
    /// A streaming replica of the database for the read-only commands and pages
    /// (status, jobs, errors, the dashboard's lists); actions go to --database-url.
    #[arg(long, env = "SK_REPLICA_URL", global = true, hide_env_values = true)]
    pub(crate) replica_url: Option<String>,
    /// sk's schema on PostgreSQL; elsewhere a prefix of its table names.
    #[arg(long, default_value = "public", global = true)]
    pub(crate) schema: String,
    /// The prefix of sk's table names.
    #[arg(long, default_value = "sk_", global = true)]
    pub(crate) prefix: String,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Create sk's tables, or bring them to this version.
    Migrate {
        /// Only say which migrations the database has and which are pending.
        #[arg(long)]
        status: bool,
        /// Key the metrics and stats tables as a Stakhanovise page does (PostgreSQL):
        /// `001` one row per owner process (the default), `000` one row per metric id and
        /// payload type, for code that upserts `ON CONFLICT (metric_id)`.
        #[arg(long, value_name = "SEED", value_parser = ["000", "001"])]
        seed_keys: Option<String>,
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
    /// Set live jobs' priority (lower runs first): by id, or every job a filter takes.
    Priority {
        /// The new priority.
        #[arg(long, allow_negative_numbers = true)]
        to: i32,
        #[command(flatten)]
        jobs: BulkArgs,
    },
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
    /// Set a queue's concurrency limit across all workers (or remove it with `none`),
    /// each of its tenants' (`--per-tenant 4`, or `--per-tenant none`), its rate limit
    /// (`--rate 100/1m`, or `--rate none`), each of its tenants' rate limit
    /// (`--per-tenant-rate 10/1s`), fair claims across its tenants (`--fair on`), or
    /// several.
    Limit {
        /// The queue.
        queue: String,
        /// At most this many of its jobs at once, or `none`.
        #[arg(required_unless_present_any = ["rate", "per_tenant", "per_tenant_rate", "fair"])]
        limit: Option<String>,
        /// At most this many jobs of each of its tenants at once over every worker, or
        /// `none`.
        #[arg(long)]
        per_tenant: Option<String>,
        /// At most this many starts per window over every worker, as `100/1m`, `50/1s`
        /// or `3/h`, or `none`.
        #[arg(long)]
        rate: Option<String>,
        /// At most this many starts of each of its tenants per window over every worker,
        /// as `10/1s`, or `none`.
        #[arg(long)]
        per_tenant_rate: Option<String>,
        /// Claim it fairly across its tenants on every worker (`on`), or in the queue's
        /// order (`off`).
        #[arg(long)]
        fair: Option<String>,
    },
    /// Errors grouped by task type, error type and message, with numbers, ids, quoted
    /// values, e-mail addresses and URL parameters masked.
    Errors {
        /// How far back, e.g. `1h`, `24h`, `7d`.
        #[arg(long, default_value = "24h")]
        since: humantime::Duration,
        /// At most this many groups.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// The schema document of the jobs (JSON): each task type's defaults and the JSON
    /// Schema of its arguments, for producers in other languages to check payloads
    /// against. The jobs linked into this binary (an application's own command built on
    /// `sk_cli::run`), else those the workers published in the database at start.
    Schema {
        /// Read what the workers published in the database, even where this binary
        /// links jobs.
        #[arg(long)]
        from_database: bool,
    },
    /// The operator actions taken (pause, resume, retry, cancel, limits, delete, ...),
    /// newest first, with who took them and how many jobs they changed.
    Audit {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
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
    /// The newest batches (`Batch`), with their jobs counted by state.
    Batches {
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// One batch with its counts and callbacks; or, with `--retry`, its jobs that failed
    /// for good or were cancelled run again, or, with `--cancel`, its live jobs cancelled.
    Batch {
        /// The batch's id.
        id: uuid::Uuid,
        /// Run its failed and cancelled jobs again.
        #[arg(long, conflicts_with = "cancel")]
        retry: bool,
        /// Cancel its jobs not ended yet.
        #[arg(long)]
        cancel: bool,
    },
    /// A queue's tenants: their available and running jobs, their starts against the
    /// queue's rate limit per tenant, and which limit per tenant holds each back now.
    Tenants {
        /// The queue.
        queue: String,
        /// Only the tenants a limit holds back with jobs waiting.
        #[arg(long)]
        held: bool,
    },
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
    /// Enqueue a job by task type and JSON arguments, checked against the schema the
    /// workers published for the type (`sk schema`) where they published one.
    Enqueue {
        /// The task type, as `#[job]` names it.
        task_type: String,
        /// The arguments as a JSON object, e.g. '{"user_id": 42}'.
        payload: String,
    },
}

#[derive(clap::Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// The page after this job id (the `next` of the page before).
    #[arg(long)]
    pub(crate) after: Option<Uuid>,
    /// Jobs per page (at most 1,000).
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
}

#[derive(clap::Args)]
pub(crate) struct BulkArgs {
    /// Job ids; or none, and a filter.
    pub(crate) ids: Vec<Uuid>,
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Do not ask before acting on more than one job.
    #[arg(long)]
    pub(crate) yes: bool,
}

#[derive(clap::Args)]
pub(crate) struct FilterArgs {
    /// Only this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this task type.
    #[arg(long = "type")]
    pub(crate) task_type: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only this correlation id.
    #[arg(long)]
    pub(crate) correlation_id: Option<String>,
    /// Only jobs in this state.
    #[arg(long, value_enum)]
    pub(crate) state: Option<StateArg>,
    /// Only jobs whose metadata has KEY=VALUE.
    #[arg(long, value_name = "KEY=VALUE")]
    pub(crate) meta: Option<String>,
    /// Only this retry group (seed 002).
    #[arg(long)]
    pub(crate) retry_group: Option<String>,
    /// Only jobs with this external id (seed 002's string id).
    #[arg(long)]
    pub(crate) external_id: Option<String>,
    /// Only jobs whose handler last set this sub-state (seed 002).
    #[arg(long)]
    pub(crate) sub_state: Option<String>,
    /// Jobs posted within this long.
    #[arg(long)]
    pub(crate) since: Option<humantime::Duration>,
}

impl FilterArgs {
    pub(crate) fn given(&self) -> bool {
        self.queue.is_some()
            || self.task_type.is_some()
            || self.tenant.is_some()
            || self.correlation_id.is_some()
            || self.state.is_some()
            || self.meta.is_some()
            || self.retry_group.is_some()
            || self.external_id.is_some()
            || self.sub_state.is_some()
            || self.since.is_some()
    }

    pub(crate) fn to_filter(&self) -> Result<JobFilter, Failure> {
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
        if let Some(g) = &self.retry_group {
            filter = filter.retry_group(g);
        }
        if let Some(id) = &self.external_id {
            filter = filter.external_id(id);
        }
        if let Some(s) = &self.sub_state {
            filter = filter.sub_state(s);
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
pub(crate) enum StateArg {
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
pub(crate) enum PerArg {
    Minute,
    Hour,
}
