//! The line protocol between a worker process and the parent.
//!
//! From the worker, on its stdout: one fact per line, as JSON, said by the worker's
//! session or by one of its members (`{"who":{"member":1},"fact":"claimed","id":7,
//! "token":9,"attempt":1}`). To the worker, on its stdin: one command per line
//! ([`STALL`]); the end of its stdin means the parent is gone.

use std::io::Write;

use serde::{Deserialize, Serialize};

/// The command that makes the next job one of the worker's members claims hang: its
/// handler waits without reporting progress, until the runner stops it.
pub const STALL: &str = "stall";

/// Who in a worker process says a fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Who {
    /// The process's session (its one lease in the space `sessions`).
    Session,
    /// Its member number `n`, counted from 0.
    Member(usize),
}

/// One fact a worker reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
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
    /// Its work on `id` under `token` stopped before the handler answered: the runner
    /// dropped it (its lease was lost, or the runner shut down).
    Cancelled { id: u64, token: u64 },
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

/// One line: who says which fact.
#[derive(Serialize, Deserialize)]
struct Line {
    who: Who,
    #[serde(flatten)]
    fact: Fact,
}

impl Fact {
    /// Parses a line; `None` for anything that is not a fact.
    pub fn parse(line: &str) -> Option<(Who, Fact)> {
        let Line { who, fact } = serde_json::from_str(line).ok()?;
        Some((who, fact))
    }

    /// Writes the fact, said by `who`, to stdout as one line and flushes, so the
    /// parent sees it at once. A closed stdout (the parent is gone) is ignored: the
    /// worker notices through stdin.
    pub fn send(self, who: Who) {
        let Ok(line) = serde_json::to_string(&Line { who, fact: self }) else {
            return;
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let reason = "local deadline passed\nand more".to_owned();
        for fact in [
            Fact::Claimed {
                id: 7,
                token: 3,
                attempt: 2,
            },
            Fact::Lost { token: 3, reason },
        ] {
            for who in [Who::Session, Who::Member(11)] {
                let line = serde_json::to_string(&Line {
                    who,
                    fact: fact.clone(),
                });
                assert_eq!(Fact::parse(&line.unwrap()), Some((who, fact.clone())));
            }
        }
        assert_eq!(Fact::parse("noise"), None);
        assert_eq!(
            Fact::parse(r#"{"who":"session","fact":"done","id":1}"#),
            None
        );
    }
}
