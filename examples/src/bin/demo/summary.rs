//! The end of the run: the parent's tally against the store, each process death as
//! the store's death history tells it (one per session, counting its members), the
//! stuck job, the scheduled job, the retried failure, the invariants, and what the
//! run was meant to show.

use std::process::ExitCode;

use liveness::{DeathCause, ItemId, ItemState, Store, Swept};
use tokio::time::Instant;

use crate::deaths::Deaths;
use crate::parent::Run;
use crate::stage::{Role, Worker};
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
    /// The members that died with it (the session record's count on a store with
    /// native sessions, the members' own records on one without), and what the
    /// sweeps of its records moved.
    pub moved: Swept,
    /// True once every one of its records was swept.
    pub swept: bool,
}

/// The death of worker `w`'s session under the token it held when its fault was
/// staged, with its members', if the store recorded it.
pub fn process_death(deaths: &Deaths, w: &Worker) -> Option<ProcessDeath> {
    let session = (deaths.list.iter()).find(|d| d.session && w.fault_of(d).is_some())?;
    let (mut moved, mut swept) = (Swept::default(), true);
    let members = (deaths.list.iter()).filter(|d| !d.session && w.fault_of(d).is_some());
    for seq in std::iter::once(session.seq).chain(members.map(|d| d.seq)) {
        let record = deaths.swept(seq);
        swept &= record.is_some();
        let record = record.unwrap_or_default();
        moved.members += record.members + u64::from(seq != session.seq);
        moved.requeued += record.requeued;
        moved.dead_lettered += record.dead_lettered;
    }
    Some(ProcessDeath {
        token: session.token,
        cause: session.cause,
        at: session.at,
        moved,
        swept,
    })
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

/// What the run showed, and what it did not: `(shown, what)`. Not safety invariants: a
/// run that could not stage them (too few items) or saw them late is still correct,
/// but it did not show what it promised, and says so in its result and its exit
/// status.
type Shown = Vec<(bool, String)>;

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
    for id in ids {
        if run.done_by_id.contains_key(&id.0) {
            continue;
        }
        match store.item(*id).await {
            // Completed items are deleted: this one was completed, but its worker
            // could not report it (killed between the completion and the report).
            Ok(None) => _ = run.unreported.insert(id.0),
            Ok(Some(rec)) if rec.state == ItemState::DeadLettered => dead_lettered.push(*id),
            Ok(Some(_)) => lost.push(*id),
            Err(e) => {
                run.failures.push(format!("cannot read item {id}: {e}"));
                lost.push(*id);
            }
        }
    }
    let re_executed = run.claims_by_id.values().filter(|n| **n > 1).count();
    let fenced: Vec<String> = (run.workers.iter())
        .flat_map(|w| &w.members)
        .flat_map(|m| {
            (m.fenced.iter()).map(|(id, t)| format!(" ({}, item #{id}, token {t})", m.name))
        })
        .collect();
    let mut lines = vec![
        String::new(),
        "summary".to_owned(),
        format!("  store: {url}"),
        match temporary {
            true => "  (a temporary file, removed now: give --store sqlite:///PATH/demo.db to keep it for `liveness deaths`)".to_owned(),
            false => format!("  look again: liveness --store '{url}' deaths (or members, items; crate liveness-cli)"),
        },
        format!(
            "  items: {} enqueued, {} done at least once, {} lost, {} dead-lettered",
            run.total,
            run.total as usize - lost.len() - dead_lettered.len(),
            lost.len(),
            dead_lettered.len()
        ),
    ];
    if !run.unreported.is_empty() {
        lines.push(format!(
            "  completed but never reported (its worker was killed in between; the store confirms it): {}",
            run.unreported.len()
        ));
    }
    lines.push(format!(
        "  re-executed after a requeue (at-least-once): {}",
        plural(re_executed, "item", "items")
    ));
    lines.push(format!(
        "  requeued after a death: {} from {} (the store's death history)",
        plural(deaths.requeued() as usize, "item", "items"),
        plural(deaths.list.len(), "death", "deaths")
    ));
    lines.push(format!(
        "  stale completions refused by fencing: {}{}",
        fenced.len(),
        fenced.concat()
    ));

    let mut shown = Shown::new();
    for w in &run.workers {
        lines.extend(worker_scene(&run, deaths, w, &mut shown));
    }
    // Any other death: a lease that lapsed without a staged fault.
    for d in &deaths.list {
        if run.workers.iter().any(|w| w.fault_of(d).is_some()) {
            continue;
        }
        let swept = deaths.swept(d.seq).unwrap_or_default();
        lines.push(format!(
            "  death of {}{} (its lease lapsed, token {}): {}, {}, {} requeued{}",
            if d.session { "the session of " } else { "" },
            d.name,
            d.token,
            d.cause,
            by(deaths, d.cause, d.token),
            plural(swept.requeued as usize, "item", "items"),
            dead_lettered_text(swept.dead_lettered),
        ));
    }
    let ran_out = "the items ran out before it was staged: use more --items";
    for (fault, name) in [("SIGKILL", "a SIGKILL"), ("SIGSTOP", "a SIGSTOP")] {
        let staged = (run.workers.iter())
            .any(|w| crate::stage::fault(w.role).is_some_and(|(f, _)| f == fault));
        if !staged {
            shown.push((false, format!("{name} ({ran_out})")));
        }
    }
    lines.push(stall_scene(&run, deaths, &mut shown, ran_out));
    let delays = store.capabilities().delays;
    lines.extend(scheduled_scene(&run, delays, &mut shown, ran_out));
    lines.extend(flaky_scene(&run, &mut shown));

    // Invariants.
    let clean = (run.workers.iter())
        .filter(|w| !matches!(w.role, Role::Killed { .. }))
        .all(|w| w.exited.is_some_and(|s| s.success()));
    let invariants = [
        (lost.is_empty(), "every item done at least once, none lost"),
        (dead_lettered.is_empty(), "no item dead-lettered"),
        (
            run.done_by_id.values().all(|n| *n == 1),
            "no completion accepted twice (a stale owner never completes)",
        ),
        (
            aborted || (run.counts.pending == 0 && run.counts.owned == 0),
            "the store holds no pending or owned item at the end",
        ),
        (deaths.each_once(), "each death declared exactly once"),
        (
            aborted || clean,
            "every worker that was not killed exited cleanly",
        ),
    ];
    for (ok, what) in invariants {
        let word = if ok {
            "invariant ok:"
        } else {
            "INVARIANT BROKEN:"
        };
        lines.push(format!("  {word} {what}"));
        if !ok {
            run.failures.push(what.to_owned());
        }
    }
    let mut not_shown = Vec::new();
    for (ok, what) in shown {
        lines.push(format!(
            "  {} {what}",
            if ok { "shown:" } else { "NOT shown:" }
        ));
        if !ok {
            not_shown.push(what);
        }
    }
    lines.extend(run.failures.iter().map(|f| format!("  problem: {f}")));
    let (result, code) = if !run.failures.is_empty() {
        ("FAILED".to_owned(), ExitCode::from(1))
    } else if !not_shown.is_empty() {
        let what = not_shown.join("; ");
        let result = format!("INCOMPLETE: every invariant held, but NOT shown: {what}");
        (result, ExitCode::from(3))
    } else {
        ("OK".to_owned(), ExitCode::SUCCESS)
    };
    lines.push(format!("  result: {result}"));
    for line in lines {
        run.view.say(&line);
    }
    code
}

