//! The end of the run: the parent's tally against the store, each process death as
//! the store's death history tells it (one per session, counting its members), the
//! stuck job, the scheduled job, the retried failure, the invariants, and what the
//! run was meant to show.

use std::process::ExitCode;

use liveness::{DeathCause, ItemId, ItemState, Store};
use tokio::time::Instant;

use crate::deaths::Deaths;
use crate::parent::Run;
use crate::stage::{Role, Stall, Worker};
use crate::view::{plural, secs};
use crate::worker::RETRY_BACKOFF;

/// A worker process's death, from the store's death history: its session's one
/// record and, on a store without native sessions, its members' own records.
pub struct ProcessDeath {
    /// The session's dead token.
    pub token: u64,
    pub cause: DeathCause,
    /// When the store recorded the session's death, on this process's clock.
    pub at: Instant,
    /// The members that died with it: the session record's count (native sessions)
    /// plus the members' own records (without).
    pub members: u64,
    /// What the sweeps of its members moved.
    pub requeued: u64,
    pub dead_lettered: u64,
    /// True once every one of its records was swept.
    pub swept: bool,
}

/// The death of worker `w`'s session under the token it held when its fault was
/// staged, with its members', if the store recorded it.
pub fn process_death(deaths: &Deaths, w: &Worker) -> Option<ProcessDeath> {
    let session = (deaths.list.iter()).find(|d| d.session && w.fault_of(d).is_some())?;
    let mut death = ProcessDeath {
        token: session.token,
        cause: session.cause,
        at: session.at,
        members: 0,
        requeued: 0,
        dead_lettered: 0,
        swept: true,
    };
    let members = (deaths.list.iter()).filter(|d| !d.session && w.fault_of(d).is_some());
    for seq in std::iter::once(session.seq).chain(members.map(|d| d.seq)) {
        match deaths.swept(seq) {
            Some(swept) => {
                death.members += swept.members;
                death.requeued += swept.requeued;
                death.dead_lettered += swept.dead_lettered;
            }
            None => death.swept = false,
        }
        if seq != session.seq {
            death.members += 1;
        }
    }
    Some(death)
}

/// The items worker `w`'s members held at its fault, each with what became of it:
/// `#12 (m1) done again by worker-3.m2`. True in the second place when every one was
/// requeued and claimed again, or completed before the fault without a report.
fn held_items(run: &Run, w: &Worker) -> (String, bool) {
    let mut all = true;
    let items: Vec<String> = (w.held.iter())
        .map(|(n, id)| {
            let again = run.claims_by_id.get(id).copied().unwrap_or(0) >= 2;
            let unreported = run.unreported.contains(id);
            all &= again || unreported;
            let fate = match run.done_by.get(id) {
                Some(by) if again => format!("done again by {by}"),
                _ if unreported => "completed, never reported".to_owned(),
                _ => "NOT done again".to_owned(),
            };
            format!("#{id} (m{}) {fate}", n + 1)
        })
        .collect();
    (items.join(", "), all)
}

