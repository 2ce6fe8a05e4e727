#!/usr/bin/env bash
# The engine's layers point down (issue 28): tests/engine/layering.lua checks every
# #include of engine/ against the layer map it holds.
cd "$(dirname "$0")/../.." || exit 1
exec lua5.4 tests/engine/layering.lua
