"""Type stubs of the extension module (src/python.rs)."""

from typing import Any, Dict, List, Mapping, Optional, Protocol, Tuple

__version__: str
git_revision: str

class DasimError(Exception):
    """A run or sweep failed; `kind`: usage, memory, sim, models, reports, io, claims, sweep."""

    kind: str

class ScenarioError(DasimError):
    """A malformed or invalid scenario, located as the command line locates it."""

    file: str
    line: Optional[int]
    column: Optional[int]
    field: Optional[str]
    message: str
    hint: Optional[str]

class InternalError(DasimError):
    """A bug in dasim (a Rust panic caught at the boundary)."""

class _Reporter(Protocol):
    def started(self, label: str) -> None: ...
    def advanced(self, label: str, fraction: float, sim_time_s: float, steps: int, wall_s: float) -> None: ...
    def finished(self, label: str) -> None: ...
    def note(self, message: str) -> None: ...
    def warning(self, message: str) -> None: ...
    def sweep_started(self, total: int, selected: int, skipped: int, to_run: int) -> None: ...
    def point_ended(self, name: str, error: Optional[str], wall_s: float) -> None: ...

class Scenario:
    @staticmethod
    def load(path: str) -> Scenario: ...
    @staticmethod
    def from_toml(text: str, path: str) -> Scenario: ...
    @staticmethod
    def from_dict(d: Dict[str, Any], base_dir: str) -> Scenario: ...
    def to_toml(self) -> str: ...
    def to_dict(self) -> Dict[str, Any]: ...
    def with_values(self, values: Dict[str, Any]) -> Scenario: ...
    def validate(self) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def algorithms(self) -> List[str]: ...
    @property
    def seed(self) -> int: ...
    @property
    def workers(self) -> int: ...
    @property
    def sweep_grid(self) -> Optional[Dict[str, Any]]: ...

def run(
    scenario: Optional[Scenario],
    out: Optional[str],
    backend: str,
    threads: Optional[int],
    force: bool,
    checkpoint_every: Optional[float],
    resume: Optional[str],
    max_batch: Optional[int],
    memory_limit: Optional[int],
    reporter: Optional[_Reporter],
) -> Tuple[Optional[str], Optional[List[Tuple[str, str]]], str]: ...
def check(
    scenario: Scenario,
    seeds: Optional[List[int]],
    backend: str,
    threads: Optional[int],
    reporter: Optional[_Reporter],
) -> List[Dict[str, Any]]: ...
def parse_seeds(text: str) -> List[int]: ...
def sweep(
    scenario: Scenario,
    grid: Optional[Dict[str, Any]],
    out: str,
    jobs: Optional[int],
    threads: int,
    backend: str,
    reporter: Optional[_Reporter],
) -> Tuple[int, int, int, List[Tuple[str, str]], str]: ...
def trace(run_dir: str) -> str: ...
def _panic_for_test(message: str) -> None: ...
