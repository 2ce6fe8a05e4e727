"""The kernel driven by the real jupyter_client: signing, malformed input,
interrupts in both modes, stdin, stop_on_error, silent, comms, shutdown."""
import json
import os
import subprocess
import time
import uuid

import pytest
import zmq

from conftest import KERNEL, KERNEL_MESSAGE, LDIST
from kutil import Kernel, streams, types


@pytest.fixture(scope="module")
def k():
    kern = Kernel()
    yield kern
    kern.close()


# ---- kernel_info ----------------------------------------------------------------------

def test_kernel_info(k):
    reply = k.shell_reply(k.kc.kernel_info())
    c = reply["content"]
    assert c["protocol_version"] == "5.3"
    assert c["implementation"] == "ldist"
    assert c["implementation_version"] == k.value("ldist.version").strip('"')
    li = c["language_info"]
    assert li["name"] == "lua"
    assert li["mimetype"] == "text/x-lua"
    assert li["file_extension"] == ".lua"
    assert li["pygments_lexer"] == "lua"
    assert li["version"].startswith("5.4.")
    assert k.value("_VERSION") == '"Lua %s"' % li["version"][:3]
    assert "ldist" in c["banner"]
    assert c["help_links"] and all("url" in h for h in c["help_links"])


def test_kernel_info_on_control_while_busy(k):
    msg_id = k.kc.execute("local t = os.time() + 2 while os.time() < t do end")
    time.sleep(0.3)
    msg = k.kc.session.msg("kernel_info_request", {})
    k.kc.control_channel.send(msg)
    reply = k.kc.control_channel.get_msg(timeout=1.0)    # answered while the cell runs
    assert reply["parent_header"]["msg_id"] == msg["header"]["msg_id"]
    assert reply["content"]["implementation"] == "ldist"
    assert k.shell_reply(msg_id)["content"]["status"] == "ok"
    k.iopub_until_idle(msg_id)


def test_heartbeat_answers_while_busy(k):
    cfg = k.km.get_connection_info()
    s = zmq.Context.instance().socket(zmq.REQ)
    s.linger = 0
    s.connect(f"tcp://{cfg['ip']}:{cfg['hb_port']}")
    msg_id = k.kc.execute("local t = os.time() + 2 while os.time() < t do end")
    time.sleep(0.2)
    s.send(b"ping")
    assert s.poll(1000), "no heartbeat while a cell runs"
    assert s.recv() == b"ping"
    s.close()
    k.shell_reply(msg_id)
    k.iopub_until_idle(msg_id)


# ---- status, execute ----------------------------------------------------------------

def test_busy_idle_around_every_request(k):
    for send in (lambda: k.kc.kernel_info(), lambda: k.kc.complete("pri", 3),
                 lambda: k.kc.inspect("print", 5), lambda: k.kc.is_complete("x = 1"),
                 lambda: k.kc.history(hist_access_type="tail", n=1)):
        msg_id = send()
        k.shell_reply(msg_id)
        msgs = k.iopub_until_idle(msg_id)
        states = [m["content"]["execution_state"] for m in msgs if m["msg_type"] == "status"]
        assert states == ["busy", "idle"], states


def test_execution_count_and_execute_input(k):
    r1, m1 = k.execute("a_count = 1")
    r2, m2 = k.execute("a_count = 2")
    assert r2["content"]["execution_count"] == r1["content"]["execution_count"] + 1
    inputs = [m for m in m2 if m["msg_type"] == "execute_input"]
    assert inputs and inputs[0]["content"]["code"] == "a_count = 2"
    assert inputs[0]["content"]["execution_count"] == r2["content"]["execution_count"]
    r3, _ = k.execute("a_count = 3", store_history=False)
    r4, _ = k.execute("a_count = 4")
    assert r4["content"]["execution_count"] == r2["content"]["execution_count"] + 1


def test_silent_produces_nothing(k):
    before = k.execute("1")[0]["content"]["execution_count"]
    reply, msgs = k.execute('print("loud"); io.stderr:write("x\\n"); display(1); 6*7', silent=True)
    assert reply["content"]["status"] == "ok"
    assert types(msgs) == ["status", "status"], types(msgs)
    reply, msgs = k.execute('error("quiet")', silent=True)
    assert reply["content"]["status"] == "error"
    assert types(msgs) == ["status", "status"], types(msgs)
    assert k.execute("1")[0]["content"]["execution_count"] == before + 1


