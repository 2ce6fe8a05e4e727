"""The teaching notebooks of scripts/notebooks/, executed end to end with
nbclient on the ldist kernel, and what they claim checked in their outputs:

- sync_vs_async.ipynb: MirroredStrategy and ParameterServerStrategy (a
  LocalCluster of 2 workers and 1 ps) train the same model; losses and step
  timelines are pictures; a killed ps worker's steps run again on the other
  (every scheduled step completes); a killed MultiWorkerMirrored worker stops
  fit with an error naming it, and BackupAndRestore resumes on new workers to
  the uninterrupted run's loss; no worker process is left behind.
- data_parallel_from_scratch.ipynb: a hand all-reduce equals strategy:reduce
  and ReplicaContext:all_reduce; uneven batches split 4 + 3 with the loss
  divided by the global batch; two replicas train as one device does;
  synchronized BatchNormalization's statistics are the global batch's, local
  ones are not; distribute_datasets_from_function's InputContext.
- your_own_data.ipynb: a folder of PNG and JPEG files read by
  image_dataset_from_directory (Keras's "Found ..." lines, the split, the
  class names, a batch's shapes, a contact sheet of images); a CSV file read by
  TextLineDataset and make_csv_dataset trains a tiny model; a CNN trains with
  ModelCheckpoint, CSVLogger, EarlyStopping and TensorBoard, whose files are
  listed; model:save / nn.load_model give the same predictions (difference 0)
  and accuracy, and training goes on; the temporary folder is removed.

tests/kernel/test_notebook.py runs every other notebook under scripts/; these
are run here only (its TEACHING set)."""
import os
import re
import time

import nbformat
from nbclient import NotebookClient

from procs import wait_gone

from conftest import KERNEL, ROOT

NOTEBOOKS = os.path.join(ROOT, "scripts", "notebooks")
TEACHING = ("sync_vs_async.ipynb", "data_parallel_from_scratch.ipynb", "your_own_data.ipynb")
MAX_SECONDS = 90     # each runs in a few seconds on a 2-core machine; this is a hang guard


