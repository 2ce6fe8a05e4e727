"""What connections that never authenticate may hold in the kernel, in total
(issue 27, item 6): 16 strangers with 60 MB partial frames each took the
kernel to 970 MB (now 64 MiB in all, at most 64 such connections); the heartbeat and iopub ports took frames of any size; a
70 MB signed request was dropped and its client waited for ever."""
import os
import sys
import time

import pytest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hostile import closed_by_peer, rss_mb, zmtp_partial_frame  # noqa: E402

from kutil import Kernel


@pytest.fixture(scope="module")
def k():
    kern = Kernel()
    yield kern
    kern.close()




def test_many_partial_frames_are_bounded_in_total(k):
    pid = k.pid
    before = rss_mb(pid)
    port = k.km.get_connection_info()["shell_port"]
    socks = []
    for _ in range(16):
        _, s = zmtp_partial_frame(port, 100 << 20, 60 << 20)
        socks.append(s)
    time.sleep(0.5)
    grown = rss_mb(pid) - before
    closed = sum(closed_by_peer(s, 0.5) for s in socks)
    for s in socks:
        s.close()
    assert grown < 150, f"the kernel grew by {grown:.0f} MB for 16 strangers' partial frames"
    assert closed >= 14, f"only {closed} of 16 strangers were closed"
    assert "has not authenticated" in k.stderr_text()
    assert k.alive()


def test_idle_strangers_beyond_the_cap_are_closed(k):
    port = k.km.get_connection_info()["control_port"]
    socks = []
    for _ in range(80):
        _, s = zmtp_partial_frame(port, 10, 0)      # a greeting and a frame header, nothing more
        socks.append(s)
    time.sleep(0.5)
    closed = sum(closed_by_peer(s, 0.05) for s in socks)
    for s in socks:
        s.close()
    assert closed >= 16, f"{80 - closed} idle strangers are still connected (at most 64 may be)"
    assert k.alive()


@pytest.mark.parametrize("port_name", ["hb_port", "iopub_port"])
def test_heartbeat_and_iopub_take_small_frames_only(k, port_name):
    pid = k.pid
    before = rss_mb(pid)
    port = k.km.get_connection_info()[port_name]
    sent, s = zmtp_partial_frame(port, 200 << 20, 150 << 20)
    grown = rss_mb(pid) - before
    s.close()
    assert grown < 50, f"the kernel grew by {grown:.0f} MB on {port_name} ({sent >> 20} MB sent)"
    assert k.alive()


def test_a_request_over_the_limit_gets_an_error_reply(k):
    n = 70 << 20
    reply, _ = k.execute('too_big = "' + "x" * n + '"', timeout=60)
    c = reply["content"]
    assert c["status"] == "error", c
    assert c["ename"] == "MessageTooLarge" and "64 MiB" in c["evalue"], c
    assert k.value("too_big == nil") == "true"
    assert k.alive()
