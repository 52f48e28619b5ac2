//! Bulk actions: the job list's filter as a query, and the action on the jobs picked on
//! the list (`scope=selected`, each checked row) or on every job the filter takes
//! (`scope=filter`, set-based in the database through `Client::retry_where` and its
//! kin), from the job list or an error group, after a confirmation with the count.

use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use maud::{html, Markup};
use sk_runtime::{JobFilter, JobStatus};

use super::layout::segment;
use super::{acting, bad, id_of, same, App, Failure, Shared};

/// The job list's filter, as the page's query (and the bulk form's fields) carry it.
#[derive(serde::Deserialize, Default, Clone)]
pub(super) struct JobsQuery {
    pub(super) queue: Option<String>,
    #[serde(rename = "type")]
    pub(super) task_type: Option<String>,
    pub(super) state: Option<String>,
    pub(super) tenant: Option<String>,
    pub(super) error_kind: Option<String>,
    pub(super) error: Option<String>,
    pub(super) after: Option<String>,
    /// What the last bulk action did, shown once.
    pub(super) done: Option<String>,
}

/// The states a filter names, as the pages name them.
pub(super) const STATES: [&str; 6] = [
    "waiting",
    "retrying",
    "running",
    "processed",
    "fatal",
    "cancelled",
];

pub(super) fn status_named(name: &str) -> Option<JobStatus> {
    Some(match name {
        "waiting" => JobStatus::Unprocessed,
        "retrying" => JobStatus::Error,
        "pending" => JobStatus::Pending,
        "running" => JobStatus::Processing,
        "processed" => JobStatus::Processed,
        "fatal" => JobStatus::Fatal,
        "cancelled" => JobStatus::Cancelled,
        _ => return None,
    })
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned)
}

impl JobsQuery {
    /// The filter's fields that are set, as (query name, value).
    fn fields(&self) -> Vec<(&'static str, String)> {
        [
            ("queue", &self.queue),
            ("type", &self.task_type),
            ("tenant", &self.tenant),
            ("state", &self.state),
            ("error_kind", &self.error_kind),
            ("error", &self.error),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, given(v)?)))
        .collect()
    }

    /// The query string of the filter (no page, no message).
    pub(super) fn query_string(&self) -> String {
        self.fields()
            .iter()
            .map(|(k, v)| format!("{k}={}", segment(v)))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// The filter the runtime takes.
    pub(super) fn filter(&self) -> Result<JobFilter, Failure> {
        let mut filter = JobFilter::new();
        for (k, v) in self.fields() {
            filter = match k {
                "queue" => filter.queue(v),
                "type" => filter.task_type(v),
                "tenant" => filter.tenant(v),
                "error_kind" => filter.error_kind(v),
                "error" => filter.error_pattern(v),
                _ => filter.status(status_named(&v).ok_or_else(|| {
                    bad(format!(
                        "no state {v:?}: waiting, retrying, running, processed, fatal or cancelled"
                    ))
                })?),
            };
        }
        Ok(filter)
    }

    /// The filter's fields as hidden inputs of a form.
    pub(super) fn hidden(&self) -> Markup {
        html! {
            @for (k, v) in self.fields() {
                input type="hidden" name=(k) value=(v);
            }
        }
    }
}

/// The actions a bulk form offers, as (value, label).
const ACTIONS: [(&str, &str); 4] = [
    ("retry", "Retry"),
    ("cancel", "Cancel"),
    ("run-now", "Run now"),
    ("delete", "Delete"),
];

/// The bar above the job list: an action, then on the checked rows or on all `matching`
/// jobs the filter takes (`capped`: at least that many).
pub(super) fn bar(app: &App, query: &JobsQuery, matching: u64, capped: bool) -> Markup {
    let all = if capped {
        format!("{matching}+")
    } else {
        matching.to_string()
    };
    html! {
        div.actions #bulk-actions {
            input type="hidden" name="csrf" value=(app.csrf);
            (query.hidden())
            select name="do" aria-label="action" {
                @for (value, label) in ACTIONS { option value=(value) { (label) } }
            }
            button #apply-selected name="scope" value="selected"
                data-confirm="{action}: the {n} selected jobs?" { "Apply to selected" }
            button #apply-all name="scope" value="filter"
                data-confirm=(format!("{{action}}: all {all} jobs matching this filter?")) {
                "Apply to all " (all) " matching"
            }
        }
    }
}

