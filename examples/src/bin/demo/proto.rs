//! The line protocol between a worker process and the parent.
//!
//! From the worker, on its stdout: one fact per line, said by the worker's session
//! (`session joined 5`) or by one of its members, numbered from 1 (`m2 claimed 7 9
//! 1`); words separated by spaces. To the worker, on its stdin: one command per line
//! ([`STALL`]); the end of its stdin means the parent is gone.

use std::io::Write;

/// The command that makes the next job one of the worker's members claims hang: its
/// handler waits without reporting progress, until the runner stops it.
pub const STALL: &str = "stall";

/// Who in a worker process says a fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Who {
    /// The process's session (its one lease in the space `sessions`).
    Session,
    /// Its member number `n`, counted from 0 (written `m{n + 1}`).
    Member(usize),
}

/// One fact a worker reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fact {
    /// The lease was taken (at start, or at a re-open or re-join) under `token`.
    Joined { token: u64 },
    /// It claimed item `id` under `token`; `attempt` counts this claim.
    Claimed { id: u64, token: u64, attempt: u32 },
    /// The store accepted its completion of `id` under `token`.
    Done { id: u64, token: u64 },
    /// Its job on `id` under `token` failed and the item went back to pending, to be
    /// tried again after the backoff.
    Retried { id: u64, token: u64 },
    /// Its work on `id` under `token` stopped before the handler answered (the runner
    /// dropped it), for `reason`: what its lease's loss said.
    Cancelled { id: u64, token: u64, reason: String },
    /// The store refused its completion of `id` under `token`: `Error::Fenced`.
    Fenced { id: u64, token: u64 },
    /// Its job on `id` under `token` hangs: the handler waits without reporting
    /// progress, as the parent asked ([`STALL`]).
    Hung { id: u64, token: u64 },
    /// Its watchdog found no progress for the progress timeout: the lease `token` was
    /// released alone, its items handed back.
    Stalled { token: u64 },
    /// The lease `token` was lost (the cancellation fired) for `reason`.
    Lost { token: u64, reason: String },
    /// It left gracefully, releasing `token`.
    Left { token: u64 },
    /// Something failed; the message is for the log.
    Error { message: String },
}

impl Who {
    fn word(self) -> String {
        match self {
            Who::Session => "session".to_owned(),
            Who::Member(n) => format!("m{}", n + 1),
        }
    }

    fn parse(word: &str) -> Option<Who> {
        if word == "session" {
            return Some(Who::Session);
        }
        let n: usize = word.strip_prefix('m')?.parse().ok()?;
        Some(Who::Member(n.checked_sub(1)?))
    }
}

impl Fact {
    /// The line written for this fact, said by `who`.
    pub fn line(&self, who: Who) -> String {
        let fact = match self {
            Fact::Joined { token } => format!("joined {token}"),
            Fact::Claimed { id, token, attempt } => format!("claimed {id} {token} {attempt}"),
            Fact::Done { id, token } => format!("done {id} {token}"),
            Fact::Retried { id, token } => format!("retried {id} {token}"),
            Fact::Cancelled { id, token, reason } => format!("cancelled {id} {token} {reason}"),
            Fact::Fenced { id, token } => format!("fenced {id} {token}"),
            Fact::Hung { id, token } => format!("hung {id} {token}"),
            Fact::Stalled { token } => format!("stalled {token}"),
            Fact::Lost { token, reason } => format!("lost {token} {reason}"),
            Fact::Left { token } => format!("left {token}"),
            Fact::Error { message } => format!("error {}", message.replace('\n', " ")),
        };
        format!("{} {fact}", who.word())
    }

    /// Parses a line; `None` for anything that is not a fact.
    pub fn parse(line: &str) -> Option<(Who, Fact)> {
        let (who, line) = line.trim_end().split_once(' ')?;
        let who = Who::parse(who)?;
        let (word, rest) = line.split_once(' ')?;
        let words: Vec<&str> = rest.split(' ').collect();
        let n = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        // The words after the first `i`, as one text.
        let text_after = |i: usize| {
            let text = words.get(i..).map(|w| w.join(" ")).unwrap_or_default();
            (!text.is_empty()).then_some(text)
        };
        let fact = match word {
            "joined" => Fact::Joined { token: n(0)? },
            "claimed" => Fact::Claimed {
                id: n(0)?,
                token: n(1)?,
                attempt: u32::try_from(n(2)?).ok()?,
            },
            "done" => Fact::Done {
                id: n(0)?,
                token: n(1)?,
            },
            "cancelled" => Fact::Cancelled {
                id: n(0)?,
                token: n(1)?,
                reason: text_after(2)?,
            },
            "retried" => Fact::Retried {
                id: n(0)?,
                token: n(1)?,
            },
            "fenced" => Fact::Fenced {
                id: n(0)?,
                token: n(1)?,
            },
            "hung" => Fact::Hung {
                id: n(0)?,
                token: n(1)?,
            },
            "stalled" => Fact::Stalled { token: n(0)? },
            "lost" => Fact::Lost {
                token: n(0)?,
                reason: text_after(1)?,
            },
            "left" => Fact::Left { token: n(0)? },
            "error" => Fact::Error {
                message: rest.to_owned(),
            },
            _ => return None,
        };
        Some((who, fact))
    }

    /// Writes the fact, said by `who`, to stdout and flushes, so the parent sees it
    /// at once. A closed stdout (the parent is gone) is ignored: the worker notices
    /// through stdin.
    pub fn send(&self, who: Who) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", self.line(who));
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for f in [
            Fact::Joined { token: 3 },
            Fact::Claimed {
                id: 7,
                token: 3,
                attempt: 2,
            },
            Fact::Done { id: 7, token: 3 },
            Fact::Retried { id: 7, token: 3 },
            Fact::Cancelled {
                id: 7,
                token: 3,
                reason: "given up by its holder".to_owned(),
            },
            Fact::Fenced { id: 7, token: 3 },
            Fact::Hung { id: 7, token: 3 },
            Fact::Stalled { token: 3 },
            Fact::Lost {
                token: 3,
                reason: "local deadline passed".to_owned(),
            },
            Fact::Left { token: 3 },
            Fact::Error {
                message: "boom".to_owned(),
            },
        ] {
            for who in [Who::Session, Who::Member(0), Who::Member(11)] {
                assert_eq!(Fact::parse(&f.line(who)), Some((who, f.clone())));
            }
        }
        assert_eq!(
            Fact::line(&Fact::Joined { token: 3 }, Who::Member(1)),
            "m2 joined 3"
        );
        assert_eq!(Fact::parse("noise"), None);
        assert_eq!(Fact::parse("m1 done x"), None);
        assert_eq!(Fact::parse("m0 done 1 2"), None);
        assert_eq!(Fact::parse("done 1 2"), None);
        assert_eq!(Fact::parse("m1 lost 3"), None);
    }
}
