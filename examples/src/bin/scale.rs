//! The bench kit's scale bench ([`liveness_conformance::scale`]) against any store URL,
//! each fleet size on a fresh namespace of that store:
//!
//! `cargo run --release -p examples --features postgres --bin scale -- --store
//! postgres://USER:PASSWORD@HOST/DB --members 100000 --ttl 10s --seconds 60
//! [--batch-ms 0] [--overload --steal 30 --spinners 1]`
//!
//! The URL names no `ns`: each run appends its own (a fresh random namespace). The
//! figures it prints are described in the conformance README.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(url) = args
        .windows(2)
        .find(|w| w[0] == "--store")
        .map(|w| w[1].clone())
    else {
        eprintln!(
            "usage: scale --store URL [--members N,N...] [--ttl 10s] [--seconds 60] \
             [--batch-ms 2|0] [--overload --steal 30 --spinners 1]"
        );
        std::process::exit(2);
    };
    liveness_conformance::scale::main(liveness_conformance::factory(move || {
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
    }));
}
