//! Endpoint health: which of the configured members a handle's requests go to.
//!
//! etcd-client balances requests over every endpoint of the URL and keeps sending a
//! share of them to a member whose connection is refused (etcdv3/etcd-client#39): with
//! one member of three down, about one request in three failed with `Unavailable`
//! until it came back. With more than one endpoint, a handle therefore runs a task
//! that asks each member for its status on a connection of its own, about once a
//! [`PROBE_EVERY`] (jittered), and
//!
//! - sets aside a member that does not answer within the request timeout, or answers
//!   that it knows no leader (a member cut off from the quorum, whose reads and
//!   writes would only wait): requests go to the others;
//! - takes a member set aside back as soon as it answers with a leader again;
//! - never sets aside every member: when none answers, all are in use (requests then
//!   fail or succeed as they would without the task).
//!
//! A status request that the member answers with an error (a permission it does not
//! grant, say) still shows that the member is up: only transport faults and timeouts
//! count as down. The task ends when the handle's last clone is dropped.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use liveness_core::sync::lock;
use liveness_core::Backoff;
use tokio::task::AbortHandle;

use crate::error::map;

/// About how often each member is asked for its status (plus up to 25 % jitter).
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The endpoints a handle sends its requests to, and the task that keeps them
/// healthy. Dropping it stops the task.
pub(crate) struct Endpoints {
    in_use: Arc<Mutex<BTreeSet<String>>>,
    task: Option<AbortHandle>,
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl Endpoints {
    /// Watches `endpoints` of `client` (connected to all of them, with `options`):
    /// with one endpoint there is nothing to choose, and no task.
    pub(crate) fn watch(
        client: &Client,
        endpoints: &[String],
        options: ConnectOptions,
        timeout: Duration,
    ) -> Endpoints {
        let all: BTreeSet<String> = endpoints.iter().cloned().collect();
        let in_use = Arc::new(Mutex::new(all.clone()));
        let task = (all.len() > 1).then(|| {
            tokio::spawn(probe(
                client.clone(),
                all.into_iter().collect(),
                options,
                timeout,
                in_use.clone(),
            ))
            .abort_handle()
        });
        Endpoints { in_use, task }
    }

    /// The endpoints requests go to now, sorted.
    pub(crate) fn in_use(&self) -> Vec<String> {
        lock(&self.in_use).iter().cloned().collect()
    }
}

/// What to use given which endpoints answered: those that did, or every endpoint
/// when none did.
fn chosen(all: &[String], answered: &[bool]) -> BTreeSet<String> {
    let up: BTreeSet<String> = all
        .iter()
        .zip(answered)
        .filter(|(_, ok)| **ok)
        .map(|(e, _)| e.clone())
        .collect();
    if up.is_empty() {
        all.iter().cloned().collect()
    } else {
        up
    }
}

async fn probe(
    client: Client,
    all: Vec<String>,
    options: ConnectOptions,
    timeout: Duration,
    in_use: Arc<Mutex<BTreeSet<String>>>,
) {
    // One connection per member, made when first needed (and again after a failed
    // attempt: a member down at start-up has no connection yet).
    let mut probes: Vec<Option<Client>> = vec![None; all.len()];
    let mut pace = Backoff::new(PROBE_EVERY, PROBE_EVERY);
    // This task is the only writer of `in_use`: what it last published.
    let mut now: BTreeSet<String> = all.iter().cloned().collect();
    loop {
        tokio::time::sleep(pace.next()).await;
        let answered = futures::future::join_all(
            probes
                .iter_mut()
                .zip(&all)
                .map(|(probe, endpoint)| answers(probe, endpoint, &options, timeout)),
        )
        .await;
        let want = chosen(&all, &answered);
        if want == now {
            continue;
        }
        for gone in now.difference(&want) {
            match client.remove_endpoint(gone).await {
                Ok(()) => tracing::warn!(
                    endpoint = %gone,
                    "etcd member does not answer (or knows no leader): requests go to the others"
                ),
                Err(e) => {
                    tracing::warn!(endpoint = %gone, error = %e, "could not set an etcd endpoint aside")
                }
            }
        }
        for back in want.difference(&now) {
            match client.add_endpoint(back).await {
                Ok(()) => {
                    tracing::info!(endpoint = %back, "etcd member answers again: back in use")
                }
                Err(e) => {
                    tracing::warn!(endpoint = %back, error = %e, "could not take an etcd endpoint back")
                }
            }
        }
        *lock(&in_use) = want.clone();
        now = want;
    }
}

/// Whether the member at `endpoint` answers a status request within `timeout` and
/// knows a leader. A reply that is an error from the member counts as an answer.
async fn answers(
    probe: &mut Option<Client>,
    endpoint: &str,
    options: &ConnectOptions,
    timeout: Duration,
) -> bool {
    let asked = tokio::time::timeout(timeout, async {
        let client = match probe {
            Some(client) => client,
            None => probe.insert(Client::connect([endpoint], Some(options.clone())).await?),
        };
        client.maintenance_client().status().await
    })
    .await;
    match asked {
        Err(_) => false,
        Ok(Ok(status)) => status.leader() != 0,
        Ok(Err(e)) => !map(e).is_retryable(),
    }
}

#[cfg(test)]
mod tests {
    use super::chosen;

    fn eps() -> Vec<String> {
        vec![
            "http://a:1".into(),
            "http://b:1".into(),
            "http://c:1".into(),
        ]
    }

    #[test]
    fn a_member_that_does_not_answer_is_set_aside() {
        let got = chosen(&eps(), &[true, false, true]);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec!["http://a:1", "http://c:1"]
        );
    }

    #[test]
    fn with_none_answering_every_member_stays_in_use() {
        assert_eq!(chosen(&eps(), &[false, false, false]).len(), 3);
    }

    #[test]
    fn every_member_that_answers_is_in_use() {
        assert_eq!(chosen(&eps(), &[true, true, true]).len(), 3);
    }
}
