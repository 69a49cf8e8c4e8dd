//! Claims without a simulator: `[[expect]]` entries checked against synthetic scenario facts,
//! and evaluated against synthetic run results (a `Summary` and the rows of `metrics.csv`,
//! `series.csv`, `staleness.csv` and `utilization.csv`).

use crate::common;

use dasim_reports::claims::expr::parse;
use dasim_reports::claims::{
    Bound, Claim, ClaimError, Expect, Facts, Op, Over, Quantities, RunView, STOPPED_EARLY, Seeds,
};
use dasim_reports::rundir::{
    AlgorithmStaleness, AlgorithmSummary, CheckResult, CheckRow, IntStats, MetricRow, SeriesRow,
    StalenessRow, Summary, TimeToTarget, Utilization, UtilizationRow,
};

/// What the algorithm registry declares of the kinds these tests use: SGP's message ages and
/// push-sum weights, DASGD's staleness between models.
const MEASURED: &[(&str, &[&str])] = &[
    ("allreduce", &[]),
    ("adpsgd", &[]),
    ("sgp", &["message_age", "pushsum_weight"]),
    ("overlap-sgp", &["message_age", "pushsum_weight"]),
    ("dasgd", &["model_staleness"]),
];

/// Four workers; an all-reduce, an AD-PSGD and an Overlap-SGP labelled `osgp-tau-2` (τ = 2).
fn facts() -> Facts {
    Facts {
        algorithms: vec![
            ("allreduce".into(), "allreduce".into()),
            ("adpsgd".into(), "adpsgd".into()),
            ("osgp-tau-2".into(), "overlap-sgp".into()),
        ],
        measured: MEASURED.to_vec(),
        workers: 4,
        accuracy: Some(true),
        optimum: Some(false),
        target_accuracy: true,
        target_loss: false,
        eval_replicas: false,
        link_peaks: false,
        timing_only: false,
        sim_time_s: Some(0.3),
        unavailable: Vec::new(),
    }
}

fn expect(metric: &str, algorithm: Option<&str>, op: Op, value: Bound) -> Expect {
    Expect {
        metric: metric.into(),
        algorithm: algorithm.map(str::to_owned),
        op,
        value,
        rel_tol: None,
        abs_tol: None,
        over: None,
        at: None,
        seeds: Seeds::All,
        note: None,
    }
}

fn num(x: f64) -> Bound {
    Bound::Number(x)
}

fn expr(e: &str) -> Bound {
    Bound::Expr(e.into())
}

fn run(label: &str, kind: &str) -> AlgorithmSummary {
    AlgorithmSummary {
        algorithm: label.into(),
        kind: kind.into(),
        options: Default::default(),
        topology: Default::default(),
        optimizer: Default::default(),
        backend: "flex".into(),
        stopped: None,
        stop_reason: None,
        sim_time_s: 0.3,
        events: 100,
        worker_steps: 120,
        steps_per_sim_s: 400.0,
        epochs: 1.5,
        final_loss: 0.25,
        final_accuracy: 0.9,
        final_perplexity: None,
        messages: 12,
        bytes: 4800,
        gradient_flushes: 10,
        gradient_requests: 120,
        global_staleness: Some(IntStats {
            count: 120,
            mean: 0.0,
            p99: 0,
            max: 0,
        }),
        row_staleness: Some(IntStats {
            count: 120,
            mean: 0.0,
            p99: 0,
            max: 0,
        }),
        message_age: None,
        mix_age: None,
        model_staleness: None,
        final_consensus: 0.0,
        final_suboptimality: None,
        time_to_target: TimeToTarget {
            accuracy_s: Some(0.2),
            loss_s: None,
        },
        utilization: Utilization {
            compute: 0.5,
            communicate: 0.1,
            blocked: 0.4,
            idle: 0.0,
            down: None,
        },
        faults: None,
    }
}

struct Results {
    summary: Summary,
    metrics: Vec<MetricRow>,
    series: Vec<SeriesRow>,
    staleness: Vec<StalenessRow>,
    utilization: Vec<UtilizationRow>,
}

impl Results {
    fn view(&self) -> RunView<'_> {
        RunView {
            summary: &self.summary,
            metrics: &self.metrics,
            series: &self.series,
            staleness: &self.staleness,
            utilization: &self.utilization,
        }
    }
}

