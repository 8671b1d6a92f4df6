//! The docs a reader follows: every relative link in the repository's Markdown names a
//! file or folder that exists, and a README that is also a crate's documentation on
//! docs.rs (where a relative link leads nowhere) has none.

use std::path::{Path, PathBuf};

/// The workspace root (this crate sits one folder below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the examples crate sits in the workspace")
        .to_path_buf()
}

/// Every `.md` file under `dir`, outside build output, VCS data and installed
/// packages.
fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("read a folder of the workspace");
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "target" | ".git" | "node_modules") && !name.starts_with('.') {
                markdown_files(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The targets of the inline links and images of `text`: what stands between `](`
/// and the next `)`, outside fenced code blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                targets.push(rest[..end].trim().to_string());
                rest = &rest[end..];
            }
        }
    }
    targets
}

/// Whether `target` is a link this check follows: a path in the repository, not a
/// web address, a mail address or an anchor in the same page.
fn is_relative(target: &str) -> bool {
    !(target.is_empty()
        || target.starts_with('#')
        || target.contains("://")
        || target.starts_with("mailto:"))
}

#[test]
fn link_targets_are_read_from_inline_links_outside_code() {
    let text =
        "see [a](docs/a.md#part) and ![b](b.png)\n```\n[c](nope.md)\n```\n[d](https://x.invalid/)";
    assert_eq!(
        link_targets(text),
        ["docs/a.md#part", "b.png", "https://x.invalid/"]
    );
    assert!(is_relative("docs/a.md#part"));
    assert!(!is_relative("https://x.invalid/"));
    assert!(!is_relative("#words"));
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_that_exists() {
    let root = root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("README.md")),
        "no README.md found under {}",
        root.display()
    );
    let mut dead = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a Markdown file");
        let dir = file.parent().expect("a file has a folder");
        for target in link_targets(&text).into_iter().filter(|t| is_relative(t)) {
            let path = target.split('#').next().unwrap_or("");
            if !path.is_empty() && !dir.join(path).exists() {
                let shown = file.strip_prefix(&root).unwrap_or(file);
                dead.push(format!("{}: {target}", shown.display()));
            }
        }
    }
    assert!(dead.is_empty(), "links to nothing:\n{}", dead.join("\n"));
}

#[test]
fn a_readme_that_is_a_crate_s_documentation_has_no_relative_link() {
    let root = root();
    let mut checked = 0;
    let mut dead = Vec::new();
    for entry in std::fs::read_dir(&root).expect("read the workspace") {
        let dir = entry.expect("a folder entry").path();
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap_or_default();
        if !lib.contains("#![doc = include_str!(\"../README.md\")]") {
            continue;
        }
        checked += 1;
        let readme = std::fs::read_to_string(dir.join("README.md")).expect("read a README");
        for target in link_targets(&readme).into_iter().filter(|t| is_relative(t)) {
            dead.push(format!("{}/README.md: {target}", dir.display()));
        }
    }
    assert!(
        checked >= 5,
        "only {checked} crates document themselves with their README"
    );
    assert!(
        dead.is_empty(),
        "relative links in crate documentation (dead on docs.rs):\n{}",
        dead.join("\n")
    );
}
