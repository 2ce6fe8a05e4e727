"""The REPL as a class meets it (issue 18): completion through indexing and
without private names, top-level locals across lines, ';', help of every
module, values printed for people, Ctrl-C in fit, Ctrl-D on a continuation
line, "did you mean" for a misspelt name. Driven through a real pty."""
import re
import time

from conftest import PROMPT, PROMPT2, clean

MODEL = ('model = nn.Sequential{nn.Dense(8, "relu"), nn.Dense(3)}; '
         'model:compile{optimizer = optim.SGD(), '
         'loss = losses.SparseCategoricalCrossentropy{from_logits = true}}')


def tab_then(repl, typed, rest):
    repl.p.send(typed)
    repl.p.send("\t")
    time.sleep(0.3)
    return repl.run(rest)


def listing(repl, typed, expect):
    """Type `typed`, press Tab twice, wait for `expect` among the candidates;
    return the listing (the line is then dropped)."""
    repl.p.send(typed)
    repl.p.send("\t\t")
    repl.p.expect(expect)
    out = clean(repl.p.before + repl.p.after)
    repl.p.expect(PROMPT)               # readline redraws the prompt and the line
    repl.p.send("\x15")                 # Ctrl-U
    repl.run("")
    return out


def test_completion_of_methods_fields_and_indexed_layers(repl):
    repl.run(MODEL)
    assert "model:fit(" in tab_then(repl, "model:fi", "(nil, nil);")
    assert "model.layers[2]:get_config()" in tab_then(repl, "model.layers[2]:get_c", "();")
    out = tab_then(repl, "model.layers[1].class_n", "")
    assert '"Dense"' in out
    repl.run("opt = optim.Adam()")
    assert "opt:apply_gradients" in tab_then(repl, "opt:apply_g", ";")


def test_private_names_are_hidden_unless_typed(repl):
    repl.run("obj = {_secret = 1, shown = 2, stone = 3}")
    shown = listing(repl, "obj.s", "stone")  # "_secret" would have made "obj." ambiguous too
    assert "shown" in shown and "_secret" not in shown
    # with the private name hidden, "obj." has one common prefix: Tab adds it
    assert re.search(r"^3$", tab_then(repl, "obj.", "tone"), re.M)
    out = tab_then(repl, "obj._se", "")
    assert "obj._secret" in out and re.search(r"^1$", out, re.M)


def test_top_level_locals_outlive_the_line(repl):
    repl.run("local a_local = 40")
    repl.run("local b_local, c_local = 1, 1 local function add(x, y) return x + y end")
    assert repl.value("add(a_local, b_local + c_local)") == "42"
    # a local inside a block stays local
    repl.run("do local hidden_local = 5 end")
    assert repl.value("hidden_local") == "nil"


def test_trailing_semicolon_hides_the_value(repl):
    out = repl.run("6 * 7;")
    assert "42" not in out
    assert repl.value("6 * 7") == "42"


def test_help_says_something_for_every_module(repl):
    out = repl.run("help()")
    for mod in ("comm", "config", "progress"):
        line = re.search(r"^\s+%s\s+(\S.*)$" % mod, out, re.M)
        assert line, f"help() lists {mod} without a word about it:\n{out}"
    out = repl.run('help("distribute.get_replica_context")')
    assert "replica" in out and "No documentation" not in out
    assert "later issues" not in repl.run("help(distribute)")


def test_per_replica_values_print_shapes_and_devices(repl):
    out = repl.run("distribute.PerReplica{tensor.ones(2, 3), {tensor.ones(4), tensor.zeros(4):long()}}")
    assert "PerReplica: 2 replicas" in out
    assert "replica 0 on cpu:0: tensor [2, 3] float32" in out
    assert "replica 1 on cpu:0: {tensor [4] float32, tensor [4] int64}" in out
    assert "table: 0x" not in out


def test_ctrl_c_in_fit_is_one_line_and_keeps_the_epochs_done(repl):
    repl.run(MODEL)
    repl.run("x = tensor.normal(20000, 64); y = tensor.zeros(20000):long()")
    repl.run('model = nn.Sequential{nn.Dense(256, "relu"), nn.Dense(256, "relu"), nn.Dense(3)}; '
             'model:compile{optimizer = optim.SGD(), loss = losses.SparseCategoricalCrossentropy{from_logits = true}}')
    repl.p.send("model:fit(x, y, {epochs = 1000, batch_size = 32})\r")
    repl.p.expect("Epoch 3/1000", timeout=60)
    repl.p.sendintr()
    out = repl.wait_prompt()
    m = re.search(r"interrupted: fit stopped in epoch (\d+)/1000 at step \d+/625; "
                  r"model.history holds the (\d+) epochs done", out)
    assert m, out
    assert "stack traceback" not in out and "keras/training" not in out
    epoch, done = int(m.group(1)), int(m.group(2))
    assert epoch >= 3 and done == epoch - 1
    assert int(repl.value("#model.history.loss")) == done


def test_ctrl_d_on_a_continuation_line_cancels_it(repl):
    repl.run("alive = 7")
    repl.p.send("for i = 1, 3 do\r")
    repl.p.expect(PROMPT2)
    repl.p.send("\x04")                  # Ctrl-D on the empty continuation line
    repl.wait_prompt()
    assert repl.value("alive * 6") == "42"
    assert repl.p.isalive()


def test_did_you_mean_for_globals_and_methods(repl):
    repl.run(MODEL)
    assert "did you mean 'model'?" in repl.run("modle:fit()")
    assert "did you mean 'fit'?" in repl.run("model:fitt(1)")
    assert "did you mean 'print'?" in repl.run('prnt("x")')
