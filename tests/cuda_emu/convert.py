#!/usr/bin/env python3
"""convert.py - turn the kernel launches of CUDA sources into calls of the
CPU emulator's launcher (tests/cuda_emu/cuda_emu.h), nothing else:

    name<<<grid, block, shmem, stream>>>(args)
    k<T, E><<<grid, block>>>(args)              (2 and 3 configuration values too)

become

    cuemu::launch< name >(__FILE__, __LINE__, BOUNDS, grid, block, shmem, stream, args)

where BOUNDS is the kernel's __launch_bounds__ (found in any of the sources
given), 0 without one; a left-out shmem or stream is 0. Launches may span
lines, sit inside macros (backslash continuations are kept as they are) and
inside macro arguments. Comments and string literals are left alone. Every
newline of the input is kept, and the output starts with a #line directive,
so compiler messages, __FILE__ and __LINE__ name the original file and line.

usage: convert.py OUT_DIR SOURCE.cu... (writes OUT_DIR/<name>.cpp for each)
exits 1, saying where, on a launch it cannot parse, or if a `<<<` is left.
"""
import os
import re
import sys


def code_mask(text):
    """mask[i] is True where text[i] is code (not in a comment, string or char literal)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            # a backslash-newline continues a // comment
            while j < n and j > 0 and text[j - 1] == "\\":
                k = text.find("\n", j + 1)
                j = n if k < 0 else k
            for k in range(i, j):
                mask[k] = False
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                mask[k] = False
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            for k in range(i, j):
                mask[k] = False
            i = j
        else:
            i += 1
    return mask


def is_ws(text, i):
    """whitespace, or the backslash of a backslash-newline"""
    return text[i].isspace() or (text[i] == "\\" and i + 1 < len(text) and text[i + 1] == "\n")


class ParseError(Exception):
    pass


def line_of(text, i):
    return text.count("\n", 0, i) + 1


def kernel_start(text, mask, end):
    """The start of the kernel expression ending before `end` (an identifier,
    possibly qualified, possibly followed by <template arguments>)."""
    i = end - 1
    while i >= 0 and is_ws(text, i):
        i -= 1
    if i >= 0 and text[i] == ">":
        depth = 0
        while i >= 0:
            if mask[i]:
                if text[i] in ">)]":
                    depth += 1
                elif text[i] in "<([":
                    depth -= 1
                    if depth == 0:
                        break
            i -= 1
        if i < 0:
            raise ParseError("unbalanced template arguments before <<<")
        i -= 1
        while i >= 0 and is_ws(text, i):
            i -= 1
    j = i
    while j >= 0 and (text[j].isalnum() or text[j] in "_:"):
        j -= 1
    if j == i:
        raise ParseError("no kernel name before <<<")
    return j + 1


def matching(text, mask, i, open_c, close_c):
    """index of the bracket closing the one at i"""
    depth = 0
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    while i < len(text):
        if mask[i]:
            c = text[i]
            if c in pairs:
                stack.append(pairs[c])
            elif c in ")]}":
                if not stack or stack.pop() != c:
                    raise ParseError("unbalanced brackets")
                if not stack:
                    return i
        i += 1
    raise ParseError("unterminated " + open_c)


def split_top(text, mask, a, b):
    """split text[a:b] at the commas outside brackets; returns (start, end) pairs"""
    parts, depth, s = [], 0, a
    for i in range(a, b):
        if not mask[i]:
            continue
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append((s, i))
            s = i + 1
    parts.append((s, b))
    return parts


def convert(text, bounds, path):
    mask = code_mask(text)
    out, pos, count = [], 0, 0
    while True:
        i = text.find("<<<", pos)
        while i >= 0 and not mask[i]:
            i = text.find("<<<", i + 3)
        if i < 0:
            break
        try:
            ks = kernel_start(text, mask, i)
            if ks < pos:
                raise ParseError("kernel expression overlaps the previous launch")
            # the configuration: up to the first >>> outside brackets
            depth, j = 0, i + 3
            while j < len(text):
                if mask[j]:
                    if text[j] in "([{":
                        depth += 1
                    elif text[j] in ")]}":
                        depth -= 1
                    elif depth == 0 and text.startswith(">>>", j):
                        break
                j += 1
            else:
                raise ParseError("no >>> after <<<")
            cfg = split_top(text, mask, i + 3, j)
            if not 2 <= len(cfg) <= 4:
                raise ParseError("%d launch configuration values (2 to 4 expected)" % len(cfg))
            p = j + 3
            while p < len(text) and is_ws(text, p):
                p += 1
            if p >= len(text) or text[p] != "(":
                raise ParseError("no argument list after >>>")
            q = matching(text, mask, p, "(", ")")
        except ParseError as e:
            sys.exit("%s:%d: convert.py: %s" % (path, line_of(text, i), e))
        kernel = text[ks:i]
        base = re.sub(r"\s|\\\n", "", kernel).split("<")[0].split("::")[-1]
        nb = bounds.get(base, 0)
        args = text[p + 1:q]
        has_args = any(mask[k] and not is_ws(text, k) for k in range(p + 1, q))
        missing = ", 0" * (4 - len(cfg))
        # what is dropped between pieces: keep its line breaks (with their backslashes)
        gap = text[j + 3:p]
        keep = "".join("\\\n" if m.group(0).startswith("\\") else "\n" for m in re.finditer(r"\\?\n", gap))
        out.append(text[pos:ks])
        out.append("cuemu::launch< %s >(__FILE__, __LINE__, %d, %s%s%s%s)" % (
            kernel, nb, text[i + 3:j], missing, keep, (", " + args) if has_args else args))
        pos = q + 1
        count += 1
    out.append(text[pos:])
    return "".join(out), count


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir, srcs = sys.argv[1], sys.argv[2:]
    texts = {s: open(s, encoding="utf-8").read() for s in srcs}
    bounds = {}
    for t in texts.values():
        for m in re.finditer(r"__launch_bounds__\s*\(\s*(\d+)[^)]*\)\s*(\w+)", t):
            bounds[m.group(2)] = int(m.group(1))
    os.makedirs(outdir, exist_ok=True)
    total = 0
    for s, t in texts.items():
        res, n = convert(t, bounds, s)
        m = code_mask(res)
        left = [k for k in range(len(res)) if res.startswith("<<<", k) and m[k]]
        if left:
            sys.exit("%s:%d: convert.py: a <<< was left" % (s, line_of(res, left[0])))
        if res.count("\n") != t.count("\n"):
            sys.exit("%s: convert.py: line count changed" % s)
        name = os.path.splitext(os.path.basename(s))[0] + ".cpp"
        data = '#line 1 "%s"\n' % s + res
        out = os.path.join(outdir, name)
        old = open(out, encoding="utf-8").read() if os.path.exists(out) else None
        if old != data:   # unchanged outputs keep their time: make rebuilds only what changed
            with open(out, "w", encoding="utf-8") as f:
                f.write(data)
        total += n
        print("  %-32s %2d launches" % (s, n))
    print("convert.py: %d launches in %d files; __launch_bounds__: %s" % (
        total, len(srcs), ", ".join("%s=%d" % kv for kv in sorted(bounds.items())) or "none"))


if __name__ == "__main__":
    main()