/// A form that retries every job of an error group (the filter of `query`), after a
/// confirmation naming `count`.
pub(super) fn retry_all(app: &App, query: &JobsQuery, count: i64) -> Markup {
    html! {
        form.retry-group method="post" action="/jobs/bulk" {
            input type="hidden" name="csrf" value=(app.csrf);
            input type="hidden" name="do" value="retry";
            (query.hidden())
            button name="scope" value="filter"
                data-confirm=(format!("retry: all {count} jobs of this error group?")) { "Retry all" }
        }
    }
}

/// `POST /jobs/bulk`.
pub(super) async fn bulk(
    State(app): Shared,
    headers: HeaderMap,
    Form(fields): Form<Vec<(String, String)>>,
) -> Result<Redirect, Failure> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    if !field("csrf").is_some_and(|c| same(c.as_bytes(), app.csrf.as_bytes())) {
        return Err(Failure(
            axum::http::StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale: reload the page".to_owned(),
        ));
    }
    let query = JobsQuery {
        queue: field("queue"),
        task_type: field("type"),
        state: field("state"),
        tenant: field("tenant"),
        error_kind: field("error_kind"),
        error: field("error"),
        ..JobsQuery::default()
    };
    let filter = query.filter()?;
    let action = field("do").unwrap_or_default();
    if !ACTIONS.iter().any(|(a, _)| *a == action) {
        return Err(bad(format!(
            "no bulk action {action:?}: retry, cancel, run-now or delete"
        )));
    }
    // Every job of every queue, on one click and a generic confirm(): a destructive
    // action asks for a filter that says which jobs it means.
    let scope = field("scope");
    if scope.as_deref() == Some("filter")
        && matches!(action.as_str(), "delete" | "cancel")
        && query.fields().is_empty()
    {
        return Err(bad(format!(
            "a bulk {action} needs a filter (a queue, a task type, a state or a tenant); with none it would take every job of every queue"
        )));
    }
    let client = acting(&app, &headers);
    let done = match scope.as_deref() {
        Some("filter") => match action.as_str() {
            "retry" => client.retry_where(&filter).await?,
            "cancel" => client.cancel_where(&filter).await?,
            "run-now" => client.run_now_where(&filter).await?,
            _ => client.delete_where(&filter).await?,
        },
        Some("selected") => {
            let ids = fields
                .iter()
                .filter(|(k, _)| k == "id")
                .map(|(_, v)| id_of(v, "job"))
                .collect::<Result<Vec<_>, _>>()?;
            if ids.is_empty() {
                return Err(bad("no job selected".to_owned()));
            }
            let mut n = 0;
            for id in ids {
                n += u64::from(match action.as_str() {
                    "retry" => matches!(
                        client.retry(id).await?,
                        sk_runtime::RetryOutcome::Retried | sk_runtime::RetryOutcome::MadeDue
                    ),
                    "cancel" => matches!(
                        client.cancel(id).await?,
                        sk_runtime::CancelOutcome::Cancelled
                            | sk_runtime::CancelOutcome::CancelledWhileRunning
                    ),
                    "run-now" => {
                        client.run_now(id).await? == sk_runtime::RescheduleOutcome::Rescheduled
                    }
                    _ => client.delete(id).await?,
                });
            }
            n
        }
        _ => return Err(bad("scope must be selected or filter".to_owned())),
    };
    // Acted on, a job's last error may no longer be what the filter asks: the list after
    // shows the jobs by the rest of the filter.
    let rest = JobsQuery {
        error_kind: None,
        error: None,
        ..query
    };
    let mut back = format!("/jobs?{}", rest.query_string());
    back.push_str(&format!(
        "&done={}",
        segment(&format!("{action}: {done} jobs"))
    ));
    Ok(Redirect::to(&back))
}
