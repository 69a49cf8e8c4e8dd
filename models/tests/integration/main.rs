//! The replica store's and the models' integration tests (`dasim-models`), as one test binary: one
//! link of the crate and its dependencies instead of one per file, and the generic code they share
//! compiled once. Each file of this folder is a module, `common` their shared helpers; a file's
//! tests are those under its module: `cargo test --release -p dasim-models --test integration --
//! conv::`.
//!
//! `allocations.rs` stays a binary of its own: its global allocator counts the bytes of the whole
//! process, which other tests running beside it would add to.

mod common;

mod backends;
mod bn_async;
mod conformance;
mod conv;
mod convex;
mod cpu_path;
mod data;
mod gradients;
mod state;
mod transformer;
mod transformer_cpu;
