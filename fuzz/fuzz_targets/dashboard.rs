//! The dashboard's requests are outside input: paths (job ids, queue names, actions),
//! query strings (filters, paging), form bodies and the Authorization header. The fuzzer
//! picks the method, the guard (a token, read-only) and those parts; each request goes
//! through the dashboard's router on a seeded SQLite database. Whatever it is:
//! - no panic, and no 5xx (bad input is the client's error);
//! - with a token the fuzzer cannot know, every request is refused with 401;
//! - no POST takes effect (2xx or 3xx): it lacks the per-process CSRF token, or the
//!   dashboard is read-only;
//! - an HTML page holds no script but the dashboard's own, whatever text the jobs hold, and
//!   every response carries the script policy and `nosniff` (the metrics are plain text
//!   holding queue names as they are: a browser must not read them as HTML).
#![no_main]

#[path = "seeded.rs"]
mod seeded;

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use sk_cli::web::{router, WebOptions};
use tower::ServiceExt;

/// A token nothing in the input can hold: random for each process.
fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| format!("{:032x}", rand_u128()))
}

fn rand_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let s = std::collections::hash_map::RandomState::new();
    let (mut a, mut b) = (s.build_hasher(), s.build_hasher());
    a.write_u8(1);
    b.write_u8(2);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |b| *b == b'\n');
    let target = parts.next().unwrap_or_default();
    let authorization = parts.next().unwrap_or_default();
    let body = parts.next().unwrap_or_default().to_vec();
    let post = flags & 1 == 1;
    let options = WebOptions {
        read_only: flags & 2 == 2,
        token: (flags & 4 == 4).then(|| token().to_owned()),
        ..WebOptions::default()
    };
    // The dashboard's own host and origin, so the pages behind the guard are reached.
    let bound: std::net::SocketAddr = ([127, 0, 0, 1], 8080).into();
    let mut request = Request::builder()
        .method(if post { Method::POST } else { Method::GET })
        .uri(target)
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::ORIGIN, "http://127.0.0.1:8080")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if !authorization.is_empty() {
        request = request.header(header::AUTHORIZATION, authorization);
    }
    // A target or header no HTTP server would pass on.
    let Ok(request) = request.body(Body::from(body)) else {
        return;
    };
    let (_, client) = seeded::database();
    let (status, headers, page) = seeded::runtime().block_on(async {
        let response = router(client.clone(), options.clone(), bound)
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let page = axum::body::to_bytes(response.into_body(), 16 << 20)
            .await
            .expect("the page is read");
        (status, headers, page)
    });
    let page = String::from_utf8_lossy(&page);
    let said = || {
        format!(
            "{flags:#04b} {:?}: {status}\n{page}",
            String::from_utf8_lossy(target)
        )
    };
    assert!(!status.is_server_error(), "{}", said());
    if options.token.is_some() {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{}", said());
    }
    if post {
        assert!(status.is_client_error(), "a POST took effect: {}", said());
    }
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    assert_eq!(
        header(header::X_CONTENT_TYPE_OPTIONS),
        "nosniff",
        "{}",
        said()
    );
    assert!(
        header(header::CONTENT_SECURITY_POLICY)
            .starts_with("default-src 'none'; script-src 'sha256-"),
        "{}",
        said()
    );
    if header(header::CONTENT_TYPE).starts_with("text/html") {
        assert!(page.matches("<script").count() <= 1, "{}", said());
        assert!(!page.contains(seeded::HOSTILE), "{}", said());
    }
});