/// Results of the three algorithms of [`facts`]: all-reduce reaches the accuracy target at
/// 0.2 s; AD-PSGD never does, is twice as fast and has staleness; Overlap-SGP mixes messages up
/// to 2 iterations old.
fn results() -> Results {
    let allreduce = run("allreduce", "allreduce");
    let adpsgd = AlgorithmSummary {
        steps_per_sim_s: 800.0,
        global_staleness: Some(IntStats {
            count: 240,
            mean: 3.5,
            p99: 7,
            max: 9,
        }),
        row_staleness: Some(IntStats {
            count: 240,
            mean: 1.25,
            p99: 4,
            max: 6,
        }),
        final_consensus: 0.05,
        time_to_target: TimeToTarget::default(),
        ..run("adpsgd", "adpsgd")
    };
    let osgp = AlgorithmSummary {
        message_age: Some(IntStats {
            count: 50,
            mean: 1.5,
            p99: 2,
            max: 2,
        }),
        ..run("osgp-tau-2", "overlap-sgp")
    };
    let mut metrics = Vec::new();
    for (label, losses) in [
        ("allreduce", [2.0, 1.0, 0.5, 0.25]),
        ("adpsgd", [2.0, 0.8, 0.9, 0.3]),
        ("osgp-tau-2", [2.0, 1.5, 1.0, 0.5]),
    ] {
        for (i, loss) in losses.into_iter().enumerate() {
            metrics.push(MetricRow {
                algorithm: label.into(),
                // Grid times with the rounding noise real files have.
                time_s: [0.0, 0.1, 0.2, 0.30000000000000004][i],
                loss: Some(loss),
                train_loss: (i > 0).then_some(loss * 1.1),
                consensus: Some(if label == "allreduce" {
                    0.0
                } else {
                    loss / 10.0
                }),
                ..MetricRow::default()
            });
        }
    }
    let series = [(0.0, 1.0, 1.0), (0.1, 0.75, 1.5), (0.2, 0.5, 1.25)]
        .into_iter()
        .flat_map(|(t, lo, hi)| {
            [("weight_min", lo), ("weight_max", hi)].map(|(name, v)| SeriesRow {
                algorithm: "osgp-tau-2".into(),
                time_s: t,
                name: name.into(),
                value: Some(v),
            })
        })
        .collect();
    let staleness = [(0, 3), (1, 1), (2, 2)]
        .into_iter()
        .map(|(value, count)| StalenessRow {
            algorithm: "adpsgd".into(),
            measure: "row".into(),
            worker: 1,
            value,
            count,
        })
        .collect();
    let utilization = (0..4)
        .map(|w| UtilizationRow {
            algorithm: "adpsgd".into(),
            worker: w,
            steps: if w == 3 { 30 } else { 60 },
            compute_s: 0.25,
            communicate_s: 0.0,
            blocked_s: 0.05,
            idle_s: 0.0,
            down_s: None,
        })
        .collect();
    Results {
        summary: Summary {
            scenario: "synthetic".into(),
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
            runs: vec![allreduce, adpsgd, osgp],
            checks: Vec::new(),
        },
        metrics,
        series,
        staleness,
        utilization,
    }
}

fn quantities() -> Quantities {
    let mut q = Quantities::default();
    q.set("n", 4.0).set("s", 2.0).set("gap", 0.5);
    q.set_for("osgp-tau-2", "tau", 2.0);
    q
}

fn check(e: &Expect) -> Vec<CheckRow> {
    let claim = Claim::new(0, e, &facts()).unwrap_or_else(|err| panic!("{err}"));
    let r = results();
    claim.evaluate(&r.view(), &quantities())
}

fn one(e: &Expect) -> CheckRow {
    let rows = check(e);
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.into_iter().next().unwrap()
}

fn error(e: &Expect) -> ClaimError {
    Claim::new(3, e, &facts()).expect_err("the expectation should be refused")
}

#[test]
fn every_comparison_on_a_scalar() {
    let st = |op, v| one(&expect("staleness.max", Some("adpsgd"), op, v));
    for (op, bound, result) in [
        (Op::Lt, 6.0, CheckResult::Fail),
        (Op::Lt, 7.0, CheckResult::Pass),
        (Op::Le, 6.0, CheckResult::Pass),
        (Op::Gt, 6.0, CheckResult::Fail),
        (Op::Ge, 6.0, CheckResult::Pass),
        (Op::Eq, 6.0, CheckResult::Pass),
        (Op::Eq, 6.5, CheckResult::Fail),
    ] {
        let row = st(op, num(bound));
        assert_eq!(row.result, result, "6 {op} {bound}");
        assert_eq!((row.observed, row.bound), (Some(6.0), Some(bound)));
        assert_eq!(row.tolerance, None);
    }
}

