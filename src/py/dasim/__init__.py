"""dasim: a deterministic discrete-event simulator of a training cluster whose workers compute
real gradients, driven from Python.

    import dasim
    scenario = dasim.load("scenarios/quickstart.toml")
    run = dasim.run(scenario)                  # kept in memory; out="runs/qs" writes a run directory
    run.metrics                                # pandas DataFrames, as metrics.csv holds them
    run.plot("loss")                           # matplotlib
    dasim.check(scenario, "1..3")              # the [[expect]] claims over seeds, as a DataFrame

The engine is the Rust library (`dasim._core`); this package turns what it returns into
DataFrames and figures. Errors are the command line's: `ScenarioError` (with `file`, `line`,
`column`, `field`, `hint`) for bad input, `DasimError` for a failed run, `InternalError` for a
bug; Ctrl-C stops a run after its current event (with a checkpoint in a run directory, which
`dasim.run(resume=DIR)` continues) and raises `KeyboardInterrupt`.
"""

from . import _core
from ._core import DasimError, InternalError, ScenarioError
from ._run import Run, check, open, run, sweep, trace
from ._scenario import Scenario, load, validate
from ._progress import DasimWarning

__version__: str = _core.__version__

__all__ = [
    "DasimError",
    "DasimWarning",
    "InternalError",
    "Run",
    "Scenario",
    "ScenarioError",
    "check",
    "load",
    "open",
    "run",
    "sweep",
    "trace",
    "validate",
]
