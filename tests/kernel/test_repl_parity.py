"""The notebook as good as the REPL (issue 18), through the real Jupyter
client: completion finds what the REPL's Tab finds (methods, fields,
`model.layers[2]:`, private names hidden until typed), a top-level `local`
outlives its cell, a trailing `;` hides the value, help() speaks of every
module, values print for people (PerReplica), Ctrl-C in fit is one line and
keeps model.history, progress bars fall back to plain lines, and errors say
"did you mean"."""
import re
import time

import pytest

from kutil import Kernel, streams

MODEL = ('model = nn.Sequential{nn.Dense(8, "relu"), nn.Dense(3)}\n'
         'model:compile{optimizer = optim.SGD(), '
         'loss = losses.SparseCategoricalCrossentropy{from_logits = true}}\n'
         'opt = optim.Adam()\n'
         'layer = model.layers[1]')


@pytest.fixture(scope="module")
def k():
    kernel = Kernel()
    reply, _ = kernel.execute(MODEL)
    assert reply["content"]["status"] == "ok", reply["content"]
    yield kernel
    kernel.close()


def complete(k, code):
    c = k.shell_reply(k.kc.complete(code, len(code)))["content"]
    assert c["status"] == "ok"
    return c


def result(msgs):
    out = [m for m in msgs if m["msg_type"] == "execute_result"]
    return out[-1]["content"]["data"]["text/plain"] if out else None


def pager(reply):
    p = reply["content"]["payload"]
    assert len(p) == 1 and p[0]["source"] == "page", reply["content"]
    return p[0]["data"]["text/plain"]


# ---- completion ---------------------------------------------------------------

@pytest.mark.parametrize("code, want", [
    ("model:fi", {"fit"}),
    ("model.", {"fit", "layers", "compile", "summary"}),
    ("layer:", {"get_config"}),
    ("layer.", {"name", "trainable_variables", "count_params", "trainable"}),
    ("opt:", {"apply_gradients"}),
    ("opt.", {"learning_rate", "iterations"}),
    ("model.layers[2]:", {"get_config"}),
    ("model.layers[2].na", {"name"}),
    ('model.layers[ 1 ].class_', {"class_name"}),
])
def test_completion_finds_what_the_repl_finds(k, code, want):
    c = complete(k, code)
    assert want <= set(c["matches"]), (code, c["matches"])
    # the reply replaces just the name being typed
    name = re.search(r"[\w]*$", code).group(0)
    assert (c["cursor_start"], c["cursor_end"]) == (len(code) - len(name), len(code))
    # and agrees with the REPL's completer, the one implementation both use
    k.execute("repl_matches = ldist.complete(%r)" % code)
    repl = k.value('table.concat(repl_matches, "|")').strip('"').split("|")
    prefix = code[:len(code) - len(name)]
    assert sorted(prefix + m for m in c["matches"]) == sorted(repl)


def test_completion_hides_private_names_unless_typed(k):
    k.execute("obj = {_secret = 1, shown = 2}")
    assert complete(k, "obj.")["matches"] == ["shown"]
    assert complete(k, "obj._")["matches"] == ["_secret"]
    assert "_G" not in complete(k, "")["matches"]
    assert "_VERSION" in complete(k, "_V")["matches"]


def test_completion_in_strings_and_after_an_index_expression(k):
    assert complete(k, 'require "stri')["matches"] == ["string"]
    assert complete(k, "f(x):")["matches"] == []


# ---- local and ; ----------------------------------------------------------------

def test_a_top_level_local_is_visible_in_the_next_cell(k):
    reply, _ = k.execute("local cell_local = 41\nlocal function plus_one(x) return x + 1 end")
    assert reply["content"]["status"] == "ok"
    reply, msgs = k.execute("plus_one(cell_local)")
    assert result(msgs) == "42"
    # inside a block a local stays local
    k.execute("do local block_local = 1 end")
    assert k.value("block_local") == "nil"


def test_trailing_semicolon_hides_the_value(k):
    reply, msgs = k.execute("6 * 7;")
    assert reply["content"]["status"] == "ok", reply["content"]
    assert result(msgs) is None
    reply, msgs = k.execute("semi = 5;")
    assert reply["content"]["status"] == "ok" and k.value("semi") == "5"
    reply, msgs = k.execute("6 * 7")
    assert result(msgs) == "42"


# ---- help ---------------------------------------------------------------------------

def test_help_speaks_of_every_module(k):
    reply, msgs = k.execute("help()")          # the overview is printed, not paged
    text = streams(msgs)
    for mod in ("comm", "config", "progress", "data", "distribute"):
        line = re.search(r"^\s+%s\s+(\S.*)$" % mod, text, re.M)
        assert line and line.group(1) != mod, f"help() says nothing of {mod}:\n{text}"
    for name in ("distribute.get_replica_context", "ReplicaContext:all_reduce",
                 "distribute.partitioners", "display.html", "ldist.progress.style"):
        text = pager(k.execute(f'help("{name}")')[0])
        assert "No documentation" not in text, name
    assert "later issues" not in pager(k.execute("help(distribute)")[0])


# ---- printing ----------------------------------------------------------------------

