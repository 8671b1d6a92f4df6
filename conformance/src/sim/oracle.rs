//! The simulation's record of what happened, in one order, and the checks run over it.
//!
//! Every record gets a position in one total order (a mutex serialises them) and the
//! moment it was made. The checks judge ORDER and ownership; the only use of the
//! moments is to excuse an overlap whose first worker was told to stop at least the
//! stop margin before the second started (a worker that ignores its signal is its own
//! fault), so no check can fail because a machine was slow.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liveness_core::{FencingToken, ItemId};

use crate::faults::{Applied, Observer};

/// What a record is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A worker of the token began a step of side effects on the item (after its
    /// "may I still act?" check passed).
    StepBegin {
        /// The item.
        id: ItemId,
        /// The token it was claimed under.
        token: FencingToken,
    },
    /// That step's side effect landed.
    StepEnd {
        /// The item.
        id: ItemId,
        /// The token it was claimed under.
        token: FencingToken,
    },
    /// The work on the item under the token was told to stop (its cancellation fired).
    Told {
        /// The item.
        id: ItemId,
        /// The token.
        token: FencingToken,
    },
    /// A leader with the token began an act.
    LeadBegin {
        /// The leadership's token.
        token: FencingToken,
    },
    /// That act landed.
    LeadEnd {
        /// The leadership's token.
        token: FencingToken,
    },
    /// The leadership was told to stop (its cancellation fired).
    LeadTold {
        /// The leadership's token.
        token: FencingToken,
    },
    /// A checker emitted `Died` for the token.
    Died {
        /// The dead token.
        token: FencingToken,
    },
    /// The store applied a call sent at position `sent`.
    Applied {
        /// Where in the order the call was sent.
        sent: u64,
        /// What it did.
        call: Applied,
    },
    /// Something the driver did (a fault), for the failure report.
    Note(String),
}

/// One record, with its position and moment.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its position in the total order.
    pub seq: u64,
    /// When it was recorded.
    pub at: Instant,
    /// What happened.
    pub record: Record,
}

/// The shared, totally ordered log of a run.
#[derive(Debug, Default)]
pub struct Log {
    entries: Mutex<Vec<Entry>>,
}

impl Log {
    /// A new, empty log.
    pub fn new() -> Arc<Log> {
        Arc::new(Log::default())
    }

    /// Appends a record; returns its position.
    pub fn push(&self, record: Record) -> u64 {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let seq = entries.len() as u64;
        entries.push(Entry {
            seq,
            at: Instant::now(),
            record,
        });
        seq
    }

    /// A copy of every entry so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Observer for Log {
    fn sent(&self) -> u64 {
        self.push(Record::Note(String::new()))
    }
    fn applied(&self, sent: u64, call: Applied) {
        self.push(Record::Applied { sent, call });
    }
}

/// Something the oracle found wrong.
pub type Violation = String;

/// The acts of one token on one subject (an item, or the leadership): positions of
/// its first and last act, and when it was first told to stop.
#[derive(Clone, Debug, Default)]
struct Span {
    first: Option<(u64, Instant)>,
    last: u64,
    told: Option<Instant>,
}

/// Finds overlapping acts: for each subject, the acts under an earlier token must all
/// come before the first act under a later one, unless the earlier token was told to
/// stop at least `margin` before that first act.
fn overlaps(spans: &BTreeMap<FencingToken, Span>, margin: Duration, what: &str) -> Vec<Violation> {
    let mut found = Vec::new();
    let started: Vec<(FencingToken, &Span, u64, Instant)> = spans
        .iter()
        .filter_map(|(t, s)| s.first.map(|(seq, at)| (*t, s, seq, at)))
        .collect();
    for (a, span_a, first_a, _) in &started {
        for (b, _, first_b, at_b) in &started {
            if a == b || first_a > first_b || span_a.last < *first_b {
                continue;
            }
            let excused = matches!(span_a.told, Some(told) if told + margin <= *at_b);
            if !excused {
                let told = match span_a.told {
                    Some(t) if t <= *at_b => format!("told to stop only {:?} before", *at_b - t),
                    Some(t) => format!("told to stop only {:?} after", t - *at_b),
                    None => "never told to stop".to_string(),
                };
                found.push(format!(
                    "{what}: token {a} still acted (last act #{}) after token {b} began (#{first_b}); {a} was {told}",
                    span_a.last
                ));
            }
        }
    }
    found
}

