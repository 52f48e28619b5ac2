//! `sk web`: the dashboard. Server-rendered pages (no front-end build), each a plain HTML
//! document with a little script that refreshes its `<main>` every few seconds.
//!
//! Like the rest of the command it reads and acts only through `sk_runtime::Client`.
//! Safe by default: `sk web` binds to loopback; bound elsewhere it needs a token (basic
//! auth, any user name, or `Authorization: Bearer`); `--read-only` refuses every action;
//! every action is a POST carrying the server's CSRF token, and a cross-site request is
//! refused whatever it carries.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup};
use sk_runtime::Client;
use uuid::Uuid;

mod audit;
mod batches;
mod bulk;
mod charts;
mod errors;
mod hosts;
mod jobs;
mod layout;
mod metrics;
mod overview;
mod queues;
mod types;
mod workflows;

/// How the dashboard guards itself.
#[derive(Debug, Clone, Default)]
pub struct WebOptions {
    /// Show everything, change nothing: no action buttons, and every POST refused.
    pub read_only: bool,
    /// Required of every request when set: the password of basic auth (any user name),
    /// or `Authorization: Bearer TOKEN`.
    pub token: Option<String>,
    /// Host names the dashboard answers to besides the address it is bound to,
    /// `localhost`, `127.0.0.1` and `[::1]` (`sk web --allow-host`): a reverse proxy's
    /// name, say. A name without a port matches on any port; `name:port` on that port.
    pub allow_hosts: Vec<String>,
}

struct App {
    client: Client,
    options: WebOptions,
    /// The address it is bound to: a request's `Host` must name it (or a name allowed).
    bound: SocketAddr,
    /// Every form carries it; a POST without it is refused (CSRF).
    csrf: String,
}

type Shared = State<Arc<App>>;

/// The dashboard's routes over `client`, served at `bound`.
pub fn router(client: Client, options: WebOptions, bound: SocketAddr) -> Router {
    let csrf = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
    let app = Arc::new(App {
        client,
        options,
        bound,
        csrf,
    });
    Router::new()
        .route("/", get(overview::overview))
        .route("/queues", get(queues::queues))
        .route("/queues/{name}/tenants", get(queues::tenants))
        .route("/queues/{name}/{action}", post(queues::queue_action))
        .route("/jobs", get(jobs::jobs))
        .route("/jobs/bulk", post(bulk::bulk))
        .route("/jobs/{id}", get(jobs::job))
        .route("/jobs/{id}/{action}", post(jobs::job_action))
        .route("/errors", get(errors::errors))
        .route("/types/{name}", get(types::task_type))
        .route("/audit", get(audit::audit))
        .route("/batches", get(batches::batches))
        .route("/batches/{id}", get(batches::batch))
        .route("/batches/{id}/{action}", post(batches::batch_action))
        .route("/workflows", get(workflows::workflows))
        .route("/workflows/{id}", get(workflows::workflow))
        .route("/workflows/{id}/{action}", post(workflows::workflow_action))
        .route("/metrics", get(metrics::metrics))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Serves the dashboard on `listener` until the process ends.
///
/// # Errors
/// The listener fails.
pub async fn serve(
    client: Client,
    listener: tokio::net::TcpListener,
    options: WebOptions,
) -> std::io::Result<()> {
    let bound = listener.local_addr()?;
    axum::serve(listener, router(client, options, bound)).await
}

/// An error page: the database failed, or the request was wrong.
struct Failure(StatusCode, String);

impl From<sk_runtime::Error> for Failure {
    /// Bad input is the request's fault (400, sk's plain message); a missing job a 404;
    /// the rest the server's.
    fn from(e: sk_runtime::Error) -> Self {
        let status = match &e {
            sk_runtime::Error::Invalid { .. } => StatusCode::BAD_REQUEST,
            sk_runtime::Error::JobNotFound(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = e.to_string();
        let first = message.lines().next().unwrap_or_default().to_owned();
        Failure(status, first)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = layout::page("Error", "", html! { p.error { (self.1) } });
        (self.0, body).into_response()
    }
}

/// A page, or why there is none.
type Page = Result<Markup, Failure>;

/// Checks the token (when one is set) of every request, and the CSRF token and the
/// read-only mode of every POST.
async fn guard(State(app): Shared, request: Request, next: Next) -> Response {
    let mut response = match admit(&app, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, policy().clone());
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The refusal of a request the guard turns away, if it does.
fn admit(app: &App, request: &Request) -> Option<Response> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if let Err(reason) = hosts::check(host, app.bound, &app.options.allow_hosts) {
        // 421 Misdirected Request: a page of another site whose name resolves here
        // (DNS rebinding) reads nothing and acts on nothing.
        return Some(
            (
                StatusCode::MISDIRECTED_REQUEST,
                format!("sk web: {reason}\n"),
            )
                .into_response(),
        );
    }
    if let Some(token) = &app.options.token {
        if !authorized(request.headers(), token) {
            let mut response =
                (StatusCode::UNAUTHORIZED, "sk web: a token is required\n").into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"sk\""),
            );
            return Some(response);
        }
    }
    if request.method() == axum::http::Method::POST {
        if app.options.read_only {
            return Some(
                (
                    StatusCode::FORBIDDEN,
                    "sk web: read-only: this dashboard takes no action\n",
                )
                    .into_response(),
            );
        }
        let cross_site = request
            .headers()
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes() == b"cross-site");
        if cross_site {
            return Some((StatusCode::FORBIDDEN, "sk web: a cross-site request\n").into_response());
        }
        if let Err(reason) = hosts::same_origin(request.headers(), host) {
            return Some((StatusCode::FORBIDDEN, format!("sk web: {reason}\n")).into_response());
        }
    }
    None
}

