"""dasim.sweep runs the sweep machinery in this process and returns sweep.csv as a DataFrame."""

import pytest

import dasim

from conftest import SCENARIOS

SHORT = {"run.sim_time_s": 0.5}
KEY = "cluster.stragglers[0].factor"


def test_a_sweep_returns_one_row_per_point_and_algorithm(tmp_path, cli):
    base = dasim.load(SCENARIOS / "quickstart.toml").with_values(SHORT)
    grid = {KEY: [1.0, 4.0]}
    out = tmp_path / "sweep"
    df = dasim.sweep(base, grid, out, jobs=2, backend="flex", progress=False)
    assert len(df) == 4 and set(df["status"]) == {"done"}
    assert sorted(df[KEY].unique()) == [1.0, 4.0]
    assert df.attrs["run"] == 2 and df.attrs["failed"] == []
    # The straggler slows all-reduce, not AD-PSGD.
    ar = df[df["algorithm"] == "allreduce"].set_index(KEY)["worker_steps"]
    assert ar[4.0] < ar[1.0]
    # Complete points are not run again; the CLI merges the same directory to the same table.
    again = dasim.sweep(base, grid, out, backend="flex", progress=False)
    assert again.attrs["run"] == 0 and again.attrs["skipped"] == 2
    assert again.equals(df)
    p = cli("sweep", "merge", out)
    assert p.returncode == 0, p.stderr


def test_a_bad_grid_is_refused_before_anything_runs(tmp_path):
    base = dasim.load(SCENARIOS / "quickstart.toml")
    with pytest.raises(dasim.ScenarioError, match="workers must be at least 2"):
        dasim.sweep(base, {"cluster.workers": [1, 4]}, tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match="needs a grid"):
        dasim.sweep(base, progress=False)