/// Prints the summary: the tally against the store, the deaths, the stuck job, the
/// invariants and what was shown; answers the exit code.
pub async fn report(
    mut run: Run,
    store: &dyn Store,
    deaths: &Deaths,
    url: &str,
    ids: &[ItemId],
    temporary: bool,
    aborted: bool,
) -> ExitCode {
    // The tally against the store.
    let mut lost: Vec<ItemId> = Vec::new();
    let mut dead_lettered: Vec<ItemId> = Vec::new();
    let mut store_only = 0usize;
    for id in ids {
        if run.done_by_id.contains_key(&id.0) {
            continue;
        }
        match store.item(*id).await {
            // Completed items are deleted: this one was completed, but its worker
            // could not report it (killed between the completion and the report).
            Ok(None) => {
                store_only += 1;
                run.unreported.insert(id.0);
            }
            Ok(Some(rec)) if rec.state == ItemState::DeadLettered => dead_lettered.push(*id),
            Ok(Some(_)) => lost.push(*id),
            Err(e) => {
                run.failures.push(format!("cannot read item {id}: {e}"));
                lost.push(*id);
            }
        }
    }
    let re_executed = run.claims_by_id.values().filter(|n| **n > 1).count();
    let requeued = deaths.requeued();
    let fenced: Vec<(String, u64, u64)> = (run.workers.iter())
        .flat_map(|w| &w.members)
        .flat_map(|m| m.fenced.iter().map(|(id, t)| (m.name.clone(), *id, *t)))
        .collect();
    let total = run.total;
    let ttl = run.ttl.duration();
    let view = &mut run.view;

    view.say("");
    view.say("summary");
    view.say(&format!("  store: {url}"));
    if temporary {
        view.say(
            "  (a temporary file, removed now: give --store sqlite:///PATH/demo.db to keep it for `liveness deaths`)",
        );
    } else {
        view.say(&format!(
            "  look again: liveness --store '{url}' deaths (or members, items; crate liveness-cli)"
        ));
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

    // The process deaths: one line each, from its session's record (and its
    // members' own, on a store without native sessions).
    let by = |cause: DeathCause, token: u64| match cause {
        DeathCause::Reaped if deaths.declared_here(token) => "by this demo's checker",
        DeathCause::Reaped => "by a checker beside the demo",
        _ => "by a new acquire of its key",
    };
    let mut lines = Vec::new();
    for w in &run.workers {
        let Some((how, signalled)) = crate::stage::fault(w.role) else {
            continue;
        };
        let Some(d) = process_death(deaths, w) else {
            continue;
        };
        let (held, _) = held_items(&run, w);
        let mut line = format!(
            "  death of {} ({how}, token {}, its session): detected {} after the signal (ttl {}), {}: ONE process death with its {}, {} requeued",
            w.name,
            d.token,
            secs(d.at.saturating_duration_since(signalled)),
            secs(ttl),
            by(d.cause, d.token),
            plural(d.members as usize, "member", "members"),
            plural(d.requeued as usize, "item", "items"),
        );
        if !held.is_empty() {
            line.push_str(&format!(" ({held})"));
        }
        if !d.swept {
            line.push_str(" (its sweep NOT recorded)");
        }
        if d.dead_lettered > 0 {
            line.push_str(&format!(", {} dead-lettered", d.dead_lettered));
        }
        if matches!(w.role, Role::Frozen { .. }) {
            let stopped = stopped_members(w);
            let rejoined: Vec<String> = (w.members.iter())
                .filter(|m| m.tokens.len() > 1)
                .filter_map(|m| m.token().map(|t| t.to_string()))
                .collect();
            line.push_str(&format!(
                "; after SIGCONT: cancellation fired {}, {} of its {} stopped (check() failed), {} refused, re-joined {}",
                if stopped == 0 { "NO" } else { "yes" },
                stopped,
                plural(w.members.len(), "member", "members"),
                plural(
                    w.members.iter().map(|m| m.fenced.len()).sum(),
                    "late completion",
                    "late completions"
                ),
                match (w.tokens.len() > 1, rejoined.is_empty()) {
                    (true, false) => format!(
                        "with new token {} (session), {} (members)",
                        w.token().unwrap_or(0),
                        rejoined.join(", ")
                    ),
                    _ => "NO".to_owned(),
                }
            ));
        }
        lines.push(line);
    }
    // Any other death: a lease that lapsed without a staged fault.
    for d in &deaths.list {
        if run.workers.iter().any(|w| w.fault_of(d).is_some()) {
            continue;
        }
        let (requeued, dead) = deaths
            .swept(d.seq)
            .map_or((0, 0), |s| (s.requeued, s.dead_lettered));
        lines.push(format!(
            "  death of {}{} (its lease lapsed, token {}): {}, {}, {} requeued{}",
            if d.session { "the session of " } else { "" },
            d.name,
            d.token,
            d.cause,
            by(d.cause, d.token),
            plural(requeued as usize, "item", "items"),
            if dead > 0 {
                format!(", {dead} dead-lettered")
            } else {
                String::new()
            },
        ));
    }
    if let Some(stall) = &run.stall {
        lines.push(stall_line(&run, deaths, stall));
    }
    let delays = store.capabilities().delays;
    lines.extend(scheduled_line(&run, delays));
    lines.extend(flaky_line(&run));
    for line in lines {
        run.view.say(&line);
    }

    // Invariants.
    let view = &mut run.view;
    let failures = &mut run.failures;
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
        run.done_by_id.values().all(|n| *n == 1),
        "no completion accepted twice (a stale owner never completes)",
    );
    check(
        aborted || (run.counts.pending == 0 && run.counts.owned == 0),
        "the store holds no pending or owned item at the end",
    );
    check(deaths.each_once(), "each death declared exactly once");
    let clean = (run.workers.iter())
        .filter(|w| !matches!(w.role, Role::Killed { .. }))
        .all(|w| w.exited.is_some_and(|s| s.success()));
    check(
        aborted || clean,
        "every worker that was not killed exited cleanly",
    );
    let not_shown = shown(&mut run, deaths, delays);

    for f in &run.failures {
        run.view.say(&format!("  problem: {f}"));
    }
    if !run.failures.is_empty() {
        run.view.say("  result: FAILED");
        ExitCode::from(1)
    } else if !not_shown.is_empty() {
        run.view.say(&format!(
            "  result: INCOMPLETE: every invariant held, but NOT shown: {}",
            not_shown.join("; ")
        ));
        ExitCode::from(3)
    } else {
        run.view.say("  result: OK");
        ExitCode::SUCCESS
    }
}

