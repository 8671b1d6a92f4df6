//! The etcd backend (work in progress).