#[test]
fn approximate_comparisons_use_the_larger_tolerance() {
    // staleness.mean of adpsgd is 1.25; n - 1 = 3 ± 20% = ±0.6 fails, ±2 (absolute) passes.
    let mut e = expect(
        "staleness.mean",
        Some("adpsgd"),
        Op::Approx,
        expr("(n - 1) / 2"),
    );
    e.rel_tol = Some(0.2);
    let row = one(&e);
    assert_eq!(row.bound, Some(1.5));
    assert_eq!(row.tolerance, Some(0.30000000000000004));
    assert_eq!(row.result, CheckResult::Pass);
    e.rel_tol = Some(0.1);
    assert_eq!(one(&e).result, CheckResult::Fail);
    e.abs_tol = Some(0.25);
    let row = one(&e);
    assert_eq!(row.tolerance, Some(0.25));
    assert_eq!(row.result, CheckResult::Pass);
}

#[test]
fn an_expectation_without_algorithm_skips_those_that_do_not_define_the_metric() {
    let rows = check(&expect("message_age.max", None, Op::Le, expr("tau")));
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r.algorithm.as_str(), r.result))
        .collect();
    assert_eq!(
        got,
        [
            ("allreduce", CheckResult::Skip),
            ("adpsgd", CheckResult::Skip),
            ("osgp-tau-2", CheckResult::Pass),
        ]
    );
    assert!(
        rows[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("not defined for allreduce")
    );
    assert_eq!(rows[2].bound, Some(2.0), "osgp-tau-2's own tau");
    // Every algorithm defines the staleness: no skip, one row each in scenario order.
    let rows = check(&expect("staleness.max", None, Op::Le, expr("2 * n")));
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.result == CheckResult::Pass));
}

#[test]
fn naming_an_algorithm_that_does_not_define_the_metric_is_an_error() {
    let e = error(&expect("message_age.max", Some("adpsgd"), Op::Le, num(2.0)));
    assert_eq!(e.key, "metric");
    assert!(e.message.contains("not defined for adpsgd"), "{e}");
    assert!(e.message.contains("sgp, overlap-sgp"), "{e}");
    let e = error(&expect("dasgd.s_avg", None, Op::Le, num(2.0)));
    assert!(e.to_string().contains("defines"), "{e}");
    // ... and in an expression too.
    let e = error(&expect(
        "staleness.max",
        Some("adpsgd"),
        Op::Le,
        expr("1 + allreduce.message_age.max"),
    ));
    assert_eq!((e.key, e.column), ("value", Some(5)));
}

#[test]
fn series_are_reduced_over_the_evaluation_points_or_taken_at_a_time() {
    let mut e = expect("loss", Some("adpsgd"), Op::Lt, num(1.0));
    let observed = |e: &Expect| one(e).observed.unwrap();
    assert_eq!(observed(&e), 0.3, "final");
    for (over, want) in [
        (Over::Final, 0.3),
        (Over::Max, 2.0),
        (Over::Min, 0.3),
        (Over::Mean, 1.0),
    ] {
        e.over = Some(over);
        assert!((observed(&e) - want).abs() < 1e-15, "{over:?}");
    }
    e.over = None;
    e.at = Some(0.2);
    assert_eq!(observed(&e), 0.9);
    e.at = Some(0.15);
    assert_eq!(observed(&e), 0.8, "the last point at or before 0.15 s");
    e.at = Some(0.3);
    assert_eq!(observed(&e), 0.3, "0.3 matches 0.30000000000000004");
    // The training loss has no value at t = 0: mean over the points that have one.
    let mut e = expect("train_loss", Some("allreduce"), Op::Lt, num(1.0));
    e.over = Some(Over::Max);
    assert_eq!(observed(&e), 1.1);
    // series.csv
    let mut e = expect("pushsum_weight.min", None, Op::Gt, num(0.4));
    e.over = Some(Over::Min);
    let rows = check(&e);
    assert_eq!(rows[2].observed, Some(0.5));
    assert_eq!(rows[2].result, CheckResult::Pass);
}