def test_output_order_and_c_level_capture(k):
    code = ('print("a"); io.write("b", "\\n"); io.stderr:write("e\\n"); '
            'os.execute("echo from-a-child; echo child-err 1>&2"); print("c"); 42')
    reply, msgs = k.execute(code)
    assert reply["content"]["status"] == "ok"
    assert streams(msgs) == "a\nb\nfrom-a-child\nc\n"
    assert streams(msgs, "stderr") == "e\nchild-err\n"
    t = types(msgs)
    last_stream = max(i for i, x in enumerate(t) if x == "stream")
    assert last_stream < t.index("execute_result") < t.index("status", 1)


def test_last_expression_rules(k):
    assert k.value("y_last = 10\ny_last * 2") == "20"
    assert k.value("return 1, 2") == "1\t2"
    assert k.value("local t = {}\nfor i = 1, 3 do t[i] = i end\n#t") == "3"
    reply, msgs = k.execute("6*7;")           # a trailing ';' hides the value
    assert "execute_result" not in types(msgs)
    reply, msgs = k.execute('io.write("w\\n")')   # no "file (0x...)" after io.write
    assert "execute_result" not in types(msgs) and streams(msgs) == "w\n"


def test_error_message(k):
    reply, msgs = k.execute("local x = nil\nreturn x.field")
    c = reply["content"]
    assert c["status"] == "error" and c["ename"] == "RuntimeError"
    assert "attempt to index a nil value" in c["evalue"]
    errors = [m for m in msgs if m["msg_type"] == "error"]
    assert len(errors) == 1
    assert any("stack traceback" in line for line in errors[0]["content"]["traceback"])
    reply, _ = k.execute("x = = 1")
    assert reply["content"]["ename"] == "SyntaxError"
    assert k.alive()


def test_user_expressions(k):
    reply, _ = k.execute("ue = 3", user_expressions={"a": "ue * 2", "b": "nope("})
    ue = reply["content"]["user_expressions"]
    assert ue["a"]["status"] == "ok" and ue["a"]["data"]["text/plain"] == "6"
    assert ue["b"]["status"] == "error"


def test_display_update_and_clear(k):
    code = ('h = display(display.html("<i>one</i>"), {display_id = "d1"})\n'
            'h:update(display.html("<i>two</i>"))\n'
            'display({["text/plain"] = "three"}, {display_id = "d1", update = true, raw = true})\n'
            'clear_output({wait = true})')
    reply, msgs = k.execute(code)
    assert reply["content"]["status"] == "ok", reply["content"]
    d = [m for m in msgs if m["msg_type"] == "display_data"]
    u = [m for m in msgs if m["msg_type"] == "update_display_data"]
    c = [m for m in msgs if m["msg_type"] == "clear_output"]
    assert len(d) == 1 and d[0]["content"]["transient"]["display_id"] == "d1"
    assert d[0]["content"]["data"]["text/html"] == "<i>one</i>"
    assert [x["content"]["transient"]["display_id"] for x in u] == ["d1", "d1"]
    assert u[0]["content"]["data"]["text/html"] == "<i>two</i>"
    assert u[1]["content"]["data"] == {"text/plain": "three"}
    assert len(c) == 1 and c[0]["content"]["wait"] is True


def test_progress_bar_is_one_display(k):
    code = ('local b = ldist.progress.new{total = 50, title = "Epoch 1/1"}\n'
            'for i = 1, 50 do b:update(i, {loss = 1 / i}) end\n'
            'b:finish({loss = 0.02})')
    reply, msgs = k.execute(code)
    assert reply["content"]["status"] == "ok", reply["content"]
    d = [m for m in msgs if m["msg_type"] == "display_data"]
    u = [m for m in msgs if m["msg_type"] == "update_display_data"]
    assert len(d) == 1 and 1 <= len(u) <= 10, types(msgs)
    ids = {m["content"]["transient"]["display_id"] for m in d + u}
    assert len(ids) == 1
    assert "50/50" in u[-1]["content"]["data"]["text/plain"]
    assert "<progress" in u[-1]["content"]["data"]["text/html"]
    assert streams(msgs) == ""


