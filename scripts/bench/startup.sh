#!/usr/bin/env bash
# scripts/bench/startup.sh - start-up time of ldist against lua5.4 and python3,
# started the same way (issue 3: under 20 ms to the first prompt, and within
# 2x of lua5.4):
#   run      `X -e ''` (python3 -c ''): start, run nothing, exit  (hyperfine when present)
#   prompt   X -q in a pseudo-terminal until its prompt shows      (median of N)
#            (ldist's REPL shows it before its Lua prelude loads, then loads
#            the prelude before it reads a key: `run` includes the prelude)
# and ldist's prompt again without -q: its banner lists the devices (issue 3's
# row is the -q one, as it has always been measured).
# Each gets an empty HOME, so no history file or rc file adds to the times.
#   LDIST=path/to/ldist  STARTUP_RUNS=N
set -u
cd "$(dirname "$0")/../.." || exit 1
ldist=${LDIST:-./ldist}
runs=${STARTUP_RUNS:-40}
[ -x "$ldist" ] || { echo "startup: $ldist is not built (make ldist)"; exit 1; }
home=$(mktemp -d); trap 'rm -rf "$home"' EXIT
export HOME=$home LDIST_HISTORY=$home/.ldist_history PYTHONSTARTUP=

python3 - "$ldist" "$runs" "$home" <<'EOF'
import json, os, pty, select, shutil, statistics, subprocess, sys, time

ldist, runs, home = sys.argv[1], int(sys.argv[2]), sys.argv[3]
progs = [  # name, "run nothing" command, interactive command, its prompt
    ("ldist", [ldist, "-e", ""], [ldist, "-q"], b"> "),
    ("lua5.4", ["lua5.4", "-e", ""], ["lua5.4"], b"> "),
    ("python3", ["python3", "-c", ""], ["python3", "-q"], b">>> "),
]
progs = [p for p in progs if shutil.which(p[1][0]) or os.path.exists(p[1][0])]

def run_times(cmd):
    """Median seconds of `cmd` from start to exit."""
    if shutil.which("hyperfine"):
        out = os.path.join(home, "hf.json")
        subprocess.run(["hyperfine", "-N", "--warmup", "5", "--runs", str(runs), "--export-json", out,
                        " ".join(a if a else "''" for a in cmd)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return json.load(open(out))["results"][0]["median"]
    ts = []
    for _ in range(runs + 5):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[5:])

def prompt_time(cmd, prompt):
    """Seconds from fork to the prompt appearing on a pseudo-terminal."""
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(cmd[0], cmd)
    buf, t = b"", None
    deadline = t0 + 10
    while time.perf_counter() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if not r:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        buf += chunk
        if buf.rstrip(b" ").endswith(prompt.rstrip()) and buf.endswith(b" "):
            t = time.perf_counter() - t0
            break
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(fd)
    if t is None:
        raise RuntimeError(f"no prompt from {cmd}: {buf[-200:]!r}")
    return t

res = {}
for name, run_cmd, repl_cmd, prompt in progs:
    r = run_times(run_cmd)
    for _ in range(3):
        prompt_time(repl_cmd, prompt)       # warm the page cache
    p = statistics.median(prompt_time(repl_cmd, prompt) for _ in range(runs))
    res[name] = (r, p)

print(f"== start-up, median of {runs} ({'hyperfine' if shutil.which('hyperfine') else 'a timing loop'} for 'run')")
print(f"{'':10s} {'run (ms)':>10s} {'prompt (ms)':>12s}")
for name, (r, p) in res.items():
    print(f"{name:10s} {r * 1e3:10.2f} {p * 1e3:12.2f}")
if "ldist" in res:
    lr, lp = res["ldist"]
    for ref in ("lua5.4", "python3"):
        if ref in res:
            rr, rp = res[ref]
            print(f"ldist / {ref}: run {lr / rr:.2f}x, prompt {lp / rp:.2f}x")
    for _ in range(3):
        prompt_time([ldist], b"> ")
    bp = statistics.median(prompt_time([ldist], b"> ") for _ in range(runs))
    print(f"ldist with its banner (the devices listed): prompt {bp * 1e3:.2f} ms"
          + (f", {bp / res['lua5.4'][1]:.2f}x lua5.4" if "lua5.4" in res else ""))
    ok20 = lp < 0.020
    ok2x = "lua5.4" in res and lp <= 2 * res["lua5.4"][1]
    print(f"goal: prompt under 20 ms: {'yes' if ok20 else 'NO'}; within 2x of lua5.4: {'yes' if ok2x else 'NO'}")
EOF
