"""The REPL in a real terminal: auto-print, ';', multi-line input, errors."""
import re

import pexpect

from conftest import PROMPT, PROMPT2, Repl, clean


def test_banner_names_version_lua_and_devices(tmp_path):
    r = Repl(tmp_path, args=()).start()
    try:
        assert re.search(r"^ldist 0\.1\.0 \(Lua 5\.4\.\d+\) devices: cpu:0", r.startup, re.M), r.startup
    finally:
        r.close()


def test_quiet_has_no_banner(repl):
    assert "ldist 0.1.0" not in repl.startup


def test_expression_prints_its_value(repl):
    assert repl.value("1 + 1") == "2"
    assert repl.value('"a" .. "b"') == '"ab"'
    assert repl.value("math.maxinteger // 2, 0.5") == "4611686018427387903\t0.5"


def test_statement_prints_nothing_and_keeps_globals(repl):
    assert repl.value("x = 41") == ""
    assert repl.value("x + 1") == "42"


def test_trailing_semicolon_suppresses_printing(repl):
    repl.run("y = 5")
    assert repl.value("y * 3;") == ""
    assert repl.value("y * 3") == "15"


def test_top_level_local_outlives_the_line(repl):
    repl.run("local z = 9")
    assert repl.value("z") == "9"


def test_tables_print_as_nested_literals(repl):
    out = repl.value('{1, 2, name = "x", sub = {a = true}}')
    assert out == '{1, 2, name = "x", sub = {a = true}}'


def test_cycles_print_as_cycle(repl):
    repl.run("c = {}; c.me = c")
    assert repl.value("c") == "{me = <cycle>}"


def test_for_loop_continues_on_secondary_prompt(repl):
    repl.p.send("for i = 1, 3 do\r")
    repl.p.expect(PROMPT2)
    out = repl.run("print(i * 10) end")
    assert re.findall(r"^\d+$", out, re.M) == ["10", "20", "30"]


def test_function_definition_over_three_lines(repl):
    repl.p.send("function f(a)\r")
    repl.p.expect(PROMPT2)
    repl.p.send("return a * 2\r")
    repl.p.expect(PROMPT2)
    repl.run("end")
    assert repl.value("f(21)") == "42"


def test_multiline_expression(repl):
    repl.p.send("{\r")
    repl.p.expect(PROMPT2)
    assert "{10, 20}" in repl.run("10, 20}")


def test_syntax_error_is_reported_at_once(repl):
    out = repl.run("x = = 1")
    assert "unexpected symbol near '='" in out
    # the primary prompt came back, not a continuation
    assert repl.value("1 + 2") == "3"


def test_runtime_error_then_prompt(repl):
    out = repl.run('error("boom")')
    assert "stdin:1: boom" in out
    assert repl.value("2 + 2") == "4"


def test_error_in_function_shows_short_traceback(repl):
    repl.run('function deep() error("inner failure") end')
    out = repl.run("deep()")
    assert "inner failure" in out
    assert "stack traceback" in out and "in function 'deep'" in out
    assert "[C]: in ?" not in out
    assert len(out.splitlines()) < 10


def test_error_in_tostring_does_not_kill_the_repl(repl):
    repl.run('bad = setmetatable({}, {__tostring = function() error("oops") end})')
    assert "<error in __tostring: stdin:1: oops>" in repl.value("bad")
    assert "<error in __tostring" in repl.value("{bad}")
    assert repl.value("3 * 3") == "9"


def test_error_object_that_is_a_table(repl):
    out = repl.run("error({code = 1})")
    assert "error object is a table value" in out
    assert repl.value("1") == "1"


def test_huge_table_prints_bounded(repl):
    repl.run("t = {} for i = 1, 200000 do t[i] = i end")
    out = repl.value("t")
    assert out.startswith("{") and "(199950 more)" in out
    assert len(out) < 1000
    repl.run('big = {} for i = 1, 20000 do big["k" .. i] = {i, {i, {i, {i}}}} end')
    out = repl.value("big")
    assert len(out) < 6000, len(out)
    assert "more)" in out and "{...}" in out
    assert repl.value("#t") == "200000"


def test_long_string_prints_bounded(repl):
    out = repl.value('("x"):rep(100000)')
    assert "(100000 bytes)" in out and len(out) < 6000


def test_ctrl_d_exits_with_status_zero(repl):
    repl.p.sendeof()
    repl.p.expect(pexpect.EOF)
    repl.p.close()
    assert repl.p.exitstatus == 0
