"""dasim.check judges a scenario's [[expect]] claims over seeds, in this process, as `dasim check`
does on the command line."""

import xml.etree.ElementTree as ET

import pytest

import dasim

from conftest import SCENARIOS

CLAIMS = SCENARIOS / "claims" / "adpsgd-default.toml"

# A claim judged on the mean over the seeds, and one that fails.
EXTRA = """
[[expect]]
metric = "final_loss"
op = "<"
value = 1.0
seeds = "mean"

[[expect]]
metric = "final_loss"
algorithm = "adpsgd"
op = "<"
value = 0.0
note = "fails on purpose"
"""


def scenario_with_extra_claims(tmp_path):
    path = tmp_path / "claims.toml"
    path.write_text(CLAIMS.read_text(encoding="utf-8") + EXTRA, encoding="utf-8")
    return path


def junit_outcomes(path):
    """(classname, name) -> pass | failure | skipped | error, from `dasim check --junit`."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "skipped", "error")]
        out[(case.get("classname"), case.get("name"))] = kinds[0] if kinds else "pass"
    return out


def test_verdicts_equal_the_command_lines(tmp_path, cli):
    path = scenario_with_extra_claims(tmp_path)
    df = dasim.check(dasim.load(path), "1..2", backend="flex", progress=False)
    junit = tmp_path / "junit.xml"
    p = cli("check", path, "--seeds", "1..2", "--junit", junit, "--backend", "flex", "--quiet")
    assert p.returncode == 1, p.stderr  # the claim that fails on purpose
    outcome = {"pass": "pass", "fail": "failure", "skip": "skipped"}
    mine = {}
    for r in df.itertuples():
        seed = f"[{r.seed}]" if r.seed.startswith("mean") else f"[seed {r.seed}]"
        kind = "error" if r.run_error else outcome[r.result]
        mine[(f"claim-adpsgd-default.{r.algorithm}", f"expect[{r.expect}] {r.claim} {seed}")] = kind
    assert mine == junit_outcomes(junit)
    # Per seed for the file's claims, once over the seeds for the mean; one failure per seed.
    assert set(df["seed"]) == {"1", "2", "mean of seeds 1, 2"}
    mean = df[df["seed"] == "mean of seeds 1, 2"]
    assert len(mean) == 2 and set(mean["result"]) == {"pass"}
    failed = df[df["result"] == "fail"]
    assert df.attrs["failures"] == 2 and set(failed["note"]) == {"fails on purpose"}
    assert list(failed["seed"]) == ["1", "2"] and not df["run_error"].any()


def test_seeds_default_to_the_scenarios_own_and_take_every_form():
    s = dasim.load(CLAIMS).with_values({"run.sim_time_s": 0.5})
    own = dasim.check(s, backend="flex", progress=False)
    assert set(own["seed"]) == {str(s.seed)}
    assert own.equals(dasim.check(s, s.seed, backend="flex", progress=False))
    assert own.equals(dasim.check(s, [s.seed], backend="flex", progress=False))
    assert own.equals(dasim.check(s, str(s.seed), backend="flex", progress=False))
    assert list(own.columns[:4]) == ["seed", "claim", "expect", "algorithm"]


def test_bad_input_is_refused_before_anything_runs():
    s = dasim.load(CLAIMS)
    with pytest.raises(ValueError, match="the range 3..1 is empty"):
        dasim.check(s, "3..1", progress=False)
    with pytest.raises(dasim.DasimError, match="seed 2 is listed twice"):
        dasim.check(s, [2, 2], progress=False)
    with pytest.raises(dasim.ScenarioError, match="nothing to check"):
        dasim.check(SCENARIOS / "quickstart.toml", progress=False)