/// Who declared a death of `cause` of `token`.
fn by(deaths: &Deaths, cause: DeathCause, token: u64) -> &'static str {
    match cause {
        DeathCause::Reaped if deaths.ours.contains_key(&token) => "by this demo's checker",
        DeathCause::Reaped => "by a checker beside the demo",
        _ => "by a new acquire of its key",
    }
}

/// `, N dead-lettered`, or nothing for none.
fn dead_lettered_text(n: u64) -> String {
    match n {
        0 => String::new(),
        n => format!(", {n} dead-lettered"),
    }
}

/// The killed or frozen worker `w`'s death line, and what it showed.
fn worker_scene(run: &Run, deaths: &Deaths, w: &Worker, shown: &mut Shown) -> Option<String> {
    let (how, signalled) = crate::stage::fault(w.role)?;
    let death = process_death(deaths, w);
    let (held, held_requeued) = held_items(run, w);
    // Declared by any checker, its session's token and its members' swept, each
    // member counted: the store's history says so.
    let members = run.members_per_worker;
    let declared = (death.as_ref()).is_some_and(|d| d.swept && d.moved.members == members as u64);
    let count = plural(members, "member", "members");
    let stopped = stopped_members(w);
    let fenced: usize = w.members.iter().map(|m| m.fenced.len()).sum();
    let rejoined = w.tokens.len() > 1 && w.members.iter().all(|m| m.tokens.len() > 1);
    match w.role {
        Role::Frozen { at, resumed } => {
            let while_frozen = (death.as_ref())
                .is_some_and(|d| d.at >= at && d.at <= resumed.unwrap_or_else(Instant::now));
            shown.extend([
                (
                    declared && held_requeued && while_frozen,
                    format!("the frozen {} declared dead while frozen, its items requeued: ONE death of its session, with its {count}", w.name),
                ),
                (
                    stopped == w.members.len() && !w.lost.is_empty(),
                    format!("every member of {} stopped when it resumed (their checks fail on the session's deadline)", w.name),
                ),
                (fenced >= 1, format!("{}'s late completion refused by fencing", w.name)),
                (
                    rejoined,
                    format!("{}'s session re-opened and its members re-joined with new tokens", w.name),
                ),
            ]);
        }
        _ => shown.push((
            declared && held_requeued,
            format!("the killed {} declared dead, its items requeued: ONE death of its session, with its {count}", w.name),
        )),
    }
    let d = death?;
    let mut line = format!(
        "  death of {} ({how}, token {}, its session): detected {} after the signal (ttl {}), {}: ONE process death with its {}, {} requeued",
        w.name,
        d.token,
        secs(d.at.saturating_duration_since(signalled)),
        secs(run.ttl.duration()),
        by(deaths, d.cause, d.token),
        plural(d.moved.members as usize, "member", "members"),
        plural(d.moved.requeued as usize, "item", "items"),
    );
    if !held.is_empty() {
        line.push_str(&format!(" ({held})"));
    }
    if !d.swept {
        line.push_str(" (its sweep NOT recorded)");
    }
    line.push_str(&dead_lettered_text(d.moved.dead_lettered));
    if matches!(w.role, Role::Frozen { .. }) {
        let tokens: Vec<String> = (w.members.iter())
            .filter(|m| m.tokens.len() > 1)
            .filter_map(|m| m.token().map(|t| t.to_string()))
            .collect();
        line.push_str(&format!(
            "; after SIGCONT: cancellation fired {}, {stopped} of its {} stopped (check() failed), {} refused, re-joined {}",
            if stopped == 0 { "NO" } else { "yes" },
            plural(w.members.len(), "member", "members"),
            plural(fenced, "late completion", "late completions"),
            match w.tokens.len() > 1 && !tokens.is_empty() {
                true => format!(
                    "with new token {} (session), {} (members)",
                    w.token().unwrap_or(0),
                    tokens.join(", ")
                ),
                false => "NO".to_owned(),
            }
        ));
    }
    Some(line)
}

