"""The book's notebook runs, and the chapter beside it renders it (tests/python/notebook.py)."""

import nbformat

import notebook


def test_the_notebook_runs_and_the_book_renders_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own inline backend
    nb = nbformat.read(notebook.NOTEBOOK, as_version=4)
    # The shipped notebook is the one notebook.py writes.
    assert [c.source for c in nb.cells] == [src for _, src in notebook.CELLS]
    notebook.execute(nb)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 1
    # The chapter holds the cells, and the printed outputs as this execution made them (the
    # runs are deterministic on flex; the tables' layout is pandas', which may change between
    # its versions); the figure is a PNG beside it.
    notebook.render(nb, tmp_path)
    chapter = notebook.CHAPTER.read_text()
    assert notebook.code_blocks(chapter) == [c.source for c in nb.cells if c.cell_type == "code"]
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                assert o.text.rstrip() in chapter
    assert (notebook.BOOK / "straggler-sweep-1.png").exists()
