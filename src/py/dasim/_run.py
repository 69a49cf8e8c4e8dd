"""Runs: `run` (into memory or a run directory), `open` (a run directory), `check` (claims over
seeds), `sweep`, `trace`."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import pandas as pd

from . import _core
from ._progress import DasimWarning, Reporter
from ._scenario import PathLike, Scenario, as_scenario

#: The tables of a run directory, by the attribute that reads them.
TABLES = {
    "metrics": "metrics.csv",
    "series": "series.csv",
    "staleness": "staleness.csv",
    "utilization": "utilization.csv",
    "waits": "waits.csv",
    "links": "links.csv",
    "timeline": "timeline.csv",
    "faults": "faults.csv",
    "gradients": "gradients.csv",
    "messages": "messages.csv",
    "partition": "partition.csv",
    "checks": "checks.csv",
}


def read_table(text: str) -> pd.DataFrame:
    """A CSV file of a run directory as a DataFrame: the stamp line (`# dasim ...`, absent in
    old run directories) skipped, empty cells (not measured) read as NaN."""
    skip = 1 if text.startswith("#") else 0
    if not text.strip() or (skip and "\n" not in text.rstrip("\n")):
        return pd.DataFrame()
    return pd.read_csv(io.StringIO(text), skiprows=skip)


class Run:
    """A run's results: its tables as DataFrames (`metrics`, `series`, `staleness`,
    `utilization`, `waits`, `links`, `timeline`, `faults`, `gradients`, `messages`,
    `partition`, `checks`), `summary` and `timings` (dicts, as the JSON files), `scenario_toml`,
    and `plot()`. A table the run did not write is an empty DataFrame."""

    def __init__(self, files: Mapping[str, str], dir: Optional[Path] = None, backend: Optional[str] = None) -> None:
        self._files: Dict[str, str] = dict(files)
        self._frames: Dict[str, pd.DataFrame] = {}
        #: The run directory (`None` for a run kept in memory).
        self.dir = dir
        #: The backend that ran it (`flex`, `wgpu`; `None` when read from a directory).
        self.backend = backend

    @classmethod
    def from_dir(cls, path: PathLike) -> "Run":
        """Reads the run directory `path` (written by `dasim run`, by `dasim.run(out=...)`, or
        by an older dasim: whatever files it has)."""
        d = Path(path)
        if not d.is_dir():
            raise FileNotFoundError(f"{d} is not a run directory (no such directory)")
        names = set(TABLES.values()) | {"summary.json", "timings.json", "scenario.toml"}
        files = {n: (d / n).read_text(encoding="utf-8") for n in sorted(names) if (d / n).is_file()}
        if "summary.json" not in files and "metrics.csv" not in files:
            raise FileNotFoundError(f"{d} holds no run (neither summary.json nor metrics.csv)")
        return cls(files, dir=d)

    def file_text(self, name: str) -> Optional[str]:
        """The text of file `name` (`"metrics.csv"`, `"summary.json"`...) as the run directory
        holds it, stamp line included; `None` when the run has no such file."""
        return self._files.get(name)

    @property
    def files(self) -> List[str]:
        """The names of the run's files (plots aside)."""
        return sorted(self._files)

    def table(self, name: str) -> pd.DataFrame:
        """Table `name` (`"metrics"` or `"metrics.csv"`) as a DataFrame."""
        file = TABLES.get(name, name)
        if file not in self._frames:
            text = self._files.get(file)
            self._frames[file] = read_table(text) if text is not None else pd.DataFrame()
        return self._frames[file].copy()

    metrics = property(lambda self: self.table("metrics"), doc="metrics.csv: the evaluation points.")
    series = property(lambda self: self.table("series"), doc="series.csv: named quantities at evaluation points.")
    staleness = property(lambda self: self.table("staleness"), doc="staleness.csv: staleness histograms.")
    utilization = property(lambda self: self.table("utilization"), doc="utilization.csv: each worker's time.")
    waits = property(lambda self: self.table("waits"), doc="waits.csv: whom each worker waited for.")
    links = property(lambda self: self.table("links"), doc="links.csv: per-link traffic.")
    timeline = property(lambda self: self.table("timeline"), doc="timeline.csv: each worker's activities.")
    faults = property(lambda self: self.table("faults"), doc="faults.csv: the faults that happened.")
    gradients = property(lambda self: self.table("gradients"), doc="gradients.csv (with [metrics] log_gradients).")
    messages = property(lambda self: self.table("messages"), doc="messages.csv (with [metrics] log_messages).")
    partition = property(lambda self: self.table("partition"), doc="partition.csv: each worker's samples.")
    checks = property(lambda self: self.table("checks"), doc="checks.csv: the claims' verdicts.")

    @property
    def summary(self) -> Dict[str, Any]:
        """summary.json (`{}` when the run has none yet)."""
        text = self._files.get("summary.json")
        return json.loads(text) if text else {}

    @property
    def timings(self) -> Dict[str, Any]:
        """timings.json: how fast this host ran it."""
        text = self._files.get("timings.json")
        return json.loads(text) if text else {}

    @property
    def scenario_toml(self) -> Optional[str]:
        """scenario.toml: the scenario as run, every default filled in."""
        return self._files.get("scenario.toml")

    @property
    def algorithms(self) -> List[str]:
        """The algorithms' labels, in order."""
        runs = self.summary.get("runs")
        if runs:
            return [r["algorithm"] for r in runs]
        m = self.metrics
        return list(dict.fromkeys(m["algorithm"])) if "algorithm" in m else []

    def runs(self) -> pd.DataFrame:
        """summary.json's `runs`, one row per algorithm (nested entries left out)."""
        rows = [{k: v for k, v in r.items() if not isinstance(v, (dict, list))} for r in self.summary.get("runs", [])]
        return pd.DataFrame(rows)

    def save(self, dir: PathLike) -> Path:
        """Writes the run's files (plots aside) into `dir`, as a run directory holds them."""
        d = Path(dir)
        d.mkdir(parents=True, exist_ok=True)
        for name, text in self._files.items():
            (d / name).write_text(text, encoding="utf-8")
        return d

    def plot(self, what: str = "loss", **kw: Any) -> Any:
        """Draws a standard figure with matplotlib and returns it: `"loss"`, `"accuracy"`,
        `"train_loss"`, `"consensus"` against `x="time"` (default), `"steps"` or `"epochs"`;
        `"staleness"`; `"utilization"`; `"timeline"` (`algorithm=`, `window=(t0, t1)`,
        `workers=` a list). `ax=` draws into existing axes; `algorithms=` selects."""
        from ._plot import plot

        return plot(self, what, **kw)

    def __repr__(self) -> str:
        where = f"dir={str(self.dir)!r}" if self.dir is not None else "in memory"
        return f"Run({', '.join(self.algorithms)}; {where})"

    def _repr_html_(self) -> str:
        r = self.runs()
        cols = [c for c in ["algorithm", "sim_time_s", "worker_steps", "epochs", "final_loss", "final_accuracy", "messages", "bytes"] if c in r]
        return f"<p>{self!r}</p>" + (r[cols].to_html(index=False) if cols else "")