def test_progress_bar_text_fits_80_columns_with_every_value(k):
    # issue 31: the notebook's bar is no wider than 80 columns; val_loss is not cut
    code = ('local b = ldist.progress.new{total = 50, title = "Epoch 1/1"}\n'
            'b:finish({loss = 0.5, accuracy = 0.8, val_loss = 0.4, val_accuracy = 0.9, '
            'sparse_top_k_categorical_accuracy = 0.95})')
    reply, msgs = k.execute(code)
    assert reply["content"]["status"] == "ok", reply["content"]
    shown = [m for m in msgs if m["msg_type"] in ("display_data", "update_display_data")]
    text = shown[-1]["content"]["data"]["text/plain"]
    assert max(len(line) for line in text.splitlines()) <= 80, text
    for value in ("val_loss: 0.4000", "val_accuracy: 0.9000", "sparse_top_k_categorical_accuracy: 0.9500"):
        assert value in text, text
    assert "<progress" in shown[-1]["content"]["data"]["text/html"]


def test_tensor_html_and_plot_svg(k):
    reply, msgs = k.execute("tensor.ones(2, 3)")
    data = [m for m in msgs if m["msg_type"] == "execute_result"][0]["content"]["data"]
    assert "<table" in data["text/html"] and "text/plain" in data
    reply, msgs = k.execute("plot({loss = {1.0, 0.5, 0.25}})")
    data = [m for m in msgs if m["msg_type"] == "execute_result"][0]["content"]["data"]
    assert data["image/svg+xml"].lstrip().startswith("<svg")


def test_invalid_utf8_output_is_repaired(k):
    reply, msgs = k.execute('print("bad \\xff byte"); "\\xfe"')
    assert reply["content"]["status"] == "ok"
    assert streams(msgs) == "bad \ufffd byte\n"


# ---- introspection ------------------------------------------------------------------

def test_complete_counts_code_points(k):
    code = 'local s = "héllo wörld"; string.up'
    reply = k.shell_reply(k.kc.complete(code, len(code)))
    c = reply["content"]
    assert c["matches"] == ["upper"]
    assert (c["cursor_start"], c["cursor_end"]) == (len(code) - 2, len(code))
    # cursor in the middle, after "é" characters
    code = "ééé = 1; tab"
    reply = k.shell_reply(k.kc.complete(code + "le.insert(t, 1)", len(code)))
    assert "table" in reply["content"]["matches"]
    assert reply["content"]["cursor_start"] == len(code) - 3


def test_complete_methods_and_globals(k):
    k.execute("obj_t = tensor.ones(2)")
    reply = k.shell_reply(k.kc.complete("obj_t:res", 9))
    assert "reshape" in reply["content"]["matches"]
    reply = k.shell_reply(k.kc.complete("ten", 3))
    assert "tensor" in reply["content"]["matches"]
    reply = k.shell_reply(k.kc.complete("whi", 3))
    assert "while" in reply["content"]["matches"]


def test_inspect(k):
    reply = k.shell_reply(k.kc.inspect("x = tensor.zeros(3)", 14))
    c = reply["content"]
    assert c["found"] is True and "zeros" in c["data"]["text/plain"]
    reply = k.shell_reply(k.kc.inspect("no_such_name_here", 5))
    assert reply["content"]["found"] is False


def test_pager_shortcuts(k):
    for code in ("?print", "print?", "??string.format"):
        reply, _ = k.execute(code)
        p = reply["content"]["payload"]
        assert len(p) == 1 and p[0]["source"] == "page", code
        assert p[0]["data"]["text/plain"], code


def test_is_complete_indent(k):
    reply = k.shell_reply(k.kc.is_complete("for i = 1, 3 do"))
    assert reply["content"] == {"status": "incomplete", "indent": "  "}
    reply = k.shell_reply(k.kc.is_complete('s = "abc\\\n'))
    assert reply["content"]["status"] == "incomplete"


def test_history_search_unique_and_output(k):
    k.execute('hist_mark = "h1"')
    k.execute('hist_mark = "h1"')
    k.execute("hist_mark")
    reply = k.shell_reply(k.kc.history(hist_access_type="search", pattern="hist_mark*",
                                       unique=True, output=False, raw=True))
    sources = [h[2] for h in reply["content"]["history"]]
    assert sources == ['hist_mark = "h1"', "hist_mark"]
    reply = k.shell_reply(k.kc.history(hist_access_type="tail", n=1, output=True, raw=True))
    assert reply["content"]["history"][0][2] == ["hist_mark", '"h1"']