/// How many of the frozen worker `w`'s members stopped when it resumed: each lost
/// the lease it held at the freeze (its check fails on the session's deadline).
fn stopped_members(w: &Worker) -> usize {
    (w.members.iter().zip(&w.fault_tokens.members))
        .filter(|(m, t)| m.lost.iter().any(|(lost, _)| Some(*lost) == **t))
        .count()
}

/// The stuck job's summary line, and what it showed.
fn stall_scene(run: &Run, deaths: &Deaths, shown: &mut Shown, ran_out: &str) -> String {
    let not_staged = format!("a stuck job ({ran_out})");
    let Some(stall) = &run.stall else {
        shown.push((false, not_staged));
        return "  stuck job: not staged".to_owned();
    };
    let w = &run.workers[stall.worker];
    let Some((n, id, token, hung_at)) = stall.hung else {
        shown.push((false, not_staged));
        return format!(
            "  stuck job: {} was asked to hang a job, but none of its members claimed one after",
            w.name
        );
    };
    let name = &w.members[n].name;
    let redone = match (&stall.taken_by, stall.redone, run.done_by.get(&id)) {
        (Some(by), true, Some(done)) if by != name => {
            Some(format!("requeued, claimed by {by}, done by {done}"))
        }
        _ => None,
    };
    shown.extend([
        (
            stall.stalled.is_some(),
            "a stuck member's watchdog released it alone (cause stalled)".to_owned(),
        ),
        (
            redone.is_some(),
            "the stuck member's item requeued and done by another member".to_owned(),
        ),
        (
            stall.others_done > 0 && !stall.others_lost,
            "the stuck member's fellow members kept working, their process untouched".to_owned(),
        ),
    ]);
    let released = match deaths.record_of(name, token) {
        Some(r) => format!(
            "the store's history: {} token {} {}",
            r.key, r.token, r.cause
        ),
        None => "its release NOT in the store's history".to_owned(),
    };
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
        redone.unwrap_or_else(|| "NOT done by another member".to_owned()),
        w.name,
        plural(stall.others_done as usize, "item", "items"),
        match stall.others_lost {
            true => "but a lease of theirs was LOST",
            false => "their leases and the session untouched",
        },
    )
}

