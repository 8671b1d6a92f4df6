//! The fdb backend (work in progress).
