//! A TCP forwarder on a loopback port whose target can be switched: what a virtual IP,
//! a DNS name or a load balancer in front of a replicated server does at a failover.
//!
//! [`Proxy::switch`] points new connections at another port and cuts every open one
//! (their clients see a broken connection and reconnect, landing on the new target).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

/// A forwarder from a free loopback port to `127.0.0.1:target`. Dropping it stops
/// accepting and cuts every connection.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    target: AtomicU16,
    stopped: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn cut_all(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for s in open.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target`.
    pub fn start(target: u16) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            target: AtomicU16::new(target),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accept = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accept.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let target = accept.target.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                {
                    let mut open = accept.open.lock().unwrap_or_else(|e| e.into_inner());
                    open.push(c3);
                    open.push(s3);
                }
                std::thread::spawn(move || pipe(client, server));
                std::thread::spawn(move || pipe(s2, c2));
            }
        });
        Ok(Proxy { port, shared })
    }

    /// The loopback port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port new connections are forwarded to.
    pub fn target(&self) -> u16 {
        self.shared.target.load(Ordering::SeqCst)
    }

    /// Forwards new connections to `127.0.0.1:target` and cuts every open one.
    pub fn switch(&self, target: u16) {
        self.shared.target.store(target, Ordering::SeqCst);
        self.shared.cut_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        self.shared.cut_all();
    }
}
