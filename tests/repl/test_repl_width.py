"""Everything printed fits the terminal (issue 31, items 2 and 3), driven
through a real pty of 80 and of 60 columns: the fit progress (val_loss
included), model:summary() with Keras's "Non-trainable params", help text
(wrapped at words, paged by less when long), a timeline, `make run`'s
hint; and ParameterServerStrategy's fit shows the progress bar every other
strategy shows. A line is measured as the terminal shows it: every piece of
text between two carriage returns, newlines or cursor moves."""
import os
import re
from pathlib import Path

import pexpect
import pytest

from conftest import ANSI, BIN, PROMPT, ROOT, clean

MOVES = re.compile(r"[\r\n]|\x1b\[\d*[A-HJKF]")


def widest(raw):
    """The widest piece of text the terminal was sent (escapes removed)."""
    return max((len(ANSI.sub("", s)) for s in MOVES.split(raw)), default=0)


class Term:
    def __init__(self, tmp_path, cols, args=("-q",), pager="cat"):
        env = dict(os.environ, HOME=str(tmp_path), LDIST_HISTORY="", TERM="xterm",
                   LANG="C.UTF-8", LC_ALL="C.UTF-8")
        env.pop("COLUMNS", None)
        if pager is None:
            env.pop("PAGER", None)
        else:
            env["PAGER"] = pager
        self.p = pexpect.spawn(BIN, list(args), env=env, cwd=str(ROOT), encoding="utf-8",
                               timeout=120, dimensions=(24, cols))
        if args == ("-q",):
            self.p.expect(PROMPT)

    def output(self, line):
        """What `line` printed (raw, the echo of the line left out)."""
        self.p.send(line + "\r")
        self.p.expect(PROMPT)
        return self.p.before.split("\n", 1)[1] if "\n" in self.p.before else ""

    def close(self):
        if self.p.isalive():
            self.p.sendeof()
            try:
                self.p.expect(pexpect.EOF, timeout=10)
            except pexpect.TIMEOUT:
                self.p.terminate(force=True)


@pytest.fixture(params=[80, 60])
def term(request, tmp_path):
    t = Term(tmp_path, request.param)
    t.cols = request.param
    yield t
    t.close()


DATA = ('tensor.seed(1); x = tensor.normal(640, 8); y = x:slice(1, 0, 3):argmax(1):astype("int64"); '
        'ds = data.Dataset.from_tensor_slices(x, y):batch(32)')
MODEL = ('do local _ <close> = s:scope(); model = nn.Sequential{nn.Dense(16, "relu"), nn.Dense(3)}; '
         'model:build({8}); model:compile{optimizer = optim.SGD(), '
         'loss = losses.SparseCategoricalCrossentropy{from_logits = true}, metrics = {"accuracy"}} end')
FIT = 'h = model:fit(ds, {epochs = 2, steps_per_epoch = 20, validation_data = ds});'
STRATEGIES = {
    "mirrored": 'ldist.config.cpu_devices(2); s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}',
    "ps": "lc = distribute.LocalCluster{workers = 2, ps = 1}; s = distribute.ParameterServerStrategy(lc)",
}


def fit_output(term, strategy):
    term.output(STRATEGIES[strategy])
    term.output(MODEL)
    term.output(DATA)
    out = term.output(FIT)
    if strategy == "ps":
        term.output("lc:shutdown()")
    return out


def test_fit_progress_fits_and_keeps_every_number(term):
    out = fit_output(term, "mirrored")
    assert widest(out) <= term.cols, out
    text = clean(out)
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert re.search(r"\b%s: \d+\.\d{4}" % name, text), (name, text)


def screen(raw):
    """The lines left on screen by raw output: a small terminal that knows
    carriage return, newline, erase to the end of the line or screen, and
    cursor up to a line's start (what the progress bar sends)."""
    rows, r, c = [""], 0, 0
    for tok in re.split(r"(\x1b\[\d*[A-Za-z]|\x1b[=>]|\r|\n)", raw):
        if not tok:
            continue
        if tok == "\r":
            c = 0
        elif tok == "\n":
            r += 1
            if r == len(rows):
                rows.append("")
        elif tok.startswith("\x1b"):
            m = re.match(r"\x1b\[(\d*)([A-Za-z])", tok)
            if m and m.group(2) == "K":
                rows[r] = rows[r][:c]
            elif m and m.group(2) == "J":
                rows[r] = rows[r][:c]
                del rows[r + 1:]
            elif m and m.group(2) == "F":
                r, c = max(0, r - int(m.group(1) or 1)), 0
        else:
            line = rows[r].ljust(c)
            rows[r] = line[:c] + tok + line[c + len(tok):]
            c += len(tok)
    return rows


