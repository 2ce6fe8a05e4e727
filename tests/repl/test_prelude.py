"""help, ldist.repr, ldist.complete, progress bars and plot, through the binary."""
import re
import xml.dom.minidom

from conftest import Repl, clean, run_ldist


def lua(code):
    r = run_ldist("-e", code)
    assert r.returncode == 0, r.stderr
    return r.stdout


# ---- repr -------------------------------------------------------------------

def test_repr_quotes_and_escapes_strings():
    assert lua(r'print(ldist.repr("a\n\"b\"\0"))') == "'a\\n\"b\"\\000'\n"
    assert lua(r'print(ldist.repr("tab\there"))') == '"tab\\there"\n'
    assert lua('print(ldist.repr("héllo"))') == '"héllo"\n'
    assert lua(r'print(ldist.repr("\255"))') == '"\\xFF"\n'


def test_repr_numbers_booleans_nil():
    assert lua("print(ldist.repr(3), ldist.repr(3.0), ldist.repr(true), ldist.repr(nil))") == "3\t3.0\ttrue\tnil\n"


def test_repr_orders_keys():
    out = lua('print(ldist.repr({b = 1, a = 2, k10 = 3, k2 = 4, [5] = 5, ["x y"] = 6, [true] = 7, "first"}))')
    assert out == '{"first", a = 2, b = 1, k2 = 4, k10 = 3, ["x y"] = 6, [5] = 5, [true] = 7}\n'


def test_repr_depth_is_bounded():
    assert lua("print(ldist.repr({{{{{1}}}}}))") == "{{{{...}}}}\n"


def test_repr_long_tables_go_multiline():
    out = lua('local t = {} for i = 1, 30 do t["key" .. i] = i end print(ldist.repr(t))')
    lines = out.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and all(len(l) <= 80 for l in lines)


def test_repr_uses_tostring_and_name():
    out = lua('print(ldist.repr(setmetatable({}, {__tostring = function() return "<obj>" end})))')
    assert out == "<obj>\n"
    out = lua('print(ldist.repr(setmetatable({a = 1}, {__name = "Point"})))')
    assert out == "Point{a = 1}\n"


def test_repr_tostring_returning_non_string():
    out = lua('print(ldist.repr(setmetatable({}, {__tostring = function() return {} end})))')
    assert out.startswith("<error in __tostring:")


# ---- help -------------------------------------------------------------------

def test_help_lists_modules():
    out = lua("help()")
    assert "Modules:" in out and "progress" in out and "help(x)" in out


def test_help_on_a_function_and_by_name():
    out = lua("help(plot)")
    assert out.startswith("plot(data [, opts]) -> Plot")
    assert lua('help("plot")') == out


def test_help_on_lua_standard_functions():
    out = lua("help(string.format)")
    assert "string.format" in out and "lua.org/manual/5.4" in out


def test_help_on_user_function_reads_comments(tmp_path):
    s = tmp_path / "f.lua"
    s.write_text("-- Adds two numbers.\n-- Really.\nfunction add(a, b) return a + b end\nhelp(add)\n")
    r = run_ldist(str(s))
    assert "add(a, b)" in r.stdout and "Adds two numbers.\nReally." in r.stdout


def test_help_unknown_name():
    assert "No documentation for \"no.such.thing\"" in lua('help("no.such.thing")')


def test_doc_text_returns_text_or_nil():
    assert lua('print(type(ldist.doc_text(plot)), ldist.doc_text(12))') == "string\tnil\n"


def test_help_on_a_class_by_metatable_name():
    out = lua('local o = setmetatable({}, {__name = "ldist.Plot"}) help(o)')
    assert out.startswith("Plot - a chart")


# ---- complete (the function the kernel shares) --------------------------------

def test_complete_api():
    out = lua('local m, s, k = ldist.complete("x = string.fo") print(table.concat(m, ","), s, k)')
    assert out == "string.format\t5\texpr\n"
    out = lua('local m, s, k = ldist.complete("print(\\"hi\\") require(\\"strin") print(table.concat(m, ","), s, k)')
    assert out == "string\t22\tmodule\n"
    out = lua('local m = ldist.complete("--[[ x ]] (\\"a\\"):up") print(#m)')
    assert out == "0\n"


