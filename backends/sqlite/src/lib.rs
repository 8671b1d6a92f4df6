//! The sqlite backend (work in progress).
