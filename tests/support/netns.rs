//! Network namespaces for the tests of a host that goes silent: a namespace for the
//! processes under test, reaching the host by links through a router namespace that can
//! drop every packet of a link (`tests/faults/silence.rs`, `examples/silent_failover.rs`).
//! Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// A namespace for the worker with two links to the host, each through a router (a
/// namespace of its own that forwards); a link is silenced in the router: every packet
/// it would forward, either way, dropped (a `pfifo` queue of length 0 on both its
/// ends). Neither end drops anything itself, so each end's TCP sees a peer that stopped
/// answering, as across a real network (a drop in the sender's own queue is an error
/// the sender's kernel counts, and gives up on in seconds).
pub struct Links {
    ns: String,
    router: String,
    /// (the router's end toward the host, its end toward the worker, the host end's
    /// address) of each link.
    links: Vec<(String, String, String)>,
    /// The host ends, deleted with the namespaces.
    host_ifs: Vec<String>,
}

impl Links {
    /// Creates the two namespaces and both links.
    ///
    /// # Panics
    /// When `ip` fails (the caller is not root).
    pub fn create() -> Links {
        let tag = std::process::id() % 10_000;
        let (ns, router) = (format!("sksil{tag}"), format!("sksilr{tag}"));
        for n in [&ns, &router] {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
            ip(&["netns", "add", n]);
            ip(&["netns", "exec", n, "ip", "link", "set", "lo", "up"]);
        }
        ip(&[
            "netns",
            "exec",
            &router,
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
        ]);
        let in_ns = |n: &str, args: &[&str]| {
            let mut all = vec!["netns", "exec", n, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        let (mut links, mut host_ifs) = (Vec::new(), Vec::new());
        for i in 0..2 {
            let host_if = format!("sks{tag}h{i}");
            let (r_host, r_worker, w_if) = (
                format!("sks{tag}rh{i}"),
                format!("sks{tag}rw{i}"),
                format!("sks{tag}w{i}"),
            );
            let (host_net, worker_net) = (
                format!("10.{}.{}", 180 + i, tag % 250),
                format!("10.{}.{}", 190 + i, tag % 250),
            );
            let _ = Command::new("ip").args(["link", "del", &host_if]).output();
            ip(&[
                "link", "add", &host_if, "type", "veth", "peer", "name", &r_host,
            ]);
            ip(&["link", "set", &r_host, "netns", &router]);
            ip(&["addr", "add", &format!("{host_net}.1/30"), "dev", &host_if]);
            ip(&["link", "set", &host_if, "up"]);
            ip(&[
                "route",
                "add",
                &format!("{worker_net}.0/30"),
                "via",
                &format!("{host_net}.2"),
            ]);
            in_ns(
                &router,
                &["addr", "add", &format!("{host_net}.2/30"), "dev", &r_host],
            );
            in_ns(&router, &["link", "set", &r_host, "up"]);
            in_ns(
                &router,
                &[
                    "link", "add", &r_worker, "type", "veth", "peer", "name", &w_if,
                ],
            );
            in_ns(&router, &["link", "set", &w_if, "netns", &ns]);
            in_ns(
                &router,
                &[
                    "addr",
                    "add",
                    &format!("{worker_net}.1/30"),
                    "dev",
                    &r_worker,
                ],
            );
            in_ns(&router, &["link", "set", &r_worker, "up"]);
            in_ns(
                &ns,
                &["addr", "add", &format!("{worker_net}.2/30"), "dev", &w_if],
            );
            in_ns(&ns, &["link", "set", &w_if, "up"]);
            in_ns(
                &ns,
                &[
                    "route",
                    "add",
                    &format!("{host_net}.0/30"),
                    "via",
                    &format!("{worker_net}.1"),
                ],
            );
            links.push((r_host, r_worker, format!("{host_net}.1")));
            host_ifs.push(host_if);
        }
        Links {
            ns,
            router,
            links,
            host_ifs,
        }
    }

    /// The namespace of the processes under test, for `ip netns exec`.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The host end's address of link `i`: what the namespace reaches the host by.
    pub fn host_ip(&self, i: usize) -> &str {
        &self.links[i].2
    }

    /// Drops every packet link `i` carries, both ways (`on`), or lets them pass again.
    pub fn silence(&self, i: usize, on: bool) {
        let op = if on { "add" } else { "del" };
        let (toward_host, toward_worker, _) = &self.links[i];
        for dev in [toward_host, toward_worker] {
            let mut args = vec![
                "netns",
                "exec",
                &self.router,
                "tc",
                "qdisc",
                op,
                "dev",
                dev,
                "root",
            ];
            if on {
                args.extend(["pfifo", "limit", "0"]);
            }
            ip(&args);
        }
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        for n in [&self.ns, &self.router] {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
        for host_if in &self.host_ifs {
            let _ = Command::new("ip").args(["link", "del", host_if]).output();
        }
    }
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().unwrap();
    assert!(status.success(), "ip {args:?}");
}