def final_epoch_lines(raw):
    """The epochs' lines as they stay on screen, the bar and the numbers
    replaced by <bar> and '#'."""
    out = []
    for line in screen(raw):
        line = re.sub(r"[│\[][█▏▎▍▌▋▊▉ =>.]*[│\]]", "<bar>", line)
        out.append(re.sub(r"\d+(\.\d+)?", "#", line))
    return [l for l in out if l.startswith("Epoch") or l.startswith("  ")]


@pytest.mark.parametrize("cols", [80])
def test_parameter_server_fit_shows_the_same_progress_as_mirrored(tmp_path, cols):
    shown = {}
    for strategy in ("mirrored", "ps"):
        t = Term(tmp_path, cols)
        try:
            raw = fit_output(t, strategy)
        finally:
            t.close()
        assert widest(raw) <= cols, raw
        # live: the bar is drawn while the epoch runs, then redrawn in place
        assert re.search(r"Epoch 1/2 +1/20 ", raw), (strategy, raw)
        assert "\x1b[K" in raw and "Epoch 1/2 - " not in raw, (strategy, raw)
        shown[strategy] = final_epoch_lines(raw)
    assert shown["ps"] and shown["ps"] == shown["mirrored"], shown
    # the metric order and the time: loss first, validation last, seconds measured
    assert re.search(r"loss: #  accuracy: #  val_loss: #  val_accuracy: #", "\n".join(shown["ps"]))


def test_model_summary_fits_and_counts_non_trainable_params(term):
    term.output('m = nn.Sequential{nn.Flatten(), nn.Dense(128, "relu"), nn.BatchNormalization(), nn.Dense(10)}; '
                "m:build({28, 28})")
    out = term.output("m:summary()")
    assert widest(out) <= term.cols, out
    text = clean(out)
    assert re.search(r"^Total params: 102282 \(399\.54 KB\)$", text, re.M), text
    assert re.search(r"^Trainable params: 102026 ", text, re.M), text
    assert re.search(r"^Non-trainable params: 256 \(1\.00 KB\)$", text, re.M), text
    assert "Param #" in text and "BatchNormalization" in text
    term.output('m2 = nn.Sequential{nn.Dense(3)}; m2:build({2})')
    assert re.search(r"^Non-trainable params: 0 ", clean(term.output("m2:summary()")), re.M)


@pytest.mark.parametrize("what", ["help(distribute)", "help()", "help(nn)", "help(ldist.progress)",
                                  'help("Strategy:timeline")'])
def test_help_fits_and_wraps_at_words(term, what):
    out = term.output(what)
    assert widest(out) <= term.cols, out
    # no word cut: every word of the documentation is still whole
    words = clean(out).split()
    assert "tf.distribute:" in words or what != "help(distribute)"


def test_long_help_is_paged_with_less(tmp_path):
    t = Term(tmp_path, 80, pager=None)
    try:
        t.p.send("help(distribute)\r")
        t.p.expect(r"\(END\)|\x1b\[7m|:\x1b\[K|lines \d+-\d+")   # less's prompt
        t.p.send("q")
        t.p.expect(r"> ")
        t.p.send("6*7\r")
        t.p.expect(r"42")
    finally:
        t.close()


def test_timeline_rows_fit_the_terminal(term):
    term.output(STRATEGIES["mirrored"])
    term.output(MODEL)
    term.output(DATA)
    term.output("s:trace(true); model:fit(ds, {epochs = 1, verbose = 0}); s:trace(false)")
    out = term.output("s:timeline()")
    assert widest(out) <= term.cols, out
    assert "replica 0 (cpu:0) |" in clean(out)
    # an explicit width in columns is honoured too
    narrow = term.output("s:timeline{width = 50}")
    assert widest(narrow) <= 50, narrow
    summary = term.output("s:trace_summary()")
    assert widest(summary) <= term.cols and "replica 1 (cpu:1)" in summary, summary


def test_make_run_hint_fits(tmp_path):
    if not Path("/usr/share/datasets/fashion-mnist").exists():
        pytest.skip("dataset-fashion-mnist is not installed")
    for cols in (80, 60):
        t = Term(tmp_path, cols, args=("scripts/main.lua",))
        t.p.expect(pexpect.EOF, timeout=300)
        out = t.p.before
        assert widest(out) <= cols, out
        assert "model:predict(x_test:slice(0, 0, 5)):argmax(1)" in clean(out)
