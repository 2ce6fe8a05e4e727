#!/usr/bin/env bash
# tests/lua/test_no_blas.sh - without a BLAS library a matrix product is an
# error in the session that names the library (it used to give NaN and a
# line on stderr), and the session goes on. LDIST_BLAS points the loader
# (engine/ld_cpu.c) at a library that is not there.
cd "$(dirname "$0")/../.." || exit 1
bin=${LDIST_BIN:-./ldist}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
out=$(LDIST_BLAS=/nonexistent/libldist_no_blas.so "$bin" -e '
local a = tensor.ones(3, 4)
local ok, err = pcall(function() return a:matmul(tensor.ones(4, 2)) end)
print(ok and "product: no error" or ("product: " .. tostring(err)))
local m = nn.Sequential({nn.Dense(2)})
ok, err = pcall(function() return m(a) end)
print(ok and "dense: no error" or ("dense: " .. tostring(err)))
print("after: " .. (a + a):sum():item())' 2>&1)
echo "$out" | sed 's/^/# /'
check() { if grep -q -- "$2" <<<"$out"; then echo "ok - $1"; else echo "not ok - $1"; fi; }
check "a product without BLAS is an error naming the library" "^product: .*cannot open /nonexistent/libldist_no_blas.so"
check "a dense layer without BLAS is the same error" "^dense: .*libldist_no_blas.so"
check "the session goes on after it" "^after: 24"
if grep -qi nan <<<"$out"; then echo "not ok - no NaN result"; else echo "ok - no NaN result"; fi
