//! The jobs: the list with its filters, one job's record and attempts, and the actions on
//! a job (retry, cancel, run now).

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use maud::{html, Markup};
use sk_runtime::{JobPage, JobRecord, JobStatus, JobSummary};
use uuid::Uuid;

use super::bulk::{bar, JobsQuery, STATES};
use super::layout::{button, page};
use super::{acting, bad, check_csrf, id_of, not_found, ActionForm, Failure, Page, Shared};
use crate::output::time;

pub(super) fn status_name(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Unprocessed => "waiting",
        JobStatus::Error | JobStatus::Faulted => "retrying",
        JobStatus::Pending => "pending",
        JobStatus::Processing => "running",
        JobStatus::Processed => "processed",
        JobStatus::Fatal => "fatal",
        JobStatus::Cancelled => "cancelled",
        _ => "other",
    }
}

/// The attempt a job is at, or the attempts it made (`JobSummary::attempt`); none for a
/// job that never ran.
fn attempt_of(j: &JobSummary) -> String {
    j.attempt.map_or_else(|| "0".to_owned(), |a| a.to_string())
}

/// How far the job list counts what its filter takes, for the bulk bar: 10,000 jobs
/// (two index scans), or 1,000 of an error group (a page of the list, which reads each
/// job's last error).
fn count_up_to(query: &JobsQuery) -> u64 {
    if query.error.is_some() || query.error_kind.is_some() {
        1_000
    } else {
        10_000
    }
}

pub(super) async fn jobs(State(app): Shared, Query(query): Query<JobsQuery>) -> Page {
    let filter = query.filter()?;
    let after = match query.after.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => Some(
            a.parse::<Uuid>()
                .map_err(|_| bad(format!("after={a:?} is not a job id")))?,
        ),
        None => None,
    };
    let JobPage { jobs, next, .. } = app.client.jobs(&filter, after, 50).await?;
    let matching = if app.options.read_only || jobs.is_empty() {
        0
    } else {
        app.client.count_where(&filter, count_up_to(&query)).await?
    };
    let filtered = query.query_string();
    let next = next.map(|next| format!("/jobs?after={next}&{filtered}"));
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let any_error = JobsQuery {
        error: None,
        error_kind: None,
        ..query.clone()
    };
    let selectable = !app.options.read_only;
    let table = html! {
        div.scroll { table #jobs {
            tr {
                @if selectable { th { input #select-all type="checkbox" aria-label="select all"; } }
                th { "id" } th { "type" } th { "queue" } th { "state" } th { "attempt" }
                th { "posted" } th { "last error" }
            }
            @for j in &jobs {
                @let s = status_name(j.status());
                tr {
                    @if selectable {
                        td { input type="checkbox" name="id" value=(j.id) aria-label="select"; }
                    }
                    td { a.id href=(format!("/jobs/{}", j.id)) { (j.id) } }
                    td { (j.task_type) }
                    td { (j.queue) }
                    td class=(format!("state {s}")) { (s) }
                    td.attempt { (attempt_of(j)) }
                    td { (time(Some(j.posted_at))) }
                    td.message { (j.last_error_message.as_deref().unwrap_or_default()) }
                }
            }
        } }
    };
    let body = html! {
        section {
            h2 { "Jobs" }
            @if let Some(done) = query.done.as_deref() {
                p.done #done { (done) }
            }
            form.filters method="get" action="/jobs" {
                input name="queue" placeholder="queue" value=(value(&query.queue));
                input name="type" placeholder="task type" value=(value(&query.task_type));
                input name="tenant" placeholder="tenant" value=(value(&query.tenant));
                select name="state" {
                    option value="" { "any state" }
                    @for s in STATES {
                        option selected[query.state.as_deref() == Some(s)] { (s) }
                    }
                }
                @if let Some(kind) = &query.error_kind { input type="hidden" name="error_kind" value=(kind); }
                @if let Some(error) = &query.error { input type="hidden" name="error" value=(error); }
                button { "Filter" }
            }
            @if query.error.is_some() {
                p #error-filter {
                    "Last error: " (value(&query.error_kind)) " " code { (value(&query.error)) }
                    " · " a href=(format!("/jobs?{}", any_error.query_string())) { "any error" }
                }
            }
            @if jobs.is_empty() {
                p { "No jobs." }
            } @else {
                @if app.options.read_only {
                    (table)
                } @else {
                    form #bulk method="post" action="/jobs/bulk" {
                        (bar(&app, &query, matching, matching >= count_up_to(&query)))
                        (table)
                    }
                }
            }
            @if let Some(link) = next {
                p { a #next href=(link) { "Older jobs →" } }
            }
        }
    };
    Ok(page("Jobs", "/jobs", body))
}

