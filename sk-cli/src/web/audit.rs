//! The audit trail: every operator action taken through `Client` (the dashboard, `sk`,
//! an application), newest first, with who took it and how many jobs it changed.

use axum::extract::{Query, State};
use maud::html;

use super::layout::page;
use super::{Page, Shared};
use crate::output::time;

#[derive(serde::Deserialize)]
pub(super) struct AuditQuery {
    before: Option<i64>,
}

pub(super) async fn audit(State(app): Shared, Query(query): Query<AuditQuery>) -> Page {
    const SHOWN: u32 = 100;
    let entries = app.client.audit(query.before, SHOWN).await?;
    // Entries are numbered per database: over several, only the newest page is merged.
    let several = app.client.databases() > 1;
    let older = (entries.len() == SHOWN as usize && !several)
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    let body = html! {
        section {
            h2 { "Audit trail" }
            @if entries.is_empty() {
                p { "No actions recorded." }
            } @else {
                div.scroll { table #audit {
                    tr { th { "at" } th { "who" } th { "action" } th { "on" } th { "filter" } th { "jobs" } }
                    @for e in &entries {
                        tr data-action=(e.action) {
                            td { (time(Some(e.at))) }
                            td { (e.actor) }
                            td.action { (e.action) }
                            td.target { (e.target.as_deref().unwrap_or_default()) }
                            td.message { (e.filter.as_deref().unwrap_or_default()) }
                            td.jobs { (e.jobs.map_or_else(String::new, |n| n.to_string())) }
                        }
                    }
                } }
                @if let Some(id) = older {
                    p { a #older href=(format!("/audit?before={id}")) { "Older actions →" } }
                }
                @if several && entries.len() == SHOWN as usize {
                    p { "The newest actions of every database; for older ones, open the dashboard of one database." }
                }
            }
        }
    };
    Ok(page("Audit", "/audit", body))
}
