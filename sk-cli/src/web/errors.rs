//! The errors of the last 24 hours, grouped.

use axum::extract::State;
use chrono::{Duration, Utc};
use maud::html;

use super::layout::page;
use super::{Page, Shared};
use crate::output::time;

pub(super) async fn errors(State(app): Shared) -> Page {
    let groups = app
        .client
        .error_groups(Utc::now() - Duration::hours(24), 50)
        .await?;
    let body = html! {
        section {
            h2 { "Errors, last 24 hours" }
            @if groups.is_empty() {
                p { "No errors." }
            } @else {
                div.scroll { table #errors {
                    tr { th { "jobs" } th { "type" } th { "message" } th { "first seen" }
                         th { "last seen" } th { "sample" } }
                    @for g in &groups {
                        tr {
                            td { (g.count) }
                            td { (g.kind.as_deref().unwrap_or_default()) }
                            td.message { (g.message.as_deref().unwrap_or_default()) }
                            td { (time(g.first_seen)) }
                            td { (time(g.last_seen)) }
                            td { a href=(format!("/jobs/{}", g.sample)) { (&g.sample.to_string()[..8]) } }
                        }
                    }
                } }
            }
        }
    };
    Ok(page("Errors", "/errors", body))
}