pub(super) async fn job(State(app): Shared, Path(id): Path<String>) -> Page {
    let id = id_of(&id, "job")?;
    let record = app
        .client
        .job(id)
        .await?
        .ok_or_else(|| not_found(format!("no job {id}")))?;
    let status = record.status();
    let s = status_name(status);
    let path = |action: &str| format!("/jobs/{id}/{action}");
    let attempts = record.attempts();
    let body = html! {
        section {
            h2 { "Job " span.id { (id) } }
            p { "State: " strong #state class=(format!("state {s}")) { (s) } }
            @if !app.options.read_only {
                div.actions {
                    @match status {
                        JobStatus::Fatal | JobStatus::Cancelled => {
                            (button(&app, &path("retry"), "retry", false))
                        }
                        JobStatus::Unprocessed => {
                            (button(&app, &path("run-now"), "run now", false))
                            (button(&app, &path("cancel"), "cancel", true))
                        }
                        JobStatus::Processing => { (button(&app, &path("cancel"), "cancel", true)) }
                        _ => {}
                    }
                }
            }
            (record_table(&record))
            h3 { "Attempts" }
            @if attempts.is_empty() {
                p { "No attempt yet." }
            } @else {
                ol.timeline #attempts {
                    @for a in &attempts {
                        @let outcome = format!("{:?}", a.outcome).to_lowercase();
                        li class=(outcome) {
                            strong { "Attempt " (a.attempt) } ": " (outcome)
                            " · worker " (a.worker.as_deref().unwrap_or("?"))
                            " · " (time(a.started_at)) " → " (time(a.ended_at))
                            @match (&a.kind, &a.message) {
                                (Some(k), Some(m)) => { pre { (k) ": " (m) } }
                                (None, Some(m)) => { pre { (m) } }
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(page("Job", "/jobs", body))
}

fn record_table(record: &JobRecord) -> Markup {
    let rows = [
        ("type", Some(record.task_type.clone())),
        ("queue", Some(record.queue.clone())),
        ("priority", Some(record.priority.to_string())),
        ("posted", Some(time(Some(record.posted_at)))),
        ("finished", record.finalized_at.map(|t| time(Some(t)))),
        ("tenant", record.tenant.clone()),
        ("correlation id", record.correlation_id.clone()),
        ("progress", record.progress().map(|p| p.to_string())),
        ("steps done", crate::output::steps_done(record)),
        (
            "worker",
            record.locked_by.clone().or(record.last_worker.clone()),
        ),
    ];
    let documents = [
        ("payload", &crate::output::payload_shown(record)),
        ("output", &record.output_json),
        ("metadata", &record.metadata),
    ];
    html! {
        div.scroll { table.record {
            @for (k, v) in rows {
                tr { th { (k) } td { (v.unwrap_or_default()) } }
            }
            @for (k, v) in documents {
                tr { th { (k) } td { pre id=(k) { (pretty(v.as_deref())) } } }
            }
        } }
    }
}

/// JSON indented, or the text as it is.
fn pretty(text: Option<&str>) -> String {
    let text = text.unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
}

pub(super) async fn job_action(
    State(app): Shared,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    let client = acting(&app, &headers);
    let id = id_of(&id, "job")?;
    let found = match action.as_str() {
        "retry" => client.retry(id).await? != sk_runtime::RetryOutcome::NotFound,
        "cancel" => client.cancel(id).await? != sk_runtime::CancelOutcome::NotFound,
        "run-now" => client.run_now(id).await? != sk_runtime::RescheduleOutcome::NotFound,
        _ => return Err(not_found(format!("no action {action:?} on a job"))),
    };
    if !found {
        return Err(not_found(format!("no job {id}")));
    }
    Ok(Redirect::to(&format!("/jobs/{id}")))
}
