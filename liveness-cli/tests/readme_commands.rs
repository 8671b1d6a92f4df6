//! The top-level README's "## Operating it" commands, run as printed.
//!
//! The project promises that every doc is true, and that section is a `sh` block of
//! `liveness …` lines an operator copies. This test reads the README at compile time,
//! finds that block and runs every line of it, in order, like one shell session, with
//! the `liveness` binary cargo built: a command added to or changed in the README is
//! checked without editing this test, and a subcommand or flag that does not exist, or
//! a command that fails, fails it. Per line:
//!
//! - `cargo install --path DIR …` is not run: DIR must be, relative to the workspace
//!   root, the crate that builds the `liveness` binary under test.
//! - `export LIVENESS_STORE='URL'`: the CLI must read that variable (its `--help`
//!   names it); the lines after it get a fresh SQLite store in a temporary directory
//!   (the README's namespace, not its path) instead, seeded first with something to
//!   show: a live member holding an item (a worker process), a dead letter and the
//!   death of the member that failed it, pending jobs up to every id a `cancel ID`
//!   line names, and a leader.
//! - `liveness …` runs with its words as written. A `> FILE` redirection or a `| …`
//!   pipe is not executed: the command's stdout must then be non-empty instead. A
//!   command must end by itself with status 0 within 30 s, except:
//!   - `watch` (it has no draw-once flag): must still run after 2 s, have printed a
//!     frame, and exit 0 on SIGINT (Ctrl-C);
//!   - `check`: its `--http` port is replaced by a free one, `/health` must answer
//!     200 within 20 s, `/` (the dashboard) and `/metrics` 200, and it must exit 0 on
//!     SIGTERM (without `--http`: must still run after 2 s, then the same SIGTERM);
//!   - `bench`: runs with the smallest sizes added for the flags the line does not
//!     give (as written it takes about 40 s; see [`BENCH_SHORT`]).
//! - Any other line (another program, a shell operator, an expansion) fails the test
//!   as one it cannot classify: nothing is skipped silently.
//!
//! The runner takes the README's text, so the tests at the bottom feed it copies with
//! one bogus line added and check that each fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{http_get, rt, signal, Worker, BIN};
use liveness::{Election, ElectionConfig, EnqueueOptions, Ttl};
use liveness_testkit::fixtures::dead_letters;

mod common;

/// The top-level README, as the crate was built with it.
const README: &str = include_str!("../../README.md");
/// The heading of the section whose `sh` block this test runs.
const SECTION: &str = "## Operating it";
/// The only variable an `export` line may set: the CLI's store URL.
const STORE_VAR: &str = "LIVENESS_STORE";
/// How long a command that ends by itself may take.
const BOUND: Duration = Duration::from_secs(30);
/// How long `watch` must keep running (and drawing) before it is interrupted.
const WATCH_FOR: Duration = Duration::from_secs(2);
/// How long `check --http` has to answer 200 on `/health`.
const HEALTH_WITHIN: Duration = Duration::from_secs(20);
/// How long a process has to exit after its signal.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// The smallest `bench` sizes, each added unless the README's line gives that flag.
///
/// As written (`liveness bench`: members 1000,10000, concurrency 1,64, 3 s per renewal
/// measurement, 20 deaths) the bench took 42 s on SQLite, debug build, on a 2-core
/// machine: past the ~30 s a test line may take. With these it takes under 1 s, and
/// still runs every kind of measurement the line runs (renewals, checker rounds, the
/// members' first page, detection latency), each at one size instead of two.
const BENCH_SHORT: &[(&str, &str)] = &[
    ("--members", "1"),
    ("--concurrency", "1"),
    ("--seconds", "0.1"),
    ("--deaths", "1"),
];

/// Not a test of its own: the worker process of [`Worker`], the live member.
#[test]
fn worker_process() {
    common::worker_process();
}

