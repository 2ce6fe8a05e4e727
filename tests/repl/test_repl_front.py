"""What the REPL shows (issue 31, item 5; issue 28, one cell compiler),
driven through a real pty: the value of the last of several statements,
explain() as a story, "did you mean" for a bare misspelt global, help
shortcuts, completion without internal names, no echo from compile and
save_weights, scientific notation, and the README's prompt."""
import re
from pathlib import Path

from conftest import ROOT, clean

MODEL = ('model = nn.Sequential{nn.Dense(8, "relu"), nn.Dense(3)}; '
         'model:compile{optimizer = optim.SGD(), '
         'loss = losses.SparseCategoricalCrossentropy{from_logits = true}}')


def test_last_expression_of_several_statements_is_shown(repl):
    out = repl.value("tensor.seed(1); tensor.normal(2, 3)")
    assert out.startswith("tensor([[") and "shape=2x3" in out, out
    assert repl.value("a_val = 6; a_val * 7") == "42"
    assert repl.value("b_val = 6; b_val * 7;") == ""       # ';' still hides it


def test_explain_prints_its_story_with_computed_numbers(repl):
    repl.run("s = distribute.MirroredStrategy()")
    out = repl.value("s:explain()")
    assert out.startswith("MirroredStrategy: synchronous"), out
    assert "\\n" not in out and '"' not in out.splitlines()[0], out
    assert re.search(r"^1\. Input", out, re.M) and re.search(r"^4\. Update", out, re.M), out
    repl.run('m3 = nn.Sequential{nn.Dense(4)}; m3:build({5})')
    out = repl.value('distribute._mw_explain(3, 96, m3, "three workers")')
    assert "2 steps of reduce-scatter and 2 of all-gather" in out, out
    assert "2 x 2/3 x" in out and "(n-1)" not in out and "3-1" not in out, out


def test_a_bare_misspelt_global_says_did_you_mean(repl):
    repl.run(MODEL)
    out = repl.run("modle")
    assert "global 'modle' is nil; did you mean 'model'?" in out, out
    assert repl.value("nothing_like_it_at_all") == "nil"   # no close name: Lua's nil


def test_help_shortcuts_work_at_the_prompt(repl):
    for line in ("?nn.Dense", "nn.Dense?", "help nn.Dense", "??nn.Dense"):
        out = repl.value(line)
        assert "A fully connected layer" in out, (line, out)
        assert "unexpected symbol" not in out
    assert "Modules:" in repl.value("help")


def test_completion_of_distribute_hides_internal_names(repl):
    repl.p.send("distribute.\t\t")
    repl.p.expect("MirroredStrategy")
    repl.p.expect(r"> ")
    shown = clean(repl.p.before + repl.p.after)
    repl.p.send("\x15")
    repl.run("")
    for name in ("LocalClusterClass", "ps_train_step", "resolve_cluster", "PSClusterClass",
                 "TimelineClass", "ParameterServerStrategyClass", "_share"):
        assert name not in shown, (name, shown)
    assert "ParameterServerStrategy" in shown and "compare_timelines" in shown
    # typed far enough that nothing public matches, an internal name is offered
    repl.p.send("distribute.ps_t\t")
    repl.p.send("\r")
    out = repl.wait_prompt()
    assert "distribute.ps_train_step" in out, out


def test_compile_and_save_weights_echo_nothing(repl, tmp_path):
    repl.run('model = nn.Sequential{nn.Dense(8, "relu"), nn.Dense(3)}')
    assert repl.value("model:compile{optimizer = optim.SGD(), loss = \"mse\"}") == ""
    repl.run("model:build({4})")
    path = tmp_path / "w.safetensors"
    assert repl.value(f'model:save_weights("{path}")') == ""
    assert repl.value(f'model:load_weights("{path}")') == ""
    assert path.exists()


def test_tensors_switch_to_scientific_notation(repl):
    out = repl.value("tensor.new{1e-8, 1, 1000}")
    assert "1.0000e-08" in out and "1.0000e+03" in out, out
    assert "0.0000" not in out.replace("1.0000e", "")
    assert "[1.5000 2.0000]" in repl.value("tensor.new{1.5, 2}")   # one decade: fixed


def test_readme_prompt_is_the_programs(repl):
    readme = (ROOT / "README.md").read_text()
    prompts = re.findall(r"at the `([^`]+)` prompt", readme)
    assert prompts, "the README names no prompt"
    repl.p.send("\r")
    repl.p.expect(r"\n(?:\x1b\[[0-9;?]*[A-Za-z]|\r)*(\S*> )")
    seen = clean(repl.p.match.group(1))
    for p in prompts:
        assert p == seen, (p, seen)


def test_a_strict_global_table_does_not_end_the_session(repl):
    # the prompt and the misspelt-name check read globals outside Lua's code
    repl.run('setmetatable(_G, {__index = function(t, k) error("strict: " .. k, 2) end});')
    assert "strict: modle" in repl.run("modle")
    assert repl.value("6 * 7") == "42" and repl.p.isalive()


def test_an_error_inside_ldist_shows_no_internal_frames(repl):
    """Keras's traceback filtering: fit's error raised in ldist's Lua code is
    shown without its position there (the line's tail call left no frame of
    the user's) nor ldist's frames; traceback_filtering(false) shows them."""
    repl.run(MODEL)
    line = "model:fit(tensor.ones(4, 5), tensor.zeros(4, 2):long(), {verbose = 0})"
    out = repl.run(line)
    assert "ldist: sparse_categorical_crossentropy: labels 4x2 do not match predictions 4x3" in out, out
    assert "[ldist prelude" not in out and "stack traceback" not in out, out
    out = repl.run("h = " + line)
    assert "ldist: stdin:1: sparse_categorical_crossentropy: labels 4x2 do not match" in out, out
    assert repl.value("ldist.config.traceback_filtering(false)") == "true"
    out = repl.run(line)
    assert "[ldist prelude keras/training]:" in out, out


def test_no_guess_for_a_one_or_two_letter_name(repl):
    """As Python's suggestions: 'a' is one letter from too many names ('T',
    a tensor's transpose, was offered), so only a change of case is."""
    repl.run("function deep(x) return x.a.b end")
    out = repl.run("deep({})")
    assert "attempt to index a nil value (field 'a')" in out and "did you mean" not in out, out
    out = repl.run("hsape_probe = tensor.ones(2).hsape.x")
    assert "did you mean 'shape'?" in out, out
