"""Setup of the multi-process tests that need Jupyter: a kernelspec of the
freshly built ./ldist in a temporary JUPYTER_PATH (as tests/kernel does)."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))   # tests/procs.py
LDIST = os.environ.get("LDIST_BIN", os.path.join(ROOT, "ldist"))
KERNEL = "ldist-dist-test"

_prefix = tempfile.mkdtemp(prefix="ldist-dist-kernelspec-")
if os.access(LDIST, os.X_OK):
    subprocess.run([LDIST, "kernel", "install", "--prefix", _prefix, "--name", KERNEL, "--display-name", KERNEL],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.environ["JUPYTER_PATH"] = os.path.join(_prefix, "share", "jupyter") + (
    os.pathsep + os.environ["JUPYTER_PATH"] if os.environ.get("JUPYTER_PATH") else "")
os.environ.setdefault("JUPYTER_RUNTIME_DIR", tempfile.mkdtemp(prefix="ldist-dist-runtime-"))