/// What became of item `id`: who completed it, if anybody did.
fn fate(run: &Run, id: u64) -> Option<String> {
    match run.done_by.get(&id) {
        Some(by) => Some(format!("done by {by}")),
        None if run.unreported.contains(&id) => Some("completed, never reported".to_owned()),
        None => None,
    }
}

/// The scheduled job's summary line, and whether it ran once due.
fn scheduled_scene(run: &Run, delays: bool, shown: &mut Shown, ran_out: &str) -> Option<String> {
    let Some(s) = &run.scheduled else {
        return match delays {
            true => {
                shown.push((false, format!("a scheduled job ({ran_out})")));
                None
            }
            false => Some("  scheduled job: none (this store keeps no delays)".to_owned()),
        };
    };
    let fate = fate(run, s.id);
    let what = "the scheduled job run once due, not before".to_owned();
    shown.push((s.claimed.is_some() && fate.is_some(), what));
    let ran = match &s.claimed {
        Some((by, after)) => format!("claimed {} after it by {by}", secs(*after)),
        None => "NEVER claimed".to_owned(),
    };
    Some(format!(
        "  scheduled job: item #{}, due {} after its enqueue (by the store's clock): {ran}, {}",
        s.id,
        secs(s.due),
        fate.unwrap_or_else(|| "NOT done".to_owned())
    ))
}

/// The retried failure's summary line, and whether it was retried and done.
fn flaky_scene(run: &Run, shown: &mut Shown) -> Option<String> {
    let f = run.flaky.as_ref()?;
    let fate = fate(run, f.id);
    let what = "a failed job retried after its backoff and done".to_owned();
    shown.push((
        f.failed.is_some() && f.again.is_some() && fate.is_some(),
        what,
    ));
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
        fate.unwrap_or_else(|| "NOT done".to_owned())
    ))
}
