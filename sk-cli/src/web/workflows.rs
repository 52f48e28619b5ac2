//! The workflows: the newest, and one workflow drawn as a graph of its stages (each job
//! a node in its state, linked to its page; a stage of many jobs one node with its
//! counts), with what failed listed and a button that retries it.

use std::collections::BTreeMap;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use maud::{html, Markup};
use sk_runtime::{JobStatus, WorkflowJob};

use super::jobs::status_name;
use super::layout::{button, page};
use super::{acting, check_csrf, id_of, not_found, ActionForm, Failure, Page, Shared};
use crate::output::time;

/// The most jobs of a stage drawn one by one; a larger stage is one node.
const NODES_PER_STAGE: usize = 12;

pub(super) async fn workflows(State(app): Shared) -> Page {
    let workflows = app.client.workflows(50).await?;
    let body = html! {
        section {
            h2 { "Workflows" }
            @if workflows.is_empty() {
                p { "No workflows." }
            } @else {
                div.scroll { table #workflows {
                    tr { th { "workflow" } th { "stages" } th { "jobs" } th { "created" } }
                    @for w in &workflows {
                        tr {
                            td.id { a href=(format!("/workflows/{}", w.id)) { (w.id) } }
                            td { (w.stages) }
                            td { (w.jobs) }
                            td { (time(Some(w.created_at))) }
                        }
                    }
                } }
            }
        }
    };
    Ok(page("Workflows", "/workflows", body))
}

fn state_of(job: &WorkflowJob) -> &'static str {
    job.status.map_or("pruned", status_name)
}

pub(super) async fn workflow(State(app): Shared, Path(id): Path<String>) -> Page {
    let id = id_of(&id, "workflow")?;
    let Some(record) = app.client.workflow(id).await? else {
        return Err(not_found(format!("no workflow {id}")));
    };
    let jobs = app.client.workflow_jobs(id).await?;
    let mut stages: Vec<Vec<&WorkflowJob>> = Vec::new();
    for job in &jobs {
        if stages.len() <= job.stage {
            stages.resize_with(job.stage + 1, Vec::new);
        }
        stages[job.stage].push(job);
    }
    let failed: Vec<&WorkflowJob> = jobs
        .iter()
        .filter(|j| matches!(j.status, Some(JobStatus::Fatal | JobStatus::Cancelled)))
        .collect();
    let body = html! {
        section {
            h2 { "Workflow " span.id { (id) } }
            p { (record.stages) " stages, " (record.jobs) " jobs, created " (time(Some(record.created_at))) }
            @if !failed.is_empty() && !app.options.read_only {
                div.actions { (button(&app, &format!("/workflows/{id}/retry"), "retry what failed", true)) }
            }
            (graph(&stages))
        }
        @if !failed.is_empty() {
            section {
                h2 { "Failed or cancelled" }
                div.scroll { table #failed {
                    tr { th { "stage" } th { "job" } th { "type" } th { "state" } }
                    @for j in &failed {
                        tr {
                            td { (j.stage + 1) }
                            td { a.id href=(format!("/jobs/{}", j.id)) { (j.id) } }
                            td { (j.task_type.as_deref().unwrap_or_default()) }
                            td class=(format!("state {}", state_of(j))) { (state_of(j)) }
                        }
                    }
                } }
            }
        }
    };
    Ok(page("Workflow", "/workflows", body))
}

/// The stages left to right, each job a node (a large stage one node with its counts),
/// every node of a stage joined to every node of the next (each waits on all of them).
fn graph(stages: &[Vec<&WorkflowJob>]) -> Markup {
    const STAGE_W: f64 = 190.0;
    const NODE_W: f64 = 150.0;
    const NODE_H: f64 = 30.0;
    const GAP: f64 = 10.0;
    let nodes: Vec<usize> = stages
        .iter()
        .map(|s| {
            if s.len() > NODES_PER_STAGE {
                1
            } else {
                s.len()
            }
        })
        .collect();
    let rows = nodes.iter().copied().max().unwrap_or(1).max(1);
    let height = rows as f64 * (NODE_H + GAP) + GAP;
    let width = (stages.len().max(1) as f64) * STAGE_W;
    let top = |stage: usize, i: usize| {
        let n = nodes[stage] as f64;
        (height - n * (NODE_H + GAP) + GAP) / 2.0 + i as f64 * (NODE_H + GAP)
    };
    let x = |stage: usize| stage as f64 * STAGE_W + 10.0;
    // A large stage's node: its jobs counted by state, and the state it is drawn in (the
    // worst there is).
    let summaries: Vec<Option<(String, &str)>> = stages
        .iter()
        .map(|jobs| {
            (jobs.len() > NODES_PER_STAGE).then(|| {
                let mut counts = BTreeMap::<&str, usize>::new();
                for j in jobs {
                    *counts.entry(state_of(j)).or_default() += 1;
                }
                let worst = [
                    "fatal",
                    "cancelled",
                    "running",
                    "retrying",
                    "waiting",
                    "pending",
                    "processed",
                ]
                .into_iter()
                .find(|s| counts.contains_key(s))
                .unwrap_or("pruned");
                let text: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
                (format!("{} jobs: {}", jobs.len(), text.join(", ")), worst)
            })
        })
        .collect();
    let f = |v: f64| format!("{v:.1}");
    html! {
        div.scroll {
            svg.graph #graph viewBox=(format!("0 0 {width} {height}")) width=(width) height=(f(height))
                role="img" aria-label="the workflow's stages" {
                @for (s, n) in nodes.iter().enumerate() {
                    @if s + 1 < nodes.len() {
                        @for i in 0..*n {
                            @for k in 0..nodes[s + 1] {
                                line.edge x1=(f(x(s) + NODE_W)) y1=(f(top(s, i) + NODE_H / 2.0))
                                    x2=(f(x(s + 1))) y2=(f(top(s + 1, k) + NODE_H / 2.0)) {}
                            }
                        }
                    }
                }
                @for (s, jobs) in stages.iter().enumerate() {
                    @if let Some((text, worst)) = &summaries[s] {
                        g.node data-stage=(s) {
                            rect class=(format!("node {worst}")) x=(f(x(s))) y=(f(top(s, 0))) width=(NODE_W) height=(NODE_H) rx="4" {}
                            text x=(f(x(s) + 6.0)) y=(f(top(s, 0) + 19.0)) { (text) }
                        }
                    } @else {
                        @for (i, j) in jobs.iter().enumerate() {
                            a href=(format!("/jobs/{}", j.id)) {
                                rect class=(format!("node {}", state_of(j))) data-job=(j.id)
                                    x=(f(x(s))) y=(f(top(s, i))) width=(NODE_W) height=(NODE_H) rx="4" {
                                    title { (j.id) " " (state_of(j)) }
                                }
                                text x=(f(x(s) + 6.0)) y=(f(top(s, i) + 19.0)) {
                                    (j.task_type.as_deref().unwrap_or("?")) " · " (state_of(j))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub(super) async fn workflow_action(
    State(app): Shared,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, Failure> {
    check_csrf(&app, form)?;
    let client = acting(&app, &headers);
    let id = id_of(&id, "workflow")?;
    if client.workflow(id).await?.is_none() {
        return Err(not_found(format!("no workflow {id}")));
    }
    match action.as_str() {
        "retry" => client.retry_workflow(id).await?,
        _ => return Err(not_found(format!("no action {action:?} on a workflow"))),
    };
    Ok(Redirect::to(&format!("/workflows/{id}")))
}
