"""Fixtures of the Python package's tests (run by tests/run.sh against a freshly built wheel).

DASIM_BIN names the command-line binary that the package's results are compared with (default:
the release build in the target directory)."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


def cli_binary() -> Path:
    if "DASIM_BIN" in os.environ:
        return Path(os.environ["DASIM_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "release" / "dasim"


@pytest.fixture(scope="session")
def cli():
    """Runs the dasim binary; returns the completed process (never raises on its exit code)."""
    exe = cli_binary()
    if not exe.exists():
        pytest.fail(f"the dasim binary is not at {exe}: build it (cargo build --release) or set DASIM_BIN")

    def call(*args, **kw):
        return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, **kw)

    return call


@pytest.fixture(autouse=True)
def _quiet_matplotlib(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
