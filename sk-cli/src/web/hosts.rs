//! Which requests are the dashboard's own: the `Host` a request names (against DNS
//! rebinding: a page of another site whose name the attacker points at 127.0.0.1 sends
//! its own name as `Host`), and the `Origin` (or `Referer`) of an action.

use std::net::{IpAddr, SocketAddr};

use axum::http::{header, HeaderMap};

/// Whether `host` (a request's `Host` header) names the dashboard bound at `bound`: its
/// address, `localhost`, `127.0.0.1` or `[::1]` with its port, or a name of `allowed`
/// (any port unless the entry gives one). Bound to every interface (`0.0.0.0`, `[::]`),
/// any IP address with its port is its own too: DNS rebinding needs a name, and an
/// address names no other site.
pub(super) fn check(host: &str, bound: SocketAddr, allowed: &[String]) -> Result<(), String> {
    let refuse = || {
        Err(format!(
            "the Host {host:?} is not this dashboard's ({bound}, localhost, 127.0.0.1 or [::1]); \
             serve it under another name with --allow-host NAME"
        ))
    };
    let Some((name, port)) = split(host) else {
        return refuse();
    };
    let name = name.to_ascii_lowercase();
    let port = port.unwrap_or(80);
    let named = allowed.iter().any(|entry| match split(entry) {
        Some((allowed, Some(allowed_port))) => {
            allowed.eq_ignore_ascii_case(&name) && allowed_port == port
        }
        Some((allowed, None)) => allowed.eq_ignore_ascii_case(&name),
        None => false,
    });
    if named {
        return Ok(());
    }
    if port != bound.port() {
        return refuse();
    }
    let address = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(&name)
        .parse::<IpAddr>()
        .ok();
    let own = name == "localhost"
        || match address {
            Some(ip) => ip.is_loopback() || ip == bound.ip() || bound.ip().is_unspecified(),
            None => false,
        };
    if own {
        Ok(())
    } else {
        refuse()
    }
}

/// A `Host`'s name and port (`None`: none given); `None` for one that is not a host.
fn split(host: &str) -> Option<(&str, Option<u16>)> {
    if host.is_empty()
        || host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b == b'/' || b == b'@')
    {
        return None;
    }
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = &rest[end + 1..];
        let name = &host[..end + 2];
        match after {
            "" => (name, None),
            _ => (name, Some(after.strip_prefix(':')?)),
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port = match port {
        Some(port) => Some(port.parse().ok()?),
        None => None,
    };
    (!name.is_empty()).then_some((name, port))
}

/// Whether an action comes from the dashboard's own pages: its `Origin` (or, without one,
/// its `Referer`) is `http://` or `https://` and the request's `host`.
pub(super) fn same_origin(headers: &HeaderMap, host: &str) -> Result<(), String> {
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let (what, seen) = match (value(header::ORIGIN), value(header::REFERER)) {
        (Some(origin), _) => ("Origin", origin),
        (None, Some(referer)) => ("Referer", referer),
        (None, None) => {
            return Err(
                "an action without an Origin or a Referer: post it from the dashboard's page"
                    .to_owned(),
            )
        }
    };
    let authority = seen
        .strip_prefix("http://")
        .or_else(|| seen.strip_prefix("https://"))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    if authority.is_some_and(|a| a.eq_ignore_ascii_case(host)) {
        Ok(())
    } else {
        Err(format!(
            "an action from another origin ({what} {seen:?}, not http://{host})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(host: &str, bound: &str, allowed: &[&str]) -> bool {
        let allowed: Vec<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
        check(host, bound.parse().unwrap(), &allowed).is_ok()
    }

    #[test]
    fn hosts_of_the_dashboard_and_others() {
        let at = "127.0.0.1:8080";
        for own in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
        ] {
            assert!(ok(own, at, &[]), "{own}");
        }
        for other in [
            "evil.example:8080",
            "127.0.0.1:9090",
            "localhost",
            "",
            "127.0.0.1:8080/x",
            "user@127.0.0.1:8080",
            "localhost.evil.example:8080",
            "[::1",
            "127.0.0.1:port",
        ] {
            assert!(!ok(other, at, &[]), "{other}");
        }
        assert!(ok("jobs.internal:8080", at, &["jobs.internal"]));
        assert!(ok("jobs.internal", at, &["jobs.internal"]));
        assert!(ok("jobs.internal:443", at, &["jobs.internal:443"]));
        assert!(!ok("jobs.internal:444", at, &["jobs.internal:443"]));
        assert!(ok("10.0.0.5:8080", "10.0.0.5:8080", &[]));
        assert!(!ok("10.0.0.6:8080", "10.0.0.5:8080", &[]));
        assert!(ok("10.0.0.6:8080", "0.0.0.0:8080", &[]));
        assert!(!ok("evil.example:8080", "0.0.0.0:8080", &[]));
        assert!(ok("localhost", "127.0.0.1:80", &[]));
    }

    #[test]
    fn origins_of_actions() {
        let headers = |pairs: &[(header::HeaderName, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(name.clone(), value.parse().unwrap());
            }
            map
        };
        let host = "127.0.0.1:8080";
        let own = headers(&[(header::ORIGIN, "http://127.0.0.1:8080")]);
        assert!(same_origin(&own, host).is_ok());
        let referer = headers(&[(header::REFERER, "http://127.0.0.1:8080/jobs?x=1")]);
        assert!(same_origin(&referer, host).is_ok());
        for other in [
            headers(&[(header::ORIGIN, "http://evil.example:8080")]),
            headers(&[(header::ORIGIN, "null")]),
            headers(&[(header::ORIGIN, "http://127.0.0.1:8080.evil.example")]),
            headers(&[(
                header::REFERER,
                "http://evil.example/http://127.0.0.1:8080/",
            )]),
            // An Origin speaks for the request even when the Referer would pass.
            headers(&[
                (header::ORIGIN, "http://evil.example"),
                (header::REFERER, "http://127.0.0.1:8080/"),
            ]),
            headers(&[]),
        ] {
            assert!(same_origin(&other, host).is_err(), "{other:?}");
        }
    }
}
