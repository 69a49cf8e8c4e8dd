//! The run directory: the one contract between `dasim run`, which writes it, and every reader
//! (`dasim plot`, `dasim report`, the tests, a user's pandas).
//!
//! | file | written | type ([`schema`]) |
//! |------|---------|-------------------|
//! | `scenario.toml` | first ([`write_scenario`]) | the scenario as run, every default filled in |
//! | `partition.csv` | next, for models that read data ([`write_partition`]) | [`Partition`] |
//! | `metrics.csv`, `series.csv` | streamed, a row per evaluation point ([`RunWriter`]) | [`MetricRow`], [`SeriesRow`] |
//! | `gradients.csv`, `messages.csv` | streamed, when `[metrics]` asks for them | [`GradientRow`], [`MessageRow`] |
//! | `staleness.csv`, `utilization.csv`, `waits.csv`, `links.csv`, `timeline.csv` | rewritten after each algorithm ([`Tables`]) | [`StalenessRow`], [`UtilizationRow`], [`WaitRow`], [`LinkRow`], [`TimelineRow`] |
//! | `summary.json` | rewritten after each algorithm | [`Summary`] |
//! | `timings.json` | rewritten after each algorithm | [`Timings`] |
//! | `checks.csv` | at the end, when the scenario has `[[expect]]` entries | [`CheckRow`] |
//!
//! Every CSV file starts with the [`Stamp`] line,
//! `# dasim <version> git=<revision> scenario_sha256=<hex>` (the SHA-256 of the `scenario.toml`
//! beside it), then a header row ([`crate::columns`]). Readers skip lines that start with `#`
//! (pandas: `pd.read_csv(f, comment="#")`; polars: `comment_prefix="#"`). An empty cell means
//! "not measured". Numbers use Rust's shortest round-trip formatting (`{}`), times are in
//! simulated seconds. Every file but `timings.json` is a function of simulated events: two runs
//! of a scenario on flex write the same bytes.
//!
//! Each row type is written and read by the same code ([`CsvRow`]): [`write`](mod@write) holds the
//! writers (one atomic, synced write for every whole file: [`write_atomic`]), [`read`] the
//! readers ([`read_csv`], [`read_summary`], [`RunData::load`] for everything the plots draw).
//! `summary.json` names each algorithm's label, kind and options, so no reader has to parse
//! `scenario.toml`.

pub mod read;
pub mod schema;
pub mod write;

pub use read::{
    Cells, CsvFile, RunData, read_csv, read_json, read_partition, read_summary, read_timings,
};
pub use schema::{
    Activity, AlgorithmStaleness, AlgorithmSummary, CheckResult, CheckRow, CsvRow, FaultRow,
    FaultSummary, GradientRow, HostTimings, IntStats, LinkRow, MessageRow, MetricRow, Partition,
    PartitionRow, SeriesRow, StalenessRow, Stamp, Stopped, Summary, TimeToTarget, TimelineRow,
    Timings, Utilization, UtilizationRow, WaitRow, files, measured, num, sha256_hex,
};
pub use write::{
    CsvStream, EventLogs, RunWriter, Tables, WriterState, csv_text, json_text, partition_text,
    write_atomic, write_csv, write_json, write_partition, write_scenario,
};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A summary with no run.
    pub(crate) fn summary() -> Summary {
        Summary {
            scenario: "s".into(),
            seed: 1,
            dasim_version: "0.1.0".into(),
            git_revision: None,
            scenario_sha256: String::new(),
            backend: "flex".into(),
            device: "CPU".into(),
            workers: 4,
            params: 10,
            timing_only: false,
            timed_as: None,
            runs: Vec::new(),
            checks: Vec::new(),
        }
    }

    /// A run entry of plausible numbers.
    pub(crate) fn algorithm_summary() -> AlgorithmSummary {
        AlgorithmSummary {
            algorithm: "sgp".into(),
            kind: "sgp".into(),
            options: Default::default(),
            topology: Default::default(),
            optimizer: Default::default(),
            backend: "flex".into(),
            stopped: None,
            stop_reason: None,
            sim_time_s: 0.5,
            events: 100,
            worker_steps: 40,
            steps_per_sim_s: 80.0,
            epochs: 1.5,
            final_loss: 0.25,
            final_accuracy: 0.875,
            messages: 12,
            bytes: 4800,
            gradient_flushes: 10,
            gradient_requests: 40,
            global_staleness: None,
            row_staleness: None,
            message_age: None,
            mix_age: None,
            model_staleness: None,
            final_consensus: 0.0,
            final_suboptimality: None,
            final_perplexity: None,
            time_to_target: TimeToTarget::default(),
            utilization: Utilization {
                compute: 0.5,
                communicate: 0.25,
                blocked: 0.25,
                idle: 0.0,
                down: None,
            },
            faults: None,
        }
    }

    #[test]
    fn stamp_is_written_and_parsed_back() {
        let s = Stamp::of_scenario("0.1.0", "abc123", "");
        assert_eq!(
            s.to_string(),
            "# dasim 0.1.0 git=abc123 \
             scenario_sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Stamp::parse(&s.to_string()), Some(s));
        let s = Stamp::parse("# dasim 0.1.0 git=abc123 scenario_sha256=00ff").unwrap();
        assert_eq!(s.version, "0.1.0");
        assert_eq!(s.git, "abc123");
        assert_eq!(s.scenario_sha256, "00ff");
        assert_eq!(Stamp::parse("algorithm,time_s"), None);
    }

    #[test]
    fn nan_is_an_empty_cell() {
        assert_eq!(num(f64::NAN), "");
        assert_eq!(num(0.1), "0.1");
        assert_eq!(num(2.0), "2");
        assert_eq!(measured(f64::NAN), None);
        assert_eq!(measured(1.5), Some(1.5));
    }
}