/// How many of the frozen worker `w`'s members stopped when it resumed: each lost
/// the lease it held at the freeze (its check fails on the session's deadline).
fn stopped_members(w: &Worker) -> usize {
    (w.members.iter().zip(&w.fault_tokens.members))
        .filter(|(m, t)| m.lost.iter().any(|(lost, _)| Some(*lost) == **t))
        .count()
}

/// The stuck job's summary line.
fn stall_line(run: &Run, deaths: &Deaths, stall: &Stall) -> String {
    let w = &run.workers[stall.worker];
    let Some((n, id, token, hung_at)) = stall.hung else {
        return format!(
            "  stuck job: {} was asked to hang a job, but none of its members claimed one after",
            w.name
        );
    };
    let name = &w.members[n].name;
    let released = deaths
        .record_of(name, token)
        .map(|r| {
            format!(
                "the store's history: {} token {} {}",
                r.key, r.token, r.cause
            )
        })
        .unwrap_or_else(|| "its release NOT in the store's history".to_owned());
    format!(
        "  stuck job: {name} hung on item #{id} (token {token}): {}; {released}; item #{id} {}; {}'s other members completed {} meanwhile, {}",
        match stall.stalled {
            Some(at) => format!(
                "its watchdog released it alone (cause stalled) {} later (progress timeout {})",
                secs(at.saturating_duration_since(hung_at)),
                secs(run.progress_timeout)
            ),
            None => "its watchdog NEVER released it".to_owned(),
        },
        match (&stall.taken_by, stall.redone, run.done_by.get(&id)) {
            (Some(by), true, Some(done)) => format!("requeued, claimed by {by}, done by {done}"),
            _ => "NOT done by another member".to_owned(),
        },
        w.name,
        plural(stall.others_done as usize, "item", "items"),
        if stall.others_lost {
            "but a lease of theirs was LOST"
        } else {
            "their leases and the session untouched"
        },
    )
}

/// What became of item `id`: who completed it.
fn fate(run: &Run, id: u64) -> String {
    match run.done_by.get(&id) {
        Some(by) => format!("done by {by}"),
        None if run.unreported.contains(&id) => "completed, never reported".to_owned(),
        None => "NOT done".to_owned(),
    }
}

/// True when item `id` was completed, reported or not.
fn done(run: &Run, id: u64) -> bool {
    run.done_by.contains_key(&id) || run.unreported.contains(&id)
}

/// The scheduled job's summary line: when it ran.
fn scheduled_line(run: &Run, delays: bool) -> Option<String> {
    let Some(s) = &run.scheduled else {
        return (!delays).then(|| "  scheduled job: none (this store keeps no delays)".to_owned());
    };
    let ran = match &s.claimed {
        Some((by, after)) => format!("claimed {} after it by {by}", secs(*after)),
        None => "NEVER claimed".to_owned(),
    };
    Some(format!(
        "  scheduled job: item #{}, due {} after its enqueue (by the store's clock): {ran}, {}",
        s.id,
        secs(s.due),
        fate(run, s.id)
    ))
}

/// The retried failure's summary line.
fn flaky_line(run: &Run) -> Option<String> {
    let f = run.flaky.as_ref()?;
    let Some((by, _)) = &f.failed else {
        return Some(format!(
            "  retried failure: item #{} NEVER failed (its first attempt was not seen)",
            f.id
        ));
    };
    let again = match &f.again {
        Some((by, attempt, after)) => {
            format!(
                "claimed again {} later by {by} (attempt {attempt})",
                secs(*after)
            )
        }
        None => "NEVER claimed again".to_owned(),
    };
    Some(format!(
        "  retried failure: item #{} failed on its first attempt ({by}, on purpose), handed back to be tried again after a backoff of up to {}: {again}, {}",
        f.id,
        secs(RETRY_BACKOFF),
        fate(run, f.id)
    ))
}

