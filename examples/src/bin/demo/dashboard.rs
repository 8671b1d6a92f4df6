//! `demo --dashboard ADDR`: the fleet's live page, served beside the demo.

use std::net::SocketAddr;
use std::sync::Arc;

use liveness::Store;
use liveness_dashboard::{loopback_hosts, redact_url, Dashboard, Options};

/// Serves the read-only dashboard over `store` (named by `url`, its password hidden)
/// at `addr` until the process ends. Returns the address it listens on.
pub async fn serve(
    addr: SocketAddr,
    store: Arc<dyn Store>,
    url: &str,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let options = Options {
        store_description: redact_url(url),
        hosts: loopback_hosts(local),
        ..Options::default()
    };
    let router = Dashboard::new(store, options).router();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("the dashboard stopped: {e}");
        }
    });
    Ok(local)
}
