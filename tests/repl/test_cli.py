"""The ldist program without a terminal: scripts, -e, stdin, exit status."""
import pexpect

from conftest import BIN, Repl, run_ldist


def test_piped_stdin_runs_as_a_script():
    r = run_ldist(input="print(1+1)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "2\n"


def test_dash_runs_stdin():
    r = run_ldist("-", input="print(select('#', ...))\n")
    assert r.returncode == 0 and r.stdout == "0\n"


def test_error_on_stdin_exits_non_zero():
    r = run_ldist(input='error("from stdin")\n')
    assert r.returncode != 0
    assert "from stdin" in r.stderr


def test_script_with_arguments(tmp_path):
    s = tmp_path / "args.lua"
    s.write_text('print(arg[0], arg[1], arg[2], select("#", ...), ...)\n')
    r = run_ldist(str(s), "a", "b c")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{s}\ta\tb c\t2\ta\tb c\n"


def test_script_error_exits_non_zero_with_message(tmp_path):
    s = tmp_path / "bad.lua"
    s.write_text('local x = 1\nerror("script failed here")\n')
    r = run_ldist(str(s))
    assert r.returncode == 1
    assert "bad.lua:2: script failed here" in r.stderr


def test_script_syntax_error_exits_non_zero(tmp_path):
    s = tmp_path / "syntax.lua"
    s.write_text("x = = 1\n")
    r = run_ldist(str(s))
    assert r.returncode == 1 and "unexpected symbol" in r.stderr


def test_missing_script_exits_non_zero():
    r = run_ldist("/nonexistent/script.lua")
    assert r.returncode == 1 and "cannot open" in r.stderr


def test_os_exit_status_is_kept(tmp_path):
    r = run_ldist("-e", "os.exit(7)")
    assert r.returncode == 7


def test_e_runs_a_string():
    r = run_ldist("-e", "print(6 * 7)")
    assert r.returncode == 0 and r.stdout == "42\n"


def test_e_error_exits_non_zero():
    r = run_ldist("-e", "error('nope')")
    assert r.returncode == 1 and "nope" in r.stderr


def test_several_e_in_order_then_script(tmp_path):
    s = tmp_path / "s.lua"
    s.write_text("print(v)\n")
    r = run_ldist("-e", "v = 1", "-e", "v = v + 1", str(s))
    assert r.stdout == "2\n"


def test_version_flag():
    r = run_ldist("-v")
    assert r.returncode == 0 and r.stdout.startswith("ldist 0.1.0 (Lua 5.4")


def test_bad_option_prints_usage():
    r = run_ldist("-Z")
    assert r.returncode != 0 and "usage: ldist" in r.stderr


def test_launch_of_a_missing_script_fails_clearly():
    r = run_ldist("launch", "-n", "2", "/nonexistent/missing.lua")
    assert r.returncode != 0 and "/nonexistent/missing.lua" in (r.stderr + r.stdout)


def test_require_ldist_returns_the_module():
    r = run_ldist("-e", 'local l = require "ldist"; print(l == ldist, type(l.version))')
    assert r.stdout == "true\tstring\n", r.stderr


def test_interactive_after_script_keeps_its_globals(tmp_path):
    s = tmp_path / "setup.lua"
    s.write_text("from_script = 6 * 7\nlocal hidden = 1\n")
    r = Repl(tmp_path, args=("-q", "-i", str(s))).start()
    try:
        assert r.value("from_script") == "42"
    finally:
        r.close()


def test_interactive_after_failing_script_still_opens(tmp_path):
    s = tmp_path / "fails.lua"
    s.write_text("before_error = 5\nerror('half way')\n")
    r = Repl(tmp_path, args=("-q", "-i", str(s))).start()
    try:
        assert "half way" in r.startup
        assert r.value("before_error") == "5"
    finally:
        r.p.sendeof()
        r.p.expect(pexpect.EOF)
        r.p.close()
        assert r.p.exitstatus == 1


FIT_BAD_LABELS = ('local m = nn.Sequential{nn.Dense(3)}\n'
                  'm:compile{optimizer = optim.SGD(), loss = losses.MeanSquaredError()}\n'
                  'local function train() m:fit(tensor.ones(4, 2), tensor.ones(4, 2), {verbose = 0}) end\n'
                  'train()\n')


def test_an_error_inside_ldist_is_reported_at_the_users_line(tmp_path):
    """Keras's traceback filtering: fit raised it in ldist's Lua code, the
    message names the script's line and the traceback only the script's frames."""
    (tmp_path / "labels.lua").write_text(FIT_BAD_LABELS)
    r = run_ldist("labels.lua", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("ldist: labels.lua:3: mean_squared_error: labels 4x2 and predictions 4x3 "
                               "do not match\nstack traceback:\n"), r.stderr
    assert "[ldist prelude" not in r.stderr and "[C]" not in r.stderr, r.stderr
    assert "labels.lua:3: in local 'train'" in r.stderr and "labels.lua:4: in main chunk" in r.stderr, r.stderr


REPLICA_ERRORS = {
    # name: (script, the frames the traceback must show)
    "loss": ('local m = nn.Sequential{nn.Dense(2)}\n'
             'local function inner(p) local r = p + "x"; return r end\n'
             'local function myloss(y, p) local r = inner(p); return r end\n'
             'm:compile{optimizer = "sgd", loss = myloss}\n'
             'm:fit(tensor.ones(8, 3), tensor.ones(8, 2), {verbose = 0})\n',
             ["loss.lua:2: in upvalue 'inner'", "loss.lua:3: in function <loss.lua:3>", "loss.lua:5: in main chunk"]),
    "evaluate": ('local m = nn.Sequential{nn.Dense(2)}\n'
                 'local function inner(p) local r = p + "x"; return r end\n'
                 'local function myloss(y, p) local r = inner(p); return r end\n'
                 'm:compile{optimizer = "sgd", loss = myloss}\n'
                 'm:evaluate(tensor.ones(8, 3), tensor.ones(8, 2), {verbose = 0})\n',
                 ["evaluate.lua:2: in upvalue 'inner'", "evaluate.lua:3: in field '_loss'",
                  "evaluate.lua:5: in main chunk"]),
    "subclass": ('local Net = nn.Model:extend("Net")\n'
                 'function Net:init() self.d = nn.Dense(2) end\n'
                 'local function helper(h) local r = h:reshape(5, 7); return r end\n'
                 'function Net:call(x, training) local y = helper(self.d(x)); return y end\n'
                 'local m = Net()\n'
                 'm:compile{optimizer = "sgd", loss = "mse"}\n'
                 'm:fit(tensor.ones(4, 3), tensor.ones(4, 2), {verbose = 0})\n',
                 ["subclass.lua:3: in upvalue 'helper'", "subclass.lua:4: in function <subclass.lua:4>",
                  "subclass.lua:7: in main chunk"]),
    "tape": ('local x = tensor.ones(3)\n'
             'local tape = autograd.GradientTape()\n'
             'local function f() local y = (x * x):sum(); return y + "z" end\n'
             'local r = tape:record(function() local v = f(); return v end)\n',
             ["tape.lua:3: in upvalue 'f'", "tape.lua:4: in function <tape.lua:4>", "tape.lua:4: in main chunk"]),
    "map": ('local function helper(x) local r = x * "k"; return r end\n'
            'local ds = data.Dataset.from_tensor_slices(tensor.ones(8, 3), tensor.ones(8, 2))\n'
            'ds = ds:map(function(x, y) local z = helper(x); return z, y end):batch(4)\n'
            'for b in ds:iter() do end\n',
            ["map.lua:1: in upvalue 'helper'", "map.lua:3: in function <map.lua:3>", "map.lua:4: in main chunk"]),
    "map_fit": ('local function helper(x) local r = x * "k"; return r end\n'
                'local ds = data.Dataset.from_tensor_slices(tensor.ones(8, 3), tensor.ones(8, 2))\n'
                'ds = ds:map(function(x, y) local z = helper(x); return z, y end):batch(4)\n'
                'local m = nn.Sequential{nn.Dense(2)}\n'
                'm:compile{optimizer = "sgd", loss = "mse"}\n'
                'm:fit(ds, {verbose = 0})\n',
                ["map_fit.lua:1: in upvalue 'helper'", "map_fit.lua:3: in function <map_fit.lua:3>",
                 "map_fit.lua:6: in main chunk"]),
    "run": ('local function deep(x) local r = x + "a"; return r end\n'
            'local function step(x) local r = deep(x); return r end\n'
            'distribute.get_strategy():run(step, tensor.ones(2))\n',
            ["run.lua:1: in upvalue 'deep'", "run.lua:2: in function <run.lua:2>", "run.lua:3: in main chunk"]),
    "mirrored": ('ldist.config.cpu_devices(2)\n'
                 'local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}\n'
                 'local function deep(x) local r = x + "a"; return r end\n'
                 'local function step(x) local r = deep(x); return r end\n'
                 's:run(step, tensor.ones(2))\n',
                 ["mirrored.lua:3: in upvalue 'deep'", "mirrored.lua:4: in function <mirrored.lua:4>",
                  "mirrored.lua:5: in main chunk"]),
    "multiworker": ('local s = distribute.MultiWorkerMirroredStrategy()\n'
                    'local function deep(x) local r = x + "a"; return r end\n'
                    'local function step(x) local r = deep(x); return r end\n'
                    's:run(step, tensor.ones(2))\n',
                    ["multiworker.lua:2: in upvalue 'deep'", "multiworker.lua:3: in function <multiworker.lua:3>",
                     "multiworker.lua:4: in main chunk"]),
}


def test_errors_below_c_calls_and_replicas_keep_their_frames(tmp_path):
    """A compiled loss and a subclassed model's call run from C (train_step),
    tape:record's function and a dataset's map function too, and a replica's
    function runs in a coroutine (Mirrored, MultiWorkerMirrored); each catches
    the error to clean up and raises it again (the map's as the iterator's
    "map function: ..."). The traceback shows the frames where it was raised."""
    for name, (script, frames) in REPLICA_ERRORS.items():
        (tmp_path / f"{name}.lua").write_text(script)
        r = run_ldist(f"{name}.lua", cwd=tmp_path)
        assert r.returncode == 1, (name, r.stderr)
        for f in frames:
            assert f"\t{f}\n" in r.stderr, (name, f, r.stderr)
        assert "[ldist prelude" not in r.stderr, (name, r.stderr)
    r = run_ldist("mirrored.lua", cwd=tmp_path)
    assert r.stderr.startswith("ldist: replica 1 (cpu:1): mirrored.lua:3: bad argument #2 to 'add'"), r.stderr
    # unfiltered: the replica's frames above the prelude's that resumed it
    r = run_ldist("mirrored.lua", cwd=tmp_path, env_extra={"LDIST_TRACEBACK_FILTERING": "0"})
    tb = r.stderr.split("\n")
    assert tb.index("\tmirrored.lua:4: in function <mirrored.lua:4>") < \
        [i for i, line in enumerate(tb) if "[ldist prelude distribute/mirrored]" in line][0], r.stderr
    # a replica's message that starts at a prelude position starts at the
    # user's line after the replica's name
    (tmp_path / "where.lua").write_text(
        'ldist.config.cpu_devices(2)\n'
        'local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}\n'
        'local function step(x) error("[ldist prelude keras/training]:12: made up", 0) end\n'
        's:run(step, tensor.ones(2))\n')
    r = run_ldist("where.lua", cwd=tmp_path)
    assert r.stderr.startswith("ldist: replica 1 (cpu:1): where.lua:3: made up\n"), r.stderr


def test_traceback_filtering_can_be_turned_off(tmp_path):
    s = tmp_path / "labels.lua"
    s.write_text(FIT_BAD_LABELS)
    r = run_ldist(str(s), env_extra={"LDIST_TRACEBACK_FILTERING": "0"})
    assert r.returncode == 1
    assert "[ldist prelude keras/training]:" in r.stderr and "stack traceback" in r.stderr, r.stderr
    s2 = tmp_path / "off.lua"
    s2.write_text("print(ldist.config.traceback_filtering(false), ldist.config.traceback_filtering())\n"
                  + FIT_BAD_LABELS)
    r = run_ldist(str(s2))
    assert r.stdout.startswith("true\tfalse\n"), r.stdout
    assert "[ldist prelude keras/training]:" in r.stderr, r.stderr


def test_an_error_in_a_callback_keeps_its_frames_through_fit(tmp_path):
    """fit catches an error to clean up and raises it again; the traceback
    still shows the frames where it was raised (the user's callback and the
    function it called), not only the script's line that called fit."""
    (tmp_path / "cb.lua").write_text(
        'local m = nn.Sequential{nn.Dense(3)}\n'
        'm:compile{optimizer = optim.SGD(), loss = losses.MeanSquaredError()}\n'
        'local function deep(x) return x.nope.field end\n'
        'local cb = {on_epoch_end = function(self, epoch, logs) deep({}) end}\n'
        'm:fit(tensor.ones(4, 2), tensor.ones(4, 3), {verbose = 0, callbacks = {cb}})\n')
    r = run_ldist("cb.lua", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("ldist: cb.lua:3: attempt to index a nil value (field 'nope')\n"), r.stderr
    assert "cb.lua:3: in upvalue 'deep'" in r.stderr and "cb.lua:4: in method 'on_epoch_end'" in r.stderr, r.stderr
    assert "cb.lua:5: in main chunk" in r.stderr and "[ldist prelude" not in r.stderr, r.stderr
    # the same error twice in one script, the first caught by the script's
    # pcall: the second, raised outside fit, shows its own frames
    (tmp_path / "twice.lua").write_text(
        'local m = nn.Sequential{nn.Dense(3)}\n'
        'm:compile{optimizer = optim.SGD(), loss = losses.MeanSquaredError()}\n'
        'local function deep(x) return x.nope.field end\n'
        'local cb = {on_epoch_end = function(self, epoch, logs) deep({}) end}\n'
        'print(pcall(m.fit, m, tensor.ones(4, 2), tensor.ones(4, 3), {verbose = 0, callbacks = {cb}}))\n'
        'local function again() deep({}) end\n'
        'again()\n')
    r = run_ldist("twice.lua", cwd=tmp_path)
    assert r.returncode == 1 and "twice.lua:3: attempt to index" in r.stdout, (r.stdout, r.stderr)
    assert r.stderr.startswith("ldist: twice.lua:3: attempt to index a nil value (field 'nope')\n"), r.stderr
    assert "twice.lua:6: in local 'again'" in r.stderr and "on_epoch_end" not in r.stderr, r.stderr