/// Every command line of "## Operating it" runs as the README prints it.
#[test]
fn every_operating_it_command_runs() {
    let started = Instant::now();
    match run(README) {
        Ok(log) => {
            for line in log {
                eprintln!("{line}");
            }
            eprintln!("all of {SECTION} ran in {:.1?}", started.elapsed());
        }
        Err(e) => panic!("{e}"),
    }
}

// ---------------------------------------------------------------------------------
// Parsing

/// A shell token: a word (quotes removed) or an operator (`>`, `|`, `;`, `&&`, …).
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Op(String),
}

/// Where a command's stdout went in the README, instead of the terminal.
#[derive(Debug, Clone, PartialEq)]
enum Sink {
    /// `> FILE` or `>> FILE`.
    File(String),
    /// `| …`: the rest of the pipeline, as text.
    Pipe(String),
}

/// What one line of the block is.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// `cargo install --path DIR …`.
    Install { path: String },
    /// `export NAME=VALUE`.
    Export { name: String, value: String },
    /// `liveness ARGS…`, maybe with its stdout sent elsewhere.
    Liveness {
        args: Vec<String>,
        sink: Option<Sink>,
    },
}

/// One command line of the block.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    /// Its line number in the README (from 1).
    number: usize,
    /// The line as printed.
    text: String,
    kind: Kind,
}

impl Line {
    /// Prefixes `e` with where the line is.
    fn fail(&self, e: impl std::fmt::Display) -> String {
        at_line(self.number, &self.text, e)
    }
}

/// `e`, prefixed with the README line it is about.
fn at_line(number: usize, text: &str, e: impl std::fmt::Display) -> String {
    format!("README.md line {number} (under {SECTION}): `{text}`: {e}")
}

/// The lines of the first ```sh block under [`SECTION`] (before the next `## `
/// heading), each with its README line number.
fn operating_block(readme: &str) -> Result<Vec<(usize, &str)>, String> {
    let mut lines = readme.lines().enumerate().map(|(i, l)| (i + 1, l));
    lines
        .by_ref()
        .find(|(_, l)| l.trim_end() == SECTION)
        .ok_or_else(|| format!("the README has no heading `{SECTION}`"))?;
    let mut section = lines.take_while(|(_, l)| !l.starts_with("## "));
    section
        .by_ref()
        .find(|(_, l)| l.trim() == "```sh")
        .ok_or_else(|| format!("no ```sh block under `{SECTION}`"))?;
    let mut block = Vec::new();
    for (number, line) in section {
        if line.trim() == "```" {
            if block.is_empty() {
                return Err(format!("the ```sh block under `{SECTION}` is empty"));
            }
            return Ok(block);
        }
        block.push((number, line));
    }
    Err(format!("the ```sh block under `{SECTION}` is not closed"))
}

/// Splits one shell line into tokens: `# comment` dropped, single and double quotes
/// and backslashes resolved. Expansions (`$`, backquotes) and continued lines are
/// refused: the test would not run what a shell runs.
fn tokens(line: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let flush = |out: &mut Vec<Token>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            out.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => flush(&mut out, &mut word, &mut in_word),
            // A comment starts a word; inside one, `#` is part of it.
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("an unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("an unterminated double quote".into()),
                        },
                        Some('$' | '`') => {
                            return Err("a shell expansion in double quotes: the test \
                                        does not expand variables or commands"
                                .into())
                        }
                        Some(c) => word.push(c),
                        None => return Err("an unterminated double quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err("a continued line (trailing backslash)".into()),
            },
            '$' | '`' => {
                return Err(
                    "a shell expansion: the test does not expand variables or commands".into(),
                )
            }
            '>' | '<' | '|' | ';' | '&' | '(' | ')' => {
                flush(&mut out, &mut word, &mut in_word);
                let mut op = c.to_string();
                if let Some(&next) = chars.peek() {
                    if next == c || (c == '>' && next == '&') {
                        op.push(next);
                        chars.next();
                    }
                }
                out.push(Token::Op(op));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut out, &mut word, &mut in_word);
    Ok(out)
}

