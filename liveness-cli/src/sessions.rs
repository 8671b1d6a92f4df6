//! `liveness members --sessions`: one line per session (one per process) that the
//! members read ride: its key, holder, token, members and time left.

use std::time::Duration;

use liveness::{Key, LeaseStatus, Space};
use serde::Serialize;

use crate::members::{self, count};
use crate::output::{duration, millis, print_read, table};
use crate::{Ctx, Failure};

/// One session, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct SessionRow {
    /// `sessions/<process>`.
    pub key: String,
    /// The session lease's holder; `null` once it is gone (reaped or released, its
    /// members not all declared dead yet).
    pub holder: Option<String>,
    /// The session lease's token; `null` once it is gone.
    pub token: Option<u64>,
    /// The members read that ride it.
    pub members: u64,
    /// `live`, `expired` (not yet reaped) or `gone`; `unknown` for a status newer than
    /// this command.
    pub status: &'static str,
    /// Time left by the store clock; `null` unless live.
    pub remaining_ms: Option<u64>,
}

/// What the summary read: its sessions, and how many members it counted them over.
struct Summary {
    sessions: Vec<SessionRow>,
    /// Members read (at most the limit).
    read: usize,
    /// Of those, the ones with a lease of their own.
    own: usize,
}

/// Reads up to `limit` members of `space`, counts them by session, and reads each
/// session's lease (one `inspect` per session).
async fn summary(ctx: &Ctx, space: &Space, limit: usize) -> Result<Summary, Failure> {
    let leases = members::list(ctx, space, limit).await?;
    let mut counted: Vec<(Key, u64)> = Vec::new();
    let mut own = 0;
    for lease in &leases {
        match &lease.session {
            None => own += 1,
            Some(s) => match counted.iter_mut().find(|(k, _)| k == s) {
                Some((_, n)) => *n += 1,
                None => counted.push((s.clone(), 1)),
            },
        }
    }
    counted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut sessions = Vec::with_capacity(counted.len());
    for (key, n) in counted {
        let info = ctx.store.inspect(&key).await?;
        let (status, remaining_ms) = match info.as_ref().map(|i| i.status) {
            Some(LeaseStatus::Live { remaining }) => ("live", Some(millis(remaining))),
            Some(LeaseStatus::Expired) => ("expired", None),
            Some(_) => ("unknown", None),
            None => ("gone", None),
        };
        sessions.push(SessionRow {
            key: key.to_string(),
            holder: info.as_ref().map(|i| i.holder.to_string()),
            token: info.as_ref().map(|i| i.token.0),
            members: n,
            status,
            remaining_ms,
        });
    }
    Ok(Summary {
        sessions,
        read: leases.len(),
        own,
    })
}

/// The human table of `s`, and a line on what it counted.
fn render(s: &Summary, space: &Space, limit: usize) -> String {
    let none = || "-".to_string();
    let rows = s.sessions.iter().map(|r| {
        vec![
            r.key.clone(),
            r.holder.clone().unwrap_or_else(none),
            r.token.map_or_else(none, |t| t.to_string()),
            r.members.to_string(),
            r.remaining_ms
                .map_or_else(none, |ms| duration(Duration::from_millis(ms))),
            r.status.into(),
        ]
    });
    let t = table(
        &[
            "session",
            "holder",
            "token",
            "members",
            "time left",
            "status",
        ],
        rows,
    );
    let mut note = format!(
        "counted over {} of {space}, {} with a lease of their own",
        count(s.read, "member"),
        s.own
    );
    if s.read >= limit {
        note.push_str(&format!(
            "; stopped at --limit {limit}: more members may ride these sessions or others"
        ));
    }
    format!("{t}\n{note}")
}

pub(crate) async fn run(ctx: &Ctx, space: &str, limit: usize) -> Result<(), Failure> {
    let space = Space::new(space)?;
    let s = summary(ctx, &space, limit).await?;
    print_read(ctx, &s.sessions, || render(&s, &space, limit))
}
