#!/usr/bin/env bash
# A LocalCluster whose worker dies before joining fails at once, naming the
# process, instead of waiting out the rendezvous timeout. The worker cannot
# start because the ldist program it runs was deleted after this session
# started (as when ldist is rebuilt during a session).
source "$(dirname "$0")/lib.sh"
mkdir -p "$T/copy/build"
cp "$LDIST" "$T/copy/ldist"
cp build/ldist_net.so "$T/copy/build/" 2>/dev/null || true
( sleep 0.5; rm -f "$T/copy/ldist" ) &
"$T/copy/ldist" -e 'ldist._cluster.sleep(1.5)
local t = ldist.clock()
local ok, err = pcall(distribute.LocalCluster, { workers = 2, start_timeout = 30 })
print(ok, err)
print(("seconds %.1f"):format(ldist.clock() - t))' > "$T/out.log" 2>&1
wait
check "LocalCluster fails instead of starting" grep -q '^false' "$T/out.log"
check "the error names the process that exited" grep -q 'exited before joining the cluster' "$T/out.log"
secs=$(sed -n 's/^seconds //p' "$T/out.log")
check "it fails within 10 s, not the 30 s timeout (took ${secs:-?} s)" le "${secs:-99}" 10
[ "$failures" = 0 ] || show "$T/out.log"
finish
