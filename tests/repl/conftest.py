"""Helpers for driving the real `ldist` binary in a pseudo-terminal (pexpect).

LDIST_BIN overrides the binary (default: ./ldist at the repository root).
Every REPL gets its own HOME and history file under pytest's tmp_path.
"""
import os
import re
import subprocess
from pathlib import Path

import pexpect
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("LDIST_BIN", str(ROOT / "ldist"))

# readline may wrap the prompt in bracketed-paste switches (ESC[?2004h)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")
PROMPT = r"(?:^|\n)(?:\x1b\[[0-9;?]*[A-Za-z]|\r)*> "
PROMPT2 = r"(?:^|\n)(?:\x1b\[[0-9;?]*[A-Za-z]|\r)*>> "


def clean(s):
    """Text as a person sees it: no escape sequences, no carriage returns."""
    return ANSI.sub("", s).replace("\r", "")


class Repl:
    def __init__(self, tmp_path, args=("-q",), cwd=None, history=None, timeout=10):
        self.history = str(history or (tmp_path / "history"))
        env = dict(os.environ)
        env.update(HOME=str(tmp_path), LDIST_HISTORY=self.history, TERM="xterm",
                   LANG="C.UTF-8", LC_ALL="C.UTF-8")
        env.pop("NO_COLOR", None)
        self.p = pexpect.spawn(BIN, list(args), env=env, cwd=str(cwd or ROOT), encoding="utf-8",
                               timeout=timeout, dimensions=(40, 120))
        self.startup = ""

    def wait_prompt(self):
        """Wait for the primary prompt; returns (cleaned) text printed before it."""
        self.p.expect(PROMPT)
        return clean(self.p.before)

    def start(self):
        self.startup = self.wait_prompt()
        return self

    def run(self, line):
        """Type a line and Enter; return what was printed up to the next prompt
        (the echoed input included)."""
        self.p.send(line + "\r")
        return self.wait_prompt()

    def value(self, line):
        """Output of `line`, without the echo of the line itself."""
        out = self.run(line)
        echo, _, rest = out.partition("\n")
        assert line.split("\t")[0] in echo, f"no echo of {line!r} in {out!r}"
        return rest.strip("\n")

    def close(self):
        if self.p.isalive():
            self.p.sendeof()
            try:
                self.p.expect(pexpect.EOF, timeout=5)
            except pexpect.TIMEOUT:
                self.p.terminate(force=True)
        self.p.close()


@pytest.fixture
def repl(tmp_path):
    r = Repl(tmp_path).start()
    yield r
    r.close()


@pytest.fixture
def make_repl(tmp_path):
    made = []

    def make(**kw):
        r = Repl(tmp_path, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def run_ldist(*args, input=None, cwd=None, timeout=30, env_extra=None):
    """Run ldist without a terminal; returns CompletedProcess (text)."""
    env = dict(os.environ, LDIST_HISTORY="", **(env_extra or {}))
    return subprocess.run([BIN, *args], input=input, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL if input is None else None,
                          cwd=str(cwd or ROOT), timeout=timeout, env=env)
