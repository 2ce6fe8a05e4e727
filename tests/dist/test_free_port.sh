#!/usr/bin/env bash
# The ports a LocalCluster hands its processes (ldist._cluster.free_port) lie
# below the kernel's ephemeral range, so a connect() made before the process
# binds its port cannot take it (that race failed a 3-worker cluster with
# "Address already in use"); they are distinct, and a listener binds them.
source "$(dirname "$0")/lib.sh"
read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range
"$LDIST" -e '
local C = ldist._cluster
local seen, dup, bad = {}, 0, 0
for i = 1, 200 do
  local p = C.free_port("127.0.0.1")
  if seen[p] then dup = dup + 1 end
  seen[p] = true
  if p >= '"$lo"' and p <= '"$hi"' then bad = bad + 1 end
  if i == 1 then print("first " .. p) end
end
print("dup " .. dup)
print("in_ephemeral " .. bad)
-- a listener binds a handed-out port: a cluster of one rank leading on it
local p = C.free_port()
local ok, err = pcall(C.join, { rank = 0, size = 1, leader = "127.0.0.1:" .. p, secret = C.random_hex(32), data_plane = false, timeout = 5 })
print("bind " .. tostring(ok) .. " " .. tostring(ok or err))
if ok then err:close() end' > "$T/out.log" 2>&1
check "ports are handed out (first: $(sed -n 's/^first //p' "$T/out.log"))" grep -q '^first [0-9]' "$T/out.log"
check "200 ports in a row are distinct" grep -qx 'dup 0' "$T/out.log"
check "none lies in the ephemeral range $lo-$hi" grep -qx 'in_ephemeral 0' "$T/out.log"
check "a listener binds the port handed out" grep -q '^bind true' "$T/out.log"
[ "$failures" = 0 ] || show "$T/out.log"
finish
