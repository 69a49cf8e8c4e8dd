//! The simulator's records as rows of the run directory.
//!
//! The run directory itself — file names, row types, stamp, `summary.json`, atomic writes — is
//! [`dasim_reports::rundir`]'s; this module only converts what the simulator hands the runner
//! ([`EvalPoint`], [`GradientRecord`], [`MessageRecord`], [`RunRecord`], the data shards) into
//! those rows. A NaN ("not measured") becomes `None`, an empty cell.

use dasim_models::data::{Dataset, class_counts};
use dasim_reports::rundir::{
    FaultRow, FaultSummary, GradientRow, LinkRow, MessageRow, MetricRow, Partition, PartitionRow,
    SeriesRow, StalenessRow, Tables, TimelineRow, UtilizationRow, WaitRow, measured,
};
use dasim_sim::engine::{EvalPoint, FaultReport, SimTime, Spread};
use dasim_sim::record::{self, GradientRecord, MessageRecord, RunRecord};

/// The git revision this dasim was built from (`unknown` outside a git checkout).
pub const GIT_REVISION: &str = env!("DASIM_GIT_REVISION");

/// The git revision, `None` when unknown.
pub fn git_revision() -> Option<&'static str> {
    (GIT_REVISION != "unknown").then_some(GIT_REVISION)
}

/// `x` with `decimals` digits after the point, as people read it: a value that rounds to zero
/// is `0.0000`, never the negative zero `-0.0000` that `format!` gives a tiny negative number.
pub fn fixed(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.bytes().all(|b| b == b'0' || b == b'.') => rest.to_owned(),
        _ => s,
    }
}

/// `x` in scientific notation with `decimals` digits after the point, never as a negative
/// zero.
pub fn sci(x: f64, decimals: usize) -> String {
    // -0.0 + 0.0 is +0.0; every other value is unchanged.
    let x = x + 0.0;
    format!("{x:.decimals$e}")
}

fn secs(t: SimTime) -> f64 {
    t.as_secs_f64()
}

/// The `metrics.csv` row of an evaluation point of `algorithm`.
pub fn metric_row(algorithm: &str, p: &EvalPoint) -> MetricRow {
    let spread = |s: Option<&Spread>| match s {
        Some(s) => [s.min, s.mean, s.max].map(measured),
        None => [None; 3],
    };
    let [replica_loss_min, replica_loss_mean, replica_loss_max] =
        spread(p.replicas.as_ref().map(|r| &r.loss));
    let [
        replica_accuracy_min,
        replica_accuracy_mean,
        replica_accuracy_max,
    ] = spread(p.replicas.as_ref().map(|r| &r.accuracy));
    MetricRow {
        algorithm: algorithm.to_owned(),
        time_s: secs(p.time),
        worker_steps: Some(p.worker_steps),
        epoch: measured(p.epoch),
        loss: measured(p.eval.loss),
        accuracy: measured(p.eval.accuracy),
        train_loss: measured(p.train_loss),
        consensus: measured(p.consensus),
        replica_loss_min,
        replica_loss_mean,
        replica_loss_max,
        replica_accuracy_min,
        replica_accuracy_mean,
        replica_accuracy_max,
        suboptimality: p.suboptimality.and_then(measured),
    }
}

/// The `series.csv` rows of an evaluation point of `algorithm`.
pub fn series_rows<'a>(
    algorithm: &'a str,
    p: &'a EvalPoint,
) -> impl Iterator<Item = SeriesRow> + 'a {
    p.series.iter().map(move |&(name, value)| SeriesRow {
        algorithm: algorithm.to_owned(),
        time_s: secs(p.time),
        name: name.to_owned(),
        value: measured(value),
    })
}

/// The `gradients.csv` row of an applied gradient of `algorithm`.
pub fn gradient_row(algorithm: &str, g: &GradientRecord) -> GradientRow {
    GradientRow {
        algorithm: algorithm.to_owned(),
        worker: g.worker as u64,
        row: g.row as u64,
        read_s: secs(g.read),
        apply_s: secs(g.apply),
        row_staleness: g.row_staleness,
        global_staleness: g.global_staleness,
    }
}

/// The `messages.csv` row of a message of `algorithm`.
pub fn message_row(algorithm: &str, m: &MessageRecord) -> MessageRow {
    MessageRow {
        algorithm: algorithm.to_owned(),
        src: m.src as u64,
        dst: m.dst as u64,
        bytes: m.bytes,
        send_s: secs(m.send),
        arrive_s: secs(m.arrive),
    }
}

