"""What connections that never authenticate may hold in a cluster leader, in
total (issue 27, item 6): three strangers with 240 MB partial frames took a
leader to 730 MB; now they may hold 64 MiB in all, and at most 8 more of
them than the cluster has members may stay connected."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hostile import closed_by_peer, rss_mb, zmtp_partial_frame  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_auth import finish, free_port, start  # noqa: E402
from test_hostile import wait_listening  # noqa: E402



def test_partial_frames_are_bounded_in_total_and_a_real_worker_still_joins(tmp_path):
    ports = [free_port(), free_port()]
    leader = start(ports, 0, tmp_path / "ran0")
    wait_listening(ports[0])
    time.sleep(0.5)
    before = rss_mb(leader.pid)
    socks = []
    for _ in range(3):
        _, s = zmtp_partial_frame(ports[0], 250 << 20, 240 << 20, more=True)
        socks.append(s)
    time.sleep(0.5)
    grown = rss_mb(leader.pid) - before
    closed = sum(closed_by_peer(s, 0.3) for s in socks)
    idle = [zmtp_partial_frame(ports[0], 10, 0)[1] for _ in range(20)]
    time.sleep(0.5)
    idle_closed = sum(closed_by_peer(s, 0.2) for s in idle)
    member = start(ports, 1, tmp_path / "ran1")
    rc1, out1, err1 = finish(member)
    rc0, out0, err0 = finish(leader)
    for s in socks + idle:
        s.close()
    assert grown < 150, f"the leader grew by {grown:.0f} MB for 3 strangers' partial frames"
    assert closed >= 2, f"only {closed} of the 3 strangers were closed"
    assert idle_closed >= 11, f"{20 - idle_closed} idle strangers stayed connected (at most 9 may)"
    assert "has not authenticated" in err0
    assert rc0 == 0 and rc1 == 0, (err0, err1)
