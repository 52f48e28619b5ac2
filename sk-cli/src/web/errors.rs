//! The errors of the last 24 hours, grouped by task type, error type and message with
//! what varies masked (`Client::error_groups`): each group with its jobs per hour, a
//! link to its jobs (where the bulk actions are) and a button that retries them all.

use axum::extract::State;
use chrono::{DateTime, Duration, Utc};
use maud::{html, Markup};
use sk_runtime::ErrorGroup;

use super::bulk::{retry_all, JobsQuery};
use super::charts::sparkline;
use super::layout::{page, segment};
use super::{App, Page, Shared};
use crate::output::time;

pub(super) async fn errors(State(app): Shared) -> Page {
    let now = Utc::now();
    let groups = app
        .client
        .error_groups(now - Duration::hours(24), 50)
        .await?;
    let body = html! {
        section {
            h2 { "Errors, last 24 hours" }
            p { "Grouped by task type, error type and message, with numbers, UUIDs, hex ids, \
                 quoted values, e-mail addresses and URL parameters masked." }
            (groups_table(&app, &groups, now))
        }
    };
    Ok(page("Errors", "/errors", body))
}

/// The filter of a group's jobs.
fn query_of(g: &ErrorGroup) -> JobsQuery {
    JobsQuery {
        task_type: Some(g.task_type.clone()),
        error_kind: g.kind.clone(),
        error: Some(g.pattern.clone()),
        ..JobsQuery::default()
    }
}

/// The groups as a table (the errors page, a task type's page).
pub(super) fn groups_table(app: &App, groups: &[ErrorGroup], now: DateTime<Utc>) -> Markup {
    if groups.is_empty() {
        return html! { p { "No errors." } };
    }
    html! {
        div.scroll { table #errors {
            tr { th { "jobs" } th { "task type" } th { "error" } th { "message" } th { "queues" }
                 th { "last 24 h" } th { "first seen" } th { "last seen" } th { "sample" } th {} }
            @for g in groups {
                @let query = query_of(g);
                tr data-group=(g.fingerprint) {
                    td.count { a.jobs href=(format!("/jobs?{}", query.query_string())) { (g.count) } }
                    td { a href=(format!("/types/{}", segment(&g.task_type))) { (g.task_type) } }
                    td { (g.kind.as_deref().unwrap_or_default()) }
                    td.message { (g.pattern) }
                    td { (g.queues.join(", ")) }
                    td { (sparkline(&g.hourly, now)) }
                    td { (time(g.first_seen)) }
                    td { (time(g.last_seen)) }
                    td { a.sample.id href=(format!("/jobs/{}", g.sample)) { (g.sample) } }
                    td {
                        @if !app.options.read_only { (retry_all(app, &query, g.count)) }
                    }
                }
            }
        } }
    }
}
