//! The bench kit's scale bench ([`liveness_conformance::scale`]) against any store URL,
//! each fleet size on a fresh namespace of that store:
//!
//! `cargo run --release -p examples --features postgres --bin scale -- --store
//! postgres://USER:PASSWORD@HOST/DB --members 100000 --ttl 10s --seconds 60
//! [--batch-ms 0] [--overload --steal 30 --spinners 1]`
//!
//! The URL names no `ns`: each run appends its own (a fresh random namespace). The
//! figures it prints are described in the conformance README.

use clap::Parser;
use liveness_conformance::scale::{self, ScaleOptions};

/// The scale bench against the store at `--store`.
#[derive(Parser)]
struct Cli {
    /// The store's URL (without `ns`).
    #[arg(long, value_name = "URL")]
    store: String,
    #[command(flatten)]
    scale: ScaleOptions,
}

#[tokio::main]
async fn main() {
    let Cli { store: url, scale } = Cli::parse();
    let factory = liveness_conformance::factory(move || {
        let url = url.clone();
        async move {
            let sep = if url.contains('?') { '&' } else { '?' };
            let ns = liveness_conformance::fresh_namespace();
            match liveness::connect(&format!("{url}{sep}ns={ns}")).await {
                Ok(store) => Some(store),
                Err(e) => {
                    eprintln!("scale: cannot connect to the store: {e}");
                    None
                }
            }
        }
    });
    scale::run(factory, scale).await;
}
