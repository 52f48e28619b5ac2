//! The queues: each one's jobs by state, its global and rate limits, and pause or resume.

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::response::Redirect;
use maud::html;

use super::layout::{button, page, segment};
use super::{check_csrf, not_found, ActionForm, Failure, Page, Shared};
use crate::output::{rate_cell, time};

pub(super) async fn queues(State(app): Shared) -> Page {
    let queues = app.client.queues().await?;
    let body = html! {
        section {
            h2 { "Queues" }
            @if queues.is_empty() {
                p { "No queues." }
            } @else {
                div.scroll { table #queues {
                    tr { th { "queue" } th { "available" } th { "scheduled" } th { "pending" }
                         th { "running" } th { "global limit" } th { "per tenant" }
                         th { "rate limit" } th { "state" } th {} }
                    @for q in &queues {
                        @let action = if q.paused_at.is_some() { "resume" } else { "pause" };
                        tr data-queue=(q.name) {
                            td { (q.name) }
                            td { (q.available) }
                            td { (q.scheduled) }
                            td { (q.pending) }
                            td { (q.running) }
                            td { (q.global_limit.map_or_else(|| "none".to_owned(), |n| n.to_string())) }
                            td { (Some(crate::commands::per_tenant_cell(q)).filter(|c| !c.is_empty()).unwrap_or_else(|| "none".to_owned())) }
                            td.rate { (q.rate_limit.as_ref().map_or_else(|| "none".to_owned(), rate_cell)) }
                            td.state {
                                @match q.paused_at {
                                    Some(at) => { "paused since " (time(Some(at))) }
                                    None => { "running" }
                                }
                            }
                            td {
                                @if !app.options.read_only {
                                    (button(&app, &format!("/queues/{}/{action}", segment(&q.name)), action, false))
                                }
                            }
                        }
                    }
                } }
            }
        }
    };
    Ok(page("Queues", "/queues", body))
}

pub(super) async fn queue_action(
    State(app): Shared,
    Path((name, action)): Path<(String, String)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    match action.as_str() {
        "pause" => app.client.pause(&name).await?,
        "resume" => app.client.resume(&name).await?,
        _ => return Err(not_found(format!("no action {action:?} on a queue"))),
    };
    Ok(Redirect::to("/queues"))
}