#[test]
fn per_worker_metrics_read_utilization_and_staleness() {
    let w = |m: &str| {
        one(&expect(m, Some("adpsgd"), Op::Ge, num(0.0)))
            .observed
            .unwrap()
    };
    assert_eq!(w("worker[3].steps"), 30.0);
    assert_eq!(w("worker[3].steps_per_sim_s"), 100.0);
    assert_eq!(w("worker[1].staleness.count"), 6.0);
    assert_eq!(w("worker[1].staleness.mean"), 5.0 / 6.0);
    assert_eq!(w("worker[1].staleness.p99"), 2.0);
    assert_eq!(w("worker[1].staleness.max"), 2.0);
    assert_eq!(w("worker[0].utilization.blocked"), 0.05 / 0.3);
    // Worker 0 applied no gradient in the histogram: its mean staleness is not measured.
    let row = one(&expect(
        "worker[0].staleness.mean",
        Some("adpsgd"),
        Op::Ge,
        num(0.0),
    ));
    assert_eq!(row.result, CheckResult::Fail);
    assert!(row.reason.unwrap().contains("not measured"));
    let e = error(&expect("worker[4].steps", None, Op::Ge, num(0.0)));
    assert!(e.message.contains("out of range"), "{e}");
}

#[test]
fn bounds_may_name_other_algorithms_metrics() {
    // AD-PSGD's throughput is at least 1.5 times all-reduce's; every osgp message is younger
    // than the all-reduce staleness max plus τ.
    let row = one(&expect(
        "steps_per_sim_s",
        Some("adpsgd"),
        Op::Ge,
        expr("1.5 * allreduce.steps_per_sim_s"),
    ));
    assert_eq!((row.bound, row.result), (Some(600.0), CheckResult::Pass));
    let row = one(&expect(
        "message_age.max",
        Some("osgp-tau-2"),
        Op::Le,
        expr("allreduce.staleness.max + tau"),
    ));
    assert_eq!(row.result, CheckResult::Pass);
    // Quoted labels, and per-worker references.
    let row = one(&expect(
        "staleness.max",
        Some("adpsgd"),
        Op::Ge,
        expr("`osgp-tau-2`.message_age.max + adpsgd.worker[1].staleness.max"),
    ));
    assert_eq!(row.bound, Some(4.0));
}

#[test]
fn a_target_never_reached_is_infinitely_late() {
    // AD-PSGD never reached the accuracy target; all-reduce did, at 0.2 s.
    let late = |op| {
        one(&expect(
            "time_to_target.accuracy_s",
            Some("adpsgd"),
            op,
            expr("0.5 * allreduce.time_to_target.accuracy_s"),
        ))
    };
    let row = late(Op::Lt);
    assert_eq!(row.observed, Some(f64::INFINITY));
    assert_eq!(row.result, CheckResult::Fail);
    assert_eq!(row.reason.as_deref(), Some("target not reached"));
    assert_eq!(late(Op::Gt).result, CheckResult::Pass);
    // The other way round: all-reduce's 0.2 s is less than half of infinity.
    let row = one(&expect(
        "time_to_target.accuracy_s",
        Some("allreduce"),
        Op::Lt,
        expr("0.5 * adpsgd.time_to_target.accuracy_s"),
    ));
    assert_eq!(row.result, CheckResult::Pass);
    assert_eq!(
        row.reason.as_deref(),
        Some("the bound is infinite: a target it names was not reached")
    );
}

#[test]
fn seeds_mean_judges_the_means() {
    let mut e = expect("staleness.mean", Some("adpsgd"), Op::Le, num(1.0));
    e.seeds = Seeds::Mean;
    let claim = Claim::new(0, &e, &facts()).unwrap();
    let seed = |observed: f64| {
        let mut row = claim.row("adpsgd");
        row.observed = Some(observed);
        row.bound = Some(1.0);
        vec![row]
    };
    // 0.5, 1.25, 1.0: two of three seeds hold, the mean 0.9166… holds.
    let rows = claim.aggregate_mean(&[(1, seed(0.5)), (2, seed(1.25)), (3, seed(1.0))]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].result, CheckResult::Pass);
    assert!((rows[0].observed.unwrap() - 2.75 / 3.0).abs() < 1e-15);
    assert!(
        rows[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("mean over seeds 1, 2, 3 of 0.5, 1.25, 1"),
        "{:?}",
        rows[0].reason
    );
    let rows = claim.aggregate_mean(&[(1, seed(0.5)), (2, seed(2.0))]);
    assert_eq!(rows[0].result, CheckResult::Fail);
    // A seed without a value fails the mean.
    let mut missing = seed(0.5);
    missing[0].observed = None;
    missing[0].reason = Some("not measured: no gradient".into());
    let rows = claim.aggregate_mean(&[(1, seed(0.5)), (2, missing)]);
    assert_eq!(rows[0].result, CheckResult::Fail);
    assert!(rows[0].reason.as_deref().unwrap().contains("seed 2"));
    // A seed whose run stopped early (diverged) fails the mean, whatever its numbers: here its
    // value would pull the mean under the bound.
    let mut diverged = seed(0.1);
    diverged[0].result = CheckResult::Fail;
    diverged[0].reason = Some(format!("{STOPPED_EARLY}: the loss diverged"));
    let rows = claim.aggregate_mean(&[(1, seed(1.2)), (2, diverged), (3, seed(1.0))]);
    assert_eq!(rows[0].result, CheckResult::Fail, "{:?}", rows[0]);
    let reason = rows[0].reason.as_deref().unwrap();
    assert!(
        reason.contains("seed 2") && reason.contains("diverged"),
        "{reason}"
    );
}