/// What a line is; `None` for a blank or comment-only line.
fn classify(tokens: Vec<Token>) -> Result<Option<Kind>, String> {
    let mut words = Vec::new();
    let mut sink = None;
    let mut rest = tokens.into_iter();
    while let Some(token) = rest.next() {
        match token {
            Token::Word(w) => words.push(w),
            Token::Op(op) if op == ">" || op == ">>" => {
                let Some(Token::Word(target)) = rest.next() else {
                    return Err(format!("`{op}` without a file"));
                };
                if rest.len() > 0 {
                    return Err(format!(
                        "cannot classify the line: more after `{op} {target}` (the test \
                         runs one command with at most one redirection of its stdout)"
                    ));
                }
                sink = Some(Sink::File(target));
            }
            Token::Op(op) if op == "|" => {
                let tail: Vec<String> = rest
                    .by_ref()
                    .map(|t| match t {
                        Token::Word(w) | Token::Op(w) => w,
                    })
                    .collect();
                sink = Some(Sink::Pipe(tail.join(" ")));
            }
            Token::Op(op) => {
                return Err(format!(
                    "cannot classify the line: shell operator `{op}` (the test runs one \
                     command per line, with at most a `> FILE` or a `| …` after it)"
                ))
            }
        }
    }
    let Some(program) = words.first() else {
        return match sink {
            None => Ok(None),
            Some(_) => Err("a redirection or pipe without a command".into()),
        };
    };
    if sink.is_some() && program != "liveness" {
        return Err(format!(
            "cannot classify the line: `{program}` with a redirection or pipe"
        ));
    }
    match program.as_str() {
        "liveness" => Ok(Some(Kind::Liveness {
            args: words[1..].to_vec(),
            sink,
        })),
        "cargo" if words.get(1).map(String::as_str) == Some("install") => {
            let path = flag_value(&words[2..], "--path").ok_or(
                "cannot classify the line: a `cargo install` without `--path DIR` (the \
                 test checks only an install from this workspace)",
            )?;
            Ok(Some(Kind::Install { path }))
        }
        "export" => match &words[1..] {
            [assignment] => {
                let (name, value) = assignment
                    .split_once('=')
                    .ok_or_else(|| format!("cannot classify `export {assignment}`: no `=`"))?;
                Ok(Some(Kind::Export {
                    name: name.to_owned(),
                    value: value.to_owned(),
                }))
            }
            more => Err(format!(
                "cannot classify the line: `export` of {} words (the test knows one \
                 `export NAME=VALUE` per line)",
                more.len()
            )),
        },
        other => Err(format!(
            "cannot classify the line: `{other}` is not a command this test knows how to \
             check (it knows `liveness …`, `cargo install --path DIR` and `export \
             {STORE_VAR}=URL`): teach it, or the README shows a command nothing runs"
        )),
    }
}

/// The value of `--flag VALUE` or `--flag=VALUE` in `words`.
fn flag_value(words: &[String], flag: &str) -> Option<String> {
    let mut it = words.iter();
    while let Some(w) = it.next() {
        if w == flag {
            return it.next().cloned();
        }
        if let Some(v) = w.strip_prefix(flag).and_then(|v| v.strip_prefix('=')) {
            return Some(v.to_owned());
        }
    }
    None
}

/// Every command line of the block, classified: an error names the first line that
/// cannot be.
fn parse(readme: &str) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    for (number, text) in operating_block(readme)? {
        let fail = |e: String| at_line(number, text, e);
        if let Some(kind) = classify(tokens(text).map_err(fail)?).map_err(fail)? {
            lines.push(Line {
                number,
                text: text.to_owned(),
                kind,
            });
        }
    }
    if !lines
        .iter()
        .any(|l| matches!(l.kind, Kind::Liveness { .. }))
    {
        return Err(format!(
            "no `liveness` command in the block under {SECTION}"
        ));
    }
    Ok(lines)
}

