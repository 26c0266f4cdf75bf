#!/usr/bin/env python3
"""Time and peak memory of the parser on large and hostile `.pdj` files.

Usage: python3 benchmarks/parser_memory.py [--mb 50] [--keep DIR] [--no-tree]

Writes, in a temporary folder:
  - big.pdj: a kernel of about --mb MB, with statements of varied shape (one to three scopes,
    continuations with '|', loads, constants, unary functions, selects, reductions);
  - one-line.pdj: a single statement of --mb MB (an oversized expression);
  - nested.pdj: 17 MB of nested brackets on one line, and nested-lines.pdj: 100,000 lines of 170
    nested brackets each (every line within the line limit, each refused for its depth).
and runs on each, in a child process whose peak resident memory is read from wait4:
  - `perfdojo check --json FILE`: parses and checks as it reads, holding no body;
  - `perfdojo fmt FILE > /dev/null` on big.pdj: checks and prints as it reads, holding the
    printed text (written only once the kernel is known valid), not the tree;
  - `perfdojo check --tree FILE` on big.pdj: loads the whole tree into memory first, as the
    optimiser and the env do.
It prints seconds, peak RSS and peak RSS over the file size for each. The targets (#21): check of
a 50 MB file within 10x its size, and the oversized and over-deep inputs refused in under a second.
"""

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def perfdojo_binary():
    d = os.environ.get("PERFDOJO_BIN_DIR")
    return str(Path(d) / "perfdojo") if d else str(ROOT / "build" / "bin" / "perfdojo")


HEADER = """# a large generated kernel
N = 64
M = 48
K = 32
input x: f32[N, M]
input w: f32[M, K]
input b: f32[K]
output y: f32[N, K]
output z: f32[N, M]
temp t: f32[N] = 0
temp u: f32[N, M] = 0

"""


def statement(rng):
    """One or more lines: a nest of one to three scopes, sometimes continued with '|'."""
    c = rng.choice(["1.5", "2", "0.25", "-3", "7.125", str(rng.randint(1, 999))])
    form = rng.randrange(8)
    if form == 0:
        return f"N M z[{{0}},{{1}}] = x[{{0}},{{1}}] * {c} + u[{{0}},{{1}}]\n"
    if form == 1:
        return f"N K y[{{0}},{{1}}] = b[{{1}}] * {c}\n| | M y[{{0}},{{1}}] += x[{{0}},{{2}}] * w[{{2}},{{1}}]\n"
    if form == 2:
        return f"N M t[{{0}}] += exp(x[{{0}},{{1}}] - {c})\n"
    if form == 3:
        return f"N M u[{{0}},{{1}}] = x[{{0}},{{1}}] > {c} ? x[{{0}},{{1}}] : -x[{{0}},{{1}}]\n"
    if form == 4:
        if rng.random() < 0.5:
            return "N M t[{0}] = max(x[{0},{1}])\n"
        return f"N t[{{0}}] = t[{{0}}] * {c}\n"
    if form == 5:
        return f"N M u[{{0}},{{1}}] = u[{{0}},{{1}}] / ({c} + abs(x[{{0}},{{1}}]))\n| | z[{{0}},{{1}}] = u[{{0}},{{1}}] + t[{{0}}]\n"
    if form == 6:
        return f"N:par K:vec y[{{0}},{{1}}] = max(y[{{0}},{{1}}], {c})\n"
    return f"32 2 z[{{0}}*2+{{1}},{{1}}] = sqrt(abs(x[{{0}}*2+{{1}},{{1}}])) * {c}\n"


def write_big(path, mb, seed=0):
    rng = random.Random(seed)
    target = int(mb * 1e6)
    statements = 0
    with open(path, "w") as f:
        f.write(HEADER)
        size = len(HEADER)
        chunk = []
        while size < target:
            s = statement(rng)
            chunk.append(s)
            size += len(s)
            statements += s.count("\n")
            if len(chunk) >= 4096:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
    return statements


