#!/usr/bin/env bash
# The conformance matrix with one process (or `ldist launch`) per strategy
# running every case in turn: one strategy object meets dozens of models,
# made and dropped as a REPL session or a notebook makes them. Under
# MultiWorkerMirrored every worker must then still call the same collectives
# in the same order, whatever its garbage collector has freed: which models
# and variables are broadcast may not depend on when memory is freed (a
# model list held weakly, variables keyed by an address a later tensor
# reuses, made the workers' broadcasts differ and the run time out).
# ParameterServer takes one model per strategy by design: not here.
source "$(dirname "$0")/lib.sh"
CONFORMANCE_ONE_PROCESS=1 CONFORMANCE_STRATEGIES="default mirrored2 mw2 mw3" \
  bash tests/dist/test_conformance.sh 2>&1 |
  sed -E 's/^(not )?ok - conformance /\1ok - conformance, one process per strategy: /'
st=${PIPESTATUS[0]}
[ "$st" = 0 ] || not_ok "conformance, one process per strategy: the suite exited with status $st"
finish
