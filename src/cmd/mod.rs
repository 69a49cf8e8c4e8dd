//! One module per command of the `dasim` binary: each turns its arguments into calls of the
//! library and prints what the user reads.

pub mod check;
pub mod plot;
pub mod report;
pub mod run;
pub mod sweep;
pub mod trace;
pub mod validate;

pub use dasim::runtime::backend_name;
