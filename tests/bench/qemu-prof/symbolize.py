#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns a pfm_prof plugin dump into per-symbol instruction counts.

usage: symbolize.py PROFILE SYSTEM_MAP GUEST_OUTPUT [--top N] [--base ITEM]... [--json FILE]

PROFILE       the plugin's output (W VADDR NINSNS EXECUTIONS per line)
SYSTEM_MAP    the guest kernel's System.map (no KASLR in the test kernels)
GUEST_OUTPUT  pfm_bench --profile's output: the PFM-KSYM lines (module
              symbols from /proc/kallsyms) and the PFM-PROF lines (which
              window holds which item, over how many iterations)

For every item: instructions per iteration (per switch, per read, per
attach cycle), split by symbol. With --base ITEM (repeatable), every item
of the same section is also shown as the difference to ITEM, symbol by symbol: where an
added cost comes from. Symbols of user space are folded into [user]. Rust
names are demangled with c++filt when it is available.
"""
import bisect
import json
import re
import subprocess
import sys
from collections import defaultdict


def load_symbols(system_map, guest_output):
    syms = []
    with open(system_map) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "TtWw":
                syms.append((int(parts[0], 16), parts[2]))
    items = []
    with open(guest_output, errors="replace") as f:
        for line in f:
            line = line.strip()
            m = re.match(r"PFM-KSYM ([0-9a-f]+) [tTwW] (\S+)\s+\[perfmon\]", line)
            if m:
                syms.append((int(m.group(1), 16), m.group(2)))
                continue
            m = re.match(r"PFM-PROF window=(\d+) item=(\S+) iterations=(\d+) unit=(\S+)", line)
            if m:
                items.append((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
    syms.sort()
    return syms, items


def demangle(names):
    names = list(names)
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        dem = out.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}
    res = {}
    for n, d in zip(names, dem):
        # <pfm_core[hash]::pfm_ctx::Context>::load -> pfm_ctx::Context::load
        d = re.sub(r"\[[0-9a-f]{16}\]", "", d)
        d = re.sub(r"\bpfm_core::", "", d)
        res[n] = d if d else n
    return res


def main():
    args = sys.argv[1:]
    top, bases, jpath = 25, [], None
    pos = []
    i = 0
    while i < len(args):
        if args[i] == "--top":
            top = int(args[i + 1]); i += 2
        elif args[i] == "--base":
            bases.append(args[i + 1]); i += 2
        elif args[i] == "--json":
            jpath = args[i + 1]; i += 2
        else:
            pos.append(args[i]); i += 1
    if len(pos) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    prof, smap, gout = pos
    syms, items = load_symbols(smap, gout)
    addrs = [a for a, _ in syms]

    per_window = defaultdict(lambda: defaultdict(int))
    cache = {}
    with open(prof) as f:
        for line in f:
            # "c ..." lines: the plugin's callees=on counts (scripts/cost-gate.sh)
            if line.startswith(("#", "c ")):
                continue
            w, vaddr, n, count = line.split()
            w, vaddr, n, count = int(w), int(vaddr, 16), int(n), int(count)
            if vaddr < 0xffff800000000000:
                name = "[user]"
            else:
                name = cache.get(vaddr)
                if name is None:
                    k = bisect.bisect_right(addrs, vaddr) - 1
                    name = syms[k][1] if k >= 0 else "[unknown]"
                    cache[vaddr] = name
            per_window[w][name] += n * count

    names = set()
    for w in per_window.values():
        names.update(w)
    dem = demangle(sorted(names))

    result = {}
    for w, item, iters, unit in items:
        counts = {dem[k]: v / iters for k, v in per_window.get(w, {}).items()}
        result[item] = {"iterations": iters, "unit": unit, "window": w,
                        "total": sum(counts.values()), "symbols": counts}

    def show(title, counts, total):
        print(title)
        ranked = sorted(counts.items(), key=lambda kv: -abs(kv[1]))
        for name, v in ranked[:top]:
            print(f"  {v:>10.1f}  {v / total * 100 if total else 0:>5.1f}%  {name}")
        rest = sum(v for _, v in ranked[top:])
        if len(ranked) > top:
            print(f"  {rest:>10.1f}         ({len(ranked) - top} more symbols)")
        print()

    for item, r in result.items():
        show(f"== {item}: {r['total']:.1f} instructions per {r['unit']} "
             f"({r['iterations']} {r['unit']}s, window {r['window']})", r["symbols"], r["total"])
    for base in bases:
        if base not in result:
            continue
        b = result[base]
        section = base.split(":")[0]
        for item, r in result.items():
            if item == base or item.split(":")[0] != section:
                continue
            diff = defaultdict(float)
            for k, v in r["symbols"].items():
                diff[k] += v
            for k, v in b["symbols"].items():
                diff[k] -= v
            diff = {k: v for k, v in diff.items() if abs(v) >= 0.05}
            added = r["total"] - b["total"]
            show(f"== {item} minus {base}: {added:+.1f} instructions per {r['unit']}", diff, added)
            r.setdefault("minus", {})[base] = {"added": added, "symbols": diff}
    if jpath:
        with open(jpath, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