/// The Content-Security-Policy of every response: the page's own style and script (by
/// their hashes) and nothing else, so text that escaped the markup still could not run a
/// script or load anything; no framing (the action buttons cannot be clickjacked); forms
/// post only here.
fn policy() -> &'static HeaderValue {
    static POLICY: std::sync::OnceLock<HeaderValue> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let hash = |text: &str| base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text));
        let value = format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            hash(layout::SCRIPT),
            hash(layout::STYLE)
        );
        HeaderValue::from_str(&value).expect("base64 and ASCII make a header value")
    })
}

/// Whether the request carries `token`: basic auth's password or a bearer token.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    if let Some(bearer) = value.strip_prefix("Bearer ") {
        return same(bearer.trim().as_bytes(), token.as_bytes());
    }
    let Some(basic) = value.strip_prefix("Basic ") else {
        return false;
    };
    let Ok(decoded) =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, basic.trim())
    else {
        return false;
    };
    match decoded.iter().position(|&b| b == b':') {
        Some(colon) => same(&decoded[colon + 1..], token.as_bytes()),
        None => false,
    }
}

/// The client an action of this request is taken with: the audit trail names
/// `web:` and the basic-auth user name, or, without one, the user `sk web` runs as.
fn acting(app: &App, headers: &HeaderMap) -> Client {
    let user = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b.trim()).ok()
        })
        .and_then(|d| String::from_utf8(d).ok())
        .and_then(|d| d.split_once(':').map(|(user, _)| user.to_owned()))
        .filter(|u| !u.is_empty())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".to_owned());
    app.client.clone().actor(format!("web:{user}"))
}

/// Compares in a time that does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(serde::Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
}

/// A form without the CSRF token, or no form at all, is refused alike.
fn check_csrf(app: &App, form: Result<Form<ActionForm>, FormRejection>) -> Result<(), Failure> {
    if form.is_ok_and(|Form(form)| same(form.csrf.as_bytes(), app.csrf.as_bytes())) {
        Ok(())
    } else {
        Err(Failure(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale: reload the page".to_owned(),
        ))
    }
}

/// `text` as the id of a `what` (`job`, `batch`, `workflow`), or a 400 saying it is not.
fn id_of(text: &str, what: &str) -> Result<Uuid, Failure> {
    text.parse::<Uuid>()
        .map_err(|_| bad(format!("{text:?} is not a {what} id")))
}

fn bad(message: String) -> Failure {
    Failure(StatusCode::BAD_REQUEST, message)
}

fn not_found(message: String) -> Failure {
    Failure(StatusCode::NOT_FOUND, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_takes_the_token_as_password() {
        let mut headers = HeaderMap::new();
        // "ops:s3cret"
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic b3BzOnMzY3JldA=="),
        );
        assert!(authorized(&headers, "s3cret"));
        assert!(!authorized(&headers, "s3cre"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert!(authorized(&headers, "s3cret"));
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
    }
}
