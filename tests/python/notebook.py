"""The book's notebook (book/src/python/straggler-sweep.ipynb): written from the cells below,
executed, and rendered as the book chapter beside it (markdown cells as they are, code cells as
Python blocks, text outputs as text blocks, figures as PNG files).

    python tests/python/notebook.py          # rewrite the notebook, run it, render the chapter

tests/python/test_notebook.py executes the notebook and checks that the chapter renders it."""

import base64
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
BOOK = HERE.parents[1] / "book" / "src" / "python"
NOTEBOOK = BOOK / "straggler-sweep.ipynb"
CHAPTER = BOOK / "straggler-sweep.md"

CELLS = [
    ("markdown", """# Notebook: the straggler sweep of AD-PSGD

Lian et al. (*Asynchronous Decentralized Parallel SGD*, ICML 2018) slow one of 16 workers down
and measure the time per epoch: all-reduce SGD and D-PSGD wait for the slow worker at every
step, AD-PSGD does not. This notebook builds that sweep in a Python loop over the paper's
scenario (`scenarios/papers/adpsgd-heterogeneity.toml`), runs it, and draws the figure. It is
executed by the test command (`tests/python/test_notebook.py`); download it:
[straggler-sweep.ipynb](straggler-sweep.ipynb)."""),
    ("code", """from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import dasim

# The repository's scenarios, from wherever the notebook runs inside it.
repo = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "scenarios" / "papers").is_dir())
base = dasim.load(repo / "scenarios" / "papers" / "adpsgd-heterogeneity.toml")
base"""),
    ("markdown", """The file has a `[sweep]` table; `dasim.load` gives the scenario without it, and the table
as `base.sweep_grid`. The loop sets the straggler's slowdown with `with_values` (the key is
written as in a `[sweep]` table) and runs each scenario in memory. The model is a timing model
(ResNet-20's schedule on a P100), so each run takes a fraction of a second."""),
    ("code", """KEY = "cluster.stragglers[0].factor"
rows = []
for factor in [1, 2, 4, 8, 16, 32, 64, 100]:
    run = dasim.run(base.with_values({KEY: float(factor)}), backend="flex", progress=False)
    for r in run.summary["runs"]:
        rows.append({"slowdown": factor, "algorithm": r["algorithm"],
                     "time_per_epoch_s": r["sim_time_s"] / r["epochs"]})
table = pd.DataFrame(rows).pivot(index="slowdown", columns="algorithm", values="time_per_epoch_s")
table[["allreduce", "dpsgd", "adpsgd"]].round(4)"""),
    ("code", """ax = table[["allreduce", "dpsgd", "adpsgd"]].plot(marker="o", logx=True, logy=True, figsize=(6.4, 4))
ax.set_xlabel("slowdown of one worker of 16 (×)")
ax.set_ylabel("time per epoch (simulated s)")
ax.set_title("AD-PSGD under heterogeneity (ResNet-20 schedule, 100 Gbit/s)")
ax.grid(True, which="both", alpha=0.3)
plt.show()"""),
    ("markdown", """Time per epoch grows linearly with the slowdown for the two synchronous algorithms and
stays flat for AD-PSGD, as the paper reports:"""),
    ("code", """speedup = table.loc[100, "allreduce"] / table.loc[100, "adpsgd"]
print(f"at 100x, AD-PSGD is {speedup:.0f}x faster per epoch than all-reduce SGD")
assert speedup > 50"""),
    ("markdown", """The same sweep in one call: `dasim.sweep` runs the file's `[sweep]` table (or a `grid=`)
with the sweep machinery of `dasim sweep`, points side by side in this process, and returns the
merged `sweep.csv`; its `time_per_epoch_s` is the loop's."""),
    ("code", """df = dasim.sweep(base, backend="flex", progress=False)
swept = df.pivot(index=KEY, columns="algorithm", values="time_per_epoch_s")
assert (swept - table.loc[swept.index, swept.columns]).abs().max().max() < 1e-12
swept[["allreduce", "dpsgd", "adpsgd"]].round(4)"""),
]


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src in CELLS:
        cell = nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
        nb.cells.append(cell)
    return nb


def execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(BOOK)}}).execute()
    return nb


def render(nb: nbformat.NotebookNode, figures: Path) -> str:
    """The chapter: markdown cells, code cells, their text outputs and figures (written into
    `figures` as straggler-sweep-N.png)."""
    out = []
    n = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            out.append(cell.source)
            continue
        out.append(f"```python\n{cell.source}\n```")
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if o.output_type == "stream":
                out.append(f"```text\n{o.text.rstrip()}\n```")
            elif "image/png" in data:
                n += 1
                name = f"straggler-sweep-{n}.png"
                (figures / name).write_bytes(base64.b64decode(data["image/png"]))
                out.append(f"![figure {n}]({name})")
            elif "text/plain" in data:
                out.append(f"```text\n{data['text/plain'].rstrip()}\n```")
    return "\n\n".join(out) + "\n"


def code_blocks(markdown: str) -> list:
    blocks, inside, cur = [], False, []
    for line in markdown.splitlines():
        if line == "```python":
            inside, cur = True, []
        elif line == "```" and inside:
            blocks.append("\n".join(cur))
            inside = False
        elif inside:
            cur.append(line)
    return blocks


if __name__ == "__main__":
    nb = build()
    nbformat.write(nb, NOTEBOOK)  # the notebook as shipped: without outputs
    CHAPTER.write_text(render(execute(nb), BOOK))
    print(f"wrote {NOTEBOOK} and {CHAPTER}", file=sys.stderr)
