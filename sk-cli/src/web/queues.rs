//! The queues: each one's jobs by state, its global and rate limits, and pause or resume;
//! a queue's tenants and what its limits per tenant hold back now.

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use maud::{html, Markup};
use sk_runtime::GroupCounts;

use super::layout::{button, page, segment};
use super::{acting, check_csrf, not_found, ActionForm, Failure, Page, Shared};
use crate::limits::{hold_cell, per_tenant_cell, waiting};
use crate::output::{rate_cell, time};
use crate::queues::every_queue;

/// Most tenants the tenants page lists (those held back first); `sk tenants` lists all.
const TENANTS_SHOWN: usize = 500;

/// A queue's or a task type's counts (`by`: `queue` or `type`) as table cells, each
/// state linking to the jobs in it.
pub(super) fn count_cells(by: &str, name: &str, c: &GroupCounts) -> Markup {
    let link = |state: &str, n: i64| {
        html! {
            td data-state=(state) {
                a href=(format!("/jobs?{by}={}&state={state}", segment(name))) { (n) }
            }
        }
    };
    html! {
        (link("waiting", c.available))
        td data-state="scheduled" { (c.scheduled) }
        td data-state="pending" { (c.pending) }
        (link("retrying", c.retrying))
        (link("running", c.running))
        (link("fatal", c.fatal))
        (link("cancelled", c.cancelled))
    }
}

/// The header cells of [`count_cells`].
pub(super) const COUNT_HEADERS: [&str; 7] = [
    "waiting",
    "scheduled",
    "pending",
    "retrying",
    "running",
    "fatal",
    "cancelled",
];

pub(super) async fn queues(State(app): Shared) -> Page {
    let queues = every_queue(&app.client).await?;
    let body = html! {
        section {
            h2 { "Queues" }
            @if queues.is_empty() {
                p { "No queues." }
            } @else {
                div.scroll { table #queues {
                    tr { th { "queue" } @for h in COUNT_HEADERS { th { (h) } }
                         th { "global limit" } th { "per tenant" } th { "rate limit" } th { "state" } th {} }
                    @for q in &queues {
                        @let paused = q.state.as_ref().and_then(|s| s.paused_at);
                        @let action = if paused.is_some() { "resume" } else { "pause" };
                        tr data-queue=(q.name) {
                            td { (q.name) }
                            (count_cells("queue", &q.name, &q.counts))
                            @match &q.state {
                                Some(s) => {
                                    td { (s.global_limit.map_or_else(|| "none".to_owned(), |n| n.to_string())) }
                                    td { a href=(format!("/queues/{}/tenants", segment(&q.name))) {
                                        (Some(per_tenant_cell(s)).filter(|c| !c.is_empty()).unwrap_or_else(|| "none".to_owned()))
                                    } }
                                    td.rate { (s.rate_limit.as_ref().map_or_else(|| "none".to_owned(), rate_cell)) }
                                }
                                None => { td { "none" } td { "none" } td.rate { "none" } }
                            }
                            td.state {
                                @match paused {
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
    headers: HeaderMap,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    // As `sk pause` does without `--force`: a name no job, control or worker has is
    // refused, not made into a queue.
    if crate::queues::known(&app.client, &name).await?.is_err() {
        return Err(not_found(format!(
            "no queue {name:?}: no job of it, not paused or limited, and no worker names it"
        )));
    }
    let client = acting(&app, &headers);
    match action.as_str() {
        "pause" => client.pause(&name).await?,
        "resume" => client.resume(&name).await?,
        _ => return Err(not_found(format!("no action {action:?} on a queue"))),
    };
    Ok(Redirect::to("/queues"))
}

/// A queue's tenants: each one's jobs, its starts against the queue's rate per tenant and
/// which limit holds it back now; those held back with jobs waiting first.
pub(super) async fn tenants(State(app): Shared, Path(name): Path<String>) -> Page {
    let mut tenants = app.client.tenants(&name).await?;
    let held = tenants.iter().filter(|t| waiting(t)).count();
    tenants.sort_by_key(|t| !waiting(t));
    let more = tenants.len().saturating_sub(TENANTS_SHOWN);
    tenants.truncate(TENANTS_SHOWN);
    let body = html! {
        section {
            h2 { "Tenants of " (name) }
            p #held { (held) " held back by a limit per tenant with jobs waiting" }
            @if tenants.is_empty() {
                p { "No tenants." }
            } @else {
                div.scroll { table #tenants {
                    tr { th { "tenant" } th { "available" } th { "running" } th { "rate" }
                         th { "held by" } }
                    @for t in &tenants {
                        tr data-tenant=(t.tenant) {
                            td { (t.tenant) }
                            td { (t.available) }
                            td { (t.running) }
                            td { (t.rate.as_ref().map_or_else(String::new, rate_cell)) }
                            td.held { (hold_cell(t)) }
                        }
                    }
                } }
                @if more > 0 {
                    p { "and " (more) " more: " code { "sk tenants " (name) } }
                }
            }
        }
    };
    Ok(page(&format!("Tenants of {name}"), "/queues", body))
}
