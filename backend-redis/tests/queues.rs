//! Named queues on the server: the default queue keeps the keys and the item fields
//! of earlier versions (so their data needs no migration), another queue has keys of
//! its own, a claim of one queue touches only that queue's keys, a busy queue's due
//! items never hide another's, and a stored queue name that is not one is a corrupt
//! record.

use std::time::Duration;

use liveness_core::{
    Corrupt, EnqueueOptions, Error, HolderId, ItemCounts, ItemId, ItemState, ItemStore, Key, Lease,
    OperatorStore, Outcome, QueueCounts, QueueName, RequestId, Store, Ttl,
};
use liveness_redis::RedisStore;
use redis::aio::MultiplexedConnection;

mod common;
use common::{calls, fresh};

fn queue(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

async fn lease(store: &RedisStore, name: &str) -> Lease {
    store
        .acquire(
            &Key::member(name).unwrap(),
            &HolderId::new(name).unwrap(),
            Ttl::from_secs(30).unwrap(),
        )
        .await
        .unwrap()
}

/// Runs `cmd` with `args` on the namespace's key `name` (`liveness:{ns}:<name>`).
async fn on_key<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    ns: &str,
    cmd: &str,
    name: &str,
    args: &[&str],
) -> T {
    redis::cmd(cmd)
        .arg(format!("liveness:{{{ns}}}:{name}"))
        .arg(args)
        .query_async(conn)
        .await
        .unwrap()
}

/// The server's clock in µs.
async fn server_us(conn: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1_000_000 + us
}

/// The store's counts per queue as `(name, [pending, owned, dead_lettered])`.
async fn per_queue(store: &RedisStore) -> Vec<(String, [u64; 3])> {
    let counts: Vec<QueueCounts> = store.queue_counts().await.unwrap();
    counts
        .iter()
        .map(|c| {
            let n = c.counts;
            (c.queue.to_string(), [n.pending, n.owned, n.dead_lettered])
        })
        .collect()
}

fn want(entries: &[(&str, [u64; 3])]) -> Vec<(String, [u64; 3])> {
    entries.iter().map(|(q, c)| (q.to_string(), *c)).collect()
}

