//! A TCP proxy to PostgreSQL between a worker process and the server: it can be cut
//! (every connection dropped, new ones refused), hung (new connections held without a
//! word) and restored, and it can lose the reply to one committed completion.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The database "goes away" for the worker behind it only.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    pub(crate) switch: Arc<Switch>,
    /// Set, the next reply to a completion's COMMIT is lost (`lose_a_commit_reply`).
    trap: Arc<Trap>,
}

impl Proxy {
    pub(crate) async fn start() -> Proxy {
        Proxy::start_on(0).await
    }

    /// A proxy on `port` (0: any free port).
    pub(crate) async fn start_on(port: u16) -> Proxy {
        Proxy::start_at("127.0.0.1", port).await
    }

    /// A proxy on `ip`:`port` (0: any free port).
    pub(crate) async fn start_at(ip: &str, port: u16) -> Proxy {
        Proxy::start_to(ip, port, "127.0.0.1:5432").await
    }

    /// A proxy on `ip`:`port` (0: any free port) to `upstream` (`host:port`).
    pub(crate) async fn start_to(ip: &str, port: u16, upstream: &'static str) -> Proxy {
        let listener = TcpListener::bind((ip, port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let switch = Arc::new(Switch::new());
        let trap = Arc::new(Trap::default());
        let (s, t) = (switch.clone(), trap.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if s.hanging() {
                    s.hold(client); // hung: accepted, never answered
                    continue;
                }
                let Some(cut) = s.up() else { continue }; // down: drop the connection
                let (trap, switch) = (t.clone(), s.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        () = relay(client, server, &trap, &switch) => {}
                        () = cut.cancelled() => {}
                    }
                });
            }
        });
        Proxy { port, switch, trap }
    }

    /// The next transaction that writes a completion (a statement bound with the done
    /// channel, then `COMMIT`) commits on the server, and its connection is closed before
    /// the reply reaches the worker: the worker sees its write fail after it was stored.
    pub(crate) fn lose_a_commit_reply(&self) {
        self.trap.armed.store(true, Ordering::SeqCst);
    }

    /// Whether the trap has lost a reply since it was set.
    pub(crate) fn lost_a_commit_reply(&self) -> bool {
        self.trap.sprung.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Trap {
    armed: AtomicBool,
    sprung: AtomicBool,
}

/// A simple-query `COMMIT` (`Q`, length 11, the text with its NUL).
const COMMIT_QUERY: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";
/// The server's CommandComplete for it (`C`, length 11): sent once the commit is durable.
const COMMIT_DONE: &[u8] = b"C\0\0\0\x0bCOMMIT\0";
/// What a completion binds: the channel it notifies (`Schema::done_channel`).
const COMPLETION: &[u8] = b"task_done";

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Copies bytes both ways until either side closes; with the trap armed, watches the
/// client for a completion and its COMMIT, and swallows the server's answer to that
/// COMMIT, ending the connection.
async fn relay(client: TcpStream, server: TcpStream, trap: &Trap, switch: &Switch) {
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let committing = AtomicBool::new(false);
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        // The last bytes seen, so a pattern split across two reads is still found.
        let mut seen: Vec<u8> = Vec::new();
        let mut completing = false;
        loop {
            let n = match client_in.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if trap.armed.load(Ordering::SeqCst) {
                seen.extend_from_slice(&buf[..n]);
                if holds(&seen, COMPLETION) {
                    completing = true;
                    seen.clear();
                } else if completing && holds(&seen, COMMIT_QUERY) {
                    committing.store(true, Ordering::SeqCst);
                    completing = false;
                    seen.clear();
                }
                let keep = seen.len().saturating_sub(COMMIT_QUERY.len());
                seen.drain(..keep);
            }
            switch.passing().await;
            if server_out.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_in.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if committing.load(Ordering::SeqCst)
                && holds(&buf[..n], COMMIT_DONE)
                && trap.armed.swap(false, Ordering::SeqCst)
            {
                trap.sprung.store(true, Ordering::SeqCst);
                return; // the reply is lost with the connection
            }
            switch.passing().await;
            if client_out.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Up/down state; going down signals every live connection to close. Hung, the proxy
/// also holds each new connection open without a word (a server that does not answer, as
/// behind a dropped route).
pub(crate) struct Switch(
    Mutex<Option<watch::Sender<bool>>>,
    Mutex<Option<Vec<TcpStream>>>,
    /// Frozen: no byte passes either way and new connections are held, every socket
    /// kept open (a host gone silent, as the client sees it).
    watch::Sender<bool>,
);

/// Completes when the switch goes down.
pub(crate) struct Cut(watch::Receiver<bool>);

impl Cut {
    pub(crate) async fn cancelled(mut self) {
        let _ = self.0.wait_for(|down| *down).await;
    }
}

impl Switch {
    fn new() -> Self {
        Switch(
            Mutex::new(Some(watch::channel(false).0)),
            Mutex::new(None),
            watch::channel(false).0,
        )
    }
    /// Stops every byte for good, keeping the connections open.
    pub(crate) fn freeze(&self) {
        self.2.send_replace(true);
        *self.1.lock().unwrap() = Some(Vec::new());
    }
    /// Waits while frozen.
    async fn passing(&self) {
        let _ = self.2.subscribe().wait_for(|frozen| !*frozen).await;
    }
    fn hanging(&self) -> bool {
        self.1.lock().unwrap().is_some()
    }
    fn hold(&self, connection: TcpStream) {
        if let Some(held) = self.1.lock().unwrap().as_mut() {
            held.push(connection);
        }
    }
    /// Cuts the live connections and holds new ones unanswered until `restore`.
    pub(crate) fn hang(&self) {
        self.down();
        *self.1.lock().unwrap() = Some(Vec::new());
    }
    fn up(&self) -> Option<Cut> {
        self.0
            .lock()
            .unwrap()
            .as_ref()
            .map(|tx| Cut(tx.subscribe()))
    }
    pub(crate) fn down(&self) {
        if let Some(tx) = self.0.lock().unwrap().take() {
            let _ = tx.send(true);
        }
    }
    pub(crate) fn restore(&self) {
        *self.1.lock().unwrap() = None;
        *self.0.lock().unwrap() = Some(watch::channel(false).0);
    }
}