def test_per_replica_values_print_shapes_and_devices(k):
    reply, msgs = k.execute("distribute.PerReplica{tensor.ones(2, 3), {tensor.ones(4), tensor.zeros(4):long()}}")
    text = result(msgs)
    assert "PerReplica: 2 replicas" in text
    assert "replica 0 on cpu:0: tensor [2, 3] float32" in text
    assert "{tensor [4] float32, tensor [4] int64}" in text
    assert "table: 0x" not in text


def test_per_replica_loss_says_it_is_a_share(k):
    code = ("local l = distribute.compute_average_loss(tensor.ones(4), {global_batch_size = 8})\n"
            "distribute.PerReplica{l, l}")
    text = result(k.execute(code)[1])
    assert "a share of the global-batch loss" in text and "0.5000" in text


# ---- errors --------------------------------------------------------------------------

def test_did_you_mean(k):
    reply, _ = k.execute("modle:fit()")
    assert "did you mean 'model'?" in reply["content"]["evalue"]
    reply, _ = k.execute("model:fitt(1)")
    assert "did you mean 'fit'?" in reply["content"]["evalue"]


def test_interrupt_in_fit_is_one_line_and_keeps_the_epochs_done(k):
    k.execute("x = tensor.normal(20000, 64); y = tensor.zeros(20000):long()\n"
              'big = nn.Sequential{nn.Dense(256, "relu"), nn.Dense(256, "relu"), nn.Dense(3)}\n'
              "big:compile{optimizer = optim.SGD(), loss = losses.SparseCategoricalCrossentropy{from_logits = true}}")
    k.execute("ldist.progress.style = 'text'")
    msg_id = k.kc.execute("big:fit(x, y, {epochs = 1000, batch_size = 32})")
    # wait for two epochs' lines (the plain-text fallback prints one per epoch)
    seen, deadline = "", time.time() + 60
    while "Epoch 2/1000" not in seen and time.time() < deadline:
        try:
            msg = k.kc.get_iopub_msg(timeout=1)
        except Exception:
            continue
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            seen += msg["content"]["text"]
    assert "Epoch 2/1000" in seen
    k.km.interrupt_kernel()
    reply = k.shell_reply(msg_id, timeout=20)
    msgs = k.iopub_until_idle(msg_id)
    c = reply["content"]
    assert c["status"] == "error" and c["ename"] == "Interrupted", c
    m = re.match(r"interrupted: fit stopped in epoch (\d+)/1000 at step \d+/625; "
                 r"model.history holds the (\d+) epochs? done$", c["evalue"])
    assert m, c["evalue"]
    assert len(c["traceback"]) == 1, c["traceback"]       # one line, no internals
    done = int(m.group(2))
    assert done == int(m.group(1)) - 1 and done >= 2
    assert k.value("#big.history.loss") == str(done)
    k.execute("ldist.progress.style = 'auto'")


# ---- progress bars without display updates ------------------------------------------------

def test_progress_text_fallback_prints_each_epochs_final_line(k):
    k.execute("ldist.progress.style = 'text'")
    try:
        reply, msgs = k.execute("xs = tensor.normal(64, 4); ys = tensor.zeros(64):long()\n"
                                "model:fit(xs, ys, {epochs = 3, batch_size = 16});")
        assert reply["content"]["status"] == "ok", reply["content"]
        assert not [m for m in msgs if m["msg_type"] in ("display_data", "update_display_data")]
        lines = [l for l in streams(msgs).splitlines() if l.startswith("Epoch")]
        assert [l.split()[1] for l in lines] == ["1/3", "2/3", "3/3"]
        assert all("4/4" in l and "loss:" in l for l in lines)
    finally:
        k.execute("ldist.progress.style = 'auto'")
    # by default a notebook gets one display per bar, updated in place
    reply, msgs = k.execute("model:fit(xs, ys, {epochs = 1, batch_size = 16});")
    assert [m for m in msgs if m["msg_type"] == "display_data"]


# ---- one cell compiler (issue 28): the REPL's forms in a cell -------------------------

@pytest.mark.parametrize("code", ["?nn.Dense", "nn.Dense?", "help nn.Dense"])
def test_help_shortcuts_as_at_the_prompt(k, code):
    reply, _ = k.execute(code)
    assert "A fully connected layer" in pager(reply)


def test_last_of_several_statements_and_a_bare_misspelt_global(k):
    assert result(k.execute("tensor.seed(1); tensor.normal(2, 3)")[1]).startswith("tensor([[")
    reply, _ = k.execute("modle")
    assert reply["content"]["status"] == "error"
    assert "global 'modle' is nil; did you mean 'model'?" in reply["content"]["evalue"]


def test_explain_shows_its_story(k):
    text = result(k.execute("distribute.MirroredStrategy():explain()")[1])
    assert text.startswith("MirroredStrategy: synchronous") and "\n1. Input" in text and "\\n" not in text, text


def test_an_error_inside_ldist_shows_no_internal_frames(k):
    """Keras's traceback filtering, as in the REPL: the message of an error
    fit raised in ldist's Lua code, without its position there."""
    k.execute(MODEL)
    reply, _ = k.execute("model:fit(tensor.ones(4, 5), tensor.zeros(4, 2):long(), {verbose = 0})")
    c = reply["content"]
    assert c["status"] == "error", c
    assert c["evalue"].startswith("sparse_categorical_crossentropy: labels 4x2 do not match predictions 4x3"), c["evalue"]
    assert not any("[ldist prelude" in line for line in c["traceback"]), c["traceback"]
