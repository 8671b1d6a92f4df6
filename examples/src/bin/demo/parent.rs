//! The demo's parent process: sets the store up, enqueues the items, runs the
//! checker, starts the workers, stages the SIGKILL and the SIGSTOP, follows the
//! store's death history, draws the view, and checks the invariants and what the run
//! showed at the end.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::{ExitCode, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use liveness::{
    Checker, CheckerConfig, DeathCause, EnqueueOptions, Event, EventBus, ItemCounts, ItemId,
    ItemState, Key, LeaseStatus, Store, Ttl,
};
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::deaths::{poll_deaths, Deaths};
use crate::proto::Fact;
use crate::stage::{signal, Role, Stage, Worker};
use crate::view::{bar, plural, secs, View};
use crate::RunArgs;

/// Attempts per item: enough that a kill and a freeze never dead-letter one.
const MAX_ATTEMPTS: u32 = 5;

enum Msg {
    Fact(usize, Fact),
    Stderr(usize, String),
    Exited(usize, std::io::Result<ExitStatus>),
}

fn setup_error(message: String) -> ExitCode {
    eprintln!("demo: {message}");
    ExitCode::from(2)
}

/// Encodes the characters a `sqlite://` URL path cannot carry verbatim.
fn url_path(path: &std::path::Path) -> String {
    let mut out = String::new();
    for ch in path.to_string_lossy().chars() {
        match ch {
            '%' | '?' | '#' | ' ' => out.push_str(&format!("%{:02X}", ch as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Runs the demo; the exit code says whether every invariant held and whether the
/// run showed all it promised.
pub async fn run(args: RunArgs) -> ExitCode {
    let live = !args.plain && std::io::stdout().is_terminal();
    let mut view = View::new(live);
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..1_000_000));

    // The store: a fresh SQLite file unless the user named one.
    let mut _tmp = None;
    let url = match &args.store {
        Some(url) => url.clone(),
        None => {
            let dir = match tempfile::Builder::new().prefix("liveness-demo-").tempdir() {
                Ok(d) => d,
                Err(e) => return setup_error(format!("cannot create a temporary directory: {e}")),
            };
            let url = format!("sqlite://{}?ns=demo", url_path(&dir.path().join("demo.db")));
            _tmp = Some(dir);
            url
        }
    };
    if url.to_ascii_lowercase().starts_with("memory:") {
        return setup_error(
            "memory:// lives inside one process, and the demo's workers are separate processes: \
             use sqlite:///path/file.db (the default) or a server store"
                .to_owned(),
        );
    }
    let ttl = match Ttl::new(args.ttl) {
        Ok(t) => t,
        Err(e) => return setup_error(format!("--ttl: {e}")),
    };
    let scheme = url
        .split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if let Some(feature) = liveness::feature_of(&scheme) {
        if !liveness::schemes().contains(&scheme.as_str()) {
            return setup_error(format!(
                "this demo was built without the {feature} backend that `{scheme}://` needs: \
                 run it with `cargo run -p examples --features {feature} --bin demo -- --store …`"
            ));
        }
    }
    let store: Arc<dyn Store> = match liveness::connect(&url).await {
        Ok(s) => s,
        Err(e) => return setup_error(format!("cannot open the store {url}: {e}")),
    };
    if let Err(e) = store.capabilities().check_ttl(ttl) {
        return setup_error(format!("--ttl for the {} store: {e}", store.backend()));
    }
    if let Some(addr) = args.dashboard {
        match crate::dashboard::serve(addr, store.clone(), &url).await {
            Ok(at) => println!("dashboard: http://{at}/"),
            Err(e) => return setup_error(format!("--dashboard {addr}: {e}")),
        }
    }
    match store.item_counts().await {
        Ok(c) if c == ItemCounts::default() => {}
        Ok(c) => {
            return setup_error(format!(
                "the store's namespace already holds items ({c:?}): give the demo a fresh one (?ns=NAME)"
            ))
        }
        Err(e) => return setup_error(format!("cannot read the store: {e}")),
    }

    let freeze_for = ttl.duration() * 2 + ttl.duration() / 2;
    view.say(&format!(
        "liveness demo: {} workers, {} items of {}-{} ms each, ttl {}, seed {seed} (re-run with --seed {seed})",
        args.workers,
        args.items,
        args.work_ms.0,
        args.work_ms.1,
        secs(ttl.duration())
    ));
    view.say(&format!("store: {url}"));
    view.say(&format!(
        "plan: SIGKILL one worker once 15% of the items are done; SIGSTOP another at 35% for {} (longer than the ttl), then SIGCONT",
        secs(freeze_for)
    ));

    // The items.
    let mut ids = Vec::new();
    for i in 0..args.items {
        match store
            .enqueue(
                format!("item {i}").as_bytes(),
                EnqueueOptions {
                    max_attempts: MAX_ATTEMPTS,
                    ..EnqueueOptions::default()
                },
            )
            .await
        {
            Ok(id) => ids.push(id),
            Err(e) => return setup_error(format!("enqueue: {e}")),
        }
    }
    view.log(&format!("enqueued {} items", ids.len()));

    // The deaths to show, from the store's death history: a checker running beside
    // the demo on the same store may win every reap from the demo's own.
    let mut deaths = match Deaths::start(&*store).await {
        Ok(d) => d,
        Err(e) => return setup_error(format!("cannot read the store's death history: {e}")),
    };
    // The checker, in this process (unless one beside it does the work).
    let bus = EventBus::default();
    let mut checker_events = bus.subscribe();
    let checker = if args.no_checker {
        view.log("no checker in the demo (--no-checker): the one beside it declares the deaths");
        None
    } else {
        let check_every =
            (ttl.duration() / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let config = CheckerConfig::default()
            .check_every(check_every)
            .events(bus);
        view.log("checker started: it reaps expired members and requeues their items");
        Some(Checker::new(store.clone(), config).spawn())
    };

    // The workers.
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return setup_error(format!("cannot find this program's path: {e}")),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut workers: Vec<Worker> = Vec::new();
    for i in 0..args.workers as usize {
        let name = format!("worker-{}", i + 1);
        let spawned = Command::new(&exe)
            .arg("worker")
            .args(["--store", &url, "--name", &name])
            .args(["--ttl-ms", &ttl.as_millis().to_string()])
            .args([
                "--seed",
                &seed.wrapping_mul(1000).wrapping_add(i as u64).to_string(),
            ])
            .args([
                "--work-ms",
                &format!("{}-{}", args.work_ms.0, args.work_ms.1),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => return setup_error(format!("cannot start {name}: {e}")),
        };
        let pid = child.id();
        let stdin = child.stdin.take();
        if let Some(out) = child.stdout.take() {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(out).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(fact) = Fact::parse(&line) {
                        let _ = tx.send(Msg::Fact(i, fact));
                    } else if !line.trim().is_empty() {
                        let _ = tx.send(Msg::Stderr(i, line));
                    }
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = tx.send(Msg::Stderr(i, line));
                }
            });
        }
        {
            let tx = tx.clone();
            tokio::spawn(async move {
                let status = child.wait().await;
                let _ = tx.send(Msg::Exited(i, status));
            });
        }
        view.log(&format!("started {name} (pid {})", pid.unwrap_or(0)));
        workers.push(Worker {
            name,
            pid,
            stdin,
            tokens: Vec::new(),
            done: 0,
            working_on: None,
            role: Role::Normal,
            fault_token: None,
            exited: None,
            lease: "starting".to_owned(),
            lost: Vec::new(),
            fenced: Vec::new(),
            rejoined: None,
        });
    }
    drop(tx);

    let total = ids.len() as u64;
    let kill_at = (total * 15 / 100).max(1);
    let freeze_at = (total * 35 / 100).max(kill_at + 1);
    let mut stage = Stage::WaitKill;
    let mut done_by_id: HashMap<u64, u32> = HashMap::new();
    let mut claims_by_id: HashMap<u64, u32> = HashMap::new();
    let mut counts = ItemCounts::default();
    let mut failures: Vec<String> = Vec::new();
    let upper = Duration::from_millis(
        total.saturating_mul(args.work_ms.1.max(1)) * 2 / u64::from(args.workers.max(1)),
    );
    let deadline = Instant::now() + Duration::from_secs(120) + freeze_for * 2 + upper;
    let mut tick = tokio::time::interval(Duration::from_millis(if live { 120 } else { 250 }));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut aborted: Option<String> = None;

    loop {
        let resume_at = match stage {
            Stage::Frozen { resume_at, .. } => Some(resume_at),
            _ => None,
        };
        tokio::select! {
            msg = rx.recv() => {
                let Some(msg) = msg else { break };
                match msg {
                    Msg::Fact(i, fact) => {
                        let w = &mut workers[i];
                        match fact {
                            Fact::Joined { token } => {
                                if let Some(old) = w.token() {
                                    w.rejoined = Some(token);
                                    view.log(&format!("{} re-joined with a NEW token {token} (its old token {old} stays dead)", w.name));
                                } else {
                                    view.log(&format!("{} joined (token {token})", w.name));
                                }
                                w.tokens.push(token);
                            }
                            Fact::Claimed { id, token, attempt } => {
                                *claims_by_id.entry(id).or_default() += 1;
                                w.working_on = Some(id);
                                if attempt > 1 {
                                    view.log(&format!("{} claimed requeued item #{id} (attempt {attempt}, token {token})", w.name));
                                }
                                let done_total: u64 = done_by_id.len() as u64;
                                if stage == Stage::WaitKill && done_total >= kill_at && w.role == Role::Normal {
                                    match signal(w.pid, Signal::SIGKILL) {
                                        Ok(()) => {
                                            w.role = Role::Killed { at: Instant::now() };
                                            w.fault_token = Some(token);
                                            view.log(&format!("SIGKILL -> {} (pid {}) while it works on item #{id} under token {token}", w.name, w.pid.unwrap_or(0)));
                                        }
                                        Err(e) => view.log(&format!("could not kill {}: {e}", w.name)),
                                    }
                                    stage = Stage::WaitFreeze;
                                } else if stage == Stage::WaitFreeze && done_total >= freeze_at && w.role == Role::Normal {
                                    match signal(w.pid, Signal::SIGSTOP) {
                                        Ok(()) => {
                                            let at = Instant::now();
                                            w.role = Role::Frozen { at, resumed: None };
                                            w.fault_token = Some(token);
                                            view.log(&format!("SIGSTOP -> {} (pid {}) while it works on item #{id} under token {token}; SIGCONT in {}", w.name, w.pid.unwrap_or(0), secs(freeze_for)));
                                            stage = Stage::Frozen { victim: i, resume_at: at + freeze_for };
                                        }
                                        Err(e) => {
                                            view.log(&format!("could not freeze {}: {e}", w.name));
                                            stage = Stage::Over;
                                        }
                                    }
                                }
                            }
                            Fact::Done { id, .. } => {
                                w.done += 1;
                                w.working_on = None;
                                let n = done_by_id.entry(id).or_default();
                                *n += 1;
                                if *n > 1 {
                                    failures.push(format!("item #{id}: the store accepted a second completion"));
                                }
                            }
                            Fact::Cancelled { id, token } => {
                                view.log(&format!("{}: cancellation fired while it worked on item #{id} (token {token}): it stops", w.name));
                            }
                            Fact::Fenced { id, token } => {
                                w.working_on = None;
                                w.fenced.push((id, token));
                                view.log(&format!("{}: its late completion of item #{id} under token {token} was REFUSED by the store: Error::Fenced (the item was requeued to a live worker)", w.name));
                            }
                            Fact::Lost { token, reason } => {
                                view.log(&format!("{}: lease token {token} lost, cancellation fired: {reason}", w.name));
                                w.lost.push((token, reason));
                            }
                            Fact::Left { token } => {
                                view.log(&format!("{} left: all work done, token {token} released", w.name));
                            }
                            Fact::Error { message } => {
                                view.log(&format!("{}: error: {message}", w.name));
                            }
                        }
                    }
                    Msg::Stderr(i, line) => view.log(&format!("{} says: {line}", workers[i].name)),
                    Msg::Exited(i, status) => {
                        let w = &mut workers[i];
                        w.stdin = None;
                        match status {
                            Ok(status) => {
                                w.exited = Some(status);
                                if !matches!(w.role, Role::Killed { .. }) {
                                    view.log(&format!("{} exited ({status})", w.name));
                                }
                            }
                            Err(e) => {
                                failures.push(format!("{}: could not wait for it: {e}", w.name));
                                w.exited = Some(ExitStatus::default());
                            }
                        }
                    }
                }
            }
            ev = checker_events.recv() => {
                match ev {
                    Ok(Event::Died { key, token, requeued, dead_lettered, .. }) => {
                        *deaths.ours.entry(token.0).or_default() += 1;
                        let worker = workers.iter().position(|w| w.name == key.name().as_ref());
                        let cause = worker.and_then(|i| match workers[i].role {
                            Role::Killed { at } => Some(format!("{} after the SIGKILL", secs(at.elapsed()))),
                            Role::Frozen { at, resumed: None } => Some(format!("{} after the SIGSTOP (it is still frozen and cannot know)", secs(at.elapsed()))),
                            _ => None,
                        });
                        view.log(&format!(
                            "checker: {} (token {token}) declared DEAD{}; {} requeued{}",
                            key.name(),
                            cause.map(|c| format!(" {c}")).unwrap_or_default(),
                            plural(requeued, "item", "items"),
                            if dead_lettered > 0 { format!(", {dead_lettered} dead-lettered") } else { String::new() },
                        ));
                        poll_deaths(&*store, &mut deaths, &mut view, &workers).await;
                    }
                    Ok(Event::OrphansRequeued { requeued, token, .. }) => {
                        view.log(&format!("checker: swept token {token}: {} requeued", plural(requeued, "item", "items")));
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        failures.push(format!("the view missed {n} checker events"));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                }
            }
            _ = async {
                match resume_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Stage::Frozen { victim, .. } = stage {
                    // Resume only once the checker has declared the frozen worker dead
                    // (on a loaded machine that can take longer than the planned
                    // freeze), so the audience sees the stale completion refused.
                    poll_deaths(&*store, &mut deaths, &mut view, &workers).await;
                    let declared = deaths.list.iter().any(|d| workers[victim].fault_of(d).is_some());
                    let frozen_at = match workers[victim].role {
                        Role::Frozen { at, .. } => at,
                        _ => Instant::now(),
                    };
                    let cap = frozen_at + freeze_for + ttl.duration() * 10;
                    if !declared && Instant::now() < cap {
                        stage = Stage::Frozen { victim, resume_at: Instant::now() + Duration::from_millis(50) };
                        continue;
                    }
                    let w = &mut workers[victim];
                    match signal(w.pid, Signal::SIGCONT) {
                        Ok(()) => {
                            if let Role::Frozen { at, .. } = w.role {
                                w.role = Role::Frozen { at, resumed: Some(Instant::now()) };
                                view.log(&format!("SIGCONT -> {} after {} frozen: it wakes up past its lease", w.name, secs(at.elapsed())));
                            }
                        }
                        Err(e) => failures.push(format!("could not resume {}: {e}", w.name)),
                    }
                    stage = Stage::Over;
                }
            }
            _ = tick.tick() => {
                poll_deaths(&*store, &mut deaths, &mut view, &workers).await;
                if let Ok(c) = store.item_counts().await {
                    counts = c;
                }
                for w in workers.iter_mut() {
                    if let Ok(key) = Key::member(&w.name) {
                        w.lease = match store.inspect(&key).await {
                            Ok(Some(info)) => match info.status {
                                LeaseStatus::Live { remaining } => format!("live ({} left) token {}", secs(remaining), info.token),
                                LeaseStatus::Expired => format!("EXPIRED token {}", info.token),
                            },
                            Ok(None) => "no lease".to_owned(),
                            Err(e) => format!("? ({e})"),
                        };
                    }
                }
                let done_total = done_by_id.len() as u64;
                let requeued = deaths.requeued();
                let fenced: usize = workers.iter().map(|w| w.fenced.len()).sum();
                let mut block = vec![format!(
                    "items {} {done_total}/{total} done | pending {} | owned {} | dead-lettered {} | requeued {requeued} | refused by fencing {fenced} | {}",
                    bar(done_total, total, 24), counts.pending, counts.owned, counts.dead_lettered, secs(started.elapsed())
                )];
                for w in &workers {
                    let state = match (w.role, w.exited) {
                        (Role::Killed { .. }, _) => "KILLED",
                        (Role::Frozen { resumed: None, .. }, _) => "FROZEN",
                        (_, Some(_)) => "exited",
                        (Role::Frozen { .. }, None) => "resumed",
                        (Role::Normal, None) => "running",
                    };
                    let dead = deaths.list.iter().filter(|d| d.name == w.name).map(|d| d.token.to_string()).collect::<Vec<_>>();
                    block.push(format!(
                        "  {:<10} pid {:<7} {:<8} store: {:<28} done {:<4} {}{}",
                        w.name,
                        w.pid.unwrap_or(0),
                        state,
                        w.lease,
                        w.done,
                        w.working_on.filter(|_| w.exited.is_none()).map(|id| format!("on #{id} ")).unwrap_or_default(),
                        if dead.is_empty() { String::new() } else { format!("dead tokens: {}", dead.join(",")) },
                    ));
                }
                let summary = format!(
                    "progress: {done_total}/{total} done, pending {}, owned {}, requeued {requeued}, refused by fencing {fenced}",
                    counts.pending, counts.owned
                );
                view.status(&block, &summary);
                if Instant::now() > deadline {
                    aborted = Some(format!("the demo did not finish within {}", secs(deadline - started)));
                }
            }
            _ = tokio::signal::ctrl_c() => {
                aborted = Some("interrupted".to_owned());
            }
        }
        if aborted.is_some() {
            break;
        }
        let all_exited = workers.iter().all(|w| w.exited.is_some());
        // A killed worker that held items is declared dead before the others can
        // finish; wait for the declaration in any case (up to ten ttls, as for the
        // frozen one), so the summary can show it.
        let kill_seen = workers.iter().all(|w| match w.role {
            Role::Killed { at } => {
                deaths.list.iter().any(|d| w.fault_of(d).is_some())
                    || at.elapsed() > ttl.duration() * 10
            }
            _ => true,
        });
        if all_exited && kill_seen {
            break;
        }
    }

    if let Some(why) = &aborted {
        for w in workers.iter_mut() {
            if w.exited.is_none() {
                let _ = signal(w.pid, Signal::SIGCONT);
                let _ = signal(w.pid, Signal::SIGKILL);
            }
            w.stdin = None;
        }
        failures.push(format!("aborted: {why}"));
    }
    if let Some(checker) = checker {
        checker.stop().await;
    }
    // The deaths this demo's checker reported after the loop's last look, then the
    // history as the store holds it at the end (every sweep done).
    while let Ok(event) = checker_events.try_recv() {
        if let Event::Died { token, .. } = event {
            *deaths.ours.entry(token.0).or_default() += 1;
        }
    }
    if let Err(e) = deaths.poll(&*store).await {
        failures.push(format!("cannot read the store's death history: {e}"));
    }
    view.finish();
    if let Ok(c) = store.item_counts().await {
        counts = c;
    }

    // The tally against the store.
    let mut lost: Vec<ItemId> = Vec::new();
    let mut dead_lettered: Vec<ItemId> = Vec::new();
    let mut store_only = 0usize;
    for id in &ids {
        if done_by_id.contains_key(&id.0) {
            continue;
        }
        match store.item(*id).await {
            // Completed items are deleted: this one was completed, but its worker
            // could not report it (killed between the completion and the report).
            Ok(None) => store_only += 1,
            Ok(Some(rec)) if rec.state == ItemState::DeadLettered => dead_lettered.push(*id),
            Ok(Some(_)) => lost.push(*id),
            Err(e) => {
                failures.push(format!("cannot read item {id}: {e}"));
                lost.push(*id);
            }
        }
    }
    let re_executed = claims_by_id.values().filter(|n| **n > 1).count();
    let requeued = deaths.requeued();
    let fenced: Vec<(String, u64, u64)> = workers
        .iter()
        .flat_map(|w| w.fenced.iter().map(|(id, t)| (w.name.clone(), *id, *t)))
        .collect();

    view.say("");
    view.say("summary");
    view.say(&format!("  store: {url}"));
    if _tmp.is_none() {
        view.say(&format!(
            "  look again: liveness --store '{url}' deaths (or members, items; crate liveness-cli)"
        ));
    } else {
        view.say(
            "  (a temporary file, removed now: give --store sqlite:///PATH/demo.db to keep it for `liveness deaths`)",
        );
    }
    view.say(&format!(
        "  items: {total} enqueued, {} done at least once, {} lost, {} dead-lettered",
        total as usize - lost.len() - dead_lettered.len(),
        lost.len(),
        dead_lettered.len()
    ));
    if store_only > 0 {
        view.say(&format!(
            "  completed but never reported (its worker was killed in between; the store confirms it): {store_only}"
        ));
    }
    view.say(&format!(
        "  re-executed after a requeue (at-least-once): {}",
        plural(re_executed, "item", "items")
    ));
    view.say(&format!(
        "  requeued after a death: {} from {} (the store's death history)",
        plural(requeued as usize, "item", "items"),
        plural(deaths.list.len(), "death", "deaths")
    ));
    view.say(&format!(
        "  stale completions refused by fencing: {}{}",
        fenced.len(),
        fenced
            .iter()
            .map(|(n, id, t)| format!(" ({n}, item #{id}, token {t})"))
            .collect::<String>()
    ));
    for d in &deaths.list {
        let w = workers.iter().find(|w| w.fault_of(d).is_some());
        let (how, latency) = match w.and_then(|w| w.fault_of(d)) {
            Some((how, at)) => (how, Some(d.at.saturating_duration_since(at))),
            None => ("its lease lapsed", None),
        };
        let by = match d.cause {
            DeathCause::Reaped if deaths.declared_here(d.token) => "by this demo's checker",
            DeathCause::Reaped => "by a checker beside the demo",
            _ => "by a new acquire of its key",
        };
        let (requeued, dead_lettered) = deaths.swept(d.seq).unwrap_or_default();
        let mut line = format!(
            "  death of {} ({how}, token {}): {}, {by}, {} requeued",
            d.name,
            d.token,
            latency
                .map(|l| format!(
                    "detected {} after the signal (ttl {})",
                    secs(l),
                    secs(ttl.duration())
                ))
                .unwrap_or_else(|| format!("{}", d.cause)),
            plural(requeued as usize, "item", "items"),
        );
        if deaths.swept(d.seq).is_none() {
            line.push_str(" (its sweep NOT recorded)");
        }
        if dead_lettered > 0 {
            line.push_str(&format!(", {dead_lettered} dead-lettered"));
        }
        if let Some(w) = w.filter(|w| matches!(w.role, Role::Frozen { .. })) {
            line.push_str(&format!(
                "; after SIGCONT: cancellation fired {}, {} refused, re-joined {}",
                if w.lost.is_empty() { "NO" } else { "yes" },
                plural(w.fenced.len(), "late completion", "late completions"),
                w.rejoined
                    .map(|t| format!("with new token {t}"))
                    .unwrap_or_else(|| "NO".to_owned())
            ));
        }
        view.say(&line);
    }

    // Invariants.
    let mut check = |ok: bool, what: &str| {
        view.say(&format!(
            "  {} {what}",
            if ok {
                "invariant ok:"
            } else {
                "INVARIANT BROKEN:"
            }
        ));
        if !ok {
            failures.push(what.to_owned());
        }
    };
    check(lost.is_empty(), "every item done at least once, none lost");
    check(dead_lettered.is_empty(), "no item dead-lettered");
    check(
        done_by_id.values().all(|n| *n == 1),
        "no completion accepted twice (a stale owner never completes)",
    );
    check(
        aborted.is_some() || (counts.pending == 0 && counts.owned == 0),
        "the store holds no pending or owned item at the end",
    );
    check(deaths.each_once(), "each death declared exactly once");
    let clean = workers
        .iter()
        .filter(|w| !matches!(w.role, Role::Killed { .. }))
        .all(|w| w.exited.is_some_and(|s| s.success()));
    check(
        aborted.is_some() || clean,
        "every worker that was not killed exited cleanly",
    );

    // What the run was meant to show. Not safety invariants: a run that could not
    // stage them (too few items) or saw them late is still correct, but it did not
    // show what it promised, and says so in its result and its exit status.
    let mut not_shown: Vec<String> = Vec::new();
    let mut show = |ok: bool, what: &str| {
        view.say(&format!(
            "  {} {what}",
            if ok { "shown:" } else { "NOT shown:" }
        ));
        if !ok {
            not_shown.push(what.to_owned());
        }
    };
    for w in &workers {
        // Declared by any checker, and its token swept: the store's history says so.
        let declared =
            (deaths.list.iter()).any(|d| w.fault_of(d).is_some() && deaths.swept(d.seq).is_some());
        match w.role {
            Role::Normal => {}
            Role::Killed { .. } => show(
                declared,
                &format!("the killed {} declared dead, its items requeued", w.name),
            ),
            Role::Frozen { .. } => {
                show(
                    declared,
                    &format!(
                        "the frozen {} declared dead while frozen, its items requeued",
                        w.name
                    ),
                );
                show(
                    !w.lost.is_empty(),
                    &format!("{}'s cancellation fired when it resumed", w.name),
                );
                show(
                    !w.fenced.is_empty(),
                    &format!("{}'s late completion refused by fencing", w.name),
                );
                show(
                    w.rejoined.is_some(),
                    &format!("{} re-joined with a new token", w.name),
                );
            }
        }
    }
    let staged = |fault: fn(&Role) -> bool| workers.iter().any(|w| fault(&w.role));
    for (was_staged, fault) in [
        (staged(|r| matches!(r, Role::Killed { .. })), "a SIGKILL"),
        (staged(|r| matches!(r, Role::Frozen { .. })), "a SIGSTOP"),
    ] {
        if !was_staged {
            show(
                false,
                &format!("{fault} (the items ran out before it was staged: use more --items)"),
            );
        }
    }
    for f in &failures {
        view.say(&format!("  problem: {f}"));
    }
    if !failures.is_empty() {
        view.say("  result: FAILED");
        ExitCode::from(1)
    } else if !not_shown.is_empty() {
        view.say(&format!(
            "  result: INCOMPLETE: every invariant held, but NOT shown: {}",
            not_shown.join("; ")
        ));
        ExitCode::from(3)
    } else {
        view.say("  result: OK");
        ExitCode::SUCCESS
    }
}