/// The subcommand of `liveness ARGS…`: the first word that is neither a global option
/// nor its value.
fn subcommand(args: &[String]) -> Option<&str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--store" || a == "--timeout" {
            it.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// The highest item id the seeded store is filled up to for a `cancel ID` line.
const MAX_SEEDED_ID: u64 = 1000;

/// The item ids the `cancel ID` lines name, up to [`MAX_SEEDED_ID`]: the seeded store
/// holds each as a pending job, so that the line cancels one. (A `retry ID` needs a
/// dead letter of that id, which seeding does not make: such a line fails, exit 2,
/// until the test learns it.)
fn cancelled_ids(lines: &[Line]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| match &l.kind {
            Kind::Liveness { args, .. } => {
                if subcommand(args)? != "cancel" {
                    return None;
                }
                let at = args.iter().position(|a| a == "cancel")?;
                args[at + 1..].iter().find_map(|a| a.parse().ok())
            }
            _ => None,
        })
        .filter(|id| *id <= MAX_SEEDED_ID)
        .collect()
}

// ---------------------------------------------------------------------------------
// Running

/// The workspace root: the README's paths are relative to it.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The store the lines after the `export` use, seeded, and what keeps it populated.
struct Seeded {
    /// The live member: a worker process holding one claimed item (killed on drop,
    /// before the directory goes).
    _worker: Worker,
    url: String,
    _dir: tempfile::TempDir,
}

/// A fresh SQLite store, namespace `ns`, holding: a dead letter (claimed and failed
/// by a member `failer`, which then left: a death), a live member `worker-1` (another
/// process) owning one item, pending jobs up to the highest of `ids`, and a leader of
/// role `scheduler`.
fn seed(ns: &str, ids: &[u64]) -> Seeded {
    let dir = tempfile::tempdir().expect("a temporary directory for the store");
    let url = format!(
        "sqlite://{}?ns={ns}",
        dir.path().join("readme.db").display()
    );
    // One runtime for all the store calls: the store's pool lives on it.
    let rt = rt();
    let store = rt.block_on(async {
        let store = liveness::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("create the store {url}: {e}"));
        dead_letters(&store, 1, |i| format!("poison {i}")).await;
        store
            .enqueue(b"held by worker-1", EnqueueOptions::default())
            .await
            .unwrap_or_else(|e| panic!("enqueue the worker's item: {e}"));
        store
    });
    // Claims the only pending item: the ids enqueued next stay pending for `cancel`.
    let worker = Worker::start(&url, "worker-1", 1, 10_000);
    rt.block_on(async {
        let want = ids.iter().copied().max().unwrap_or(0);
        let mut enqueued = Vec::new();
        for i in 0.. {
            let id = store
                .enqueue(format!("job {i}").as_bytes(), EnqueueOptions::default())
                .await
                .unwrap_or_else(|e| panic!("enqueue job {i}: {e}"));
            enqueued.push(id.0);
            if i >= 3 && id.0 >= want {
                break;
            }
        }
        for id in ids {
            assert!(
                enqueued.contains(id),
                "item {id}, which the README names, is not among the pending jobs \
                 seeded: {enqueued:?}"
            );
        }
        let ttl = Ttl::from_secs(300).expect("a 300 s ttl");
        let config = ElectionConfig::new("scheduler", "host-a", ttl).expect("election config");
        let leadership = Election::new(store, config)
            .try_lead()
            .await
            .unwrap_or_else(|e| panic!("lead role scheduler: {e}"))
            .expect("nobody else leads role scheduler");
        // Held until its ttl runs out, without a heartbeat: enough for this run.
        leadership.orphan();
    });
    Seeded {
        _worker: worker,
        url,
        _dir: dir,
    }
}