/// Items written by hand as the version before queues wrote them (no `q`, the keys
/// `pending`, `held`, `heldi`, `dl`, the `owned` counter, no per-queue count) are in
/// the default queue: counted there, claimed from it, handed back to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_of_earlier_versions_is_the_default_queue() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let c = &mut conn;
    let owner = lease(&store, "owner").await;
    let now = server_us(c).await.to_string();
    let past = (server_us(c).await - 1_000).to_string();
    let token = owner.token.0.to_string();
    let _: u64 = on_key(c, &ns, "INCRBY", "ids", &["4"]).await;
    // 1 due, 2 held back (due already), 3 dead-lettered, 4 owned by `owner`.
    for (id, state) in [("1", "p"), ("2", "p"), ("3", "d"), ("4", token.as_str())] {
        let name = format!("i:{id}");
        let fields = ["p", id, "a", "1", "m", "3", "s", state, "w", now.as_str()];
        let _: u64 = on_key(c, &ns, "HSET", &name, &fields).await;
    }
    let _: u64 = on_key(c, &ns, "ZADD", "pending", &["1", "1"]).await;
    let _: u64 = on_key(c, &ns, "ZADD", "held", &[past.as_str(), "2"]).await;
    let _: u64 = on_key(c, &ns, "ZADD", "heldi", &["2", "2"]).await;
    let _: u64 = on_key(c, &ns, "ZADD", "dl", &["3", "3"]).await;
    let _: u64 = on_key(c, &ns, "ZADD", &format!("o:{token}"), &["4", "4"]).await;
    let _: u64 = on_key(c, &ns, "INCRBY", "owned", &["1"]).await;

    assert_eq!(store.item_counts().await.unwrap(), ItemCounts::new(2, 1, 1));
    assert_eq!(per_queue(&store).await, want(&[("default", [2, 1, 1])]));
    let record = store.item(ItemId(4)).await.unwrap().expect("kept");
    assert_eq!(record.item.queue, QueueName::DEFAULT);
    assert_eq!(record.state, ItemState::Owned(owner.token));

    // A named queue beside them: its own keys, its name in the item and the set.
    let mail = store
        .enqueue(b"m", EnqueueOptions::default().queue(queue("mail")))
        .await
        .unwrap();
    let q: Option<String> = on_key(c, &ns, "HGET", &format!("i:{}", mail.0), &["q"]).await;
    assert_eq!(q.as_deref(), Some("mail"));
    assert_eq!(on_key::<u64>(c, &ns, "ZCARD", "qp:mail", &[]).await, 1);
    assert_eq!(on_key::<u64>(c, &ns, "ZCARD", "pending", &[]).await, 1);
    let names: Vec<String> = on_key(c, &ns, "SMEMBERS", "queues", &[]).await;
    assert_eq!(names, ["mail"]);
    assert_eq!(
        per_queue(&store).await,
        want(&[("default", [2, 1, 1]), ("mail", [1, 0, 0])])
    );

    // The default queue claims the old items (the held-back one moved once due), and
    // hands them back to the old keys.
    let got = store.claim(&owner, 5).await.unwrap();
    let ids: Vec<(u64, QueueName)> = got.iter().map(|i| (i.id.0, i.queue)).collect();
    assert_eq!(ids, [(1, QueueName::DEFAULT), (2, QueueName::DEFAULT)]);
    assert_eq!(on_key::<u64>(c, &ns, "ZCARD", "held", &[]).await, 0);
    store
        .finish(&owner, ItemId(1), Outcome::RETRY)
        .await
        .unwrap();
    assert_eq!(on_key::<u64>(c, &ns, "ZCARD", "pending", &[]).await, 1);
    store.complete(&owner, ItemId(4)).await.unwrap();
    store.retry_dead_letter(ItemId(3)).await.unwrap();
    let score: Option<u64> = on_key(c, &ns, "ZSCORE", "pending", &["3"]).await;
    assert_eq!(score, Some(3));
    let got = store
        .claim_from(&owner, &[queue("mail")], 5, RequestId::next())
        .await
        .unwrap();
    assert_eq!(got.iter().map(|i| i.id).collect::<Vec<_>>(), [mail]);
    assert_eq!(got[0].queue, queue("mail"));
    assert_eq!(
        per_queue(&store).await,
        want(&[("default", [2, 1, 0]), ("mail", [0, 1, 0])])
    );
    assert_eq!(store.item_counts().await.unwrap(), ItemCounts::new(2, 2, 0));
    // No item of the default queue is written with a `q`.
    for id in [1, 2, 3] {
        let q: Option<String> = on_key(c, &ns, "HGET", &format!("i:{id}"), &["q"]).await;
        assert_eq!(q, None, "item {id}");
    }
}

/// A claim of one queue is one script that reads and writes that queue's keys: for
/// the default queue the commands of a claim before queues, for another one more
/// HINCRBY (its owned count) for the whole claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_one_queue_costs_one_count_at_most() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let owner = lease(&store, "owner").await;
    for name in ["default", "mail"] {
        let options = EnqueueOptions::default().queue(queue(name));
        store
            .enqueue_many(&[b"a".to_vec(), b"b".to_vec()], options)
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .unwrap();
        let got = store
            .claim_from(&owner, &[queue(name)], 2, RequestId::next())
            .await
            .unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|i| i.queue.as_str() == name), "{got:?}");
        assert_eq!(calls(&mut conn, &["evalsha", "eval"]).await, 1);
        // Each item's attempts, and for a named queue its owned count once.
        let counts = if name == "default" { 2 } else { 3 };
        assert_eq!(calls(&mut conn, &["hincrby"]).await, counts, "{name}");
        assert_eq!(calls(&mut conn, &["smembers", "hget"]).await, 0, "{name}");
    }
    assert_eq!(
        per_queue(&store).await,
        want(&[("default", [0, 2, 0]), ("mail", [0, 2, 0])])
    );
}

