//! The properties the fuzz targets check; `tests/props.rs` includes the same file.
pub mod checks;
