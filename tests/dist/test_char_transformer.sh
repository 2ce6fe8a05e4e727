#!/usr/bin/env bash
# A character-level transformer (scripts/char_transformer.lua: Embedding +
# position Embedding + causal MultiHeadAttention + LayerNormalization + Dense)
# trains on /usr/share/common-licenses/GPL-3 (Debian's base-files) and its
# training loss falls well below the text's unigram entropy; then the real REPL,
# in a pty, loads the script with dofile, trains briefly and samples text.
source "$(dirname "$0")/lib.sh"
scale=${LDIST_TEST_TIME_SCALE:-1}
# 3 epochs of 100 steps (batch 32, 64 characters): about 15 s on 2 cores.
# Measured: the mean loss of the third epoch is 1.65 nats/char against an
# entropy of 3.17 (epochs 2.70, 2.14, 1.65), 1.52 below; the check asks for 1.0.
MARGIN=1.0
timeout $((120 * scale)) "$LDIST" scripts/char_transformer.lua --epochs 3 --steps 100 --n 120 --seed 1 \
  > "$T/train.log" 2>&1
st=$?
check "the script trains and samples (exit status $st)" test $st = 0
H=$(sed -n 's/.*unigram entropy \([0-9.]*\) nats\/char.*/\1/p' "$T/train.log" | head -1)
loss=$(sed -n 's/^epoch [0-9]*: loss \([0-9.]*\).*/\1/p' "$T/train.log" | tail -1)
note "unigram entropy $H nats/char; loss per epoch: $(sed -n 's/^epoch [0-9]*: loss \([0-9.]*\).*/\1/p' "$T/train.log" | tr '\n' ' ')"
check "the unigram entropy of GPL-3 is printed and plausible ($H)" \
  awk -v h="$H" 'BEGIN { exit !(h > 2.8 && h < 3.5) }'
check "the final epoch's loss $loss is below the entropy $H by at least $MARGIN" \
  le "$loss" "$(awk -v h="$H" -v m=$MARGIN 'BEGIN { print h - m }')"
samp=$(awk '/^---- sample/ { on = 1; next } /^----$/ { on = 0 } on' "$T/train.log")
check "a sample of the prompt and 120 characters is printed" \
  test "${samp:0:13}" = "This License " -a "${#samp}" -ge 120
[ "$failures" = 0 ] || show "$T/train.log"

# The REPL: dofile defines sample() and char_transformer.train without training
timeout $((300 * scale)) python3 - "$T" > "$T/repl.log" 2>&1 <<'PY'
import re, sys, time
from pathlib import Path
sys.path.insert(0, "tests/repl")
from conftest import Repl, clean
tmp = Path(sys.argv[1])
r = Repl(tmp, timeout=30).start()
def ok(name, cond, detail=""):
    print(("ok - " if cond else "not ok - ") + name)
    if not cond and detail:
        print("\n".join("#   " + l for l in str(detail).splitlines()[-20:]))
try:
    t0 = time.time()
    out = r.run('dofile("scripts/char_transformer.lua");')
    ok("repl: dofile loads the script without training", "epoch" not in out and "error" not in out.lower()
       and time.time() - t0 < 10, out)
    ok("repl: sample and char_transformer.train are defined",
       r.value("type(sample), type(char_transformer.train)") == '"function"\t"function"')
    r.p.timeout = 120
    out = r.run("m = char_transformer.train{epochs = 1, steps = 80};")
    ok("repl: a short training prints its loss next to the entropy",
       re.search(r"epoch 1: loss [0-9.]+.*unigram entropy 3\.1", out) is not None, out)
    out = r.run('math.randomseed(7); s = sample(m, "This License ", 100, 0.8); print("<<" .. s .. ">>")')
    m = re.search(r"<<(This License [\s\S]*?)>>", out)
    ok("repl: sample(model, prompt, 100, 0.8) prints the prompt and 100 characters",
       m is not None and len(m.group(1)) == 13 + 100, out)
    if m: print("# sampled in the REPL: " + repr(m.group(1)))
    out = r.value('#sample(m, "GNU", 5, 0)')
    ok("repl: greedy sampling (temperature 0) works", out == "8", out)
finally:
    r.close()
PY
st=$?
cat "$T/repl.log" | grep -E '^(ok|not ok|#)'
check "the REPL session ran to its end (status $st)" test $st = 0
[ $st = 0 ] || show "$T/repl.log"
finish
