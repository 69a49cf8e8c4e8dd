"""Run.plot draws the standard figures with matplotlib."""

import pytest

import dasim

from conftest import SCENARIOS


@pytest.fixture(scope="module")
def run():
    return dasim.run(dasim.load(SCENARIOS / "quickstart.toml").with_values({"run.sim_time_s": 1.0}), backend="flex", progress=False)


@pytest.mark.parametrize("what", ["loss", "accuracy", "train_loss", "consensus"])
def test_curves_have_a_line_per_algorithm(run, what):
    fig = run.plot(what, x="epochs")
    assert len(fig.axes[0].lines) == 2


def test_staleness_utilization_and_timeline(run):
    assert len(run.plot("staleness").axes[0].lines) == 2
    fig = run.plot("utilization")
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == 4 * 16
    fig = run.plot("timeline", algorithm="adpsgd", window=(0.0, 0.2))
    assert len(fig.axes[0].collections) > 0
    with pytest.raises(ValueError, match="unknown figure"):
        run.plot("nope")