def _memory_bytes(limit: Union[None, int, str]) -> Optional[int]:
    if limit is None or isinstance(limit, int):
        return limit
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
    s = limit.strip().upper()
    num = s.rstrip("KMGTIB ")
    unit = s[len(num):].strip()
    if unit not in units:
        raise ValueError(f"memory_limit: {limit!r} is not a size such as 4GiB")
    return int(float(num) * units[unit])


def run(
    scenario: Union[Scenario, PathLike, Mapping[str, Any], None] = None,
    out: Optional[PathLike] = None,
    *,
    backend: str = "auto",
    threads: Optional[int] = None,
    progress: bool = True,
    force: bool = False,
    checkpoint_every: Optional[float] = None,
    resume: Optional[PathLike] = None,
    max_batch: Optional[int] = None,
    memory_limit: Union[None, int, str] = None,
) -> Run:
    """Runs a scenario (a `Scenario`, a file, or a dict) and returns its `Run`.

    Without `out` the run is kept in memory (nothing is written); with it, `out` becomes the
    run directory `dasim run --out` writes, plots included (`force=True` replaces an earlier
    run there). `backend`: `auto` (a hardware GPU if present, else `flex`), `wgpu` or `flex`.
    `threads`: for the gradient math (default: every core; results do not depend on it).
    `checkpoint_every`: simulated seconds between checkpoints of a run directory. `resume`: a
    run directory whose run was interrupted, continued from its checkpoint (the scenario is
    then optional: the checkpoint names its file). Ctrl-C stops the run after its current
    event and raises `KeyboardInterrupt` (a run directory keeps a checkpoint to resume).
    """
    if scenario is None and resume is None:
        raise TypeError("run() needs a scenario, or resume= a run directory")
    core = as_scenario(scenario)._core if scenario is not None else None
    reporter = Reporter(progress)
    try:
        dir, files, used = _core.run(
            core,
            os.fspath(out) if out is not None else None,
            backend,
            threads,
            force,
            checkpoint_every,
            os.fspath(resume) if resume is not None else None,
            max_batch,
            _memory_bytes(memory_limit),
            reporter,
        )
    finally:
        reporter.close()
    if dir is not None:
        r = Run.from_dir(dir)
        r.backend = used
        return r
    return Run(dict(files), backend=used)


