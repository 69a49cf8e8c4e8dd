"""Progress of a run or a sweep: a tqdm bar (in a terminal and in Jupyter), notes, warnings."""

from __future__ import annotations

import sys
import warnings
from typing import Any, Optional


class DasimWarning(UserWarning):
    """Something legal but rarely meant (the engine's warnings), or a sweep's failed points."""


class Reporter:
    """Receives what the engine reports. `show=False` shows nothing but the warnings."""

    def __init__(self, show: bool) -> None:
        self.show = show
        self.bar: Optional[Any] = None

    def _new_bar(self, **kw: Any) -> Any:
        from tqdm.auto import tqdm

        return tqdm(file=sys.stderr, dynamic_ncols=True, **kw)

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    # A run's algorithms, one bar each (the fraction of the simulated time, in thousandths).
    def started(self, label: str) -> None:
        self._close()
        if self.show:
            self.bar = self._new_bar(total=1000, desc=label, bar_format="{desc} {bar:30} {percentage:3.0f}% [{elapsed}]{postfix}")

    def advanced(self, label: str, fraction: float, sim_time_s: float, steps: int, wall_s: float) -> None:
        if self.bar is not None:
            self.bar.n = min(1000, round(fraction * 1000))
            rate = steps / max(wall_s, 1e-9)
            self.bar.set_postfix_str(f"sim {sim_time_s:.2f} s  {steps} steps  {rate:.0f} steps/s", refresh=False)
            self.bar.refresh()

    def finished(self, label: str) -> None:
        if self.bar is not None:
            self.bar.n = 1000
            self.bar.refresh()
        self._close()

    def note(self, message: str) -> None:
        if self.show:
            print(message, file=sys.stderr)

    def warning(self, message: str) -> None:
        warnings.warn(message, DasimWarning, stacklevel=4)

    # A sweep: one bar over its points.
    def sweep_started(self, total: int, selected: int, skipped: int, to_run: int) -> None:
        if self.show:
            print(f"sweep: {total} points, {skipped} complete already, {to_run} to run", file=sys.stderr)
            self.bar = self._new_bar(total=to_run, desc="points", unit="point")

    def point_ended(self, name: str, error: Optional[str], wall_s: float) -> None:
        if error is not None:
            warnings.warn(f"sweep point {name} failed: {error}", DasimWarning, stacklevel=4)
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        self._close()
