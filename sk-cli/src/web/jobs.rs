//! The jobs: the list with its filters, one job's record and attempts, and the actions on
//! a job (retry, cancel, run now).

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::response::Redirect;
use maud::{html, Markup};
use sk_runtime::{JobFilter, JobPage, JobRecord, JobStatus};
use uuid::Uuid;

use super::layout::{button, page, segment};
use super::{bad, check_csrf, not_found, ActionForm, Failure, Page, Shared};
use crate::output::time;

#[derive(serde::Deserialize, Default)]
pub(super) struct JobsQuery {
    queue: Option<String>,
    #[serde(rename = "type")]
    task_type: Option<String>,
    state: Option<String>,
    tenant: Option<String>,
    after: Option<String>,
}

/// The states a filter names, as the pages name them.
const STATES: [&str; 5] = ["waiting", "running", "processed", "fatal", "cancelled"];

fn status_named(name: &str) -> Option<JobStatus> {
    Some(match name {
        "waiting" => JobStatus::Unprocessed,
        "pending" => JobStatus::Pending,
        "running" => JobStatus::Processing,
        "processed" => JobStatus::Processed,
        "fatal" => JobStatus::Fatal,
        "cancelled" => JobStatus::Cancelled,
        _ => return None,
    })
}

fn status_name(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Unprocessed => "waiting",
        JobStatus::Pending => "pending",
        JobStatus::Processing => "running",
        JobStatus::Processed => "processed",
        JobStatus::Fatal => "fatal",
        JobStatus::Cancelled => "cancelled",
        _ => "other",
    }
}

pub(super) async fn jobs(State(app): Shared, Query(query): Query<JobsQuery>) -> Page {
    let given = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    let mut filter = JobFilter::new();
    if let Some(q) = given(&query.queue) {
        filter = filter.queue(q);
    }
    if let Some(t) = given(&query.task_type) {
        filter = filter.task_type(t);
    }
    if let Some(t) = given(&query.tenant) {
        filter = filter.tenant(t);
    }
    if let Some(s) = given(&query.state) {
        let status = status_named(&s).ok_or_else(|| {
            bad(format!(
                "no state {s:?}: waiting, running, processed, fatal or cancelled"
            ))
        })?;
        filter = filter.status(status);
    }
    let after = match given(&query.after) {
        Some(a) => Some(
            a.parse::<Uuid>()
                .map_err(|_| bad(format!("after={a:?} is not a job id")))?,
        ),
        None => None,
    };
    let JobPage { jobs, next, .. } = app.client.jobs(&filter, after, 50).await?;
    let next = next.map(|next| {
        let mut link = format!("/jobs?after={next}");
        for (k, v) in [
            ("queue", &query.queue),
            ("type", &query.task_type),
            ("tenant", &query.tenant),
            ("state", &query.state),
        ] {
            if let Some(v) = given(v) {
                link.push_str(&format!("&{k}={}", segment(&v)));
            }
        }
        link
    });
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let body = html! {
        section {
            h2 { "Jobs" }
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
                button { "Filter" }
            }
            @if jobs.is_empty() {
                p { "No jobs." }
            } @else {
                div.scroll { table #jobs {
                    tr { th { "id" } th { "type" } th { "queue" } th { "state" } th { "attempt" }
                         th { "posted" } th { "last error" } }
                    @for j in &jobs {
                        @let s = status_name(j.status());
                        tr {
                            td { a.id href=(format!("/jobs/{}", j.id)) { (j.id) } }
                            td { (j.task_type) }
                            td { (j.queue) }
                            td class=(format!("state {s}")) { (s) }
                            td { (j.attempt.map_or_else(String::new, |a| a.to_string())) }
                            td { (time(Some(j.posted_at))) }
                            td.message { (j.last_error_message.as_deref().unwrap_or_default()) }
                        }
                    }
                } }
            }
            @if let Some(link) = next {
                p { a #next href=(link) { "Older jobs →" } }
            }
        }
    };
    Ok(page("Jobs", "/jobs", body))
}

pub(super) async fn job(State(app): Shared, Path(id): Path<String>) -> Page {
    let id = id
        .parse::<Uuid>()
        .map_err(|_| bad(format!("{id:?} is not a job id")))?;
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
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    let id = id
        .parse::<Uuid>()
        .map_err(|_| bad(format!("{id:?} is not a job id")))?;
    let client = &app.client;
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
