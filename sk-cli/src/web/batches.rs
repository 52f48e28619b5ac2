//! The batches: the newest with their counts, one batch with its callbacks and links to
//! its jobs, and the actions on a batch (retry what failed, cancel what is left).

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use maud::html;

use super::layout::{button, page};
use super::{acting, check_csrf, id_of, not_found, ActionForm, Failure, Page, Shared};
use crate::batches::batch_state;
use crate::output::time;

pub(super) async fn batches(State(app): Shared) -> Page {
    let batches = app.client.batches(50).await?;
    let body = html! {
        section {
            h2 { "Batches" }
            @if batches.is_empty() {
                p { "No batches." }
            } @else {
                div.scroll { table #batches {
                    tr { th { "batch" } th { "description" } th { "state" } th { "total" } th { "pending" }
                         th { "succeeded" } th { "failed" } th { "cancelled" } th { "created" } }
                    @for b in &batches {
                        tr {
                            td.id { a href=(format!("/batches/{}", b.id)) { (b.id) } }
                            td.message { (b.description.as_deref().unwrap_or_default()) }
                            td { (batch_state(b)) }
                            td { (b.total) }
                            td { (b.pending) }
                            td { (b.succeeded) }
                            td { (b.failed) }
                            td { (b.cancelled) }
                            td { (time(Some(b.created_at))) }
                        }
                    }
                } }
            }
        }
    };
    Ok(page("Batches", "/batches", body))
}

pub(super) async fn batch(State(app): Shared, Path(id): Path<String>) -> Page {
    let id = id_of(&id, "batch")?;
    let Some(b) = app.client.batch(id).await? else {
        return Err(not_found(format!("no batch {id}")));
    };
    // The batch's jobs by state: the first page of each, linked to the job's page.
    let mut listed = Vec::new();
    for (name, which) in [
        ("failed", sk_runtime::BatchJobs::Failed),
        ("cancelled", sk_runtime::BatchJobs::Cancelled),
        ("pending", sk_runtime::BatchJobs::Pending),
    ] {
        let ids = app.client.batch_jobs(id, which, None, 20).await?;
        if !ids.is_empty() {
            listed.push((name, ids));
        }
    }
    let body = html! {
        section {
            h2 { "Batch " span.id { (b.id) } }
            @if let Some(text) = &b.description { p { (text) } }
            table #batch {
                tr { th { "state" } td { (batch_state(&b)) } }
                tr { th { "total" } td { (b.total) } }
                tr { th { "pending" } td { (b.pending) } }
                tr { th { "succeeded" } td { (b.succeeded) } }
                tr { th { "failed" } td { (b.failed) } }
                tr { th { "cancelled" } td { (b.cancelled) } }
                tr { th { "created" } td { (time(Some(b.created_at))) } }
                tr { th { "finished" } td { (time(b.finished_at)) } }
            }
            @if !app.options.read_only {
                div.actions {
                    @if b.failed + b.cancelled > 0 {
                        (button(&app, &format!("/batches/{id}/retry"), "Retry failed", true))
                    }
                    @if b.pending > 0 {
                        (button(&app, &format!("/batches/{id}/cancel"), "Cancel pending", true))
                    }
                }
            }
        }
        section {
            h2 { "Callbacks" }
            @if b.callbacks.is_empty() {
                p { "No callbacks." }
            } @else {
                table #callbacks {
                    tr { th { "on" } th { "job" } th { "type" } th { "posted" } }
                    @for c in &b.callbacks {
                        tr {
                            td { (c.event.name()) }
                            td.id {
                                @if c.posted_at.is_some() {
                                    a href=(format!("/jobs/{}", c.job_id)) { (c.job_id) }
                                } @else { (c.job_id) }
                            }
                            td { (c.task_type) }
                            td { (c.posted_at.map_or_else(|| "waiting".to_owned(), |at| time(Some(at)))) }
                        }
                    }
                }
            }
        }
        @for (name, ids) in &listed {
            section {
                h3 { "Jobs " (name) }
                ul #(format!("jobs-{name}")) {
                    @for job in ids {
                        li.id { a href=(format!("/jobs/{job}")) { (job) } }
                    }
                }
            }
        }
    };
    Ok(page("Batch", "/batches", body))
}

pub(super) async fn batch_action(
    State(app): Shared,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    let client = acting(&app, &headers);
    let id = id_of(&id, "batch")?;
    if app.client.batch(id).await?.is_none() {
        return Err(not_found(format!("no batch {id}")));
    }
    match action.as_str() {
        "retry" => client.retry_batch(id).await?,
        "cancel" => client.cancel_batch(id).await?,
        _ => return Err(not_found(format!("no action {action:?} on a batch"))),
    };
    Ok(Redirect::to(&format!("/batches/{id}")))
}
