//! The overview: the last hour's runs with a chart, figures by task type, jobs by queue
//! (every queue), the jobs running now with their progress, paused queues, workers.

use axum::extract::State;
use chrono::{Duration, Utc};
use maud::{html, Markup};
use sk_runtime::{CountBy, GroupCounts, JobFilter, JobRecord, JobStatus, Per, Throughput};

use super::charts::runs_per_minute;
use super::layout::{page, segment, workers_table};
use super::queues::{count_cells, COUNT_HEADERS};
use super::{Page, Shared};
use crate::output::time;
use crate::queues::every_queue;

pub(super) async fn overview(State(app): Shared) -> Page {
    let client = &app.client;
    let now = Utc::now();
    let queues = every_queue(client).await?;
    let workers = client.workers().await?;
    let hour_ago = now - Duration::hours(1);
    let minutes = client.throughput(hour_ago, Per::Minute, None).await?;
    let by_type = client.throughput(hour_ago, Per::Whole, None).await?;
    let type_counts = client.count_by(CountBy::TaskType).await?;
    // The card sums the table by task type below, from the same reads: the runs of the
    // hour per type, and the jobs that failed for good. (Summed from the chart's minutes,
    // read apart, it said "0 failed" beside 500 fatal jobs in the tables.)
    let succeeded: i64 = by_type.iter().map(|r| r.processed).sum();
    let failed: i64 = by_type.iter().map(|r| r.failed).sum();
    let fatal: i64 = type_counts.iter().map(|c| c.fatal).sum();
    let running = running_now(client).await?;
    let paused: Vec<_> = queues
        .iter()
        .filter_map(|q| Some((q.name.as_str(), q.state.as_ref()?.paused_at?)))
        .collect();
    let replica = replica_line(client).await?;
    let body = html! {
        (replica)
        section {
            h2 { "Last hour" }
            p.figures {
                span #succeeded { (succeeded) } " runs succeeded · "
                span #failed { (failed) } " failed · "
                @if succeeded + failed > 0 {
                    span #failure-rate { (format!("{:.1}", rate(succeeded, failed))) } "% failure rate · "
                }
                span #fatal { (fatal) } " jobs failed for good (still kept)"
            }
            p.note { "Runs as the workers last wrote them, at most a heartbeat ago." }
            (runs_per_minute(&minutes, now))
        }
        section {
            h2 { "By task type" }
            (types_table(&type_counts, &by_type))
        }
        section {
            h2 { "Jobs by queue" }
            @if queues.is_empty() {
                p { "No jobs." }
            } @else {
                div.scroll { table #counts {
                    tr { th { "queue" } @for h in COUNT_HEADERS { th { (h) } } }
                    @for q in &queues {
                        tr data-queue=(q.name) {
                            td {
                                (q.name)
                                @if paused.iter().any(|(name, _)| *name == q.name) { " " span.tag { "paused" } }
                            }
                            (count_cells("queue", &q.name, &q.counts))
                        }
                    }
                } }
            }
        }
        section {
            h2 { "Running now" }
            (running_table(&running))
        }
        section {
            h2 { "Paused queues" }
            @if paused.is_empty() {
                p #paused { "None." }
            } @else {
                ul #paused {
                    @for (name, at) in &paused { li { (name) " since " (time(Some(*at))) } }
                }
            }
        }
        section { h2 { "Workers" } (workers_table(&workers)) }
    };
    Ok(page("Overview", "/", body))
}

/// Where the pages read, when it is not the primary (`sk web --replica-url`): a
/// replica, and how far behind it is.
async fn replica_line(client: &sk_runtime::Client) -> Result<Markup, super::Failure> {
    if !client.reads_elsewhere() {
        return Ok(html! {});
    }
    let lag = client.replica_lag().await?;
    Ok(html! {
        p #replica-lag {
            @match lag {
                Some(lag) => {
                    "Read from a replica, " (format!("{:.1}", lag.as_secs_f64())) " s behind the primary; actions go to the primary."
                }
                None => { "Read from a server of their own (not a streaming replica); actions go to the primary." }
            }
        }
    })
}

