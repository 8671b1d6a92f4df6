//! Starting a real etcd server for tests (being written).
