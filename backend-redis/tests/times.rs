//! Item times (`ItemRecord::times`) on Redis: the fields `te`, `ta` and `tf` of the
//! item's hash. A claim stamps `ta` in the script and the `HSET` it already made (no
//! more commands, one `TIME`); an item an earlier version wrote has no fields and
//! answers `None`.

use liveness_core::{
    EnqueueOptions, HolderId, ItemStateKind, ItemStore, Key, OperatorStore, Page, Store, Ttl,
};

mod common;
use common::{calls, fresh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_stamps_in_its_own_writes_and_an_item_from_before_has_no_times() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let both = store
        .enqueue_many(&[b"a".to_vec(), b"b".to_vec()], EnqueueOptions::default())
        .await
        .unwrap();
    // b as an earlier version wrote it: no times.
    let removed: u64 = redis::cmd("HDEL")
        .arg(format!("liveness:{{{ns}}}:i:{}", both[1].0))
        .arg("te")
        .arg("ta")
        .arg("tf")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(removed, 1, "the enqueue wrote `te` only");
    let b = store.item(both[1]).await.unwrap().unwrap();
    assert_eq!(b.times, Default::default(), "{b:?}");
    let a = store.item(both[0]).await.unwrap().unwrap();
    assert!(a.times.enqueued.is_some(), "{a:?}");

    let owner = store
        .acquire(
            &Key::member("owner").unwrap(),
            &HolderId::new("owner").unwrap(),
            Ttl::from_secs(30).unwrap(),
        )
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(store.claim(&owner, 2).await.unwrap().len(), 2);
    // One script, one clock reading; the lease's high-water mark and one HSET per item.
    assert_eq!(calls(&mut conn, &["evalsha", "eval"]).await, 1);
    assert_eq!(calls(&mut conn, &["time"]).await, 1);
    assert_eq!(calls(&mut conn, &["hset", "hmset"]).await, 1 + 2);

    let listed = store
        .items(ItemStateKind::Owned, Page::first(10))
        .await
        .unwrap();
    let b = listed.iter().find(|r| r.item.id == both[1]).unwrap();
    assert_eq!(b.times.enqueued, None, "still none: {b:?}");
    assert!(b.times.attempted.is_some(), "the claim stamps it: {b:?}");
    let a = listed.iter().find(|r| r.item.id == both[0]).unwrap();
    assert_eq!(a.times.attempted, b.times.attempted, "one claim, one now");
}
