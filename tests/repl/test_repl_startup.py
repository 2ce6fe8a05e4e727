"""The REPL shows its prompt before the Lua prelude has loaded and loads it
before it reads the first key (lua_bindings/state.c, ldist_newstate_deferred;
repl/repl.c). Whatever the user types must then meet the state a script gets:
the same globals, modules, docs and help; keys typed before the prompt wait
for it."""
import subprocess

from conftest import BIN, ROOT, Repl

# One line describing the state: sorted globals, ldist's, distribute's and
# callbacks' keys (but ldist.interactive, the REPL's own), how many docs entries.
FINGERPRINT = (   # in a block: a REPL line's top-level locals become globals
    "do local function keys(t) local r = {} for k in pairs(t) do if k ~= 'interactive' then r[#r + 1] = tostring(k) end end "
    "table.sort(r) return table.concat(r, ',') end "
    "local nd = 0 for _ in pairs(ldist.docs) do nd = nd + 1 end "
    "print('FP', #keys(_G), keys(_G), keys(ldist), keys(distribute), keys(callbacks), nd) end"
)


def script_fingerprint():
    out = subprocess.run([BIN, "-e", FINGERPRINT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = [l for l in out.stdout.splitlines() if l.startswith("FP")]
    assert line, out.stdout
    return line[0].split("\t")


def repl_fingerprint(r):
    out = r.value(FINGERPRINT)
    line = [l for l in out.splitlines() if l.startswith("FP")]
    assert line, out
    return line[0].split("\t")


def test_the_prompt_meets_the_state_a_script_gets(tmp_path):
    want = script_fingerprint()
    for args in (("-q",), ()):
        r = Repl(tmp_path, args=args).start()
        try:
            got = repl_fingerprint(r)
            assert got == want, (args, [(a, b) for a, b in zip(got, want) if a != b])
            assert r.value("print(ldist.interactive, type(distribute.ParameterServerStrategy))") \
                == "true\tfunction"
            assert "A fully connected layer" in r.value("?nn.Dense")
        finally:
            r.close()


def test_keys_typed_before_the_prompt_wait_for_it(tmp_path):
    r = Repl(tmp_path)
    try:
        # sent at once, before the prompt (and the prelude) exist
        r.p.send("print(type(distribute.MirroredStrategy), type(help), 6 * 7)\r")
        r.p.expect("function\tfunction\t42")
        r.wait_prompt()
        assert r.value("6 * 7") == "42"
    finally:
        r.close()
