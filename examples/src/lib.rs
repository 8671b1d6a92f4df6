//! Small programs per use case, the demo (`src/bin/demo`), and [`custom_store`]: a store
//! written from scratch as a user would, exactly the one `docs/custom-store.md` builds,
//! which passes the whole conformance suite (`tests/custom_store.rs`).

pub mod custom_store;

use std::sync::Arc;

use liveness::Store;

/// The store named by the program's first argument (a URL [`liveness::connect`]
/// takes), or the in-process `memory://` store when there is none.
///
/// # Errors
///
/// What [`liveness::connect`] answers for that URL.
pub async fn store_from_args() -> liveness::Result<Arc<dyn Store>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".to_owned());
    liveness::connect(&url).await
}

/// `url` on a namespace no earlier run used: the URL's own `ns` with a random suffix,
/// or `prefix` and one when it gives none (a URL must not name `ns` twice). What the
/// measuring programs (`peers`, `schedule`, `rerun`) run each measurement on.
pub fn in_fresh_namespace(url: &str, prefix: &str) -> String {
    let suffix = format!("{:016x}", fastrand::u64(..));
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut named = false;
    let mut pairs: Vec<String> = (query.split('&').filter(|p| !p.is_empty()))
        .map(|pair| match pair.strip_prefix("ns=") {
            Some(ns) => {
                named = true;
                format!("ns={ns}_{suffix}")
            }
            None => pair.to_owned(),
        })
        .collect();
    if !named {
        pairs.push(format!("ns={prefix}_{suffix}"));
    }
    format!("{base}?{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::in_fresh_namespace;

    #[test]
    fn a_fresh_namespace_keeps_the_url_s_own_name_and_parameters() {
        let url = in_fresh_namespace("redis://h:1/?ns=app&durability=relaxed", "x");
        let (base, query) = url.split_once('?').unwrap();
        assert_eq!(base, "redis://h:1/");
        let (ns, rest) = query.split_once('&').unwrap();
        assert!(
            ns.starts_with("ns=app_") && ns.len() == "ns=app_".len() + 16,
            "{url}"
        );
        assert_eq!(rest, "durability=relaxed");
        let url = in_fresh_namespace("sqlite:///tmp/a.db", "rerun");
        assert!(url.starts_with("sqlite:///tmp/a.db?ns=rerun_"), "{url}");
        assert_ne!(url, in_fresh_namespace("sqlite:///tmp/a.db", "rerun"));
    }
}
