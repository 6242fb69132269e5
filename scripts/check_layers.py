#!/usr/bin/env python3
"""Checks that host/ depends only downward, and that cli/, bench/ and mpi/ have no circles.

    scripts/check_layers.py [--build DIR] [--graph]

host/'s folders are layers, listed bottom up in LAYERS; a folder may use its own files and those
of the layers below it, never one above or beside it. Checked two ways:
  - #include lines: a file of host/<a>/ including "<b>/..." needs rank(b) < rank(a), or b == a;
  - with --build DIR (a configured and built build folder): the calls, read from the library's
    objects with `nm` (which file defines each symbol another file uses). No folder may call one
    above or beside it, and no two files may call each other, directly or around a circle.
--graph also prints every file -> file edge the objects show. Exit status 0 when clean, 1 with
one line per violation on stderr, 2 on a usage error (no objects found, nm missing).
With --build, the programs' folders (FLAT: cli/, bench/, mpi/) are checked for circles between
their files the same way (they have no layers of their own; they use the library's public API).
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys

# Bottom up; the layers of one tuple are siblings (neither may use the other).
LAYERS = [("core",), ("config",), ("tune",), ("causal",), ("forward",), ("backward", "shard"), ("verify",)]
RANK = {name: i for i, group in enumerate(LAYERS) for name in group}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAT = ("cli", "bench", "mpi")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def may_use(user, used):
    return used == user or RANK[used] < RANK[user]


def check_includes(errors):
    host = os.path.join(ROOT, "host")
    for path in sorted(glob.glob(os.path.join(host, "*", "*.[ch]"))):
        layer = os.path.basename(os.path.dirname(path))
        rel = os.path.relpath(path, ROOT)
        if layer not in RANK:
            errors.append(f"{rel}: folder '{layer}' is not a layer (add it to LAYERS)")
            continue
        with open(path, encoding="utf-8") as f:
            for target in INCLUDE.findall(f.read()):
                used = target.split("/")[0] if "/" in target else None
                if used is None:
                    if os.path.exists(os.path.join(host, target)):
                        errors.append(f'{rel}: includes "{target}" by its bare name: name its layer')
                    continue
                if used in RANK and not may_use(layer, used):
                    errors.append(f'{rel}: includes "{target}": {layer}/ may not use {used}/')
    for path in sorted(glob.glob(os.path.join(host, "*.[ch]"))):
        errors.append(f"{os.path.relpath(path, ROOT)}: a file outside the layers")


def nm_symbols(obj, defined, used, key):
    try:
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"check_layers: nm {obj}: {e}")
    defined.setdefault(key, set())
    used.setdefault(key, set())
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRC":
            defined[key].add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used[key].add(parts[1])


def object_symbols(build):
    objs = sorted(glob.glob(os.path.join(build, "host", "*libmhla*.p", "*.c.o")))
    if not objs:
        sys.exit(f"check_layers: no objects under {build}/host/*libmhla*.p (build it first)")
    defined, used = {}, {}
    for obj in objs:
        name = os.path.basename(obj)[:-len(".c.o")]
        layer, _, stem = name.partition("_")
        if layer not in RANK:  # the generated kernel sources
            continue
        nm_symbols(obj, defined, used, f"{layer}/{stem}.c")
    return defined, used


def check_flat(build, errors):
    """Circles between the files of each program folder (every target's objects of that folder)."""
    checked = 0
    for folder in FLAT:
        defined, used = {}, {}
        for obj in sorted(glob.glob(os.path.join(build, folder, "*.p", "*.c.o"))):
            name = os.path.basename(obj)[:-len(".c.o")]
            if name.startswith("meson-generated"):
                continue
            nm_symbols(obj, defined, used, f"{folder}/{name}.c")
        owner = {sym: f for f, syms in defined.items() for sym in syms}
        edges = collections.defaultdict(set)
        for f, syms in used.items():
            edges[f] |= {owner[s] for s in syms if s in owner and owner[s] != f}
        for comp in circles(edges):
            errors.append("files calling each other around a circle: " + " <-> ".join(comp))
        checked += len(defined)
    return checked


def circles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def check_calls(build, errors, graph):
    defined, used = object_symbols(build)
    owner = {sym: f for f, syms in defined.items() for sym in syms}
    edges = {f: set() for f in used}  # every file, those that call no other too
    for f, syms in used.items():
        for sym in sorted(syms):
            g = owner.get(sym)
            if g and g != f:
                if g not in edges[f] and not may_use(f.split("/")[0], g.split("/")[0]):
                    errors.append(f"{f} calls {sym} of {g}: {f.split('/')[0]}/ may not use {g.split('/')[0]}/")
                edges[f].add(g)
    for comp in circles(edges):
        errors.append("files calling each other around a circle: " + " <-> ".join(comp))
    if graph:
        for f in sorted(edges):
            print(f"{f} -> {' '.join(sorted(edges[f])) or '(nothing)'}")
    return sum(len(v) for v in edges.values()), len(edges)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="a built build folder: check the calls too")
    ap.add_argument("--graph", action="store_true", help="print the file -> file call edges")
    args = ap.parse_args()
    errors = []
    check_includes(errors)
    summary = "includes"
    if args.build:
        n_edges, n_files = check_calls(args.build, errors, args.graph)
        summary += f" and calls ({n_files} files, {n_edges} file -> file edges)"
        summary += f"; {check_flat(args.build, errors)} files of {', '.join(f + '/' for f in FLAT)} for circles"
    for e in errors:
        print(e, file=sys.stderr)
    layers = " < ".join("/".join(g) for g in LAYERS)
    print(f"check_layers: {summary}: {len(errors)} violations; layers {layers}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
