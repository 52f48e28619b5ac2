//! A task type's page: its jobs by state, its last hour's runs per minute, failure rate
//! and run time percentiles, its error groups, and the schema of its arguments the
//! workers published.

use axum::extract::{Path, State};
use chrono::{Duration, Utc};
use maud::html;
use sk_runtime::{CountBy, Per};

use super::charts::runs_per_minute;
use super::errors::groups_table;
use super::layout::page;
use super::overview::rate;
use super::queues::{count_cells, COUNT_HEADERS};
use super::{Page, Shared};

pub(super) async fn task_type(State(app): Shared, Path(name): Path<String>) -> Page {
    let client = &app.client;
    let now = Utc::now();
    let hour_ago = now - Duration::hours(1);
    let minutes = client
        .throughput(hour_ago, Per::Minute, Some(&name))
        .await?;
    let whole = client.throughput(hour_ago, Per::Whole, Some(&name)).await?;
    let counts = client
        .count_by(CountBy::TaskType)
        .await?
        .into_iter()
        .find(|c| c.key.as_deref() == Some(name.as_str()))
        .unwrap_or_default();
    let mut groups = client.error_groups(now - Duration::hours(24), 200).await?;
    groups.retain(|g| g.task_type == name);
    let published = client.published_schema().await?;
    let schema = published["jobs"].get(&name);
    let (ok, failed) = whole.first().map_or((0, 0), |t| (t.processed, t.failed));
    let body = html! {
        section {
            h2 { "Task type " (name) }
            div.scroll { table #type-counts {
                tr { @for h in COUNT_HEADERS { th { (h) } } }
                tr { (count_cells("type", &name, &counts)) }
            } }
        }
        section {
            h2 { "Last hour" }
            p.figures {
                span #succeeded { (ok) } " succeeded · " span #failed { (failed) } " failed · "
                (format!("{:.1}", rate(ok, failed))) "% failure rate"
                @if let Some(t) = whole.first() {
                    " · run time p50 " (format!("{:.1}", t.p50_ms)) " ms, p95 "
                    (format!("{:.1}", t.p95_ms)) " ms, p99 " (format!("{:.1}", t.p99_ms)) " ms"
                }
            }
            (runs_per_minute(&minutes, now))
        }
        section {
            h2 { "Errors, last 24 hours" }
            (groups_table(&app, &groups, now))
        }
        section {
            h2 { "Arguments" }
            @match schema {
                Some(entry) => {
                    p { "As the workers accept them (published at start; " code { "sk schema" } "):" }
                    pre #type-schema { (serde_json::to_string_pretty(&entry["args"]).unwrap_or_default()) }
                }
                None => p { "No worker has published this type's schema." },
            }
        }
    };
    Ok(page(&format!("Task type {name}"), "/", body))
}