fn note_act(span: &mut Span, e: &Entry) {
    if span.first.is_none() {
        span.first = Some((e.seq, e.at));
    }
    span.last = e.seq;
}

fn note_told(span: &mut Span, e: &Entry) {
    span.told.get_or_insert(e.at);
}

/// No two tokens work one item at once, and no two leaders act at once: for each
/// item (and for the leadership), every act under one token comes before the first
/// act under any token that began later, unless the earlier token was told to stop
/// at least `margin` before that first act.
pub fn check_exclusive(entries: &[Entry], margin: Duration) -> Vec<Violation> {
    let mut items: HashMap<ItemId, BTreeMap<FencingToken, Span>> = HashMap::new();
    let mut leaders: BTreeMap<FencingToken, Span> = BTreeMap::new();
    for e in entries {
        match &e.record {
            Record::StepBegin { id, token } | Record::StepEnd { id, token } => {
                note_act(items.entry(*id).or_default().entry(*token).or_default(), e)
            }
            Record::Told { id, token } => {
                note_told(items.entry(*id).or_default().entry(*token).or_default(), e)
            }
            Record::LeadBegin { token } | Record::LeadEnd { token } => {
                note_act(leaders.entry(*token).or_default(), e)
            }
            Record::LeadTold { token } => note_told(leaders.entry(*token).or_default(), e),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (id, spans) in &items {
        found.extend(overlaps(spans, margin, &format!("item {id}")));
    }
    found.extend(overlaps(&leaders, margin, "leadership"));
    found
}

/// What an applied call did to one item's ownership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Own {
    /// Claimed by the token.
    Claimed(FencingToken),
    /// Moved away from the token (failed, or requeued from it).
    LetGo(FencingToken),
    /// Completed by the token (gone).
    Completed(FencingToken),
}

/// One applied call on one item: where it was sent and answered in the log.
#[derive(Clone, Copy, Debug)]
struct Change {
    sent: u64,
    answered: u64,
    own: Own,
}

impl Change {
    /// True when `self` certainly took effect before `later` did: it was answered
    /// before `later` was sent. Concurrent calls are never ordered, so answers that
    /// arrive in another order than the store applied them cannot fool the check.
    fn before(&self, later: &Change) -> bool {
        self.answered < later.sent
    }
}

/// Every item's ownership changes, from the calls the store applied.
fn ownership(entries: &[Entry]) -> HashMap<ItemId, Vec<Change>> {
    let mut changes: HashMap<ItemId, Vec<Change>> = HashMap::new();
    for e in entries {
        let Record::Applied { sent, call } = &e.record else {
            continue;
        };
        let mut add = |id: ItemId, own| {
            let change = Change {
                sent: *sent,
                answered: e.seq,
                own,
            };
            changes.entry(id).or_default().push(change);
        };
        match call {
            Applied::Claimed { token, ids } => {
                ids.iter().for_each(|id| add(*id, Own::Claimed(*token)))
            }
            Applied::Failed { token, id } => add(*id, Own::LetGo(*token)),
            Applied::Swept { token, moved } => moved
                .requeued
                .iter()
                .chain(&moved.dead_lettered)
                .for_each(|id| add(*id, Own::LetGo(*token))),
            Applied::Completed { token, id } => add(*id, Own::Completed(*token)),
            Applied::Reaped { .. } => {}
        }
    }
    changes
}

/// Every completion the store accepted came from the token that owned the item: the
/// token's own claim certainly came before it, and nothing certainly between the two
/// took the item away (another token's claim, a requeue or fail from this token, a
/// completion).
pub fn check_fenced_completions(entries: &[Entry]) -> Vec<Violation> {
    let mut found = Vec::new();
    for (id, changes) in ownership(entries) {
        for done in &changes {
            let Own::Completed(token) = done.own else {
                continue;
            };
            let claim = changes
                .iter()
                .filter(|c| c.own == Own::Claimed(token) && c.before(done))
                .max_by_key(|c| c.answered);
            let Some(claim) = claim else {
                found.push(format!(
                    "the store accepted item {id}'s completion by token {token} (sent #{}), which never claimed it before",
                    done.sent
                ));
                continue;
            };
            let taken = changes.iter().find(|c| {
                claim.before(c)
                    && c.before(done)
                    && match c.own {
                        Own::Claimed(other) => other != token,
                        Own::LetGo(from) => from == token,
                        Own::Completed(_) => true,
                    }
            });
            if let Some(taken) = taken {
                found.push(format!(
                    "the store accepted item {id}'s completion by token {token} (sent #{}) after {:?} (answered #{}) took the item from it",
                    done.sent, taken.own, taken.answered
                ));
            }
        }
    }
    found
}

/// Each death was declared once: one `reap` answered true, or one member declared
/// dead by the sweep of its session's death ([`liveness_core::Sweep::members`]), per
/// token, and one `Died` event per token.
pub fn check_deaths_once(entries: &[Entry]) -> Vec<Violation> {
    let mut reaped: HashMap<FencingToken, usize> = HashMap::new();
    let mut died: HashMap<FencingToken, usize> = HashMap::new();
    for e in entries {
        match &e.record {
            Record::Applied {
                call: Applied::Reaped { token, .. },
                ..
            } => *reaped.entry(*token).or_default() += 1,
            Record::Applied {
                call: Applied::Swept { moved, .. },
                ..
            } => {
                for member in &moved.members {
                    *reaped.entry(member.token).or_default() += 1;
                }
            }
            Record::Died { token } => *died.entry(*token).or_default() += 1,
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (what, counts) in [
        ("reaped (or declared dead by a session's sweep)", &reaped),
        ("declared Died", &died),
    ] {
        for (token, n) in counts {
            if *n > 1 {
                found.push(format!("token {token} was {what} {n} times"));
            }
        }
    }
    found
}

/// No worker began a step on an item after its work on it was told to stop: the
/// check before each step fails from the instant the cancellation fires (for a
/// member riding a session, from the instant the session's deadline passed or the
/// session was lost), and a worker records its step right after that check, so a
/// step recorded after the signal acted past the deadline.
pub fn check_no_act_after_told(entries: &[Entry]) -> Vec<Violation> {
    let mut told: HashMap<(ItemId, FencingToken), u64> = HashMap::new();
    let mut found = Vec::new();
    for e in entries {
        match &e.record {
            Record::Told { id, token } => {
                told.entry((*id, *token)).or_insert(e.seq);
            }
            Record::StepBegin { id, token } => {
                if let Some(at) = told.get(&(*id, *token)) {
                    found.push(format!(
                        "item {id}: token {token} began a step (#{}) after it was told to stop (#{at}): it acted past its deadline",
                        e.seq
                    ));
                }
            }
            _ => {}
        }
    }
    found
}

/// Every item in `ids` was completed (the store accepted a completion of it).
pub fn check_all_completed(entries: &[Entry], ids: &[ItemId]) -> Vec<Violation> {
    let done: std::collections::HashSet<ItemId> = entries
        .iter()
        .filter_map(|e| match &e.record {
            Record::Applied {
                call: Applied::Completed { id, .. },
                ..
            } => Some(*id),
            _ => None,
        })
        .collect();
    ids.iter()
        .filter(|id| !done.contains(id))
        .map(|id| format!("item {id} was never completed"))
        .collect()
}

/// The last `n` entries that `keep` selects, one a line with their position and
/// milliseconds since the first entry, for a failure report.
pub fn tail(entries: &[Entry], n: usize, keep: impl Fn(&Record) -> bool) -> String {
    let start = entries.first().map(|e| e.at);
    let mut out = String::new();
    let shown: Vec<&Entry> = entries.iter().filter(|e| keep(&e.record)).collect();
    for e in shown.iter().skip(shown.len().saturating_sub(n)) {
        let ms = start.map_or(0, |s| e.at.saturating_duration_since(s).as_millis());
        let _ = writeln!(out, "  #{:<6} {:>6} ms  {:?}", e.seq, ms, e.record);
    }
    out
}

/// True for the records a failure report shows: everything but empty claims and the
/// send markers of observed calls.
pub fn worth_showing(record: &Record) -> bool {
    match record {
        Record::Note(s) => !s.is_empty(),
        Record::Applied {
            call: Applied::Claimed { ids, .. },
            ..
        } => !ids.is_empty(),
        _ => true,
    }
}

/// True for the records about item `id` (acts, signals, ownership changes), the
/// leadership when `id` is `None`, and the driver's notes.
pub fn about(record: &Record, id: Option<ItemId>) -> bool {
    let item = |i: &ItemId| Some(*i) == id;
    match record {
        Record::StepBegin { id, .. } | Record::StepEnd { id, .. } | Record::Told { id, .. } => {
            item(id)
        }
        Record::LeadBegin { .. } | Record::LeadEnd { .. } | Record::LeadTold { .. } => id.is_none(),
        Record::Applied { call, .. } => match call {
            Applied::Claimed { ids, .. } => ids.iter().any(item),
            Applied::Completed { id, .. } | Applied::Failed { id, .. } => item(id),
            Applied::Swept { moved, .. } => {
                moved.requeued.iter().chain(&moved.dead_lettered).any(item)
            }
            Applied::Reaped { .. } => true,
        },
        Record::Died { .. } => true,
        Record::Note(s) => !s.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> FencingToken {
        FencingToken(n)
    }

    /// Builds a log from records, `ms` milliseconds apart.
    fn log(records: Vec<(u64, Record)>) -> Vec<Entry> {
        let start = Instant::now();
        records
            .into_iter()
            .enumerate()
            .map(|(seq, (ms, record))| Entry {
                seq: seq as u64,
                at: start + Duration::from_millis(ms),
                record,
            })
            .collect()
    }

    fn begin(id: u64, token: u64) -> Record {
        Record::StepBegin {
            id: ItemId(id),
            token: t(token),
        }
    }

    fn end(id: u64, token: u64) -> Record {
        Record::StepEnd {
            id: ItemId(id),
            token: t(token),
        }
    }

    fn told(id: u64, token: u64) -> Record {
        Record::Told {
            id: ItemId(id),
            token: t(token),
        }
    }

    fn applied(sent: u64, call: Applied) -> Record {
        Record::Applied { sent, call }
    }

    const MARGIN: Duration = Duration::from_millis(100);

    #[test]
    fn a_handover_after_the_first_worker_stopped_is_clean() {
        let entries = log(vec![
            (0, begin(1, 1)),
            (10, end(1, 1)),
            (20, told(1, 1)),
            (30, begin(1, 2)),
            (40, end(1, 2)),
        ]);
        assert_eq!(check_exclusive(&entries, MARGIN), Vec::<String>::new());
    }

    #[test]
    fn a_worker_acting_after_the_next_one_began_is_caught() {
        // Woken from a freeze: acts before it learns it lost.
        let entries = log(vec![
            (0, begin(1, 1)),
            (10, end(1, 1)),
            (500, begin(1, 2)),
            (600, begin(1, 1)),
            (601, told(1, 1)),
        ]);
        let found = check_exclusive(&entries, MARGIN);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("item #1: token 1 still acted"),
            "{found:?}"
        );
    }

    #[test]
    fn a_worker_told_less_than_the_margin_before_is_caught_and_more_is_excused() {
        // Told 20 ms before the next began, still in its step: handed away too early.
        let early = log(vec![
            (0, begin(1, 1)),
            (80, told(1, 1)),
            (100, begin(1, 2)),
            (110, end(1, 1)),
        ]);
        assert_eq!(check_exclusive(&early, MARGIN).len(), 1);
        // Told a whole margin before: the overlap is the worker's own fault.
        let late = log(vec![
            (0, begin(1, 1)),
            (10, told(1, 1)),
            (110, begin(1, 2)),
            (120, end(1, 1)),
        ]);
        assert_eq!(check_exclusive(&late, MARGIN), Vec::<String>::new());
    }

    #[test]
    fn two_leaders_acting_at_once_are_caught() {
        let entries = log(vec![
            (0, Record::LeadBegin { token: t(1) }),
            (10, Record::LeadBegin { token: t(2) }),
            (20, Record::LeadEnd { token: t(1) }),
        ]);
        let found = check_exclusive(&entries, MARGIN);
        assert!(
            found.iter().any(|v| v.starts_with("leadership")),
            "{found:?}"
        );
    }

    fn claim_of(token: u64, id: u64) -> Applied {
        Applied::Claimed {
            token: t(token),
            ids: vec![ItemId(id)],
        }
    }

    fn complete_of(token: u64, id: u64) -> Applied {
        Applied::Completed {
            token: t(token),
            id: ItemId(id),
        }
    }

    fn sweep_of(token: u64, id: u64) -> Applied {
        Applied::Swept {
            token: t(token),
            moved: liveness_core::Sweep::new(vec![ItemId(id)], Vec::new()),
        }
    }

    #[test]
    fn a_completion_by_a_token_that_no_longer_owns_the_item_is_caught() {
        let (claim, complete) = (claim_of, complete_of);
        let requeue = sweep_of(1, 7);
        // Claimed by 1, requeued, claimed by 2: a completion by 1 sent after that.
        let stale = log(vec![
            (0, applied(0, claim(1, 7))),
            (1, applied(1, requeue.clone())),
            (2, applied(2, claim(2, 7))),
            (3, applied(3, complete(1, 7))),
        ]);
        let found = check_fenced_completions(&stale);
        assert_eq!(found.len(), 1, "{found:?}");
        // Requeued and not claimed again: still not 1's.
        let pending = log(vec![
            (0, applied(0, claim(1, 7))),
            (1, applied(1, requeue)),
            (2, applied(2, complete(1, 7))),
        ]);
        assert_eq!(check_fenced_completions(&pending).len(), 1);
        // The owner's own completion is fine.
        let fine = log(vec![
            (0, applied(0, claim(2, 7))),
            (1, applied(1, complete(2, 7))),
        ]);
        assert_eq!(check_fenced_completions(&fine), Vec::<String>::new());
    }

    #[test]
    fn answers_arriving_out_of_order_are_not_a_stale_completion() {
        // A requeue from token 1 and a claim by token 2 run concurrently (the claim
        // was applied after the requeue, but answered first); 2 then completes.
        let entries = log(vec![
            (0, applied(0, claim_of(1, 7))),
            (1, Record::Note(String::new())),
            (2, Record::Note(String::new())),
            (3, applied(2, claim_of(2, 7))),
            (4, applied(1, sweep_of(1, 7))),
            (5, applied(5, complete_of(2, 7))),
        ]);
        assert_eq!(check_fenced_completions(&entries), Vec::<String>::new());
    }

    #[test]
    fn a_step_begun_after_the_signal_is_caught_and_one_before_is_not() {
        let entries = log(vec![(0, begin(1, 1)), (10, told(1, 1)), (20, end(1, 1))]);
        assert_eq!(check_no_act_after_told(&entries), Vec::<String>::new());
        let entries = log(vec![(0, told(1, 1)), (10, begin(1, 1))]);
        let found = check_no_act_after_told(&entries);
        assert!(found[0].contains("past its deadline"), "{found:?}");
    }

    #[test]
    fn a_member_declared_dead_twice_by_a_sweep_is_caught() {
        let member = liveness_core::ExpiredLease::new(
            liveness_core::Key::member("m").unwrap(),
            liveness_core::HolderId::new("h").unwrap(),
            t(5),
        );
        let swept = |sent| {
            applied(
                sent,
                Applied::Swept {
                    token: t(4),
                    moved: liveness_core::Sweep::default().with_members(vec![member.clone()]),
                },
            )
        };
        let entries = log(vec![(0, swept(0))]);
        assert_eq!(check_deaths_once(&entries), Vec::<String>::new());
        let entries = log(vec![(0, swept(0)), (10, swept(1))]);
        let found = check_deaths_once(&entries);
        assert!(found[0].contains("token 5"), "{found:?}");
    }

    #[test]
    fn a_death_declared_twice_is_caught() {
        let key = liveness_core::Key::member("m").unwrap();
        let reaped = || Applied::Reaped {
            key: key.clone(),
            token: t(3),
        };
        let entries = log(vec![
            (0, applied(0, reaped())),
            (1, Record::Died { token: t(3) }),
            (2, applied(2, reaped())),
            (3, Record::Died { token: t(3) }),
        ]);
        assert_eq!(check_deaths_once(&entries).len(), 2);
    }

    #[test]
    fn an_item_never_completed_is_caught() {
        let entries = log(vec![(
            0,
            applied(
                0,
                Applied::Completed {
                    token: t(1),
                    id: ItemId(1),
                },
            ),
        )]);
        let found = check_all_completed(&entries, &[ItemId(1), ItemId(2)]);
        assert_eq!(found, vec!["item #2 was never completed".to_string()]);
    }
}
