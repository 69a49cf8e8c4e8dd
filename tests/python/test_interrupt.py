"""Ctrl-C stops dasim.run after the current event with a checkpoint; resume= completes the run
directory to the files of a run that never stopped, byte for byte."""

import subprocess
import sys
import textwrap

import pytest

import dasim

from conftest import SCENARIOS

# The quickstart, AD-PSGD's run long enough (8 simulated seconds) to be interrupted in.
LONG = {"run.sim_time_s": 8.0}

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import dasim
    from dasim import _progress

    scenario, out = sys.argv[1], sys.argv[2]
    sent = []
    # Python's own Ctrl-C handler, as in a terminal: a process started in the background by a
    # shell without job control inherits SIGINT ignored, and Python then installs none.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    # Ctrl-C, as a terminal sends it (SIGINT to the process), once AD-PSGD is 2 simulated
    # seconds in: whatever the machine's speed, the run is under way.
    def advanced(self, label, fraction, sim_time_s, steps, wall_s):
        if label == "adpsgd" and sim_time_s > 2.0 and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    _progress.Reporter.advanced = advanced
    try:
        dasim.run(scenario, out, backend="flex", progress=False, threads=1)
    except KeyboardInterrupt as e:
        print("INTERRUPTED:", e)
        sys.exit(130)
    print("FINISHED")
    """
)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenario") / "long-quickstart.toml"
    path.write_text(dasim.load(SCENARIOS / "quickstart.toml").with_values(LONG).to_toml())
    return path


def test_ctrl_c_leaves_a_checkpoint_that_resume_completes_byte_for_byte(tmp_path, scenario_file):
    whole = tmp_path / "whole"
    dasim.run(scenario_file, whole, backend="flex", progress=False, threads=1)

    cut = tmp_path / "cut"
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(scenario_file), str(cut)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 130, (p.stdout, p.stderr)
    assert "INTERRUPTED:" in p.stdout and "checkpoint" in p.stdout
    assert (cut / "checkpoint.bin").exists()
    assert not (cut / "loss.png").exists()  # the plots come at the end

    run = dasim.run(resume=cut, progress=False, threads=1)
    assert run.dir == cut and not (cut / "checkpoint.bin").exists()
    for name in sorted(f.name for f in whole.iterdir()):
        if name == "timings.json":  # wall-clock seconds
            continue
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name


def test_an_exception_of_the_progress_reporter_stops_the_run(tmp_path, scenario_file, monkeypatch):
    from dasim import _progress

    class Stop(Exception):
        pass

    def advanced(self, label, fraction, sim_time_s, steps, wall_s):
        if sim_time_s > 0.5:
            raise Stop(label)

    monkeypatch.setattr(_progress.Reporter, "advanced", advanced)
    with pytest.raises(Stop):
        dasim.run(scenario_file, tmp_path / "run", backend="flex", progress=False)
    assert (tmp_path / "run" / "checkpoint.bin").exists()
