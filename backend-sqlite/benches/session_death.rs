//! A process hosting many members is SIGKILLed, on one SQLite file shared by the
//! processes: how long until every one of its members is declared dead and its item
//! requeued, whether any is declared twice, the death records it left, and what the
//! other sessions' renewals saw meanwhile. Once with the members riding one session,
//! once with a lease each, in one run.
//!
//! `cargo bench -p liveness-sqlite --bench session_death -- [--members 10000]
//! [--others 20] [--other-members 500] [--ttl-ms 5000] [--no-leases]
//! [--synchronous normal]`. The file is a fresh one in a temporary directory (removed
//! at the end), opened by this process (the checker, the other sessions, the probe)
//! and by the victim child, each with a store handle of its own; `synchronous=full`
//! (the store's default) unless `--synchronous normal`.
//!
//! The body is the bench kit's ([`liveness_conformance::bench::session_death`], where
//! the victim child, the other sessions, the probe and the printed figures are
//! described); this file says where the file is and how to open it.

use liveness_conformance::bench::session_death::{self, connect};
use liveness_testkit::with_query;

/// The bench's own option beside the kit's.
#[derive(clap::Args)]
struct Sqlite {
    /// The file's `synchronous` setting (`full`, the store's default, or `normal`).
    #[arg(long, value_parser = ["full", "normal"])]
    synchronous: Option<String>,
}

/// The store's URL: a file in a fresh temporary directory (kept until the bench ends),
/// with `synchronous=normal` when asked for.
fn file(o: &Sqlite) -> Option<(tempfile::TempDir, String)> {
    let dir = tempfile::Builder::new()
        .prefix("liveness-session-death-")
        .tempdir()
        .unwrap_or_else(|e| panic!("temporary directory: {e}"));
    let mut url = format!("sqlite://{}", dir.path().join("bench.db").display());
    if o.synchronous.as_deref() == Some("normal") {
        url = with_query(&url, "synchronous=normal");
    }
    println!("sqlite file {url}");
    Some((dir, url))
}

fn main() {
    session_death::main_with(
        file,
        connect(|url: String, namespace| async move {
            liveness_sqlite::connect(&with_query(&url, &format!("ns={namespace}")))
                .await
                .unwrap_or_else(|e| panic!("connect: {e}"))
        }),
    );
}