/// Due items of a queue nobody claims from do not stand before another queue's: each
/// queue keeps its held-back items apart, so a claim of `urgent` finds its own due
/// item however many of `bulk`'s fell due before it. `next_due` answers for every
/// queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_queue_s_due_items_do_not_hide_another_s() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let wait = Duration::from_millis(300);
    let bulk = EnqueueOptions::default().queue(queue("bulk")).delay(wait);
    let payloads: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i]).collect();
    store.enqueue_many(&payloads, bulk).await.unwrap();
    let urgent = EnqueueOptions::default().queue(queue("urgent")).delay(wait);
    let late = store.enqueue(b"u", urgent).await.unwrap();
    let left = store.next_due().await.unwrap().expect("held back");
    assert!(left <= wait, "{left:?}");
    assert_eq!(
        on_key::<u64>(&mut conn, &ns, "ZCARD", "qheld", &[]).await,
        51
    );
    tokio::time::sleep(wait + Duration::from_millis(200)).await;
    assert_eq!(store.next_due().await.unwrap(), None, "all due");

    let owner = lease(&store, "owner").await;
    let got = store
        .claim_from(&owner, &[queue("urgent")], 1, RequestId::next())
        .await
        .unwrap();
    assert_eq!(got.iter().map(|i| i.id).collect::<Vec<_>>(), [late]);
    assert_eq!(
        on_key::<u64>(&mut conn, &ns, "ZCARD", "qheld", &[]).await,
        50
    );
    assert_eq!(
        on_key::<u64>(&mut conn, &ns, "ZCARD", "qh:bulk", &[]).await,
        50
    );

    // A retry's backoff in a named queue is held back there, and next_due sees it.
    store
        .finish(&owner, late, Outcome::Retry { after: wait })
        .await
        .unwrap();
    assert_eq!(
        on_key::<u64>(&mut conn, &ns, "ZCARD", "qh:urgent", &[]).await,
        1
    );
    let left = store.next_due().await.unwrap().expect("held back");
    assert!(left <= wait, "{left:?}");
    // Cancelling it leaves no trace in the held zsets.
    assert_eq!(store.cancel(late).await.unwrap(), Some(ItemState::Pending));
    assert_eq!(store.next_due().await.unwrap(), None);
    for name in ["qh:urgent", "qhi:urgent"] {
        assert_eq!(on_key::<u64>(&mut conn, &ns, "ZCARD", name, &[]).await, 0);
    }
    assert_eq!(
        per_queue(&store).await,
        want(&[("bulk", [50, 0, 0])]),
        "a queue with no item left is not listed"
    );
}

/// A queue name in an item's hash that is not a valid name answers a corrupt record
/// (no panic) to every read of the item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_queue_that_is_no_name_is_a_corrupt_record() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let id = store
        .enqueue(b"x", EnqueueOptions::default().queue(queue("mail")))
        .await
        .unwrap();
    let _: u64 = on_key(
        &mut conn,
        &ns,
        "HSET",
        &format!("i:{}", id.0),
        &["q", "no name"],
    )
    .await;
    let corrupt = |r: Result<(), Error>| match r {
        Err(Error::Backend { source, .. }) => assert!(source.is::<Corrupt>(), "{source}"),
        other => panic!("expected a corrupt record, got {other:?}"),
    };
    corrupt(store.item(id).await.map(|_| ()));
    let page = liveness_core::Page::first(10);
    let kind = liveness_core::ItemStateKind::Pending;
    corrupt(store.items(kind, page).await.map(|_| ()));
    let owner = lease(&store, "owner").await;
    let req = RequestId::next();
    // The claim takes it from `mail` and answers the queue it took it from; a repeat
    // reads the stored field.
    let got = store
        .claim_from(&owner, &[queue("mail")], 1, req)
        .await
        .unwrap();
    assert_eq!(got[0].queue, queue("mail"));
    corrupt(
        store
            .claim_from(&owner, &[queue("mail")], 1, req)
            .await
            .map(|_| ()),
    );
}