# ---- progress -----------------------------------------------------------------

PROGRESS = """
local bar = ldist.progress.new{total = 20, title = "Epoch 1/2"}
for i = 1, 20 do bar:update(i, {loss = 1 / i, accuracy = i / 20}) end
bar:finish{loss = 0.5, accuracy = 0.75}
"""


def test_progress_plain_lines_when_not_a_terminal():
    out = lua(PROGRESS)
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert "\r" not in out
    # in 80 columns: the bar narrows (or the spaces do) before any number goes
    assert len(lines[0]) <= 80, lines[0]
    assert re.match(r"Epoch 1/2 +20/20 +\[=+\] +\d+\.\ds +[\d.]+ steps/s +loss: 0\.5000 +accuracy: 0\.7500$", lines[0]), lines[0]


def test_progress_redraws_in_place_on_a_terminal(tmp_path):
    s = tmp_path / "p.lua"
    s.write_text("local t0 = os.clock()\n" + PROGRESS.replace(
        "bar:update(i,", "local t = ldist.walltime() while ldist.walltime() - t < 0.02 do end bar:update(i,"))
    r = Repl(tmp_path, args=(str(s),))
    r.p.expect(r"accuracy: 0\.7500")
    raw = r.p.before + r.p.after
    r.p.expect("\n")
    assert raw.count("\r") >= 3                      # drawn several times, in place
    assert "█" in raw and "\x1b[K" in raw
    r.close()


def test_progress_backend_is_replaceable():
    out = lua("""
local seen = {}
ldist.progress.backend = {
  update = function(bar, st) seen[#seen + 1] = "u" .. st.done end,
  finish = function(bar, st) seen[#seen + 1] = "f" .. ldist.progress.format(st):match("%d+/%d+") end,
}
local b = ldist.progress.new{total = 3}
b:update(1) b:update(2) b:update(3) b:finish()
print(table.concat(seen, " "))
""")
    assert out == "u1 u2 u3 f3/3\n"


# ---- plot --------------------------------------------------------------------------

HISTORY = "{loss = {2.3, 1.2, 0.8, 0.6, 0.5}, accuracy = {0.3, 0.6, 0.75, 0.8, 0.83}}"


def test_plot_in_a_script_draws_braille():
    out = lua(f"plot({HISTORY}, {{title = 'Training', width = 40, height = 8}})")
    assert "Training" in out and "epoch" in out
    assert re.search("[\u2801-\u28ff]", out)
    assert "loss" in out and "accuracy" in out
    assert "┤" in out and "└" in out
    assert max(len(l) for l in out.splitlines()) < 60


def test_plot_saves_svg(tmp_path):
    f = tmp_path / "h.svg"
    lua(f"plot({HISTORY}, {{save = '{f}', show = false}})")
    doc = xml.dom.minidom.parse(str(f))
    assert doc.documentElement.tagName == "svg"
    assert len(doc.getElementsByTagName("polyline")) == 2


def test_plot_object_methods_and_mimebundle():
    out = lua("""
local p = plot({1, 4, 9}, {show = false})
local mb = getmetatable(p).__mimebundle(p)
print(p:svg():match("^<svg") ~= nil, mb["image/svg+xml"] == p:svg(), mb["text/plain"] == p:text(false))
""")
    assert out == "true\ttrue\ttrue\n"


def test_plot_in_the_repl_shows_through_autoprint(repl):
    out = repl.run("plot({1, 2, 3, 2, 1}, {width = 20, height = 4})")
    assert re.search("[\u2801-\u28ff]", out)
    assert repl.value("p = plot({1, 2, 3})") == ""      # no drawing for a statement


def test_plot_bad_argument():
    r = run_ldist("-e", "plot(42)")
    assert r.returncode == 1 and "bad argument #1 to 'plot'" in r.stderr