def check(
    scenario: Union[Scenario, PathLike, Mapping[str, Any]],
    seeds: Union[None, int, str, Sequence[int]] = None,
    *,
    backend: str = "auto",
    threads: Optional[int] = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Runs the scenario under each seed and judges its `[[expect]]` claims, as `dasim check`
    does; returns the verdicts, one row per claim, algorithm and seed (`seed` is the seed, or
    `"mean of seeds 1, 2, 3"` for a claim with `seeds = "mean"`): the columns of `checks.csv`
    (`observed`, `bound`, `result` `pass`/`fail`/`skip`, `reason`...), with `claim` as written
    and `run_error` (the run failed, so the claim could not be judged).

    `seeds`: a list, one seed, or the command line's text (`"1..5"`, `"1,4,9"`); default: the
    scenario's own. Every run is kept in memory; a failed claim is a row, not an exception.
    `df.attrs["failures"]` counts the failed verdicts, so a regression test reads
    `assert dasim.check(s, "1..3").attrs["failures"] == 0`.
    """
    s = as_scenario(scenario)
    if isinstance(seeds, str):
        seeds = _core.parse_seeds(seeds)
    elif isinstance(seeds, int):
        seeds = [seeds]
    reporter = Reporter(progress)
    try:
        rows = _core.check(s._core, list(seeds) if seeds is not None else None, backend, threads, reporter)
    finally:
        reporter.close()
    # The columns in the order the engine gives them (a scenario with claims has verdicts).
    df = pd.DataFrame(rows)
    df.attrs["failures"] = int((df["result"] == "fail").sum())
    df.attrs["skipped"] = int((df["result"] == "skip").sum())
    return df


def open(run_dir: PathLike) -> Run:  # noqa: A001 - dasim.open reads a run directory
    """Reads a run directory (written by `dasim run` or `dasim.run(out=...)`, by this version
    of dasim or an older one) into a `Run`."""
    return Run.from_dir(run_dir)


def sweep(
    scenario: Union[Scenario, PathLike, Mapping[str, Any]],
    grid: Optional[Mapping[str, Any]] = None,
    out: Optional[PathLike] = None,
    *,
    jobs: Optional[int] = None,
    threads: int = 1,
    backend: str = "auto",
    progress: bool = True,
) -> pd.DataFrame:
    """Runs a parameter sweep and returns the merged table (`sweep.csv`: one row per point
    and algorithm, the swept values, the summary's metrics, the claims' verdicts).

    `grid` is a `[sweep]` table: key paths to lists of values (`{"cluster.stragglers[0].factor":
    [1, 2, 4], "seed": "1..=3"}`; `"zip": [[...]]` for keys that vary together); without it,
    the `[sweep]` table of the file the scenario was loaded from. Points run `jobs` at a time
    in this process (default: the cores divided by `threads`), each in its run directory under
    `out/points/` (default `out`: a new temporary directory, in `df.attrs["dir"]`); points
    already complete there are not run again, so a sweep interrupted by Ctrl-C continues where
    it stopped. Failed points are warned about and listed in the table with their error.
    """
    s = as_scenario(scenario)
    if grid is None and s.sweep_grid is None:
        raise ValueError("sweep() needs a grid, or a scenario loaded from a file with a [sweep] table")
    d = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="dasim-sweep-"))
    reporter = Reporter(progress)
    try:
        total, done, skipped, failed, csv = _core.sweep(
            s._core, dict(grid) if grid is not None else None, os.fspath(d), jobs, threads, backend, reporter
        )
    finally:
        reporter.close()
    df = pd.read_csv(csv)
    df.attrs["dir"] = str(d)
    df.attrs["points"] = total
    df.attrs["run"] = done
    df.attrs["skipped"] = skipped
    df.attrs["failed"] = [name for name, _ in failed]
    return df


def trace(run: Union[Run, PathLike]) -> Path:
    """Writes `trace.json` (the timeline in the Chrome trace event format, for Perfetto) into
    the run directory, as `dasim trace` does, and returns its path."""
    d = run.dir if isinstance(run, Run) else Path(run)
    if d is None:
        raise ValueError("a run kept in memory has no directory: run it with out=..., or save() it first")
    return Path(_core.trace(os.fspath(d)))
