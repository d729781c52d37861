//! Integration tests of the trine facade live in `tests/`; this crate has no code of its own.
