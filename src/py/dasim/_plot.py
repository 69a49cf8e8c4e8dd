"""The standard figures of a run, drawn with matplotlib from its DataFrames."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ._run import Run

CURVES = {"loss": "test loss", "accuracy": "test accuracy", "train_loss": "training loss", "consensus": "consensus distance"}
XS = {"time": ("time_s", "simulated time (s)"), "steps": ("worker_steps", "worker steps"), "epochs": ("epoch", "epochs")}
ACTIVITIES = ("compute", "communicate", "blocked", "idle")
COLORS = {"compute": "#4c72b0", "communicate": "#dd8452", "blocked": "#c44e52", "idle": "#cccccc"}


def _axes(ax: Any, figsize: Tuple[float, float] = (7, 4)) -> Tuple[Any, Any]:
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("Run.plot needs matplotlib: pip install matplotlib (or dasim[plot])") from e
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=figsize)
    return fig, ax


def _selected(run: "Run", algorithms: Optional[Sequence[str]]) -> Sequence[str]:
    names = run.algorithms
    if algorithms is None:
        return names
    unknown = [a for a in algorithms if a not in names]
    if unknown:
        raise ValueError(f"no algorithm {unknown} in this run; it has {names}")
    return list(algorithms)


def plot(run: "Run", what: str = "loss", *, x: str = "time", ax: Any = None, algorithms: Optional[Sequence[str]] = None, **kw: Any) -> Any:
    if what in CURVES:
        return _curve(run, what, x, ax, algorithms)
    if what == "staleness":
        return _staleness(run, ax, algorithms, kw.get("measure", "global"))
    if what == "utilization":
        return _utilization(run, ax, algorithms)
    if what == "timeline":
        return _timeline(run, ax, kw.get("algorithm"), kw.get("window"), kw.get("workers"))
    raise ValueError(f"unknown figure {what!r}: one of {sorted(CURVES)} or staleness, utilization, timeline")


def _curve(run: "Run", what: str, x: str, ax: Any, algorithms: Optional[Sequence[str]]) -> Any:
    if x not in XS:
        raise ValueError(f"x must be one of {sorted(XS)}, not {x!r}")
    col, xlabel = XS[x]
    m = run.metrics
    fig, ax = _axes(ax)
    for a in _selected(run, algorithms):
        rows = m[(m["algorithm"] == a)].dropna(subset=[what]) if what in m else m.iloc[0:0]
        if len(rows):
            ax.plot(rows[col], rows[what], marker=".", label=a)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(CURVES[what])
    if what in ("loss", "train_loss"):
        ax.set_yscale("log")
    ax.set_title(f"{run.summary.get('scenario', '')}: {CURVES[what]}".strip(": "))
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def _staleness(run: "Run", ax: Any, algorithms: Optional[Sequence[str]], measure: str) -> Any:
    s = run.staleness
    fig, ax = _axes(ax)
    for a in _selected(run, algorithms):
        rows = s[(s["algorithm"] == a) & (s["measure"] == measure)]
        if len(rows):
            h = rows.groupby("value")["count"].sum()
            ax.step(h.index, h.values / h.values.sum(), where="mid", label=a)
    ax.set_xlabel(f"staleness ({measure}, updates)")
    ax.set_ylabel("fraction of applied gradients")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def _utilization(run: "Run", ax: Any, algorithms: Optional[Sequence[str]]) -> Any:
    import matplotlib.pyplot as plt

    u = run.utilization
    names = _selected(run, algorithms)
    if ax is None:
        fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.2 * len(names) + 0.6), squeeze=False)
        axes = axes[:, 0]
    else:
        fig, axes = ax.figure, [ax]
    for a, ax_ in zip(names, axes):
        rows = u[u["algorithm"] == a]
        total = rows[[f"{k}_s" for k in ACTIVITIES]].sum(axis=1).where(lambda t: t > 0, 1.0)
        bottom = 0
        for k in ACTIVITIES:
            share = rows[f"{k}_s"] / total
            ax_.bar(rows["worker"], share, bottom=bottom, color=COLORS[k], label=k, width=0.9)
            bottom = bottom + share.values
        ax_.set_ylabel(a)
        ax_.set_ylim(0, 1)
    axes[-1].set_xlabel("worker")
    axes[0].legend(ncol=4, loc="lower left", bbox_to_anchor=(0, 1.02), frameon=False)
    fig.tight_layout()
    return fig


def _timeline(run: "Run", ax: Any, algorithm: Optional[str], window: Optional[Tuple[float, float]], workers: Optional[Sequence[int]]) -> Any:
    t = run.timeline
    name = algorithm or (run.algorithms[0] if run.algorithms else None)
    if name not in run.algorithms:
        raise ValueError(f"no algorithm {name!r} in this run; it has {run.algorithms}")
    rows = t[t["algorithm"] == name]
    if workers is not None:
        rows = rows[rows["worker"].isin(list(workers))]
    if window is None and len(rows):
        end = rows["end_s"].max()
        window = (0.0, min(end, rows["start_s"].min() + 0.1 * end if end > 0 else end) or end)
    fig, ax = _axes(ax, (9, 0.25 * max(4, rows["worker"].nunique()) + 1))
    if window is not None:
        rows = rows[(rows["end_s"] > window[0]) & (rows["start_s"] < window[1])]
        ax.set_xlim(*window)
    for k in ACTIVITIES:
        r = rows[rows["activity"] == k]
        for w, g in r.groupby("worker"):
            ax.broken_barh(list(zip(g["start_s"], g["end_s"] - g["start_s"])), (w - 0.4, 0.8), color=COLORS[k], label=k)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), ncol=4, loc="lower left", bbox_to_anchor=(0, 1.02), frameon=False)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("worker")
    ax.invert_yaxis()
    ax.set_title(name, loc="right")
    return fig