# ---- stdin --------------------------------------------------------------------------

def _answer_inputs(k, msg_id, answers):
    prompts = []
    for a in answers:
        req = k.kc.get_stdin_msg(timeout=10)
        assert req["msg_type"] == "input_request"
        assert req["parent_header"]["msg_id"] == msg_id
        prompts.append(req["content"]["prompt"])
        k.kc.input(a)
    return prompts


def test_stdin_round_trip_all_formats(k):
    code = ('local n = io.read("n")\nlocal l = io.read("l")\nlocal L = io.read("L")\n'
            'local c = io.stdin:read(3)\nlocal a = io.read("a")\n'
            'print(math.type(n), n, "[" .. l .. "]", "[" .. L .. "]", c, "[" .. a .. "]")')
    msg_id = k.kc.execute(code, allow_stdin=True)
    _answer_inputs(k, msg_id, ["12 rest", "line two", "abcdef"])
    reply = k.shell_reply(msg_id)
    assert reply["content"]["status"] == "ok", reply["content"]
    out = streams(k.iopub_until_idle(msg_id))
    assert out == "integer\t12\t[ rest]\t[line two\n]\tabc\t[def\n]\n"


def test_stdin_lines_and_numbers(k):
    code = ('local s = 0\nfor a, b in io.lines(nil, "n", "n") do s = s + a + b; if s > 10 then break end end\n'
            'print(s, io.read("*n"))')
    msg_id = k.kc.execute(code, allow_stdin=True)
    _answer_inputs(k, msg_id, ["1 2", "3 4", "5 0", "0x10"])
    assert k.shell_reply(msg_id)["content"]["status"] == "ok"
    assert streams(k.iopub_until_idle(msg_id)) == "15\t16\n"


def test_io_read_refused_without_stdin(k):
    for code in ("io.read()", 'io.stdin:read("n")', "for l in io.lines() do end"):
        reply, msgs = k.execute(code, allow_stdin=False)
        c = reply["content"]
        assert c["status"] == "error", code
        assert "input is not available: the front end does not allow stdin" in c["evalue"]
    assert k.alive()


def test_io_read_from_a_file_still_works(k, tmp_path):
    p = tmp_path / "in.txt"
    p.write_text("first\nsecond\n")
    code = f'io.input("{p}")\nlocal a = io.read("l")\nio.input(io.stdin)\na'
    assert k.value(code) == '"first"'


# ---- stop_on_error --------------------------------------------------------------------

def test_stop_on_error_aborts_queued_cells(k):
    k.execute("ran2, ran3 = nil, nil")
    first = k.kc.execute('local t = os.clock() + 0.3 while os.clock() < t do end error("stop here")')
    second = k.kc.execute("ran2 = true")
    third = k.kc.execute("ran3 = true")
    assert k.shell_reply(first)["content"]["status"] == "error"
    assert k.shell_reply(second)["content"]["status"] == "aborted"
    assert k.shell_reply(third)["content"]["status"] == "aborted"
    for m in (first, second, third):
        k.iopub_until_idle(m)
    assert k.value("ran2") == "nil" and k.value("ran3") == "nil"
    # stop_on_error=False: the next cell runs
    first = k.kc.execute('local t = os.clock() + 0.3 while os.clock() < t do end error("go on")',
                         stop_on_error=False)
    second = k.kc.execute("ran2 = true")
    assert k.shell_reply(first)["content"]["status"] == "error"
    assert k.shell_reply(second)["content"]["status"] == "ok"
    for m in (first, second):
        k.iopub_until_idle(m)
    assert k.value("ran2") == "true"


# ---- comms ----------------------------------------------------------------------------