/// Says what the run showed, and answers what it did not. Not safety invariants: a
/// run that could not stage them (too few items) or saw them late is still correct,
/// but it did not show what it promised, and says so in its result and its exit
/// status.
fn shown(run: &mut Run, deaths: &Deaths, delays: bool) -> Vec<String> {
    let mut not_shown: Vec<String> = Vec::new();
    let mut lines: Vec<(bool, String)> = Vec::new();
    let members = run.members_per_worker as u64;
    for w in &run.workers {
        // Declared by any checker, its session's token and its members' swept, each
        // member counted: the store's history says so.
        let death = process_death(deaths, w);
        let declared = death
            .as_ref()
            .is_some_and(|d| d.swept && d.members == members);
        let (_, held_requeued) = held_items(run, w);
        let count = plural(members as usize, "member", "members");
        match w.role {
            Role::Normal => {}
            Role::Killed { .. } => lines.push((
                declared && held_requeued,
                format!(
                    "the killed {} declared dead, its items requeued: ONE death of its session, with its {count}",
                    w.name
                ),
            )),
            Role::Frozen { at, .. } => {
                let while_frozen = death.as_ref().is_some_and(|d| {
                    let resumed = match w.role {
                        Role::Frozen {
                            resumed: Some(r), ..
                        } => r,
                        _ => Instant::now(),
                    };
                    d.at >= at && d.at <= resumed
                });
                lines.push((
                    declared && held_requeued && while_frozen,
                    format!(
                        "the frozen {} declared dead while frozen, its items requeued: ONE death of its session, with its {count}",
                        w.name
                    ),
                ));
                lines.push((
                    stopped_members(w) == w.members.len() && !w.lost.is_empty(),
                    format!(
                        "every member of {} stopped when it resumed (their checks fail on the session's deadline)",
                        w.name
                    ),
                ));
                let fenced: usize = w.members.iter().map(|m| m.fenced.len()).sum();
                lines.push((
                    fenced >= 1,
                    format!("{}'s late completion refused by fencing", w.name),
                ));
                lines.push((
                    w.tokens.len() > 1 && w.members.iter().all(|m| m.tokens.len() > 1),
                    format!(
                        "{}'s session re-opened and its members re-joined with new tokens",
                        w.name
                    ),
                ));
            }
        }
    }
    let staged = |fault: fn(&Role) -> bool| run.workers.iter().any(|w| fault(&w.role));
    let killed = staged(|r| matches!(r, Role::Killed { .. }));
    let frozen = staged(|r| matches!(r, Role::Frozen { .. }));
    let ran_out = "the items ran out before it was staged: use more --items";
    if !killed {
        lines.push((false, format!("a SIGKILL ({ran_out})")));
    }
    match &run.stall {
        Some(stall) if stall.hung.is_some() => {
            lines.push((
                stall.stalled.is_some(),
                "a stuck member's watchdog released it alone (cause stalled)".to_owned(),
            ));
            let another = match (&stall.taken_by, stall.hung) {
                (Some(by), Some((n, ..))) => *by != run.workers[stall.worker].members[n].name,
                _ => false,
            };
            lines.push((
                another && stall.redone,
                "the stuck member's item requeued and done by another member".to_owned(),
            ));
            lines.push((
                stall.others_done > 0 && !stall.others_lost,
                "the stuck member's fellow members kept working, their process untouched"
                    .to_owned(),
            ));
        }
        _ => lines.push((false, format!("a stuck job ({ran_out})"))),
    }
    if !frozen {
        lines.push((false, format!("a SIGSTOP ({ran_out})")));
    }
    match &run.scheduled {
        Some(s) => lines.push((
            s.claimed.is_some() && done(run, s.id),
            "the scheduled job run once due, not before".to_owned(),
        )),
        None if delays => lines.push((false, format!("a scheduled job ({ran_out})"))),
        None => {}
    }
    if let Some(f) = &run.flaky {
        lines.push((
            f.failed.is_some() && f.again.is_some() && done(run, f.id),
            "a failed job retried after its backoff and done".to_owned(),
        ));
    }
    for (ok, what) in lines {
        run.view.say(&format!(
            "  {} {what}",
            if ok { "shown:" } else { "NOT shown:" }
        ));
        if !ok {
            not_shown.push(what);
        }
    }
    not_shown
}
