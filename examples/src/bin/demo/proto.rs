//! The line protocol from a worker to the parent: one fact per stdout line, words
//! separated by spaces.

use std::io::Write;

/// One fact a worker reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fact {
    /// The member acquired its lease (at start, or at a re-join) under `token`.
    Joined { token: u64 },
    /// It claimed item `id` under `token`; `attempt` counts this claim.
    Claimed { id: u64, token: u64, attempt: u32 },
    /// The store accepted its completion of `id` under `token`.
    Done { id: u64, token: u64 },
    /// Its cancellation signal fired while it worked on `id` under `token`.
    Cancelled { id: u64, token: u64 },
    /// The store refused its completion of `id` under `token`: `Error::Fenced`.
    Fenced { id: u64, token: u64 },
    /// Its heartbeat lost the lease `token` (the cancellation fired) for `reason`.
    Lost { token: u64, reason: String },
    /// It left gracefully, releasing `token`.
    Left { token: u64 },
    /// Something failed; the message is for the log.
    Error { message: String },
}

impl Fact {
    /// The line written for this fact.
    pub fn line(&self) -> String {
        match self {
            Fact::Joined { token } => format!("joined {token}"),
            Fact::Claimed { id, token, attempt } => format!("claimed {id} {token} {attempt}"),
            Fact::Done { id, token } => format!("done {id} {token}"),
            Fact::Cancelled { id, token } => format!("cancelled {id} {token}"),
            Fact::Fenced { id, token } => format!("fenced {id} {token}"),
            Fact::Lost { token, reason } => format!("lost {token} {reason}"),
            Fact::Left { token } => format!("left {token}"),
            Fact::Error { message } => format!("error {}", message.replace('\n', " ")),
        }
    }

    /// Parses a line; `None` for anything that is not a fact.
    pub fn parse(line: &str) -> Option<Fact> {
        let (word, rest) = line.trim_end().split_once(' ')?;
        let nums: Vec<u64> = rest.split(' ').map_while(|w| w.parse().ok()).collect();
        let n = |i: usize| nums.get(i).copied();
        Some(match word {
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
            },
            "fenced" => Fact::Fenced {
                id: n(0)?,
                token: n(1)?,
            },
            "lost" => {
                let (token, reason) = rest.split_once(' ')?;
                Fact::Lost {
                    token: token.parse().ok()?,
                    reason: reason.to_owned(),
                }
            }
            "left" => Fact::Left { token: n(0)? },
            "error" => Fact::Error {
                message: rest.to_owned(),
            },
            _ => return None,
        })
    }

    /// Writes the fact to stdout and flushes, so the parent sees it at once. A closed
    /// stdout (the parent is gone) is ignored: the worker notices through stdin.
    pub fn send(&self) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", self.line());
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
            Fact::Cancelled { id: 7, token: 3 },
            Fact::Fenced { id: 7, token: 3 },
            Fact::Lost {
                token: 3,
                reason: "local deadline passed".to_owned(),
            },
            Fact::Left { token: 3 },
            Fact::Error {
                message: "boom".to_owned(),
            },
        ] {
            assert_eq!(Fact::parse(&f.line()), Some(f));
        }
        assert_eq!(Fact::parse("noise"), None);
        assert_eq!(Fact::parse("done x"), None);
    }
}