def _send_shell(k, msg_type, content):
    msg = k.kc.session.msg(msg_type, content)
    k.kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def test_comms(k):
    k.execute('ldist.comm.register_target("echo", function(c, msg)\n'
              '  c:send({opened = msg.content.data.hello})\n'
              '  c:on_msg(function(m) c:send({echo = m.content.data.x}) end)\n'
              '  c:on_close(function() closed_echo = true end)\nend)')
    cid = uuid.uuid4().hex
    mid = _send_shell(k, "comm_open", {"comm_id": cid, "target_name": "echo", "data": {"hello": 5}})
    msgs = k.iopub_until_idle(mid)
    sent = [m["content"] for m in msgs if m["msg_type"] == "comm_msg"]
    assert sent == [{"comm_id": cid, "data": {"opened": 5}}]
    reply = k.shell_reply(k.kc.comm_info())
    assert reply["content"]["comms"][cid] == {"target_name": "echo"}
    reply = k.shell_reply(k.kc.comm_info(target_name="other"))
    assert reply["content"]["comms"] == {}
    mid = _send_shell(k, "comm_msg", {"comm_id": cid, "data": {"x": [1, 2]}})
    sent = [m["content"]["data"] for m in k.iopub_until_idle(mid) if m["msg_type"] == "comm_msg"]
    assert sent == [{"echo": [1, 2]}]
    mid = _send_shell(k, "comm_close", {"comm_id": cid, "data": {}})
    k.iopub_until_idle(mid)
    assert k.value("closed_echo") == "true"
    assert cid not in k.shell_reply(k.kc.comm_info())["content"]["comms"]
    # an unknown target is closed back
    cid2 = uuid.uuid4().hex
    mid = _send_shell(k, "comm_open", {"comm_id": cid2, "target_name": "nobody", "data": {}})
    closes = [m["content"] for m in k.iopub_until_idle(mid) if m["msg_type"] == "comm_close"]
    assert closes and closes[0]["comm_id"] == cid2
    # a kernel-side comm
    reply, msgs = k.execute('kc_comm = ldist.comm.open("from_kernel", {a = 1})\nkc_comm:close()')
    assert [m["msg_type"] for m in msgs if m["msg_type"].startswith("comm_")] == ["comm_open", "comm_close"]


# ---- hostile input ----------------------------------------------------------------------

def _raw_execute(k, sock, code, key=None):
    s = k.session(key)
    msg = s.msg("execute_request", {"code": code, "silent": False, "store_history": False,
                                    "user_expressions": {}, "allow_stdin": False,
                                    "stop_on_error": True})
    s.send(sock, msg)
    return msg


def test_bad_signature_is_never_executed(k):
    k.execute("forged, genuine = nil, nil")
    sock = k.raw_shell()
    _raw_execute(k, sock, "forged = true", key=b"not-the-key")
    # right key, tampered content after signing
    s = k.session()
    parts = s.serialize(s.msg("execute_request", {"code": "forged = 3", "silent": False}))
    parts[-1] = json.dumps({"code": "forged = 4", "silent": False}).encode()
    sock.send_multipart(parts)
    # no signature at all
    parts = s.serialize(s.msg("execute_request", {"code": "forged = 5", "silent": False}))
    parts[1] = b""
    sock.send_multipart(parts)
    assert not sock.poll(1000), "a forged message got a reply"
    # the same socket with the right key is served: the test can tell
    _raw_execute(k, sock, "genuine = true")
    assert sock.poll(5000)
    sock.close()
    assert k.value("forged") == "nil"
    assert k.value("genuine") == "true"
    assert "bad message signature" in k.stderr_text()


def test_malformed_messages_do_not_kill_it(k):
    sock = k.raw_shell()
    s = k.session()
    good = s.serialize(s.msg("execute_request", {"code": "malformed_ok = 1"}))

    def signed(frames4):        # a valid signature over broken content
        return [b"<IDS|MSG>", s.sign(frames4)] + frames4

    sock.send_multipart([b"just one frame"])
    sock.send_multipart([b"<IDS|MSG>", b"sig"])
    sock.send_multipart(signed([b"{not json", b"{}", b"{}", b"{}"]))
    sock.send_multipart(signed([b"[]", b"{}", b"{}", b"{}"]))
    sock.send_multipart(signed([b'{"msg_id": "1"}', b"{}", b"{}", b"{}"]))
    sock.send_multipart(signed([json.dumps({"msg_id": "2", "msg_type": "execute_request",
                                            "session": "s", "username": "u", "date": "",
                                            "version": "5.3"}).encode(), b"{}", b"{}",
                                b'{"code": 5}']))
    sock.send_multipart(signed([json.dumps({"msg_id": "3", "msg_type": "no_such_request",
                                            "session": "s", "username": "u", "date": "",
                                            "version": "5.3"}).encode(), b"{}", b"{}", b"{}"]))
    sock.send_multipart(good[:3])      # cut short
    time.sleep(0.5)
    sock.close()
    assert k.alive()
    assert "not a JSON object" in k.stderr_text()
    assert "unknown type 'no_such_request'" in k.stderr_text()


