#!/usr/bin/env python3
"""Fails when modules of a Rust crate import each other in a loop.

Usage: import_loops.py SRC_DIR...

Each file is a module (`a/b.rs` and `a/b/mod.rs` are `a::b`). A reference
`crate::x::y::Item`, or `super::...` resolved from the file's module, is an edge to
the deepest module file it names. A child using its parent's items is not an edge
(a parent owns its children); comments and string literals are not read. Prints each
loop, the files in it and the names that tie them, and exits 1 if there is one.
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super)((?:::\w+)+)")
GROUP = re.compile(r"\b(crate|super)((?:::\w+)*)::\{([^{}]*)\}")
LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)


def modules(src):
    found = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                parts = os.path.relpath(path, src)[:-3].split(os.sep)
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                found[tuple(parts)] = path
    return found


def edges_of(module, path, found):
    text = LITERAL.sub('""', open(path, encoding="utf-8").read())
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
    refs = [(base, rest.split("::")[1:]) for base, rest in PATH.findall(text)]
    for base, head, inner in GROUP.findall(text):
        for item in inner.split(","):
            refs.append((base, head.split("::")[1:] + item.strip().split("::")))
    out = {}
    for base, parts in refs:
        parts = [p for p in parts if p]
        if base == "super":
            parts = list(module[:-1]) + parts
        target = next(
            (tuple(parts[:k]) for k in range(len(parts), 0, -1) if tuple(parts[:k]) in found),
            None,
        )
        if target is None or target == module or module[: len(target)] == target:
            continue
        out.setdefault(target, set()).add("::".join(parts[len(target):]) or "*")
    return out


def loops(graph):
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    bad = 0
    for src in sys.argv[1:]:
        found = modules(src)
        graph = {m: edges_of(m, p, found) for m, p in found.items()}
        name = lambda m: "::".join(m) or "(root)"
        for group in loops(graph):
            bad += 1
            print(f"{src}: an import loop of {len(group)} modules:")
            for m in group:
                for t, items in sorted(graph[m].items()):
                    if t in group:
                        print(f"  {name(m)} -> {name(t)}: {', '.join(sorted(items))}")
        print(f"{src}: {len(found)} modules, {'no' if not bad else bad} import loops")
    sys.exit(1 if bad else 0)


main()
