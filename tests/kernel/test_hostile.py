"""What a stranger or a careless client can do to the kernel's sockets
(issue 15): replay a captured message, read its replies slowly, or open a
huge frame it never finishes."""
import os
import sys
import socket
import time

import pytest
import zmq
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hostile import rss_mb, zmtp_partial_frame  # noqa: E402

from kutil import Kernel


@pytest.fixture(scope="module")
def k():
    kern = Kernel()
    yield kern
    kern.close()







def test_a_replayed_signed_message_is_refused(k):
    k.execute("replayed = 0")
    sock = k.raw_shell()
    s = k.session()
    msg = s.msg("execute_request", {"code": "replayed = replayed + 1", "silent": False, "store_history": False,
                                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    frames = s.serialize(msg)
    sock.send_multipart(frames)
    assert sock.poll(5000), "no reply to the first copy"
    sock.recv_multipart()
    sock.send_multipart(frames)         # the same signed message, captured and sent again
    assert not sock.poll(1500), "a replayed message got a reply"
    sock.close()
    assert k.value("replayed") == "1"
    assert "a replay" in k.stderr_text()


def test_every_reply_reaches_a_client_that_reads_slowly(k):
    n = 5000
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 100)
    sock.setsockopt(zmq.RCVBUF, 4096)   # little room on this side: the kernel's queue takes the rest
    cfg = k.km.get_connection_info()
    sock.connect(f"{cfg['transport']}://{cfg['ip']}:{cfg['shell_port']}")
    s = k.session()
    ids = set()
    for i in range(n):
        msg = s.msg("execute_request", {"code": "x_slow = 1", "silent": True, "store_history": False,
                                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})
        ids.add(msg["header"]["msg_id"])
        s.send(sock, msg)
    time.sleep(6)                       # the client is busy: the kernel's queue fills
    got, deadline = 0, time.time() + 45
    while got < n and time.time() < deadline:
        if not sock.poll(10000):        # a loaded machine can pause the kernel; the total is what counts
            break
        _, reply = s.recv(sock)
        assert reply["parent_header"]["msg_id"] in ids
        got += 1
        if got % 100 == 0:
            time.sleep(0.01)            # and reads slowly
    sock.close()
    # on a failure, what the kernel logged (a reply it gave up on says so) and when the replies stopped
    assert got == n, (f"{n - got} of {n} execute_reply messages never arrived "
                      f"({time.time() - deadline + 45:.1f} s after reading began); the kernel's log ends: "
                      + k.stderr_text()[-1500:])
    k.drain()                           # iopub dropped some of its flood, as PUB does
    assert k.alive()


@pytest.mark.parametrize("port_name", ["shell_port", "control_port", "stdin_port"])
def test_a_huge_partial_frame_does_not_pin_memory(k, port_name):
    pid = k.pid
    before = rss_mb(pid)
    port = k.km.get_connection_info()[port_name]
    sent, s = zmtp_partial_frame(port, 500 << 20, 400 << 20)
    time.sleep(0.5)
    grown = rss_mb(pid) - before
    s.close()
    assert grown < 100, f"the kernel grew by {grown:.0f} MB holding a partial frame ({sent >> 20} MB sent)"
    assert k.alive()


def test_dropped_messages_are_logged_at_a_bounded_rate(k):
    before = k.stderr_text().count("dropped a")
    sock = k.raw_shell()
    s = k.session(key=b"not-the-key")
    for _ in range(5000):
        s.send(sock, s.msg("kernel_info_request", {}))
    time.sleep(2)
    s.send(sock, s.msg("kernel_info_request", {}))     # a second later: its line carries the count
    time.sleep(0.5)
    sock.close()
    assert k.alive()
    lines = k.stderr_text().count("dropped a") - before
    assert 0 < lines < 200, f"{lines} log lines for 5000 forged messages"
    assert "were not logged" in k.stderr_text()


def test_a_large_legitimate_message_still_passes(k):
    # 40 MB: four times what a notebook server's websocket passes by default
    n = 40 << 20
    reply, _ = k.execute('big_cell = "' + "x" * n + '"', timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert k.value("#big_cell") == str(n)
    k.execute("big_cell = nil")
