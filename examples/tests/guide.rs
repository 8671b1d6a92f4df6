//! `docs/custom-store.md` works as written: its blocks marked ```` ```lang file=PATH ````
//! are put together into the crate the guide describes, with only the checkout path
//! replaced (the one thing the guide tells the reader to change), and `cargo test`
//! passes there, running the whole conformance suite and every test the guide adds.
//! The store the guide builds is the workspace's example store, byte for byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the guide tells the reader to replace with the path of their checkout.
const CHECKOUT: &str = "/path/to/liveness";

/// The guide's files, in the order they first appear: each the blocks marked with its
/// path, one after the other.
fn guide_files(guide: &str) -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut open: Option<(String, String)> = None;
    for line in guide.lines() {
        match open.as_mut() {
            Some((_, body)) if line.trim_end() != "```" => {
                body.push_str(line);
                body.push('\n');
            }
            Some(_) => {
                let (path, body) = open.take().unwrap();
                let file = files.entry(path).or_default();
                if !file.is_empty() {
                    file.push('\n');
                }
                file.push_str(&body);
            }
            None => {
                let info = line.strip_prefix("```").unwrap_or_default();
                if let Some(path) = info
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("file="))
                {
                    open = Some((path.to_owned(), String::new()));
                }
            }
        }
    }
    assert!(
        open.is_none(),
        "docs/custom-store.md: an unclosed code block"
    );
    files
}

/// The number of tests `cargo test` reported passed, over every test binary; panics
/// when any reported a failure.
fn passed(output: &str) -> usize {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("test result: "))
        .map(|result| {
            assert!(result.starts_with("ok."), "a failing test binary: {result}");
            let count = result
                .trim_start_matches("ok.")
                .split_whitespace()
                .next()
                .unwrap();
            count.parse::<usize>().unwrap()
        })
        .sum()
}

fn cargo(dir: &Path, target: &Path, args: &[&str]) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .arg("--offline")
        .current_dir(dir)
        // The workspace's target directory: the dependencies are built already.
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo {args:?} in the guide's crate failed:\n{stdout}\n{stderr}"
    );
    stdout
}

/// The guide's `src/lib.rs` is `examples/src/custom_store.rs`: one store, which
/// `tests/custom_store.rs` runs the suite and the cost check on, and which the
/// reader copies from the guide exactly as it is here.
#[test]
fn the_guide_builds_the_example_store() {
    let files = guide_files(include_str!("../../docs/custom-store.md"));
    let (guide, store) = (&files["src/lib.rs"], include_str!("../src/custom_store.rs"));
    let differ = guide.lines().zip(store.lines()).position(|(g, s)| g != s);
    assert!(
        guide == store,
        "docs/custom-store.md: its src/lib.rs blocks, put together, are not \
         examples/src/custom_store.rs (first differing line: {differ:?}; lines: {} against {})",
        guide.lines().count(),
        store.lines().count()
    );
}

#[test]
fn the_guide_builds_a_crate_that_passes_the_suite() {
    let guide = include_str!("../../docs/custom-store.md");
    let files = guide_files(guide);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "Cargo.toml",
            "benches/bench.rs",
            "src/lib.rs",
            "tests/conformance.rs"
        ],
        "the files the guide builds"
    );
    assert!(
        files["Cargo.toml"].contains(CHECKOUT),
        "the guide's Cargo.toml names the checkout as {CHECKOUT}"
    );

    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in &files {
        let text = text.replace(CHECKOUT, root.to_str().unwrap());
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    // The workspace's lock file, so that the guide's crate builds against the
    // dependency versions already built (and needs no registry: `--offline`).
    std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();

    let stdout = cargo(dir.path(), &target, &["test"]);
    // Every test the guide writes, and every scenario of the suite with the property
    // test and the two fault simulations (members alone, members riding sessions),
    // ran and passed.
    let own = files["tests/conformance.rs"].matches("#[test]").count();
    let want = liveness_conformance::scenarios::SCENARIOS.len() + 3 + own;
    assert_eq!(passed(&stdout), want, "tests passed:\n{stdout}");

    // The bench binary of step 5 compiles (running it is a bench, not a test).
    cargo(dir.path(), &target, &["test", "--benches", "--no-run"]);
}
