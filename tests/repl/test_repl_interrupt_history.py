"""Ctrl-C and history in the real REPL."""
import time

import pexpect

from conftest import PROMPT, PROMPT2, Repl, clean


def test_ctrl_c_interrupts_a_loop_and_keeps_variables(repl):
    repl.run("kept = 123")
    repl.p.send("while true do end\r")
    time.sleep(0.5)
    repl.p.sendintr()
    out = repl.wait_prompt()
    assert "interrupted" in out
    assert repl.value("kept") == "123"


def test_ctrl_c_interrupts_a_loop_inside_a_function(repl):
    repl.run("counter = 0")
    repl.run("function spin() while true do counter = counter + 1 end end")
    repl.p.send("spin()\r")
    time.sleep(0.5)
    repl.p.sendintr()
    assert "interrupted" in repl.wait_prompt()
    assert int(repl.value("counter")) > 0
    # and a second interrupt works as well as the first
    repl.p.send("spin()\r")
    time.sleep(0.3)
    repl.p.sendintr()
    assert "interrupted" in repl.wait_prompt()
    assert repl.value("1 + 1") == "2"


def test_ctrl_c_at_the_prompt_clears_the_line(repl):
    repl.p.send("this is not lua")
    time.sleep(0.2)
    repl.p.sendintr()
    repl.wait_prompt()
    assert repl.value("2 * 21") == "42"


def test_ctrl_c_cancels_an_unfinished_chunk(repl):
    repl.p.send("for i = 1, 3 do\r")
    repl.p.expect(PROMPT2)
    repl.p.sendintr()
    repl.wait_prompt()
    assert repl.value("5 + 5") == "10"


def test_history_survives_a_restart(make_repl, tmp_path):
    hist = tmp_path / "hist"
    r1 = make_repl(history=hist).start()
    r1.run("remembered = 31337")
    r1.close()
    assert "remembered = 31337" in hist.read_text()
    r2 = make_repl(history=hist).start()
    r2.p.send("\x1b[A")            # Up: the last line of the previous session
    time.sleep(0.2)
    r2.run("")
    assert r2.value("remembered") == "31337"


def test_multiline_chunk_is_one_history_entry(make_repl, tmp_path):
    hist = tmp_path / "hist"
    r1 = make_repl(history=hist).start()
    r1.p.send("for i = 1, 2 do\r")
    r1.p.expect(PROMPT2)
    r1.run("acc = (acc or 0) + i end")
    r1.close()
    r2 = make_repl(history=hist).start()
    r2.p.send("\x1b[A")
    time.sleep(0.2)
    r2.run("")
    assert r2.value("acc") == "3"


def test_history_file_is_size_limited(make_repl, tmp_path):
    hist = tmp_path / "hist"
    hist.write_text("".join(f"old_line_{i} = {i}\n" for i in range(5000)))
    r = make_repl(history=hist).start()
    r.run("newest = 1")
    r.close()
    entries = [l for l in hist.read_text().splitlines() if not l.startswith("#")]
    assert len(entries) <= 1000
    assert entries[-1] == "newest = 1"


def test_ctrl_r_searches_the_history(make_repl, tmp_path):
    hist = tmp_path / "hist"
    r = make_repl(history=hist).start()
    r.run("needle_value = 77")
    r.run("other = 1")
    r.p.send("\x12")              # Ctrl-R
    r.p.send("needle_v")
    time.sleep(0.3)
    r.p.send("\r")
    r.wait_prompt()
    assert r.value("needle_value") == "77"