/// Status, stdout and stderr of a finished command, for a failure message.
fn describe(out: &Output) -> String {
    format!(
        "{}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits for `child` to exit (its output piped) for at most `within`; past it, kills
/// it and fails.
fn finish(child: Child, within: Duration) -> Result<Output, String> {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(within) {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(format!("waiting for it: {e}")),
        Err(_) => {
            signal("-KILL", pid)?;
            let out = match rx.recv_timeout(EXIT_WITHIN) {
                Ok(Ok(out)) => describe(&out),
                _ => "(no output)".into(),
            };
            Err(format!(
                "still running after {within:?}, killed (a command that does not end \
                 by itself needs its own handling in this test): {out}"
            ))
        }
    }
}

/// A process that runs until stopped; killed on drop, so that a failing run leaves
/// none behind.
struct Running(Option<Child>);

impl Running {
    fn spawn(mut command: Command) -> Result<Running, String> {
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map(|c| Running(Some(c)))
            .map_err(|e| format!("start it: {e}"))
    }

    /// `Ok` while it runs; once it has exited, an error with its output.
    fn alive(&mut self, what: &str) -> Result<(), String> {
        let child = self.0.as_mut().expect("a running process");
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(_)) => {
                let out = finish(self.0.take().expect("a running process"), EXIT_WITHIN)?;
                Err(format!("{what}, it exited: {}", describe(&out)))
            }
            Err(e) => Err(format!("cannot tell whether it runs: {e}")),
        }
    }

    /// Sends `sig` and waits for the exit: it must be status 0.
    fn stop(mut self, sig: &str) -> Result<Output, String> {
        // Signalled while still ours: a failed `kill` leaves it to the drop.
        signal(sig, self.0.as_ref().expect("a running process").id())?;
        let out = finish(self.0.take().expect("a running process"), EXIT_WITHIN)?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(format!("after kill {sig}: {}", describe(&out)))
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The status code of an HTTP status line (`HTTP/1.1 200 OK`).
fn status_code(line: &str) -> Option<&str> {
    line.split_whitespace().nth(1)
}

/// `args` with the port of `check`'s `--http ADDR` (or `--metrics ADDR`) replaced by
/// a free one; the port, when there is an ADDR.
fn with_free_port(args: &[String]) -> Result<(Vec<String>, Option<u16>), String> {
    let mut out = Vec::new();
    let mut port = None;
    let mut it = args.iter();
    let mut replace = |addr: &str| -> Result<String, String> {
        let free = liveness_testkit::free_port().map_err(|e| format!("a free port: {e}"))?;
        port = Some(free);
        match addr.rsplit_once(':') {
            None => Ok(free.to_string()),
            Some((host, _)) if ["127.0.0.1", "localhost", "0.0.0.0"].contains(&host) => {
                Ok(format!("{host}:{free}"))
            }
            Some((host, _)) => Err(format!(
                "`--http {addr}`: the test reaches the checker on 127.0.0.1, not {host}"
            )),
        }
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--http" | "--metrics" => {
                out.push(a.clone());
                let addr = it.next().ok_or(format!("`{a}` without an address"))?;
                out.push(replace(addr)?);
            }
            _ => match a.split_once('=') {
                Some((flag @ ("--http" | "--metrics"), addr)) => {
                    out.push(format!("{flag}={}", replace(addr)?));
                }
                _ => out.push(a.clone()),
            },
        }
    }
    Ok((out, port))
}

