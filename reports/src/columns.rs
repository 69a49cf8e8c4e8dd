//! The header of every CSV file of a run directory, in column order: the one definition that
//! the row types of [`crate::rundir`] write and read. The columns are defined in the book's
//! metrics chapter.

/// The columns of `metrics.csv`.
pub const METRICS: &[&str] = &[
    "algorithm",
    "time_s",
    "worker_steps",
    "epoch",
    "loss",
    "accuracy",
    "train_loss",
    "consensus",
    "replica_loss_min",
    "replica_loss_mean",
    "replica_loss_max",
    "replica_accuracy_min",
    "replica_accuracy_mean",
    "replica_accuracy_max",
    "suboptimality",
];
/// The columns of `series.csv`.
pub const SERIES: &[&str] = &["algorithm", "time_s", "name", "value"];
/// The columns of `staleness.csv`.
pub const STALENESS: &[&str] = &["algorithm", "measure", "worker", "value", "count"];
/// The columns of `utilization.csv`.
pub const UTILIZATION: &[&str] = &[
    "algorithm",
    "worker",
    "steps",
    "compute_s",
    "communicate_s",
    "blocked_s",
    "idle_s",
    "down_s",
];
/// The columns of `waits.csv`.
pub const WAITS: &[&str] = &["algorithm", "worker", "waited_for", "seconds"];
/// The columns of `links.csv`.
pub const LINKS: &[&str] = &["algorithm", "src", "dst", "messages", "bytes", "busy_s"];
/// The columns of `timeline.csv`.
pub const TIMELINE: &[&str] = &[
    "algorithm",
    "worker",
    "activity",
    "start_s",
    "end_s",
    "waited_for",
];
/// The columns of `faults.csv`: one row per message a fault touched inside the timeline window.
pub const FAULTS: &[&str] = &["algorithm", "time_s", "event", "node", "peer"];
/// The columns of `gradients.csv`.
pub const GRADIENTS: &[&str] = &[
    "algorithm",
    "worker",
    "row",
    "read_s",
    "apply_s",
    "row_staleness",
    "global_staleness",
];
/// The columns of `messages.csv`.
pub const MESSAGES: &[&str] = &["algorithm", "src", "dst", "bytes", "send_s", "arrive_s"];
/// The columns of `checks.csv`: one row per expectation and algorithm.
pub const CHECKS: &[&str] = &[
    "expect",
    "algorithm",
    "metric",
    "over",
    "op",
    "value",
    "observed",
    "bound",
    "tolerance",
    "result",
    "reason",
    "note",
];
/// The first columns of `partition.csv`; one [`class_column`] per class follows.
pub const PARTITION: &[&str] = &["worker", "samples"];

/// The column of `partition.csv` that counts the samples of class `c`: `class_<c>`.
pub fn class_column(c: usize) -> String {
    format!("class_{c}")
}
