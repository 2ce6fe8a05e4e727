"""Acceptance 4: the interactive path through the real Jupyter client. A
notebook (scripts/notebooks/multiworker.ipynb) starts a LocalCluster of 2
workers, fits on them, plots the history and shuts down, leaving no process
behind; stopping or killing the kernel stops its workers too; interrupting
the kernel stops the workers' job and the cluster stays usable."""
import os
import re
import signal
import time

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from procs import alive, wait_gone

from conftest import KERNEL, ROOT

NOTEBOOK = os.path.join(ROOT, "scripts", "notebooks", "multiworker.ipynb")


def pids_of(text):
    m = re.search(r"pids ([\d, ]+)\)", text)
    assert m, text
    return [int(p) for p in m.group(1).split(", ")]


def outputs(cell, kind=None):
    return [o for o in cell.outputs if kind is None or o.output_type == kind]


def text_of(cell):
    (res,) = outputs(cell, "execute_result")
    return res.data["text/plain"]


def test_the_notebook_trains_on_a_local_cluster_and_leaves_nothing_behind():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                   resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    for c in code:
        assert not outputs(c, "error"), c.source
    pids = pids_of(text_of(code[0]))
    assert len(pids) == 2 and len(set(pids)) == 2
    # every worker answered from its own process
    for p in pids:
        assert f"worker pid {p}" in text_of(code[1])
    assert text_of(code[2]) == "2"                      # num_replicas_in_sync
    bars = outputs(code[3], "display_data")
    assert len(bars) == 3, [o.output_type for o in code[3].outputs]
    for epoch, bar in enumerate(bars, 1):
        assert bar.data["text/plain"].startswith(f"Epoch {epoch}/3") and "47/47" in bar.data["text/plain"]
    assert text_of(code[3]) == "3"                      # #history.loss
    (plot,) = outputs(code[4], "execute_result")
    assert plot.data["image/svg+xml"].lstrip().startswith("<svg")
    acc = float(re.search(r"test accuracy ([\d.]+)", text_of(code[5])).group(1))
    assert acc > 0.7, acc                               # the weights came back trained
    assert "shut down" in text_of(code[6])
    assert wait_gone(pids) == [], "workers left behind"


def test_stopping_the_kernel_stops_its_workers():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("lc = distribute.LocalCluster{workers = 2}\nlc")])
    NotebookClient(nb, kernel_name=KERNEL, timeout=120).execute()   # no shutdown in the notebook
    pids = pids_of(text_of(nb.cells[0]))
    assert wait_gone(pids) == [], "the kernel's shutdown left its workers running"


@pytest.fixture
def kernel():
    km = KernelManager(kernel_name=KERNEL)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=30)
    yield km, kc
    kc.stop_channels()
    if km.has_kernel:
        km.shutdown_kernel(now=True)


def run(kc, code, timeout=120):
    """(status, text of the results and streams, error value) of one cell"""
    msg_id = kc.execute(code)
    texts, err = [], None
    deadline = time.time() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(1, deadline - time.time()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = msg["msg_type"], msg["content"]
        if t == "execute_result":
            texts.append(c["data"].get("text/plain", ""))
        elif t == "stream":
            texts.append(c["text"])
        elif t == "error":
            err = c["evalue"]
        elif t == "status" and c["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=10)
    return reply["content"]["status"], "".join(texts), err


def test_killing_the_kernel_kills_its_workers(kernel):
    km, kc = kernel
    status, text, err = run(kc, "lc = distribute.LocalCluster{workers = 2}\nlc")
    assert status == "ok", err
    pids = pids_of(text)
    assert all(alive(p) for p in pids)
    status, text, err = run(kc, "ldist._cluster.getpid()")
    os.kill(int(text), signal.SIGKILL)      # no Lua finalizer runs
    assert wait_gone(pids) == [], "workers outlived a killed kernel"


def test_interrupting_a_fit_stops_the_workers_job_and_the_cluster_stays_usable(kernel):
    km, kc = kernel
    setup = """
lc = distribute.LocalCluster{workers = 2}
strategy = distribute.MultiWorkerMirroredStrategy{cluster = lc}
do
  local _ <close> = strategy:scope()
  model = nn.Sequential{ nn.Dense(64, "relu"), nn.Dense(3) }
  model:compile{ optimizer = "adam", loss = losses.SparseCategoricalCrossentropy{from_logits = true} }
end
tensor.seed(1)
x = tensor.normal(4000, 20)
y = x:slice(1, 0, 3):argmax(1):astype("int64")
ds = data.Dataset.from_tensor_slices(x, y):batch(100)
lc"""
    status, text, err = run(kc, setup)
    assert status == "ok", err
    pids = pids_of(text)
    msg_id = kc.execute("model:fit(ds, {epochs = 100000, verbose = 0})")
    time.sleep(2.0)
    t0 = time.time()
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "error" and "interrupted" in reply["content"]["evalue"], reply["content"]
    # As with ipykernel, execute requests that arrive before the failed cell's
    # idle are aborted (stop_on_error): a client sends its next cell after idle.
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"):
            break
    assert time.time() - t0 < 15
    assert all(alive(p) for p in pids), "an interrupt must not kill the workers"
    status, text, err = run(kc, 'table.concat(lc:run("return 7"), ",")')
    assert status == "ok" and "7,7" in text, (status, text, err)
    # a new fit after the interrupted one (the workers rejoin each other)
    status, text, err = run(kc, "h = model:fit(ds, {epochs = 2, verbose = 0}); #h.loss")
    assert status == "ok" and text.strip() == "2", (status, text, err)
    status, text, err = run(kc, "lc:shutdown()")
    assert status == "ok", err
    assert wait_gone(pids) == []
