"""Scenarios from files, text and dicts; with_values; every error located as the CLI locates it."""

import pytest

import dasim

from conftest import SCENARIOS

QUICKSTART = SCENARIOS / "quickstart.toml"


def test_a_dict_round_trips():
    s = dasim.load(QUICKSTART)
    assert s.name == "quickstart" and s.workers == 16 and s.algorithms == ["allreduce", "adpsgd"]
    d = s.to_dict()
    again = dasim.Scenario.from_dict(d, base_dir=SCENARIOS)
    assert again.to_dict() == d
    assert dasim.Scenario.from_toml(s.to_toml(), QUICKSTART).to_dict() == d


def test_with_values_sets_keys_as_a_sweep_does():
    s = dasim.load(QUICKSTART).with_values({"cluster.stragglers[0].factor": 8, "run.sim_time_s": 1.5}, seed=7)
    d = s.to_dict()
    assert d["cluster"]["stragglers"][0]["factor"] == 8.0  # an integer where the file has a float
    assert d["run"]["sim_time_s"] == 1.5 and s.seed == 7
    with pytest.raises(dasim.DasimError, match=r"\[3\] is past its end"):
        dasim.load(QUICKSTART).with_values({"cluster.stragglers[3].factor": 2.0})
    with pytest.raises(dasim.ScenarioError, match="workers must be at least 2"):
        dasim.load(QUICKSTART).with_values({"cluster.workers": 1})


def test_dict_errors_name_the_key_path():
    d = dasim.load(QUICKSTART).to_dict()
    d["cluster"]["workers"] = "many"
    with pytest.raises(dasim.ScenarioError) as e:
        dasim.Scenario.from_dict(d)
    assert e.value.file == "<dict>" and e.value.field == "cluster.workers" and e.value.line is None
    assert str(e.value).startswith("<dict>: cluster.workers: invalid type")
    d["cluster"]["workers"] = None
    with pytest.raises(dasim.ScenarioError, match="leave the key out"):
        dasim.Scenario.from_dict(d)


def test_a_sweep_file_loads_as_its_base_scenario_and_grid():
    s = dasim.load(SCENARIOS / "papers" / "adpsgd-heterogeneity.toml")
    assert s.sweep_grid == {"cluster.stragglers[0].factor": [1.0, 2.0, 4.0, 8.0, 16.0, 100.0]}
    assert "sweep" not in s.to_dict()


def test_a_panic_is_an_internal_error_naming_a_bug():
    with pytest.raises(dasim.InternalError, match="dasim bug: a Rust panic reached the Python boundary: boom"):
        dasim._core._panic_for_test("boom")


BAD = {
    "not_toml": "name = \n",
    "unknown_key": "[cluster]\nworkers = 4\nwokers = 3\n[model]\nkind = \"quadratic\"\ndim = 4\n[[algorithms]]\nkind = \"allreduce\"\n",
    "wrong_type": "[cluster]\nworkers = \"four\"\n",
    "impossible_value": "[cluster]\nworkers = 1\n[model]\nkind = \"quadratic\"\ndim = 4\n[[algorithms]]\nkind = \"allreduce\"\n",
    "unknown_algorithm": "[cluster]\nworkers = 4\n[model]\nkind = \"quadratic\"\ndim = 4\n[[algorithms]]\nkind = \"gossip-magic\"\n",
    "missing_data_file": "[cluster]\nworkers = 4\n[model]\nkind = \"mlp\"\nhidden = [8]\n[data]\ndataset = \"csv\"\npath = \"no-such-file.csv\"\n[[algorithms]]\nkind = \"allreduce\"\n",
    "disconnected_topology": "[cluster]\nworkers = 4\n[model]\nkind = \"quadratic\"\ndim = 4\n[topology]\nkind = \"file\"\npath = \"edges.txt\"\n[[algorithms]]\nkind = \"dpsgd\"\n",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_the_cli_message(tmp_path, cli, case):
    (tmp_path / "edges.txt").write_text("0 1\n2 3\n")
    path = tmp_path / f"{case}.toml"
    path.write_text(BAD[case])
    p = cli("validate", path)
    assert p.returncode == 2, (case, p.stdout, p.stderr)
    message = p.stderr.strip()
    assert message.startswith("error: ")
    with pytest.raises(dasim.DasimError) as e:
        dasim.validate(path)
    assert str(e.value) == message[len("error: "):]
    if isinstance(e.value, dasim.ScenarioError):
        assert e.value.file == str(path)


def test_a_missing_scenario_file_is_located(tmp_path, cli):
    path = tmp_path / "absent.toml"
    p = cli("validate", path)
    with pytest.raises(dasim.ScenarioError) as e:
        dasim.load(path)
    assert str(e.value) == p.stderr.strip()[len("error: "):]
    assert "cannot read the scenario file" in str(e.value)
