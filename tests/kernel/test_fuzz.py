"""A short libFuzzer run of the kernel's wire parser under ASan/LSan/UBSan
(tests/kernel/fuzz.sh; run it longer by hand: tests/kernel/fuzz.sh 600)."""
import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(__file__)


def test_fuzz_wire_parser():
    if not shutil.which(os.environ.get("FUZZ_CC", "clang")):
        pytest.skip("clang (libFuzzer) is not installed")
    secs = os.environ.get("LDIST_FUZZ_SECONDS", "10")
    r = subprocess.run(["bash", os.path.join(HERE, "fuzz.sh"), secs], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "ok - fuzz_wire" in r.stdout