/// The table rows a finished algorithm adds: the histograms per worker of the global and row
/// staleness (`global`, `row`), the message ages and the oldest age per mixing step
/// (`message_age`, `mix_age`),
/// utilization per worker, waits per worker and peer, traffic per link, and the timeline by
/// worker and start. `faulty`: the run has `[[faults]]`, so `utilization.csv` gets its `down_s`
/// cells (left empty otherwise, and the column out of the file when no run has them).
pub fn tables(algorithm: &str, r: &RunRecord, faulty: bool) -> Tables {
    let a = || algorithm.to_owned();
    let mut t = Tables::default();
    for (measure, hs) in [
        ("global", &r.global_staleness),
        ("row", &r.row_staleness),
        ("message_age", &r.message_age),
        ("mix_age", &r.mix_age),
    ] {
        for (w, h) in hs.iter().enumerate() {
            for (value, count) in h.iter() {
                t.staleness.push(StalenessRow {
                    algorithm: a(),
                    measure: measure.into(),
                    worker: w as u64,
                    value,
                    count,
                });
            }
        }
    }
    for (w, u) in r.usage.iter().enumerate() {
        let [compute_s, communicate_s, blocked_s, idle_s, down_s] =
            record::Activity::ALL.map(|x| secs(u.get(x)));
        t.utilization.push(UtilizationRow {
            algorithm: a(),
            worker: w as u64,
            steps: u.steps,
            compute_s,
            communicate_s,
            blocked_s,
            idle_s,
            down_s: faulty.then_some(down_s),
        });
    }
    for (&(w, p), &d) in &r.waits {
        t.waits.push(WaitRow {
            algorithm: a(),
            worker: w as u64,
            waited_for: p as u64,
            seconds: secs(d),
        });
    }
    for (&(src, dst), l) in &r.links {
        t.links.push(LinkRow {
            algorithm: a(),
            src: src as u64,
            dst: dst as u64,
            messages: l.messages,
            bytes: l.bytes,
            busy_s: secs(l.busy),
        });
    }
    let mut timeline = r.timeline.clone();
    timeline.sort_by_key(|i| (i.worker, i.start));
    t.timeline = timeline
        .iter()
        .map(|i| TimelineRow {
            algorithm: a(),
            worker: i.worker as u64,
            activity: i.activity,
            start_s: secs(i.start),
            end_s: secs(i.end),
            waited_for: i.waited_for.map(|p| p as u64),
        })
        .collect();
    t.faults = r
        .fault_events
        .iter()
        .map(|e| FaultRow {
            algorithm: a(),
            time_s: secs(e.time),
            event: e.mark.name().into(),
            node: e.node as u64,
            peer: e.peer.map(|p| p as u64),
        })
        .collect();
    t
}

/// `partition.csv`: each worker's shard of `train`, per class.
pub fn partition_table(shards: &[Vec<usize>], train: &Dataset) -> Partition {
    Partition {
        classes: train.classes().unwrap_or(0),
        workers: shards
            .iter()
            .zip(class_counts(shards, train))
            .enumerate()
            .map(|(w, (shard, counts))| PartitionRow {
                worker: w as u64,
                samples: shard.len() as u64,
                class_counts: counts.into_iter().map(|c| c as u64).collect(),
            })
            .collect(),
    }
}

/// `summary.json`'s account of what a run's `[[faults]]` did.
pub fn fault_summary(f: &FaultReport) -> FaultSummary {
    let s = &f.stats;
    FaultSummary {
        messages_lost: s.lost,
        messages_lost_link_down: s.lost_link_down,
        messages_dropped_down: s.dropped_down,
        messages_duplicated: s.duplicated,
        messages_delayed: s.delayed,
        delay_total_s: s.delay_total.as_secs_f64(),
        crashes: s.crashes,
        rejoins: s.rejoins,
        down_time_s: s.down_time.iter().map(|t| t.as_secs_f64()).collect(),
        mass_lost: f.mass_lost,
        algorithm_counts: f
            .counts
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounded_numbers_are_never_negative_zero() {
        assert_eq!(fixed(-1e-9, 4), "0.0000");
        assert_eq!(fixed(-0.0, 4), "0.0000");
        assert_eq!(fixed(-0.00004, 4), "0.0000");
        assert_eq!(fixed(-0.00005001, 4), "-0.0001");
        assert_eq!(fixed(-2.5, 1), "-2.5");
        assert_eq!(fixed(1.23456, 2), "1.23");
        assert_eq!(fixed(-3.0, 0), "-3");
        assert_eq!(fixed(-0.2, 0), "0");
        assert_eq!(fixed(f64::NAN, 4), "NaN");
        assert_eq!(fixed(f64::NEG_INFINITY, 4), "-inf");
        assert_eq!(sci(-0.0, 3), "0.000e0");
        assert_eq!(sci(-1e-300, 3), "-1.000e-300");
        assert_eq!(sci(2.5e-7, 3), "2.500e-7");
    }
}