def execute(name):
    path = os.path.join(NOTEBOOKS, name)
    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    # raises CellExecutionError at the first cell that fails
    NotebookClient(nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": NOTEBOOKS}}).execute()
    seconds = time.time() - t0
    print(f"{name}: {seconds:.1f} s")
    code = [c for c in nb.cells if c.cell_type == "code"]
    for c in code:
        assert c.execution_count, c.source
        assert not [o for o in c.outputs if o.output_type == "error"], c.source
    assert seconds < MAX_SECONDS, f"{name} took {seconds:.0f} s"
    return code


def stdout(cells):
    return "".join(o.text for c in cells for o in c.outputs if o.output_type == "stream" and o.name == "stdout")


def pictures(cells):
    """(cell index, svg text or png marker) of every picture the cells showed"""
    out = []
    for i, c in enumerate(cells):
        for o in c.outputs:
            if o.output_type in ("display_data", "execute_result"):
                if "image/svg+xml" in o.data:
                    svg = o.data["image/svg+xml"]
                    assert svg.lstrip().startswith("<svg"), svg[:80]
                    out.append((i, svg))
                elif "image/png" in o.data:
                    out.append((i, "png"))
    return out


def number(pattern, text):
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in the output:\n{text}"
    return [float(g) for g in m.groups()] if len(m.groups()) > 1 else float(m.group(1))


def test_sync_vs_async():
    cells = execute("sync_vs_async.ipynb")
    text = stdout(cells)

    # the same number of updates both ways, and both learn
    assert number(r"MirroredStrategy: (\d+) steps", text) == 235
    assert number(r"ParameterServerStrategy: (\d+) steps", text) == 235, "every scheduled step applied once"
    first = number(r"epoch 1 +mirrored \(sync\) ([\d.]+) +parameter server \(async\) ([\d.]+)", text)
    last = number(r"epoch 5 +mirrored \(sync\) ([\d.]+) +parameter server \(async\) ([\d.]+)", text)
    assert last[0] < first[0] - 0.3 and last[1] < first[1] - 0.3, (first, last)

    pics = pictures(cells)
    svgs = [s for _, s in pics if s != "png"]
    assert len(pics) >= 4, [i for i, _ in pics]
    assert any("sync (Mirrored)" in s and "async (PS)" in s for s in svgs), "the losses side by side"
    assert any("replica 1 (cpu:1)" in s and "allreduce" in s for s in svgs), "the Mirrored timeline"
    assert any("worker 1" in s and "push" in s and "kill -9" not in s for s in svgs), "the PS timeline"
    killed = [s for s in svgs if "kill -9 worker 1" in s]
    assert killed and 'class="mark"' in killed[0] and "time since the first span" in killed[0], \
        "the library's PS timeline around the kill, the kill marked on it"
    assert "worker 1 died during the trace" in killed[0]
    # the strategies' own timelines one above the other (distribute.compare_timelines); the
    # notebook's steps call worker:pull()/push() themselves, and its PS rows still hold
    # pull, compute and push spans, the stale pushes marked s<k>
    both = [s for s in svgs if "MirroredStrategy" in s and "ParameterServerStrategy" in s and "ps 0" in s]
    assert both, "sync and async side by side"
    ps_half = both[0][both[0].index("ParameterServerStrategy"):]
    for kind in ("pull", "compute", "push", "apply"):
        assert len(re.findall(r"<title>%s · (worker \d|ps 0)" % kind, ps_half)) >= 10, kind
    assert re.search(r'fill="#b00" text-anchor="middle">s[1-9]<', ps_half), "a stale push marked s<k>"
    # sync waits at the all-reduce: the Mirrored half lists who waited for whom
    assert re.search(r'class="annotation"[^>]*>1\. replica \d waits [\d.]+ (us|ms) for replica \d', both[0])
    # each run across the whole width: no hand-made drawing, the library's axis under each
    assert both[0].count("time since the first span") == 2

    # the ps run survives a killed worker: every step completes, on the survivor
    sched, done, resched, applied, dups = number(
        r"scheduled (\d+), completed (\d+), rescheduled (\d+), applied (\d+) \(duplicates (\d+)\), workers alive 1", text)
    assert sched == done == 60
    assert resched >= 1 and dups <= resched, (resched, dups)
    assert applied == 60 + dups, "each step applied once, plus the re-runs of steps whose push had landed"
    w0, w1 = number(r"60 steps, worker 1 killed: worker 0 ran (\d+) steps, worker 1 ran (\d+)", text)
    assert w0 + w1 == 60 and w1 < w0

    # synchronous training stops at a lost worker ...
    assert "fit succeeded: false" in text
    assert re.search(r"error: fit stopped: worker 1 \(pid \d+\) was killed by signal 9 \(Killed\), during step \d+/47 "
                     r"of epoch [2-5]/5\.", text), text
    kept = number(r"model.history keeps (\d+) epoch", text)
    assert 1 <= kept < 5 and re.search(r"from the end of epoch %d, and model.history its %d epoch" % (kept, kept), text), text
    # ... and BackupAndRestore resumes where the checkpoint was, to the same loss
    assert re.search(r"BackupAndRestore: resuming from .* at epoch [2-5], step \d+", text), text
    story = [l for l in text.splitlines() if re.search(r"resum|difference|fit succeeded|error:", l)]
    assert number(r"the resumed fit ran (\d+) epoch", text) < 5, story
    assert number(r"difference ([\d.e+-]+)", text) < 1e-4, story

    # every process the notebook started is gone
    pids = [int(p) for m in re.finditer(r"\(pids ([\d, ]+)\)", text) for p in m.group(1).split(", ")]
    assert len(pids) == 3 + 2 + 2, pids
    assert wait_gone(pids) == [], "worker or ps processes left behind"


def test_data_parallel_from_scratch():
    cells = execute("data_parallel_from_scratch.ipynb")
    text = stdout(cells)

    assert "devices: cpu:0, cpu:1" in text and "b lives on cpu:1" in text
    assert "replica 0: 10.0 10.0 on cpu:0" in text and "replica 1: 20.0 20.0 on cpu:1" in text

    # a batch of 7 on 2 replicas: 4 + 3 rows, in order
    assert "replica 0 on cpu:0: 4 rows (rows 0-3 of the batch: true)" in text
    assert "replica 1 on cpu:1: 3 rows (rows 4-6 of the batch: true)" in text

    # the all-reduce by hand is the strategy's, and the one-device gradient
    assert number(r"max \|hand all-reduce - strategy:reduce\| = ([\d.e+-]+)", text) < 1e-6
    assert number(r"max \|hand all-reduce - ReplicaContext:all_reduce\| = ([\d.e+-]+)", text) < 1e-6
    assert number(r"max \|hand all-reduce - one-device gradient\| = ([\d.e+-]+)", text) < 1e-5

    # each replica's loss is its summed loss / 7 (the global batch)
    for r, rows in ((0, 4), (1, 3)):
        _, by7, loss = number(rf"replica {r}: {rows} rows, sum of its losses ([\d.]+), / 7 = ([\d.]+), "
                              r"the replica's loss ([\d.]+)", text)
        assert abs(by7 - loss) < 1e-5, (r, by7, loss)
    total, one = number(r"sum of the replicas' losses = ([\d.]+); one device on all 7 rows = ([\d.]+)", text)
    assert abs(total - one) < 1e-5
    wrong = number(r"the mean of each replica's own mean would be ([\d.]+)", text)
    assert abs(wrong - one) > 1e-3, "the uneven split makes the naive mean differ"

    # two replicas train as one device
    steps, d_loss, d_w = number(r"(\d+) steps; max \|loss difference\| = ([\d.e+-]+); "
                                r"max \|weight difference\| after training = ([\d.e+-]+)", text)
    assert steps == 56 and d_loss < 1e-4 and d_w < 1e-4

    # BatchNormalization: synchronized = the global batch's statistics; local ones differ
    assert number(r"max \|synchronized - global\| = ([\d.e+-]+)", text) < 1e-5
    assert number(r"max \|local - global\| = ([\d.e+-]+)", text) > 0.5
    assert number(r"max \|one device - global\| = ([\d.e+-]+)", text) < 1e-5

    # distribute_datasets_from_function
    assert "num_input_pipelines 1, input_pipeline_id 0, per-replica batch 4" in text
    assert "step 2: replica 0 gets 8,9,10,11; replica 1 gets 12,13,14,15" in text
    assert "not divisible by the number of replicas in sync (2)" in text

    pics = pictures(cells)
    svgs = [s for _, s in pics if s != "png"]
    assert len(pics) >= 2
    assert any("one device" in s and "2 replicas" in s for s in svgs), "the loss curves"
    assert any("replica 1 (cpu:1)" in s for s in svgs), "the timeline"


def displayed_text(cells):
    """the text/plain of every display_data (progress bars, summaries, pictures)"""
    return "\n".join(o.data.get("text/plain", "") for c in cells for o in c.outputs if o.output_type == "display_data")


def test_your_own_data():
    cells = execute("your_own_data.ipynb")
    text = stdout(cells)

    # the folder: 3 classes of 300 files, PNG exact, JPEG lossy
    root = re.search(r"working in (\S+)", text).group(1)
    for name in ("T-shirt_top", "Shirt", "Sneaker"):
        assert re.search(rf"images/{name} +300 files", text), name
    assert number(r"\.png: 28x28x1 uint8, largest pixel difference from the original: (\d+)", text) == 0
    assert 0 < number(r"\.jpg: 28x28x1 uint8, largest pixel difference from the original: (\d+)", text) < 64

    # image_dataset_from_directory, as Keras
    assert "Found 900 files belonging to 3 classes." in text
    assert "Using 720 files for training." in text and "Using 180 files for validation." in text
    assert "class_names: Shirt, Sneaker, T-shirt_top" in text, "sorted folder names"
    assert "images [32, 28, 28, 1] float32, values 0..255; labels [32] int32" in text
    assert "batches: 23 for training, 6 for validation" in text

    # the pictures: the contact sheet (a PNG, its 12 labels printed below), the loss and accuracy curves
    pics = pictures(cells)
    assert len(pics) >= 3, [i for i, _ in pics]
    sheet = [i for i, s in pics if s == "png"]
    assert len(sheet) == 1
    grid = [ln.split() for ln in "".join(o.text for o in cells[sheet[0]].outputs
                                         if o.output_type == "stream").splitlines()]
    assert len(grid) == 2 and all(len(r) == 6 and set(r) <= {"Shirt", "Sneaker", "T-shirt_top"} for r in grid), grid
    svgs = [s for _, s in pics if s != "png"]
    assert any("loss per epoch" in s and "val_loss" in s for s in svgs), "the loss curves"
    assert any("accuracy per epoch" in s and "val_accuracy" in s for s in svgs), "the accuracy curves"

    # the CSV file, read two ways, and a tiny model on it
    assert "garments.csv: 900 rows" in text and "brightness,bright_pixels,height,width,label" in text
    assert "lines after the header: 900" in text
    assert ("features: bright_pixels [32] float32, brightness [32] float32, height [32] float32, "
            "width [32] float32; label int32") in text
    train_acc, val_acc = number(r"accuracy ([\d.]+) on its 708 rows, ([\d.]+) on the 192 held out", text)
    assert train_acc > 0.6 and val_acc > 0.6, (train_acc, val_acc)
    right, total, _ = number(r"Sneaker +(\d+) of +(\d+) right \((\d+) %\)", text)
    assert right == total > 0, "sneakers are told apart by their shape alone"

    # the CNN with callbacks: early stopping restored its best epoch; the checkpoint has the best val_accuracy
    epochs, _, best_epoch = number(r"ran (\d+) epochs; the best val_loss ([\d.]+) was at epoch (\d+)", text)
    assert best_epoch < epochs <= 20
    now, then = number(r"the model now: val_accuracy ([\d.]+); epoch \d+'s in the history: ([\d.]+)", text)
    assert now == then, "restore_best_weights"
    ck, best = number(r"checkpoint: val_accuracy ([\d.]+); the best in the history ([\d.]+)", text)
    assert ck == best and ck > 0.8, (ck, best)

    # the files the callbacks wrote, listed before the folder went
    sizes = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+) +(\d+) bytes$", text, re.M)}
    events = [p for p in sizes if re.fullmatch(r"logs/(train|validation)/events\.out\.tfevents\.\S+\.v2", p)]
    assert {p.split("/")[1] for p in events} == {"train", "validation"}, sizes
    assert all(sizes[p] > 0 for p in events), sizes
    assert sizes.get("training.csv", 0) > 0 and sizes.get("best.safetensors", 0) > 0, sizes
    log = re.search(r"^epoch,accuracy,loss,val_accuracy,val_loss\n((?:\d+,.*\n)+)", text, re.M)
    assert log and len(log.group(1).splitlines()) == epochs, "one CSVLogger row per epoch"

    # save / load: the same model, and training goes on
    assert number(r"max \|saved model's predictions - reloaded model's predictions\| = (\S+)", text) == 0
    a, b = number(r"validation accuracy: saved model ([\d.]+), reloaded model ([\d.]+)", text)
    assert a == b == now
    n = int(epochs) + 1
    assert f"Epoch {n}/{n}" in displayed_text(cells), "one more epoch, numbered after the others"
    assert number(r"one more epoch on the reloaded model: loss ([\d.]+)", text) < 1

    # the temporary folder is gone
    assert f"{root} removed: true" in text
    assert not os.path.exists(root)
