"""Issue 8, acceptance 4: ParameterServerStrategy from a notebook through the
real Jupyter client: a LocalCluster with 2 workers and 1 ps, a few scheduled
steps, a plot of the loss, shutdown with no process left behind."""
import os
import re

import nbformat
from nbclient import NotebookClient

from conftest import KERNEL
from procs import wait_gone

CELLS = [
    "lc = distribute.LocalCluster{workers = 2, ps = 1}\nlc",
    """strategy = distribute.ParameterServerStrategy(lc)
do
  local _ <close> = strategy:scope()
  model = nn.Sequential{ nn.Dense{units = 32, activation = "relu"}, nn.Dense{units = 1} }
  model:build{8}
  model:compile{ optimizer = optim.SGD{learning_rate = 0.05}, loss = "mse" }
end
coordinator = distribute.ClusterCoordinator(strategy)
coordinator:place(model)
tensor.seed(1)
x = tensor.randn{512, 8}
y = (x:slice(1, 0, 1) * 2 + 1)
per_worker = coordinator:create_per_worker_dataset(data.Dataset.from_tensor_slices{x, y}:batch(32))
strategy""",
    """losses = {}
for epoch = 1, 5 do
  local rvs = {}
  for k = 1, 16 do rvs[k] = coordinator:schedule(distribute.ps_train_step, {per_worker}) end
  coordinator:join()
  local sum = 0
  for k = 1, 16 do sum = sum + rvs[k]:fetch() end
  losses[epoch] = sum / 16
end
("%d steps, loss %.4f -> %.4f"):format(coordinator:stats().applied, losses[1], losses[5])""",
    "plot{loss = losses}",
    "lc:shutdown()\nlc",
]


def result(cell):
    (res,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    return res.data


def test_a_notebook_schedules_steps_on_workers_and_ps_and_leaves_nothing_behind():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, kernel_name=KERNEL, timeout=180).execute()
    for c in nb.cells:
        assert not [o for o in c.outputs if o.output_type == "error"], c.source
    m = re.search(r"2 workers and 1 ps tasks \(pids ([\d, ]+)\)", result(nb.cells[0])["text/plain"])
    assert m, result(nb.cells[0])
    pids = [int(p) for p in m.group(1).split(", ")]
    assert len(set(pids)) == 3
    assert "ParameterServerStrategy" in result(nb.cells[1])["text/plain"]
    m = re.search(r"(\d+) steps, loss ([\d.]+) -> ([\d.]+)", result(nb.cells[2])["text/plain"])
    assert m and int(m.group(1)) == 80 and float(m.group(3)) < float(m.group(2)), result(nb.cells[2])
    assert result(nb.cells[3])["image/svg+xml"].lstrip().startswith("<svg")
    assert "shut down" in result(nb.cells[4])["text/plain"]
    assert wait_gone(pids) == [], "processes left behind"