/// Most running jobs the overview shows with their progress.
const RUNNING_SHOWN: u32 = 20;

/// The newest running jobs, each with its record (for its progress and worker).
async fn running_now(client: &sk_runtime::Client) -> Result<Vec<JobRecord>, super::Failure> {
    let filter = JobFilter::new().status(JobStatus::Processing);
    let page = client.jobs(&filter, None, RUNNING_SHOWN).await?;
    let mut records = Vec::with_capacity(page.jobs.len());
    for job in &page.jobs {
        if let Some(record) = client.job(job.id).await? {
            records.push(record);
        }
    }
    Ok(records)
}

/// Running jobs with how far each has come ([`JobRecord::progress`]): a bar when the
/// value has numbers `done` and `of`, the value as JSON always.
fn running_table(running: &[JobRecord]) -> Markup {
    if running.is_empty() {
        return html! { p #running { "None." } };
    }
    html! {
        div.scroll { table #running {
            tr { th { "job" } th { "type" } th { "queue" } th { "worker" } th { "progress" } }
            @for r in running {
                @let progress = r.progress();
                @let bar = progress.as_ref().and_then(|p| Some((p.get("done")?.as_f64()?, p.get("of")?.as_f64()?)));
                tr {
                    td { a.id href=(format!("/jobs/{}", r.id)) { (r.id) } }
                    td { (r.task_type) }
                    td { (r.queue) }
                    td { (r.locked_by.as_deref().unwrap_or_default()) }
                    td.progress {
                        @if let Some((done, of)) = bar {
                            progress value=(done) max=(of) {}
                            " "
                        }
                        (progress.map(|p| p.to_string()).unwrap_or_default())
                    }
                }
            }
        } }
    }
}

/// Failed runs as a percentage of all runs.
pub(super) fn rate(succeeded: i64, failed: i64) -> f64 {
    if succeeded + failed > 0 {
        failed as f64 * 100.0 / (succeeded + failed) as f64
    } else {
        0.0
    }
}

/// Per task type: its jobs by state now, and its last hour's runs, failure rate and run
/// time percentiles; the worst failure rate first.
fn types_table(counts: &[GroupCounts], hour: &[Throughput]) -> Markup {
    let mut names: Vec<&str> = counts
        .iter()
        .filter_map(|c| c.key.as_deref())
        .chain(hour.iter().map(|t| t.task_type.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let run = |name: &str| hour.iter().find(|t| t.task_type == name);
    names.sort_by(|a, b| {
        let r = |n: &str| run(n).map_or(0.0, |t| rate(t.processed, t.failed));
        r(b).total_cmp(&r(a)).then(a.cmp(b))
    });
    if names.is_empty() {
        return html! { p { "No task types." } };
    }
    let ms = |v: f64| format!("{v:.1}");
    html! {
        div.scroll { table #types {
            tr { th { "task type" } @for h in COUNT_HEADERS { th { (h) } }
                 th { "succeeded/h" } th { "failed/h" } th { "failure rate" }
                 th { "p50 ms" } th { "p95 ms" } th { "p99 ms" } }
            @for name in &names {
                @let c = counts.iter().find(|c| c.key.as_deref() == Some(*name)).cloned().unwrap_or_default();
                @let t = run(name);
                tr data-type=(name) {
                    td { a href=(format!("/types/{}", segment(name))) { (name) } }
                    (count_cells("type", name, &c))
                    td { (t.map_or(0, |t| t.processed)) }
                    td data-state="failed" { (t.map_or(0, |t| t.failed)) }
                    td.rate { (t.map_or_else(|| "–".to_owned(), |t| format!("{:.1}%", rate(t.processed, t.failed)))) }
                    td { (t.map_or_else(String::new, |t| ms(t.p50_ms))) }
                    td { (t.map_or_else(String::new, |t| ms(t.p95_ms))) }
                    td { (t.map_or_else(String::new, |t| ms(t.p99_ms))) }
                }
            }
        } }
    }
}
