#!/usr/bin/env bash
# tests/kernel/fuzz.sh [SECONDS] - build the wire-parser fuzzer with libFuzzer,
# AddressSanitizer (leaks included) and UBSan, seed it with real messages and
# run it for SECONDS (default 30). Exit status 0: no crash, no leak.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-30}
out=build/fuzz
mkdir -p "$out/corpus"
CC=${FUZZ_CC:-clang}
if ! command -v "$CC" >/dev/null; then echo "fuzz: $CC not found (apt-get install clang)" >&2; exit 2; fi
"$CC" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Ikernel tests/kernel/fuzz_wire.c kernel/kwire.c -ljansson -lcrypto -luuid -o "$out/fuzz_wire"
# seeds: mode byte, then NUL-separated frames
hdr='{"msg_id":"a","msg_type":"execute_request","session":"s","username":"u","date":"2024-01-01T00:00:00Z","version":"5.3"}'
printf '\002id\000<IDS|MSG>\000x\000%s\000{}\000{}\000{"code":"print(1)","silent":false}' "$hdr" > "$out/corpus/seed1"
printf '\003<IDS|MSG>\000x\000%s\000{"msg_id":"p"}\000{"k":[1,2.5,null,true]}\000{"code":"\\u00e9\\ud83d\\ude00"}\000buf' "$hdr" > "$out/corpus/seed2"
printf '\000<IDS|MSG>\000\000%s\000{}\000{}\000{}' "$hdr" > "$out/corpus/seed3"
printf '\001<IDS|MSG>\000deadbeef\000{}\000{}\000{}\000{}' > "$out/corpus/seed4"
set +e
ASAN_OPTIONS=detect_leaks=1 "$out/fuzz_wire" -max_total_time="$secs" -max_len=4096 \
  -artifact_prefix="$out/" -print_final_stats=1 "$out/corpus" >"$out/log" 2>&1
st=$?
set -e
tail -n 30 "$out/log"
if [ "$st" != 0 ]; then echo "not ok - fuzz_wire found a crash or a leak (see $out/crash-*)"; exit 1; fi
echo "ok - fuzz_wire ran ${secs}s without a crash or a leak"
