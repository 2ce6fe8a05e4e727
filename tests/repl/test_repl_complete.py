"""Tab completion in the real REPL: globals, fields, methods through
metatables (tables and userdata), require names, file names in strings."""
import re
import time

from conftest import PROMPT, clean


def tab_then(repl, typed, rest):
    """Type `typed`, press Tab, type `rest` and Enter; return the output."""
    repl.p.send(typed)
    repl.p.send("\t")
    time.sleep(0.3)
    return repl.run(rest)


def test_table_field(repl):
    out = tab_then(repl, "string.fo", '("%05d", 42)')
    assert "string.format(" in out
    assert '"00042"' in out


def test_global_name(repl):
    repl.run("a_rather_unique_global = 17")
    out = tab_then(repl, "a_rather_uni", "")
    assert "17" in out


def test_method_through_metatable_index(repl):
    repl.run("Model = {} Model.__index = Model")
    repl.run('function Model:fit() return "fitted" end')
    repl.run('function Model:evaluate() return "evaluated" end')
    repl.run("model = setmetatable({}, Model)")
    out = tab_then(repl, "model:fi", "()")
    assert "model:fit()" in out
    assert '"fitted"' in out


def test_method_of_a_userdata(repl):
    out = tab_then(repl, "io.stdout:wri", '("written-by-ud\\n");')
    assert "io.stdout:write(" in out
    assert "written-by-ud" in out


def test_ambiguous_prefix_lists_the_candidates(repl):
    repl.p.send("string.")
    repl.p.send("\t\t")
    repl.p.expect("gsub")
    listing = clean(repl.p.before + repl.p.after)
    repl.p.expect(PROMPT)         # readline redraws the prompt and the line
    assert "format" in listing and "byte" in listing
    # the listing shows names only, and the line is still being edited
    assert "string.format" not in listing
    repl.p.send("\x15")           # Ctrl-U: drop the line
    assert re.search(r"^2$", repl.run("1 + 1"), re.M)


def test_require_names(repl):
    out = tab_then(repl, 'require "stri', "")
    assert 'require "string"' in out
    assert "format = function" in out


def test_file_names_inside_strings(make_repl, tmp_path):
    (tmp_path / "unique_data_file.txt").write_text("hello")
    (tmp_path / "subdir").mkdir()
    r = make_repl(cwd=tmp_path).start()
    out = tab_then(r, 'f = "uniq', "")
    assert r.value("f") == '"unique_data_file.txt"', out
    # a directory completes with a slash and leaves the string open
    out = tab_then(r, 'g = "subd', 'x"')
    assert r.value("g") == '"subdir/x"', out


def test_method_through_an_index_function(repl):
    # bindings often use a function __index (t[i] and computed fields) that
    # closes over the method table; completion finds the methods there
    repl.run('do local methods = {train = function() return "trained" end}; '
             'obj2 = setmetatable({}, {__index = function(t, k) return methods[k] end}) end')
    out = tab_then(repl, "obj2:tr", "()")
    assert "obj2:train()" in out and '"trained"' in out


def test_computed_fields_listed_in___fields(repl):
    repl.run('ud = setmetatable({}, {__index = function(t, k) if k == "units" then return 128 end end, '
             '__fields = {"units"}})')
    out = tab_then(repl, "ud.un", "")
    assert "128" in out
