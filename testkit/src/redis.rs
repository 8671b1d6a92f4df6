//! Starting a real redis server for tests (being written).
