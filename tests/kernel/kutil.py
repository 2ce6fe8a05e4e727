"""Helpers for the kernel tests: start a kernel, run a cell and collect what
it published, and talk to the sockets raw (to forge and break messages)."""
import os
import queue
import tempfile
import time

import zmq
from jupyter_client.manager import KernelManager
from jupyter_client.session import Session

from conftest import KERNEL

TIMEOUT = 20


class Kernel:
    """A started kernel with a blocking client; the kernel's own stderr goes
    to a file (self.stderr_text()) so the tests can read what it logged."""

    def __init__(self, name=KERNEL):
        self.log = tempfile.NamedTemporaryFile(prefix="ldist-kernel-", suffix=".log", delete=False)
        self.km = KernelManager(kernel_name=name)
        self.km.start_kernel(stderr=self.log)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=TIMEOUT)
        self.drain()

    def stderr_text(self):
        with open(self.log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def drain(self):
        self._stash = []
        for ch in (self.kc.shell_channel, self.kc.iopub_channel, self.kc.stdin_channel):
            while True:
                try:
                    ch.get_msg(timeout=0.05)
                except queue.Empty:
                    break

    def close(self):
        try:
            self.kc.stop_channels()
        finally:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=True)
            os.unlink(self.log.name)

    # ---- running cells ----------------------------------------------------------

    def iopub_until_idle(self, msg_id, timeout=TIMEOUT):
        """Every iopub message whose parent is msg_id, up to its idle status.
        Messages of other parents are kept for a later call (cells that run
        back to back interleave their status messages)."""
        out, deadline = [], time.time() + timeout
        stash = getattr(self, "_stash", [])
        self._stash = []
        pending = iter(stash)
        while True:
            msg = next(pending, None)
            if msg is None:
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError(f"no idle for {msg_id}; got {[m['msg_type'] for m in out]}")
                try:
                    msg = self.kc.get_iopub_msg(timeout=left)
                except queue.Empty:
                    continue
            if msg["parent_header"].get("msg_id") != msg_id:
                self._stash.append(msg)
                continue
            out.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                self._stash.extend(pending)
                return out

    def shell_reply(self, msg_id, timeout=TIMEOUT):
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"no reply to {msg_id}")
            msg = self.kc.get_shell_msg(timeout=left)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def execute(self, code, timeout=TIMEOUT, **kw):
        """(reply, iopub messages) of one cell."""
        msg_id = self.kc.execute(code, **kw)
        reply = self.shell_reply(msg_id, timeout)
        return reply, self.iopub_until_idle(msg_id, timeout)

    def value(self, expr):
        """The text/plain of a Lua expression's value."""
        reply, msgs = self.execute(expr)
        assert reply["content"]["status"] == "ok", reply["content"]
        results = [m for m in msgs if m["msg_type"] == "execute_result"]
        assert results, f"no execute_result for {expr!r}: {[m['msg_type'] for m in msgs]}"
        return results[-1]["content"]["data"]["text/plain"]

    @property
    def pid(self):
        """The kernel process's pid (its memory is read from /proc by the hostile tests)."""
        return self.km.provisioner.process.pid

    def alive(self):
        """The kernel answers kernel_info and runs code."""
        msg_id = self.kc.kernel_info()
        reply = self.shell_reply(msg_id, 10)
        return reply["content"]["status"] == "ok" and self.value("1 + 1") == "2"

    # ---- raw sockets ------------------------------------------------------------

    def raw_shell(self):
        """A DEALER socket of our own on the shell port."""
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        cfg = self.km.get_connection_info()
        s.connect(f"{cfg['transport']}://{cfg['ip']}:{cfg['shell_port']}")
        return s

    def session(self, key=None):
        """A Session signing with the kernel's key, or with `key`."""
        k = self.km.session.key if key is None else key
        return Session(key=k, signature_scheme="hmac-sha256", username="test")


def streams(msgs, name="stdout"):
    return "".join(m["content"]["text"] for m in msgs
                   if m["msg_type"] == "stream" and m["content"]["name"] == name)


def types(msgs):
    return [m["msg_type"] for m in msgs]
