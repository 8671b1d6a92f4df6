//! Starting a real postgres server for tests (being written).