def generate(d, mb):
    """Writes the four files into `d`; returns the number of statement lines of big.pdj."""
    big = d / "big.pdj"
    n = write_big(big, mb)
    one = d / "one-line.pdj"
    with open(one, "w") as f:
        f.write(HEADER + "N M z[{0},{1}] = x[{0},{1}]")
        terms = int(mb * 1e6) // 12
        for i in range(0, terms, 100_000):
            f.write(" + x[{0},{1}]" * min(100_000, terms - i))
        f.write("\n")
    nested = d / "nested.pdj"
    depth = 17_000_000 // 2
    nested.write_text(HEADER + "N M z[{0},{1}] = " + "(" * depth + "1" + ")" * depth + "\n")
    lines = d / "nested-lines.pdj"
    with open(lines, "w") as f:
        f.write(HEADER)
        row = "N M z[{0},{1}] = " + "(" * 170 + "1" + ")" * 170 + "\n"
        f.write(row * 100_000)

    return n


def run(cmd, stdout=subprocess.DEVNULL):
    """Seconds, peak RSS in bytes, exit status and stdout of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    out = proc.stdout.read() if stdout == subprocess.PIPE else b""
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    return seconds, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), out + err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50, help="size of the large files in MB (default 50)")
    ap.add_argument("--keep", help="write the files here and keep them")
    ap.add_argument("--generate", help=argparse.SUPPRESS)
    ap.add_argument("--no-tree", action="store_true", help="skip the whole-tree load (slow, large)")
    args = ap.parse_args()
    if args.generate:
        print(generate(Path(args.generate), args.mb))
        return 0
    exe = perfdojo_binary()
    tmp = tempfile.TemporaryDirectory() if not args.keep else None
    d = Path(args.keep or tmp.name)
    d.mkdir(parents=True, exist_ok=True)

    # The files are written by a child process: a child forked from a large parent would start
    # with the parent's resident size as its peak.
    n = int(subprocess.run([sys.executable, __file__, "--generate", str(d), "--mb", str(args.mb)],
                           check=True, capture_output=True, text=True).stdout)
    big, one, nested, lines = (d / f for f in ("big.pdj", "one-line.pdj", "nested.pdj", "nested-lines.pdj"))
    print(f"perfdojo: {exe}")
    print(f"{'case':<44} {'MB':>7} {'s':>7} {'peak MB':>9} {'peak/size':>9}  result")
    small = ROOT / "kernels" / "softmax.pdj"
    cases = [("check softmax.pdj (the process alone)", small, [exe, "check", "--json", str(small)]),
             ("check big.pdj (%d statement lines)" % n, big, [exe, "check", "--json", str(big)]),
             ("check one-line.pdj (one huge statement)", one, [exe, "check", "--json", str(one)]),
             ("check nested.pdj (17 MB of brackets)", nested, [exe, "check", "--json", str(nested)]),
             ("check nested-lines.pdj (100k deep lines)", lines, [exe, "check", "--json", str(lines)])]
    cases.append(("fmt big.pdj (streams, holds the output)", big, [exe, "fmt", str(big)]))
    if not args.no_tree:
        cases.append(("check --tree big.pdj (the whole tree)", big, [exe, "check", "--json", "--tree", str(big)]))
    for name, path, cmd in cases:
        size = path.stat().st_size
        secs, peak, rc, out = run(cmd, subprocess.PIPE if name.startswith("check") else subprocess.DEVNULL)
        text = out.decode("utf-8", "replace").strip().splitlines()
        result = "ok" if rc == 0 else (text[0][:70] if text else f"exit {rc}")
        if rc == 0 and name.startswith("check"):
            result = text[0][:70]
        ratio = f"{peak / size:8.1f}x" if size >= 1e6 else f"{'-':>9}"
        print(f"{name:<44} {size / 1e6:7.1f} {secs:7.2f} {peak / 1e6:9.0f} {ratio}  {result}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