#[test]
fn bad_expectations_name_their_key_and_column() {
    let mut facts = facts();
    facts
        .unavailable
        .push(("gap".into(), None, "the schedule is time-varying".into()));
    let err = |e: &Expect| Claim::new(0, e, &facts).unwrap_err();
    let st = |v: Bound| expect("staleness.max", Some("adpsgd"), Op::Le, v);
    for (e, key, column, needle) in [
        (
            expect("stalenes.max", None, Op::Le, num(1.0)),
            "metric",
            None,
            "did you mean `row_staleness.max`",
        ),
        (
            expect("staleness.max", Some("adpsgdd"), Op::Le, num(1.0)),
            "algorithm",
            None,
            "allreduce, adpsgd, osgp-tau-2",
        ),
        (st(expr("2 * (n - 1")), "value", Some(11), "`)` to close"),
        (
            st(expr("2 * gapp")),
            "value",
            Some(5),
            "unknown name `gapp`",
        ),
        (
            st(expr("n-s")),
            "value",
            Some(1),
            "write `n - s` with spaces",
        ),
        (st(expr("2 * gap")), "value", Some(5), "time-varying"),
        (
            st(expr("adpsgd.final_los")),
            "value",
            Some(1),
            "`adpsgd.final_loss`",
        ),
        (
            expect("final_suboptimality", None, Op::Le, num(1.0)),
            "metric",
            None,
            "optimum",
        ),
        (
            expect("time_to_target.loss_s", None, Op::Le, num(1.0)),
            "metric",
            None,
            "target_loss",
        ),
        (
            expect("replica_loss.max", None, Op::Le, num(1.0)),
            "metric",
            None,
            "eval_replicas",
        ),
        (
            Expect {
                over: Some(Over::Max),
                ..st(num(1.0))
            },
            "over",
            None,
            "one number per run",
        ),
        (
            Expect {
                at: Some(0.1),
                ..st(num(1.0))
            },
            "at",
            None,
            "one number per run",
        ),
        (
            Expect {
                at: Some(0.5),
                ..expect("loss", None, Op::Le, num(1.0))
            },
            "at",
            None,
            "after the end of the run",
        ),
        (
            Expect {
                at: Some(0.1),
                over: Some(Over::Max),
                ..expect("loss", None, Op::Le, num(1.0))
            },
            "at",
            None,
            "not both",
        ),
        (
            expect("staleness.max", None, Op::Approx, num(1.0)),
            "op",
            None,
            "needs a tolerance",
        ),
        (
            Expect {
                rel_tol: Some(0.1),
                ..st(num(1.0))
            },
            "rel_tol",
            None,
            "applies only to op = \"~=\"",
        ),
    ] {
        let got = err(&e);
        assert_eq!((got.key, got.column), (key, column), "{got}");
        assert!(got.to_string().contains(needle), "`{needle}` not in: {got}");
    }
    // `tau` for an algorithm that has none, when the scenario's Overlap-SGP entries differ.
    facts
        .unavailable
        .push(("tau".into(), Some("adpsgd".into()), "different τ".into()));
    let got = Claim::new(0, &st(expr("n + tau")), &facts).unwrap_err();
    assert_eq!(got.column, Some(5));
    let ok = expect("message_age.max", Some("osgp-tau-2"), Op::Le, expr("tau"));
    assert!(Claim::new(0, &ok, &facts).is_ok());
}

