"""`dasim.run` is the command line's run: the same files, byte for byte, as DataFrames."""

import json

import pandas as pd
import pytest

import dasim

from conftest import SCENARIOS

QUICKSTART = SCENARIOS / "quickstart.toml"


@pytest.fixture(scope="module")
def cli_quickstart(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("cli") / "quickstart"
    p = cli("run", QUICKSTART, "--out", out, "--backend", "flex", "--quiet")
    assert p.returncode == 0, p.stderr
    return out


@pytest.fixture(scope="module")
def memory_quickstart():
    return dasim.run(QUICKSTART, backend="flex", progress=False)


def test_the_run_in_memory_has_the_files_of_the_cli_byte_for_byte(cli_quickstart, memory_quickstart):
    run = memory_quickstart
    assert run.dir is None and run.backend.startswith("flex")
    expected = {"scenario.toml", "partition.csv", "metrics.csv", "series.csv", "staleness.csv",
                "utilization.csv", "waits.csv", "links.csv", "timeline.csv", "summary.json", "timings.json"}
    assert set(run.files) == expected
    for name in run.files:
        if name == "timings.json":  # wall-clock seconds of this host
            continue
        assert run.file_text(name) == (cli_quickstart / name).read_text(), name


def test_its_dataframes_equal_the_cli_csv_files(cli_quickstart, memory_quickstart):
    for attr in ["metrics", "series", "staleness", "utilization", "waits", "links", "timeline", "partition"]:
        frame = getattr(memory_quickstart, attr)
        on_disk = pd.read_csv(cli_quickstart / f"{attr}.csv", skiprows=1)
        pd.testing.assert_frame_equal(frame, on_disk, check_exact=True, obj=attr)
    assert len(memory_quickstart.metrics) > 10
    assert memory_quickstart.summary == json.loads((cli_quickstart / "summary.json").read_text())


def test_open_reads_the_cli_directory_into_the_same_run(cli_quickstart, memory_quickstart):
    opened = dasim.open(cli_quickstart)
    assert opened.dir == cli_quickstart
    for attr in ["metrics", "staleness", "utilization", "timeline", "links", "waits", "series"]:
        pd.testing.assert_frame_equal(getattr(opened, attr), getattr(memory_quickstart, attr), check_exact=True)
    assert opened.summary == memory_quickstart.summary
    assert opened.algorithms == ["allreduce", "adpsgd"]
    assert opened.checks.empty and opened.faults.empty  # files this run did not write
    runs = opened.runs()
    assert list(runs["algorithm"]) == ["allreduce", "adpsgd"]


def test_open_reads_a_directory_of_an_older_dasim(tmp_path, cli_quickstart):
    # Before the stamp line and summary.json's later fields: plain CSV files, no summary.
    old = tmp_path / "old"
    old.mkdir()
    for name in ["metrics.csv", "timeline.csv"]:
        lines = (cli_quickstart / name).read_text().splitlines(keepends=True)
        (old / name).write_text("".join(lines[1:]))
    run = dasim.open(old)
    assert run.summary == {}
    assert run.algorithms == ["allreduce", "adpsgd"]
    pd.testing.assert_frame_equal(run.metrics, pd.read_csv(cli_quickstart / "metrics.csv", skiprows=1))
    with pytest.raises(FileNotFoundError, match="holds no run"):
        dasim.open(tmp_path)


def test_a_run_into_a_directory_is_the_cli_run(tmp_path, cli_quickstart):
    out = tmp_path / "run"
    run = dasim.run(QUICKSTART, out, backend="flex", progress=False)
    assert run.dir == out
    for name in ["metrics.csv", "staleness.csv", "timeline.csv", "summary.json", "scenario.toml"]:
        assert (out / name).read_bytes() == (cli_quickstart / name).read_bytes(), name
    assert (out / "loss.png").exists()
    # An occupied directory is refused as the CLI refuses it, and force= replaces it.
    with pytest.raises(dasim.DasimError, match="already holds the results of a run") as e:
        dasim.run(QUICKSTART, out, backend="flex", progress=False)
    assert e.value.kind == "usage"
    dasim.run(QUICKSTART, out, backend="flex", progress=False, force=True)


def test_a_scenario_from_a_dict_runs_like_its_file(memory_quickstart):
    d = dasim.load(QUICKSTART).to_dict()
    run = dasim.run(dasim.Scenario.from_dict(d, base_dir=SCENARIOS), backend="flex", progress=False)
    for name in ["metrics.csv", "staleness.csv", "timeline.csv"]:
        assert run.file_text(name).split("\n", 1)[1] == memory_quickstart.file_text(name).split("\n", 1)[1]


def test_threads_do_not_change_the_results(memory_quickstart):
    run = dasim.run(QUICKSTART, backend="flex", progress=False, threads=1)
    assert run.file_text("metrics.csv") == memory_quickstart.file_text("metrics.csv")


def test_the_trace_has_a_slice_per_timeline_row(tmp_path):
    out = tmp_path / "run"
    dasim.run(QUICKSTART, out, backend="flex", progress=False)
    trace = json.loads(dasim.trace(out).read_text())
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    timeline = dasim.open(out).timeline
    assert len(slices) == len(timeline)
    durations = sorted(round(e["dur"], 3) for e in slices)
    expected = sorted(round((r.end_s - r.start_s) * 1e6, 3) for r in timeline.itertuples())
    assert durations == pytest.approx(expected, abs=1e-3)
