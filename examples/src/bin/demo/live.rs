//! The live view's status block: every worker process with its session, and each of its members with its lease as
//! the store reports it.

use std::time::Duration;

use liveness::{Key, LeaseStatus, Name, Space, Store};

use crate::deaths::Deaths;
use crate::parent::Run;
use crate::stage::Role;
use crate::view::{bar, secs};

impl Run {
    /// Redraws the status block (live) or logs a progress line now and then (plain).
    pub async fn draw(&mut self, store: &dyn Store, deaths: &Deaths, elapsed: Duration) {
        let live = self.view.is_live();
        if live {
            for w in self.workers.iter_mut() {
                let session = Name::new(w.name.as_str()).map(|n| Key::new(Space::sessions(), n));
                if let Ok(key) = session {
                    w.lease = status(store, &key).await;
                }
                for m in w.members.iter_mut() {
                    if let Ok(key) = Key::member(&m.name) {
                        m.lease = status(store, &key).await;
                    }
                }
            }
        }
        let done_total = self.done_total();
        let (total, counts) = (self.total, self.counts);
        let requeued = deaths.requeued();
        let fenced: usize = (self.workers.iter())
            .flat_map(|w| &w.members)
            .map(|m| m.fenced.len())
            .sum();
        let mut block = vec![format!(
            "items {} {done_total}/{total} done | pending {} | owned {} | dead-lettered {} | requeued {requeued} | refused by fencing {fenced} | {}",
            bar(done_total, total, 24), counts.pending, counts.owned, counts.dead_lettered, secs(elapsed)
        )];
        for w in &self.workers {
            let state = match (w.role, w.exited) {
                (Role::Killed { .. }, _) => "KILLED",
                (Role::Frozen { resumed: None, .. }, _) => "FROZEN",
                (_, Some(_)) => "exited",
                (Role::Frozen { .. }, None) => "resumed",
                (Role::Normal, None) => "running",
            };
            block.push(format!(
                "  {:<10} pid {:<7} {:<8} session: {}",
                w.name,
                w.pid.unwrap_or(0),
                state,
                w.lease
            ));
            for m in &w.members {
                let dead = (deaths.list.iter())
                    .filter(|d| !d.session && d.name == m.name)
                    .map(|d| d.token.to_string())
                    .collect::<Vec<_>>();
                block.push(format!(
                    "    {:<14} store: {:<30} done {:<4} {}{}",
                    m.name,
                    m.lease,
                    m.done,
                    (m.working_on.filter(|_| w.exited.is_none()))
                        .map(|id| format!("on #{id} "))
                        .unwrap_or_default(),
                    if dead.is_empty() {
                        String::new()
                    } else {
                        format!("dead tokens: {}", dead.join(","))
                    },
                ));
            }
        }
        let summary = format!(
            "progress: {done_total}/{total} done, pending {}, owned {}, requeued {requeued}, refused by fencing {fenced}",
            counts.pending, counts.owned
        );
        self.view.status(&block, &summary);
    }
}

/// A lease's store status, for the live view.
async fn status(store: &dyn Store, key: &Key) -> String {
    match store.inspect(key).await {
        Ok(Some(info)) => match info.status {
            LeaseStatus::Live { remaining } => {
                format!("live ({} left) token {}", secs(remaining), info.token)
            }
            LeaseStatus::Expired => format!("EXPIRED token {}", info.token),
            other => format!("{other:?} token {}", info.token),
        },
        Ok(None) => "no lease".to_owned(),
        Err(e) => format!("? ({e})"),
    }
}