/// Runs one `liveness` line; says what it ran.
fn run_liveness(
    args: &[String],
    sink: &Option<Sink>,
    store: Option<&str>,
    cwd: &Path,
) -> Result<String, String> {
    let command = |args: &[String]| {
        let mut c = Command::new(BIN);
        c.args(args).current_dir(cwd).stdin(Stdio::null());
        match store {
            Some(url) => c.env(STORE_VAR, url),
            None => c.env_remove(STORE_VAR),
        };
        c
    };
    match subcommand(args) {
        // Redraws until Ctrl-C, and has no flag to draw once.
        Some("watch") => {
            let mut running = Running::spawn(command(args))?;
            std::thread::sleep(WATCH_FOR);
            running.alive(&format!(
                "`watch` should run until Ctrl-C, but within {WATCH_FOR:?}"
            ))?;
            let out = running.stop("-INT")?;
            if out.stdout.is_empty() {
                return Err(format!(
                    "`watch` drew nothing in {WATCH_FOR:?}: {}",
                    describe(&out)
                ));
            }
            Ok(format!(
                "ran {WATCH_FOR:?}, drew {} lines, exited 0 on SIGINT",
                String::from_utf8_lossy(&out.stdout).lines().count()
            ))
        }
        // A checker: runs until SIGTERM.
        Some("check") => {
            let (args, port) = with_free_port(args)?;
            let mut running = Running::spawn(command(&args))?;
            let mut served = String::new();
            if let Some(port) = port {
                let until = Instant::now() + HEALTH_WITHIN;
                loop {
                    running.alive("while waiting for /health 200")?;
                    let got = http_get(port, "/health");
                    if let Some((status, _)) =
                        got.as_ref().filter(|(s, _)| status_code(s) == Some("200"))
                    {
                        served.push_str(&format!("/health {status}"));
                        break;
                    }
                    if Instant::now() > until {
                        return Err(format!(
                            "/health on port {port} did not answer 200 within \
                             {HEALTH_WITHIN:?}; last answer: {got:?}"
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                // What the README's line promises beside /health.
                for path in ["/", "/metrics"] {
                    match http_get(port, path) {
                        Some((status, _)) if status_code(&status) == Some("200") => {
                            served.push_str(&format!(", {path} 200"));
                        }
                        other => return Err(format!("GET {path} on port {port}: {other:?}")),
                    }
                }
            } else {
                std::thread::sleep(WATCH_FOR);
                running.alive(&format!(
                    "`check` should run until SIGTERM, but within {WATCH_FOR:?}"
                ))?;
                served.push_str(&format!("ran {WATCH_FOR:?}"));
            }
            running.stop("-TERM")?;
            Ok(format!(
                "`liveness {}`: {served}, exited 0 on SIGTERM",
                args.join(" ")
            ))
        }
        sub => {
            let mut args = args.to_vec();
            let mut note = String::new();
            if sub == Some("bench") {
                for (flag, small) in BENCH_SHORT {
                    if flag_value(&args, flag).is_none() {
                        args.extend([flag.to_string(), small.to_string()]);
                    }
                }
                note = format!(" (shortened: `liveness {}`)", args.join(" "));
            }
            let child = command(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("start it: {e}"))?;
            let out = finish(child, BOUND)?;
            if !out.status.success() {
                return Err(format!("exited with {}", describe(&out)));
            }
            if let Some(sink) = sink {
                if out.stdout.is_empty() {
                    return Err(format!("printed nothing for {sink:?}: {}", describe(&out)));
                }
            }
            let dropped = match sink {
                Some(Sink::File(f)) => format!(", not written to {f}"),
                Some(Sink::Pipe(p)) => format!(", not piped to `{p}`"),
                None => String::new(),
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            Ok(format!(
                "exit 0, {} lines of stdout{dropped}{note}; last: {:?}",
                stdout.lines().count(),
                stdout.lines().last().unwrap_or_default()
            ))
        }
    }
}

/// Checks `cargo install --path DIR`: DIR is the crate whose `liveness` binary this
/// test runs.
fn check_install(path: &str) -> Result<String, String> {
    let dir = workspace_root().join(path);
    if !dir.join("Cargo.toml").is_file() {
        return Err(format!(
            "{} holds no Cargo.toml: not a crate of the workspace",
            dir.display()
        ));
    }
    let canonical = |p: &Path| {
        p.canonicalize()
            .map_err(|e| format!("resolve {}: {e}", p.display()))
    };
    if canonical(&dir)? != canonical(Path::new(env!("CARGO_MANIFEST_DIR")))? {
        return Err(format!(
            "{} is not the crate that builds the `liveness` command ({})",
            dir.display(),
            env!("CARGO_MANIFEST_DIR")
        ));
    }
    Ok(format!(
        "not run: {path}/Cargo.toml is the `liveness` binary's crate"
    ))
}

/// Checks `export NAME=VALUE`: NAME is the CLI's store variable (its `--help` says
/// so). Returns the namespace of the README's URL.
fn check_export(name: &str, value: &str) -> Result<String, String> {
    if name != STORE_VAR {
        return Err(format!(
            "cannot classify the line: `export {name}` (the test knows only \
             `export {STORE_VAR}=URL`)"
        ));
    }
    let help = Command::new(BIN)
        .arg("--help")
        .env_remove(name)
        .output()
        .map_err(|e| format!("run liveness --help: {e}"))?;
    let help = String::from_utf8_lossy(&help.stdout);
    if !help.contains(&format!("[env: {name}=")) {
        return Err(format!("`liveness --help` names no [env: {name}=]: {help}"));
    }
    let query = value.split_once('?').map_or("", |(_, q)| q);
    let ns = query
        .split('&')
        .find_map(|p| p.strip_prefix("ns="))
        .unwrap_or("default");
    Ok(ns.to_owned())
}

/// Runs every command line of `readme`'s "## Operating it" block, in order; returns
/// one line per command saying what ran, or the first failure.
fn run(readme: &str) -> Result<Vec<String>, String> {
    let lines = parse(readme)?;
    let ids = cancelled_ids(&lines);
    let cwd = tempfile::tempdir().map_err(|e| format!("a working directory: {e}"))?;
    let mut store: Option<Seeded> = None;
    let mut log = Vec::new();
    for line in &lines {
        let started = Instant::now();
        let did = match &line.kind {
            Kind::Install { path } => check_install(path),
            Kind::Export { name, value } => check_export(name, value).map(|ns| {
                let seeded = seed(&ns, &ids);
                let did = format!("{STORE_VAR}={} (seeded) instead", seeded.url);
                store = Some(seeded);
                did
            }),
            Kind::Liveness { args, sink } => run_liveness(
                args,
                sink,
                store.as_ref().map(|s| s.url.as_str()),
                cwd.path(),
            ),
        }
        .map_err(|e| line.fail(e))?;
        log.push(format!(
            "{:>6.2}s  line {}: {}\n          {did}",
            started.elapsed().as_secs_f64(),
            line.number,
            line.text.trim_end()
        ));
    }
    Ok(log)
}

// ---------------------------------------------------------------------------------
// The parser's own tests, and proof that the runner fails on a bad line.

/// A copy of `readme` with `extra` as a line of the block right after its `export`
/// line (or, without one, its first line): the store is seeded, and the line runs
/// before the long ones.
fn with_line(readme: &str, extra: &str) -> String {
    let block = operating_block(readme).expect("the README's block");
    let after = block
        .iter()
        .find(|(_, l)| l.starts_with("export "))
        .or(block.first())
        .map(|(n, _)| *n)
        .expect("a line in the block");
    let mut out = String::new();
    for (i, l) in readme.lines().enumerate() {
        out.push_str(l);
        out.push('\n');
        if i + 1 == after {
            out.push_str(extra);
            out.push('\n');
        }
    }
    out
}

fn words(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|w| w.to_string()).collect()
}

#[test]
fn the_parser_splits_quotes_comments_and_redirections() {
    let t = tokens("export LIVENESS_STORE='sqlite:///a b.db?ns=app'   # or --store URL")
        .expect("tokens");
    assert_eq!(
        t,
        [
            Token::Word("export".into()),
            Token::Word("LIVENESS_STORE=sqlite:///a b.db?ns=app".into())
        ]
    );
    assert_eq!(
        classify(tokens("liveness completions bash > /etc/x   # or zsh").expect("tokens")),
        Ok(Some(Kind::Liveness {
            args: words(&["completions", "bash"]),
            sink: Some(Sink::File("/etc/x".into()))
        }))
    );
    assert_eq!(
        classify(tokens("liveness items --json | jq .").expect("tokens")),
        Ok(Some(Kind::Liveness {
            args: words(&["items", "--json"]),
            sink: Some(Sink::Pipe("jq .".into()))
        }))
    );
    assert_eq!(
        classify(tokens("cargo install --path liveness-cli   # needs protoc").expect("t")),
        Ok(Some(Kind::Install {
            path: "liveness-cli".into()
        }))
    );
    assert_eq!(
        classify(tokens("   # only a comment").expect("t")),
        Ok(None)
    );
    assert_eq!(
        tokens(r#"liveness --store "a#b" x#y"#).expect("t"),
        [
            Token::Word("liveness".into()),
            Token::Word("--store".into()),
            Token::Word("a#b".into()),
            Token::Word("x#y".into())
        ]
    );
    for refused in [
        "liveness members $SPACE",
        "liveness members \\",
        "echo 'open",
    ] {
        assert!(tokens(refused).is_err(), "{refused}");
    }
    for unclassified in [
        "curl http://127.0.0.1:9464/health",
        "liveness members && liveness items",
        "cargo run -p liveness-cli -- members",
        "export A=1 B=2",
    ] {
        let err = classify(tokens(unclassified).expect("tokens")).expect_err(unclassified);
        assert!(err.contains("cannot classify"), "{unclassified}: {err}");
    }
    assert_eq!(
        subcommand(&words(&["--store", "x", "--json", "watch"])),
        Some("watch")
    );
}

#[test]
fn the_readme_block_is_found_and_every_line_classified() {
    let lines = parse(README).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        lines
            .iter()
            .any(|l| matches!(&l.kind, Kind::Export { name, .. } if name == STORE_VAR)),
        "{lines:#?}"
    );
    assert!(parse("# x\n## Operating it\n\nno block\n## Next\n```sh\nliveness x\n```\n").is_err());
}

/// Runs `readme` and expects it to fail, naming `line`; returns the failure.
fn fails_on(readme: &str, line: &str) -> String {
    let err = run(readme).expect_err("a README with a bad line must fail the run");
    assert!(
        err.contains(line),
        "the failure should name `{line}`: {err}"
    );
    err
}

/// A bogus line added to a copy of the README fails the run: an unknown subcommand or
/// flag (on a finite command, on `watch`, on `check`), a command that exits non-zero,
/// a crate that is not there, a variable the CLI does not read, a line of another
/// kind.
#[test]
fn a_bogus_line_fails_the_run() {
    for bogus in [
        "liveness nosuchcommand",
        "liveness members --no-such-flag",
        "liveness watch --once",
        "liveness check --http 127.0.0.1:9464 --no-such-flag",
        "liveness retry 987654321",
        "liveness completions nosuchshell > /etc/bash_completion.d/liveness",
        "cargo install --path no-such-crate",
        "cargo install --path backend-sqlite",
        "export LIVENESS_URL='sqlite:///x.db?ns=app'",
    ] {
        eprintln!("with `{bogus}` added:");
        let err = fails_on(&with_line(README, bogus), bogus);
        eprintln!("{bogus}\n  -> {}", err.lines().next().unwrap_or_default());
    }
    let err = fails_on(
        &with_line(README, "curl -s http://127.0.0.1:9464/health"),
        "curl",
    );
    assert!(err.contains("cannot classify"), "{err}");
}
