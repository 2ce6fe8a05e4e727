#!/usr/bin/env bash
# tests/lua/test_prelude_protocol.sh - the prelude's rule: "No prelude file
# replaces a function another file defined". A file of lua_bindings/lua/ may add
# keys, but never reassign one that holds a function set by a C module or by an
# earlier file. tests/lua/prelude_audit.lua checks it in a plain lua5.4 (./ldist
# has already run the prelude), with the C modules of ./ldist.so (make -j2 all):
# one TAP line per prelude file, then controls showing the audit can fail.
cd "$(dirname "$0")/../.." || exit 1
if ! command -v lua5.4 >/dev/null; then echo "not ok - lua5.4 is installed"; exit 1; fi
# LDIST_SO: another build's module (tests/run.sh); LDIST_PRELOAD: the sanitizer
# runtime a stock lua5.4 must load first to open a sanitized one
so=${LDIST_SO:-./ldist.so}
if [ ! -f "$so" ]; then echo "not ok - $so is built (make -j2 all)"; exit 1; fi
LDIST_SO=$so LD_PRELOAD=${LDIST_PRELOAD:-$LD_PRELOAD} exec lua5.4 tests/lua/prelude_audit.lua
