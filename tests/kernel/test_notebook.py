"""Notebooks executed end to end with nbclient on the ldist kernel, and
their outputs checked: tests/kernel/kernel_tour.ipynb cell by cell, and
every notebook under scripts/ (which must run without an error)."""
import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from conftest import KERNEL, ROOT

HERE = os.path.dirname(__file__)


def run(nb, timeout=120, **kw):
    NotebookClient(nb, kernel_name=KERNEL, timeout=timeout, **kw).execute()
    return nb


def outputs(cell, output_type=None):
    return [o for o in cell.outputs if output_type is None or o.output_type == output_type]


def test_kernel_tour():
    nb = run(nbformat.read(os.path.join(HERE, "kernel_tour.ipynb"), as_version=4))
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)

    streams = outputs(code[0], "stream")
    assert [(s.name, s.text) for s in streams] == [("stdout", "hello from ldist\n"),
                                                   ("stderr", "a warning\n")]

    (res,) = outputs(code[1], "execute_result")
    assert "<table" in res.data["text/html"] and "text/plain" in res.data

    (res,) = outputs(code[2], "execute_result")
    assert res.data["image/svg+xml"].lstrip().startswith("<svg")

    # update_display_data replaced the first markdown in place
    (disp,) = outputs(code[3], "display_data")
    assert disp.data["text/markdown"] == "**step 2**"

    # model:fit: one live bar per epoch, each ending complete; no stream spam
    bars = outputs(code[4], "display_data")
    assert len(bars) == 3, [o.output_type for o in code[4].outputs]
    for epoch, bar in enumerate(bars, 1):
        text = bar.data["text/plain"]
        assert text.startswith(f"Epoch {epoch}/3") and "4/4" in text and "loss" in text
        assert "<progress" in bar.data["text/html"]
    assert not outputs(code[4], "stream")
    (res,) = outputs(code[4], "execute_result")
    assert res.data["text/plain"] == "3"

    (res,) = outputs(code[5], "execute_result")
    assert "image/svg+xml" in res.data

    (res,) = outputs(code[6], "execute_result")
    assert res.data["text/plain"] == "1"


def test_error_stops_the_notebook():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("a = 1"),
        nbformat.v4.new_code_cell('error("broken cell")'),
        nbformat.v4.new_code_cell("a = 2"),
    ])
    with pytest.raises(CellExecutionError) as e:
        run(nb)
    assert "RuntimeError" in str(e.value) and "broken cell" in str(e.value)
    # with allow_errors, the error is an output and the rest runs
    nb = run(nb, allow_errors=True)
    (err,) = outputs(nb.cells[1], "error")
    assert err.ename == "RuntimeError" and "broken cell" in err.evalue
    assert nb.cells[2].execution_count == 3


# test_teaching_notebooks.py runs and checks these; not twice
TEACHING = {"sync_vs_async.ipynb", "data_parallel_from_scratch.ipynb", "your_own_data.ipynb"}
SCRIPTS = sorted(p for p in glob.glob(os.path.join(ROOT, "scripts", "**", "*.ipynb"), recursive=True)
                 if not (os.path.dirname(p) == os.path.join(ROOT, "scripts", "notebooks")
                         and os.path.basename(p) in TEACHING))

if SCRIPTS:     # the project's own notebooks, when there are any
    @pytest.mark.parametrize("path", SCRIPTS, ids=[os.path.relpath(p, ROOT) for p in SCRIPTS])
    def test_script_notebooks_run(path):
        nb = nbformat.read(path, as_version=4)
        run(nb, timeout=1200, resources={"metadata": {"path": os.path.dirname(path)}})
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not outputs(cell, "error"), cell.source


def test_seed_notebook_shows_pictures_and_tables():
    """scripts/notebooks/seed.ipynb: the fit progress is one live bar per epoch,
    the summary an HTML table, plot and timeline SVG pictures."""
    path = os.path.join(ROOT, "scripts", "notebooks", "seed.ipynb")
    nb = nbformat.read(path, as_version=4)
    run(nb, timeout=1200, resources={"metadata": {"path": os.path.dirname(path)}})
    fit, plot_cell, mirrored, timeline = nb.cells[2], nb.cells[3], nb.cells[5], nb.cells[6]
    datas = [o for o in fit.outputs if o.output_type in ("display_data", "execute_result")]
    assert any("text/html" in o.data and "<table" in o.data["text/html"] and "dense" in o.data["text/html"]
               for o in datas), "model:summary() is an HTML table"
    bars = [o for o in fit.outputs if o.output_type == "display_data" and "Epoch" in o.data.get("text/plain", "")]
    assert 1 <= len(bars) <= 3, "one progress output per epoch, updated in place, not hundreds of lines"
    assert any("image/svg+xml" in o.get("data", {}) for o in plot_cell.outputs), "plot(history) is a picture"
    text = "".join(o.get("text", "") for o in mirrored.outputs if o.output_type == "stream")
    assert "Epoch 2: Loss" in text
    svg = [o for o in timeline.outputs if "image/svg+xml" in o.get("data", {})]
    assert svg and "replica 1" in svg[0].data["image/svg+xml"], "the timeline shows one row per replica"
