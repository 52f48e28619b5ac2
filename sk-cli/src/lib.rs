//! `sk`: the operator's command for sk's job queues, on PostgreSQL, SQLite or MySQL.
//!
//! Every command goes through `sk_runtime::Client`, the same control and insight API an
//! application uses, so the command holds no SQL of its own and works on every backend.
//! The binary is a thin shim over [`run`], which tests call in-process.

use std::io::Write;

use clap::Parser;
use sk_runtime::{Client, Error, Per, Pool, RouteBy, Routes, Schema};

mod args;
mod audit;
mod batches;
mod commands;
mod limits;
mod output;
mod queues;
pub mod web;

use args::{Cli, Command, PerArg};
use commands::{act, confirm, job, jobs, known_queue, migrations, status, Action};
use output::{ago, cells, print_json, print_table, say, table, time, workers_table, Inert};

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

/// `sk migrate` on each database.
async fn migrate(
    pools: Vec<Pool>,
    schema: &Schema,
    status: bool,
    seed_keys: Option<&str>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    if status {
        let several = pools.len() > 1;
        for (at, pool) in pools.into_iter().enumerate() {
            if several && !json {
                writeln!(out, "database {at}:")?;
            }
            migrations(pool, schema, json, out).await?;
        }
        return Ok(());
    }
    let keys = match seed_keys {
        Some("000") => Some(sk_runtime::SeedKeys::OnePerName),
        Some(_) => Some(sk_runtime::SeedKeys::PerProcess),
        None => None,
    };
    let databases = pools.len();
    for pool in pools {
        sk_runtime::migrate(pool.clone(), schema).await?;
        if let Some(keys) = keys {
            sk_runtime::set_seed_keys(pool, schema, keys).await?;
        }
    }
    say(
        out,
        json,
        &serde_json::json!({ "migrated": true, "seed_keys": seed_keys, "databases": databases }),
        || {
            let tables = if databases == 1 {
                "sk's tables are".to_owned()
            } else {
                format!("sk's tables in all {databases} databases are")
            };
            match seed_keys {
                Some(seed) => format!("{tables} at this version, keyed as seed {seed}'s"),
                None => format!("{tables} at this version"),
            }
        },
    )
}

/// The routes of `sk enqueue` over `databases`: `pins` as QUEUE=N.
fn routes(databases: usize, pins: &[String], by_tenant: bool) -> Result<Routes, Failure> {
    let mut routes = Routes::new(databases)?;
    if by_tenant {
        routes = routes.by(RouteBy::Tenant);
    }
    for pin in pins {
        let parsed = pin
            .split_once('=')
            .and_then(|(queue, at)| Some((queue, at.parse::<usize>().ok()?)));
        let Some((queue, at)) = parsed else {
            return Err(fail(
                format!("--pin {pin:?}: give QUEUE=N, N the database's place from 0"),
                2,
            ));
        };
        routes = routes.pin(queue, at)?;
    }
    Ok(routes)
}

async fn command(cli: Cli, out: &mut dyn Write) -> Result<(), Failure> {
    if let Command::Schema {
        from_database: false,
    } = cli.command
    {
        let linked = sk_runtime::schema()?;
        if linked["jobs"]
            .as_object()
            .is_some_and(|jobs| !jobs.is_empty())
        {
            return print_json(out, &linked);
        }
        if cli.database_url.is_empty() {
            return Err(fail(
                "this sk links no #[job]: give --database-url (or DATABASE_URL) to read the schemas the workers published",
                1,
            ));
        }
    }
    if cli.database_url.is_empty() {
        return Err(fail(
            "no database: give --database-url or set DATABASE_URL (postgres://, sqlite: or mysql://)",
            1,
        ));
    }
    let schema = Schema::new(&cli.schema, &cli.prefix)?;
    let mut pools = Vec::with_capacity(cli.database_url.len());
    for url in &cli.database_url {
        pools.push(Pool::connect(url).await?);
    }
    if let Command::Migrate { status, seed_keys } = &cli.command {
        return migrate(pools, &schema, *status, seed_keys.as_deref(), cli.json, out).await;
    }
    let several = pools.len() > 1;
    let routes = routes(pools.len(), &cli.pin, cli.route_by_tenant)?;
    let mut client = Client::across(pools)?.with_routes(routes)?.schema(schema);
    if let Some(replica) = cli.replica_url.as_deref() {
        if several {
            return Err(fail(
                "--replica-url reads one database's replica; it cannot go with several --database-url",
                2,
            ));
        }
        client = client.insight_from(Pool::connect(replica).await?);
    }
    let json = cli.json;
    match cli.command {
        Command::Migrate { .. } => Ok(()),
        Command::Schema { .. } => {
            let published = client.published_schema().await?;
            if published["jobs"]
                .as_object()
                .is_none_or(|jobs| jobs.is_empty())
            {
                return Err(fail(
                    "no worker has published its jobs' schemas to this database (a worker does at start, \
                     unless built with publish_schemas(false)), and this sk links no #[job]",
                    1,
                ));
            }
            print_json(out, &published)
        }
        Command::Status => status(&client, json, out).await,
        Command::Jobs(args) => jobs(&client, args, json, out).await,
        Command::Job { id } => job(&client, id, json, out).await,
        Command::Retry(args) => act(&client, args, json, Action::Retry, out).await,
        Command::Cancel(args) => act(&client, args, json, Action::Cancel, out).await,
        Command::RunNow(args) => act(&client, args, json, Action::RunNow, out).await,
        Command::Priority { to, jobs } => act(&client, jobs, json, Action::Priority(to), out).await,
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
        Command::Limit {
            queue,
            limit,
            per_tenant,
            rate,
            per_tenant_rate,
            fair,
        } => {
            let change = limits::Limits {
                running: limit.as_deref(),
                per_tenant: per_tenant.as_deref(),
                rate: rate.as_deref(),
                per_tenant_rate: per_tenant_rate.as_deref(),
                fair: fair.as_deref(),
            };
            limits::limit(&client, &queue, &change, json, out).await
        }
        Command::Tenants { queue, held } => limits::tenants(&client, &queue, held, json, out).await,
        Command::Errors { since, limit } => audit::errors(&client, since, limit, json, out).await,
        Command::Audit { limit } => audit::audit(&client, limit, json, out).await,
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
        Command::Batches { limit } => batches::batches(&client, limit, json, out).await,
        Command::Batch { id, retry, cancel } => {
            let action = match (retry, cancel) {
                (true, _) => batches::BatchAction::Retry,
                (_, true) => batches::BatchAction::Cancel,
                _ => batches::BatchAction::Show,
            };
            batches::batch(&client, id, action, json, out).await
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
            // Checked against the schema the workers published, where one is; a type
            // no worker published yet is posted as it is.
            let id = match client.enqueue_json(&task_type, payload.clone()).await {
                Err(Error::Invalid {
                    what: "task type", ..
                }) => client.enqueue_json_unchecked(&task_type, payload).await?,
                posted => posted?,
            };
            say(out, json, &serde_json::json!({ "id": id }), || {
                id.to_string()
            })
        }
    }
}
