//! Held-back items on the server: a claim moves at most as many due items out of the
//! held zsets as it may claim (the rest move with the next claims), `next_due` looks
//! only at items not yet due and writes nothing, and the pending page and counts merge due and held-back
//! items in id order.

use std::time::Duration;

use liveness_core::{
    EnqueueOptions, HolderId, ItemId, ItemState, ItemStateKind, ItemStore, Key, OperatorStore,
    Page, Store, Ttl,
};

mod common;
use common::{calls, fresh};

/// How long the test's items are held back.
const WAIT: Duration = Duration::from_millis(400);

/// The number of members of the namespace's zset `name`.
async fn card(conn: &mut redis::aio::MultiplexedConnection, ns: &str, name: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(format!("liveness:{{{ns}}}:{name}"))
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_moves_at_most_its_own_size_of_due_items() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let later = EnqueueOptions::default().delay(WAIT);
    let at_once = store
        .enqueue(b"a", EnqueueOptions::default())
        .await
        .unwrap();
    let held = store.enqueue(b"b", later).await.unwrap();
    let also_now = store
        .enqueue(b"c", EnqueueOptions::default())
        .await
        .unwrap();
    let many = store
        .enqueue_many(&[b"d".to_vec(), b"e".to_vec()], later)
        .await
        .unwrap();
    let all = [at_once, held, also_now, many[0], many[1]];

    // Pending, in id order, whether due or held back.
    let page = |after: Option<ItemId>, limit| {
        let store = store.clone();
        async move {
            let page = Page { after, limit };
            let records = store.items(ItemStateKind::Pending, page).await.unwrap();
            records.iter().map(|r| r.item.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(page(None, 10).await, all);
    assert_eq!(page(Some(at_once), 2).await, [held, also_now]);
    assert_eq!(page(Some(also_now), 10).await, many);
    assert_eq!(store.item_counts().await.unwrap().pending, 5);
    let record = store.item(held).await.unwrap().unwrap();
    assert_eq!(record.state, ItemState::Pending);
    assert_eq!(card(&mut conn, &ns, "held").await, 3);

    let left = store
        .next_due()
        .await
        .unwrap()
        .expect("items are held back");
    assert!(!left.is_zero() && left <= WAIT, "due in {left:?}");
    tokio::time::sleep(left + Duration::from_millis(100)).await;
    let writes = ["zadd", "zrem", "hset"];
    let before = calls(&mut conn, &writes).await;
    assert_eq!(
        store.next_due().await.unwrap(),
        None,
        "items due already are left to the claims"
    );
    assert_eq!(calls(&mut conn, &writes).await, before, "next_due writes");

    let key = Key::member("w").unwrap();
    let lease = store
        .acquire(
            &key,
            &HolderId::new("w").unwrap(),
            Ttl::from_secs(30).unwrap(),
        )
        .await
        .unwrap();
    // n = 1: one due item moves (the earliest due), the lowest id is claimed.
    let first = store.claim(&lease, 1).await.unwrap();
    assert_eq!(first.iter().map(|i| i.id).collect::<Vec<_>>(), [at_once]);
    assert_eq!(card(&mut conn, &ns, "held").await, 2);
    assert_eq!(card(&mut conn, &ns, "heldi").await, 2);
    assert_eq!(store.item_counts().await.unwrap().pending, 4);
    let rest = store.claim(&lease, 10).await.unwrap();
    let mut ids: Vec<ItemId> = rest.iter().map(|i| i.id).collect();
    ids.sort();
    assert_eq!(ids, [held, also_now, many[0], many[1]]);
    assert_eq!(card(&mut conn, &ns, "held").await, 0);
    assert_eq!(card(&mut conn, &ns, "heldi").await, 0);
    assert_eq!(store.item_counts().await.unwrap().pending, 0);
}
