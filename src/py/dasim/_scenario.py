"""Scenarios: a TOML file, TOML text or a dict, parsed and validated by the engine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from . import _core

PathLike = Union[str, "os.PathLike[str]"]


class Scenario:
    """A scenario, parsed and validated (the engine's checks that need no data; `validate()`
    makes the others). Immutable: `with_values` gives a changed copy."""

    __slots__ = ("_core",)

    def __init__(self, core: _core.Scenario) -> None:
        self._core = core

    @classmethod
    def load(cls, path: PathLike) -> "Scenario":
        """Reads a scenario file (see `dasim.load`)."""
        return cls(_core.Scenario.load(os.fspath(path)))

    @classmethod
    def from_toml(cls, text: str, path: Optional[PathLike] = None) -> "Scenario":
        """Scenario text. `path` names it in errors and anchors its relative paths (default:
        `<string>` in the current directory)."""
        where = Path(path) if path is not None else Path.cwd() / "<string>"
        return cls(_core.Scenario.from_toml(text, os.fspath(where)))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base_dir: Optional[PathLike] = None) -> "Scenario":
        """A scenario from nested dicts and lists of TOML values (as `to_dict` gives them).
        Errors name `<dict>` and the key path; relative paths in it are resolved against
        `base_dir` (default: the current directory)."""
        if not isinstance(d, dict):
            d = dict(d)
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        return cls(_core.Scenario.from_dict(d, os.fspath(base)))

    def to_toml(self) -> str:
        """The scenario's TOML text."""
        return self._core.to_toml()

    def to_dict(self) -> Dict[str, Any]:
        """The scenario as nested dicts and lists (`from_dict` takes it back)."""
        return self._core.to_dict()

    def with_values(self, values: Optional[Mapping[str, Any]] = None, **keys: Any) -> "Scenario":
        """A copy with keys set, named as in a `[sweep]` table
        (`{"cluster.stragglers[0].factor": 8.0, "seed": 2}`; plain keys also as keyword
        arguments: `with_values(seed=2)`), validated again."""
        merged = dict(values or {})
        merged.update(keys)
        return Scenario(self._core.with_values(merged))

    def validate(self) -> "Scenario":
        """Every check a run makes before it starts (`dasim validate`): the model, the data,
        the topologies, the claims. Returns the scenario."""
        self._core.validate()
        return self

    @property
    def path(self) -> Path:
        """The file it was read from (for a dict: its base directory joined with `<dict>`)."""
        return Path(self._core.path)

    @property
    def name(self) -> str:
        """Its name, as the plots title it."""
        return self._core.name

    @property
    def algorithms(self) -> List[str]:
        """The algorithms' labels, in order."""
        return list(self._core.algorithms)

    @property
    def seed(self) -> int:
        return self._core.seed

    @property
    def workers(self) -> int:
        return self._core.workers

    @property
    def sweep_grid(self) -> Optional[Dict[str, Any]]:
        """The `[sweep]` table of the file it was loaded from (`dasim.sweep` runs it when no
        grid is given); `None` without one."""
        return self._core.sweep_grid

    def __repr__(self) -> str:
        algos = ", ".join(self.algorithms)
        return f"Scenario({self.name!r}: {self.workers} workers; {algos})"

    def _repr_markdown_(self) -> str:
        return f"**{self.name}** ({self.workers} workers; {', '.join(self.algorithms)})\n\n```toml\n{self.to_toml()}\n```"


def load(path: PathLike) -> Scenario:
    """Reads, parses and validates a scenario file. A file with a `[sweep]` table gives its
    base scenario (the file without the table) after checking every point, and keeps the table
    as `sweep_grid`."""
    return Scenario.load(path)


def validate(scenario: Union[Scenario, PathLike]) -> Scenario:
    """Every check `dasim validate` makes, on a scenario or a file."""
    s = scenario if isinstance(scenario, Scenario) else load(scenario)
    return s.validate()


def as_scenario(scenario: Union[Scenario, PathLike, Mapping[str, Any]]) -> Scenario:
    """A `Scenario` from one, a path, or a dict."""
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, Mapping):
        return Scenario.from_dict(scenario)
    return load(scenario)
