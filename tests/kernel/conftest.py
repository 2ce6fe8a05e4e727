"""Shared setup of the kernel tests: the kernelspecs of the freshly built
./ldist, installed into a temporary JUPYTER_PATH before any test imports a
kernel manager (jupyter_kernel_test starts its kernel in setUpClass).

Two kernelspecs: KERNEL (interrupt_mode signal, the default) and
KERNEL_MESSAGE (interrupt_mode message: interrupt_request on control)."""
import os
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LDIST = os.path.abspath(os.environ.get("LDIST_BIN", os.path.join(ROOT, "ldist")))  # LDIST_BIN: another build
KERNEL = "ldist-test"
KERNEL_MESSAGE = "ldist-test-message"

_prefix = tempfile.mkdtemp(prefix="ldist-kernelspec-")


def _install(name, *extra):
    if not os.access(LDIST, os.X_OK):
        return  # every test then fails with "No such kernel", which says enough
    subprocess.run([LDIST, "kernel", "install", "--prefix", _prefix, "--name", name,
                    "--display-name", name, *extra], check=True, stdout=subprocess.DEVNULL)


_install(KERNEL)
_install(KERNEL_MESSAGE, "--interrupt-mode", "message")
os.environ["JUPYTER_PATH"] = os.path.join(_prefix, "share", "jupyter") + (
    os.pathsep + os.environ["JUPYTER_PATH"] if os.environ.get("JUPYTER_PATH") else "")
# No stray user config or runtime files from this machine's Jupyter.
os.environ.setdefault("JUPYTER_RUNTIME_DIR", tempfile.mkdtemp(prefix="ldist-runtime-"))
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))   # tests/procs.py
