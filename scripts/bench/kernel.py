#!/usr/bin/env python3
"""Kernel benchmark: start-to-ready time and execute round trip (p50, p99)
of `ldist kernel` against ipykernel, measured with the same jupyter_client in
the same run.

    python3 scripts/bench/kernel.py [--cells 1000] [--starts 5]

Start-to-ready: from spawning the kernelspec's argv to the first
kernel_info_reply, the client's socket connected beforehand and retrying
every millisecond (not ZeroMQ's default 100 ms), so it times the kernel and
not the client's backoff or jupyter_client's own start-up work.
Round trip: from sending execute_request ("x = 1") to having both the
execute_reply and the idle status on iopub (what a notebook waits for),
measured twice: through jupyter_client's BlockingKernelClient (what front
ends see) and through bare pyzmq sockets sending one pre-signed request
(what the kernel itself costs; Python's own message handling left out).
ipykernel is installed with pip here if it is missing (only the benchmark
needs it)."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LDIST = os.path.abspath(os.environ.get("LDIST_BIN", os.path.join(ROOT, "ldist")))  # LDIST_BIN: another build


def ensure_ipykernel():
    try:
        import ipykernel  # noqa: F401
    except ImportError:
        print("bench: installing ipykernel (pip)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ipykernel"], check=True)


def install_ldist_spec():
    prefix = tempfile.mkdtemp(prefix="ldist-bench-")
    subprocess.run([LDIST, "kernel", "install", "--prefix", prefix, "--name", "ldist-bench"],
                   check=True, stdout=subprocess.DEVNULL)
    os.environ["JUPYTER_PATH"] = os.path.join(prefix, "share", "jupyter")


def ready_time(name):
    """Seconds from spawning the kernel's argv to its first kernel_info_reply,
    with the client's sockets connected (and retrying every millisecond)
    before the process starts; jupyter_client's own start-up work is left out."""
    import zmq
    from jupyter_client.connect import write_connection_file
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.session import Session
    d = tempfile.mkdtemp(prefix="ldist-bench-cf-")
    key = b"bench-key"
    cf, cfg = write_connection_file(os.path.join(d, "kernel.json"), key=key)
    argv = [a.replace("{connection_file}", cf)
            for a in KernelSpecManager().get_kernel_spec(name).argv]
    # as jupyter_client's KernelManager does: a spec's bare "python" means this interpreter
    if argv and argv[0] in ("python", f"python{sys.version_info[0]}", "python%d.%d" % sys.version_info[:2]):
        argv[0] = sys.executable
    ctx = zmq.Context.instance()
    shell = ctx.socket(zmq.DEALER)
    shell.linger = 0
    shell.connect(f"tcp://{cfg['ip']}:{cfg['shell_port']}")
    sess = Session(key=key)
    req = sess.serialize(sess.msg("kernel_info_request", {}))
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shell.send_multipart(req)
    if not shell.poll(60000):
        proc.kill()
        raise RuntimeError(f"kernel {name} did not answer kernel_info")
    ready = time.perf_counter() - t0
    shell.recv_multipart()
    sess.send(shell, sess.msg("shutdown_request", {"restart": False}))
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shell.close()
    return ready


def start(name):
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name=name)
    km.start_kernel(stderr=subprocess.DEVNULL)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    # drain iopub (starting/busy/idle of the kernel_info requests)
    while True:
        try:
            kc.get_iopub_msg(timeout=0.2)
        except Exception:
            break
    return km, kc


def raw_round_trips(km, n, code="x = 1"):
    """Round trips through bare sockets, with requests signed beforehand."""
    import zmq
    cfg = km.get_connection_info()
    ctx = zmq.Context.instance()
    shell, iopub = ctx.socket(zmq.DEALER), ctx.socket(zmq.SUB)
    iopub.setsockopt(zmq.SUBSCRIBE, b"")
    for s, port in ((shell, "shell_port"), (iopub, "iopub_port")):
        s.linger = 0
        s.connect(f"{cfg['transport']}://{cfg['ip']}:{cfg[port]}")
    time.sleep(0.3)                          # let the subscription reach the kernel
    sess = km.session
    # signed beforehand, one per cell: ipykernel does not answer a msg_id twice
    requests = [sess.serialize(sess.msg("execute_request", {
        "code": code, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": True})) for _ in range(n + 50)]
    times = []
    for i, frames in enumerate(requests):
        t0 = time.perf_counter()
        shell.send_multipart(frames)
        shell.recv_multipart()
        while b'"idle"' not in iopub.recv_multipart()[-1]:
            pass
        if i >= 50:                          # the first 50 warm up
            times.append(time.perf_counter() - t0)
    shell.close()
    iopub.close()
    return sorted(times)


def round_trip(kc, code):
    t0 = time.perf_counter()
    msg_id = kc.execute(code)
    got_reply = got_idle = False
    while not got_reply:
        m = kc.get_shell_msg(timeout=10)
        got_reply = m["parent_header"].get("msg_id") == msg_id
    while not got_idle:
        m = kc.get_iopub_msg(timeout=10)
        got_idle = (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                    and m["content"]["execution_state"] == "idle")
    return time.perf_counter() - t0


def bench(name, cells, starts):
    readies = [ready_time(name) for _ in range(starts)]
    km, kc = start(name)
    for _ in range(50):                      # warm up
        round_trip(kc, "x = 1")
    times = sorted(round_trip(kc, "x = 1") for _ in range(cells))
    raw = raw_round_trips(km, cells)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    p = lambda t, q: t[min(len(t) - 1, int(q * len(t)))]
    return {"ready": statistics.median(readies), "p50": p(times, 0.50), "p99": p(times, 0.99),
            "raw_p50": p(raw, 0.50), "raw_p99": p(raw, 0.99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--no-ipykernel", action="store_true", help="measure ldist only")
    args = ap.parse_args()
    if not os.access(LDIST, os.X_OK):
        sys.exit("bench: build ./ldist first (make ldist)")
    install_ldist_spec()
    import zmq
    zmq.Context.instance().setsockopt(zmq.RECONNECT_IVL, 1)
    kernels = [("ldist", "ldist-bench")]
    if not args.no_ipykernel:
        ensure_ipykernel()
        kernels.append(("ipykernel", "python3"))
    res = {label: bench(name, args.cells, args.starts) for label, name in kernels}
    print(f"execute round trip over {args.cells} cells (ms); start-to-ready median of "
          f"{args.starts} starts")
    print(f"{'kernel':<10} {'ready':>8} {'client p50':>11} {'client p99':>11} {'raw p50':>8} {'raw p99':>8}")
    for label, r in res.items():
        print(f"{label:<10} {r['ready'] * 1e3:8.1f} {r['p50'] * 1e3:11.3f} {r['p99'] * 1e3:11.3f} "
              f"{r['raw_p50'] * 1e3:8.3f} {r['raw_p99'] * 1e3:8.3f}")
    if "ipykernel" in res:
        a, b = res["ldist"], res["ipykernel"]
        print(f"ipykernel/ldist: ready {b['ready'] / a['ready']:.1f}x, client p50 "
              f"{b['p50'] / a['p50']:.1f}x, raw p50 {b['raw_p50'] / a['raw_p50']:.1f}x, "
              f"raw p99 {b['raw_p99'] / a['raw_p99']:.1f}x")

if __name__ == "__main__":
    main()
