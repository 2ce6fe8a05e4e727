"""Process checks shared by the Python tests (tests/kernel, tests/dist): is a
process still running, and wait until a set of them is gone."""
import os
import time


def alive(pid):
    """True while pid runs (a zombie not yet reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout=10):
    """Wait up to timeout seconds for every pid to end; the ones still running."""
    deadline = time.time() + timeout
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]
