"""hostile.py - what the kernel's and the cluster's hostile-client tests share
(tests/kernel/test_hostile.py, tests/dist/test_hostile.py): a process's
memory, a raw ZMTP peer that never finishes its frame, and whether the peer
closed a connection."""
import socket


def rss_mb(pid):
    """The resident set of process pid, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def zmtp_partial_frame(port, claim, send, more=False, host="127.0.0.1"):
    """Open a raw ZMTP 3.0 connection as a DEALER (NULL mechanism), announce
    one long frame of `claim` bytes (with the MORE flag when `more`) and send
    `send` bytes of it, never the rest. Returns (bytes sent, the socket): the
    socket is left open, so the peer holds whatever it buffered."""
    s = socket.create_connection((host, port))
    s.sendall(b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL" + bytes(16) + b"\x00" + bytes(31))
    body = b"\x05READY" + b"\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER"
    s.sendall(b"\x04" + bytes([len(body)]) + body)
    s.sendall((b"\x03" if more else b"\x02") + claim.to_bytes(8, "big"))
    chunk, sent = b"\0" * (1 << 20), 0
    s.settimeout(5)
    try:
        while sent < send:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass        # the peer closed the connection: what it should do
    return sent, s


def closed_by_peer(s, wait):
    """True when the other side closed (or reset) the connection within
    `wait` seconds."""
    s.settimeout(wait)
    try:
        while True:
            if not s.recv(65536):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True