# ---- interrupts ---------------------------------------------------------------------------

def _interrupt_loop(k, code="while true do end"):
    k.execute("kept = 42")
    msg_id = k.kc.execute(code)
    time.sleep(0.5)
    t0 = time.time()
    k.km.interrupt_kernel()
    reply = k.shell_reply(msg_id, timeout=5)
    took = time.time() - t0
    k.iopub_until_idle(msg_id)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "Interrupted", reply["content"]
    assert took < 3.0, took   # prompt (a loop that ignored it would run until the 5 s reply timeout)
    assert k.value("kept") == "42"


@pytest.mark.parametrize("name", [KERNEL, KERNEL_MESSAGE])
def test_interrupt_keeps_state(name):
    k = Kernel(name)
    try:
        _interrupt_loop(k)
        _interrupt_loop(k)                          # and again
        _interrupt_loop(k, "local t = {} while true do t[#t % 10 + 1] = {} end")
        # an interrupt while idle harms nothing
        k.km.interrupt_kernel()
        time.sleep(0.3)
        assert k.value("kept + 1") == "43"
        # an interrupt while waiting for input
        msg_id = k.kc.execute("io.read()", allow_stdin=True)
        assert k.kc.get_stdin_msg(timeout=10)["msg_type"] == "input_request"
        k.km.interrupt_kernel()
        reply = k.shell_reply(msg_id, timeout=5)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "Interrupted"
        k.iopub_until_idle(msg_id)
        assert k.alive()
    finally:
        k.close()


def test_interrupt_mode_in_kernelspec():
    from jupyter_client.kernelspec import KernelSpecManager
    ksm = KernelSpecManager()
    assert ksm.get_kernel_spec(KERNEL).interrupt_mode == "signal"
    assert ksm.get_kernel_spec(KERNEL_MESSAGE).interrupt_mode == "message"
    spec = ksm.get_kernel_spec(KERNEL)
    assert spec.argv[1:] == ["kernel", "-f", "{connection_file}"] and spec.language == "lua"


# ---- shutdown ----------------------------------------------------------------------------

@pytest.mark.parametrize("busy", [False, True])
def test_shutdown_replies_and_exits(busy):
    k = Kernel()
    try:
        if busy:
            k.kc.execute("while true do end")
            time.sleep(0.3)
        msg = k.kc.session.msg("shutdown_request", {"restart": False})
        k.kc.control_channel.send(msg)
        reply = k.kc.control_channel.get_msg(timeout=5)
        assert reply["msg_type"] == "shutdown_reply"
        assert reply["content"] == {"status": "ok", "restart": False}
        proc = k.km.provisioner.process
        t0 = time.time()
        proc.wait(timeout=5)
        assert time.time() - t0 < 4
        assert proc.returncode == 0
    finally:
        k.close()


def test_restart_keeps_working():
    k = Kernel()
    try:
        k.execute("gone = 1")
        k.km.restart_kernel(now=False)
        k.kc.wait_for_ready(timeout=20)
        assert k.value("gone") == "nil"
    finally:
        k.close()


def test_install_locations(tmp_path):
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([LDIST, "kernel", "install", "--user"], env=env, capture_output=True,
                         text=True, check=True).stdout
    path = tmp_path / "home" / ".local/share/jupyter/kernels/ldist/kernel.json"
    spec = json.loads(path.read_text())
    assert spec["argv"][0] == LDIST and spec["display_name"] == "ldist (Lua 5.4)"
    assert spec["interrupt_mode"] == "signal" and str(path.parent) in out
    bad = subprocess.run([LDIST, "kernel", "install", "--bogus"], capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown option" in bad.stderr


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_orphaned_kernel_exits(tmp_path):
    from jupyter_client.connect import write_connection_file
    cf, _ = write_connection_file(str(tmp_path / "kernel.json"), key=b"k")
    parent = subprocess.Popen(["bash", "-c", f'"{LDIST}" kernel -f "{cf}" 2>/dev/null & echo $!; sleep 60'],
                              stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    time.sleep(1.0)
    assert _running(pid)
    parent.kill()
    parent.wait()
    deadline = time.time() + 6
    while _running(pid) and time.time() < deadline:
        time.sleep(0.1)
    alive = _running(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive, "the kernel outlived its parent"