#[test]
fn claims_describe_themselves() {
    let mut e = expect("loss", Some("adpsgd"), Op::Approx, expr("0.5 * n"));
    e.rel_tol = Some(0.05);
    e.over = Some(Over::Mean);
    let c = Claim::new(0, &e, &facts()).unwrap();
    assert_eq!(c.describe(), "loss ~= 0.5 * n over mean (±5%)");
    assert_eq!(c.over_text(), "mean");
    assert_eq!(c.quantities(), ["n"]);
    e.over = None;
    e.at = Some(0.25);
    let c = Claim::new(0, &e, &facts()).unwrap();
    assert_eq!(c.over_text(), "at=0.25");
    let c = Claim::new(0, &expect("bytes", None, Op::Gt, num(0.0)), &facts()).unwrap();
    assert_eq!(c.over_text(), "");
}

#[test]
fn the_parser_follows_the_usual_precedence() {
    let eval = |t: &str| parse(t).unwrap().eval(&mut |_| Ok::<_, ()>(3.0)).unwrap();
    assert_eq!(eval("1 + 2 * 3 ^ 2"), 19.0);
    assert_eq!(eval("-n ^ 2"), -9.0);
    assert_eq!(eval("2 ^ 1 ^ 3"), 2.0);
    assert_eq!(eval("(1 + 2) * 3 / 9 - 1"), 0.0);
    assert_eq!(eval("max(n, 2 * n) - min(1, n)"), 5.0);
    assert_eq!(eval("sqrt(n * n) + log(1)"), 3.0);
    let e = parse("1 +* 2").unwrap_err();
    assert_eq!(e.column, 4);
}

#[test]
fn the_expect_table_reads_from_toml() {
    let text = r#"
metric = "staleness.max"
algorithm = "adpsgd"
op = "<="
value = 12
seeds = "mean"
note = "Lian et al. 2018"
"#;
    let e: Expect = toml::from_str(text).unwrap();
    assert_eq!(e.value, num(12.0));
    assert_eq!(e.seeds, Seeds::Mean);
    let e: Expect = toml::from_str(&text.replace("12", "\"2 * n\"")).unwrap();
    assert_eq!(e.value, expr("2 * n"));
    let bad: Result<Expect, _> = toml::from_str(&text.replace("\"<=\"", "\"=<\""));
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("unknown variant `=<`")
    );
    let bad: Result<Expect, _> = toml::from_str(&text.replace("12", "true"));
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("a number, or an expression")
    );
    let bad: Result<Expect, _> = toml::from_str(&format!("{text}over = \"last\"\n"));
    assert!(bad.is_err());
    let bad: Result<Expect, _> = toml::from_str(&format!("{text}tolerance = 1\n"));
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("unknown field `tolerance`")
    );
}

/// The book's chapter "Testing claims" holds the quantity table exactly as the code renders it:
/// one owner, the code. (The metric table, whose "defined for" column the algorithm registry
/// decides, is checked by the binary's `tests/integration/book.rs`.)
#[test]
fn the_book_lists_the_quantities_of_the_code() {
    let path = common::manifest_dir().join("../book/src/testing-claims.md");
    let book = std::fs::read_to_string(&path).unwrap();
    let table = dasim_reports::claims::quantities_table();
    assert!(
        book.contains(&table),
        "the quantity table of {} differs from the code's; paste:\n\n{table}",
        path.display()
    );
}

#[test]
fn dasgd_staleness_is_read_from_the_summary() {
    let mut r = results();
    r.summary.runs.push(AlgorithmSummary {
        model_staleness: Some(AlgorithmStaleness {
            count: 10,
            mean: 2.5,
            max: 4,
        }),
        ..run("dasgd", "dasgd")
    });
    let mut f = facts();
    f.algorithms.push(("dasgd".into(), "dasgd".into()));
    let c = Claim::new(
        0,
        &expect("dasgd.s_avg", None, Op::Le, expr("dasgd.dasgd.s_max")),
        &f,
    )
    .unwrap();
    // A label followed by a metric that starts with the same word: the hint says how.
    let e = Claim::new(
        0,
        &expect("dasgd.s_avg", None, Op::Le, expr("dasgd.s_max")),
        &f,
    )
    .unwrap_err();
    assert!(e.to_string().contains("`dasgd.dasgd.s_max`"), "{e}");
    let rows = c.evaluate(&r.view(), &quantities());
    let dasgd = rows.iter().find(|r| r.algorithm == "dasgd").unwrap();
    assert_eq!((dasgd.observed, dasgd.bound), (Some(2.5), Some(4.0)));
    assert_eq!(
        rows.iter()
            .filter(|r| r.result == CheckResult::Skip)
            .count(),
        3
    );
}
