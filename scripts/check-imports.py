#!/usr/bin/env python3
"""Fails when a crate of the workspace has an import circle.

For each crate's `src/`, every file is a module. A file depends on another when it names it:
`crate::a::b` paths, `super::` paths, and paths through its own child modules. Two graphs
must be free of circles:

- the files of a crate (a module declaring a child with `mod child;` is not a dependency;
  a child naming its parent's items is one, and so is a parent re-exporting a child);
- the crate's top-level modules, its "wings" (`remote`, `run`, `routes`, ...), where a wing
  depends on another when any of its files does.

The crate root is left out as a source (it declares and assembles every module) but not as a
target: a module using an item of `lib.rs` depends on it. Test modules (`tests.rs`, or a `mod tests` block) are left out: they exist to look inside.
Where a crate's wings have an order (`WING_ORDER`, lowest first), a wing may import only
wings below it, and every wing must be placed in the order: a new wing is put on its floor
on purpose, not left wherever it first fits.

Prints every circle and every upward import found and exits non-zero.
Usage: scripts/check-imports.py [CRATE_DIR...]
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["shared-protocol", "seal", "server", "device-agent", "loadtests"]

# Each crate's wings from the ground up (ARCHITECTURE.md draws the same floors).
WING_ORDER = {
    "server": [
        # the ground: time, the error body, tokens, logs, the operator's settings
        "clock", "error", "credentials", "replica_memory", "telemetry", "proxies", "rate_limits", "config",
        # tables
        "store",
        # the domain
        "accounts", "spaces", "devices", "relay", "consoles", "previews", "jobs",
        # this replica's outward parts, and who is told after a commit
        "metrics", "push", "notices", "sweeper",
        # the web
        "state", "auth", "routes", "pages",
    ],
    "device-agent": [
        "test_job", "local", "policy", "sandbox", "changes", "remote", "run", "console",
        "engines", "daemon", "cli",
    ],
}

PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+|[a-z_][a-z0-9_]*::[A-Za-z_][A-Za-z0-9_:]*)")
BRACED = re.compile(r"\b(crate|super|self|[a-z_][a-z0-9_]*)((?:::[a-z_][a-z0-9_]*)*)::\{([^;]*?)\};", re.S)
COMMENT = re.compile(r"//[^\n]*")
TEST_BLOCK = re.compile(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{")


def modules(src):
    """Maps module path tuples (('run', 'lease')) to their files."""
    found = {}
    for folder, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts == ["main"] and os.path.exists(os.path.join(src, "lib.rs")):
                continue  # the binary is its own crate over the library
            if parts in (["lib"], ["main"]):
                parts = []
            if "tests" in parts or parts and parts[-1] in ("tests",):
                continue
            if "bin" in parts[:1]:
                continue
            found[tuple(parts)] = os.path.join(src, rel)
    return found


def strip_tests(text):
    """Drops `#[cfg(test)] mod tests { ... }` blocks and comments."""
    text = COMMENT.sub("", text)
    while True:
        match = TEST_BLOCK.search(text)
        if not match:
            return text
        depth, index = 1, match.end()
        while index < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            index += 1
        text = text[: match.start()] + text[index:]


def resolve(path, here, known):
    """The longest known module a path names, from module `here`."""
    parts = path.split("::")
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    elif parts[0] in ("super", "self"):
        base = here
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
        rest = parts
    else:
        # A relative path only counts when its first segment is a child of `here`.
        if here + (parts[0],) not in known:
            return None
        base, rest = here, parts
    best = base if base in known else None
    for length in range(1, len(rest) + 1):
        candidate = base + tuple(rest[:length])
        if candidate in known:
            best = candidate
    return best


def expand_braces(text):
    """`use crate::a::{b, c::d};` becomes `crate::a::b crate::a::c::d`."""
    out = []
    for match in BRACED.finditer(text):
        prefix = match.group(1) + match.group(2)
        for item in re.split(r"[,\s{}]+", match.group(3)):
            item = item.split(" as ")[0].strip()
            if item and item != "self" and re.match(r"[A-Za-z_]", item):
                out.append(prefix + "::" + item)
            elif item == "self":
                out.append(prefix)
    return out


def edges(known):
    graph = {module: set() for module in known}
    for module, file in known.items():
        if not module:
            continue  # the crate root assembles the crate: it names every module
        with open(file) as handle:
            text = strip_tests(handle.read())
        paths = PATH.findall(text) + expand_braces(text)
        for path in paths:
            target = resolve(path, module, known)
            if target is None or target == module:
                continue
            # A parent naming its own child in `mod child;` never shows up as a path; a
            # child reaching into its ancestor's items is a real dependency.
            graph[module].add(target)
    return graph


def circles(graph):
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(component)

    sys.setrecursionlimit(10000)
    for node in graph:
        if node not in index:
            visit(node)
    return result


def name(module):
    return "::".join(module) or "(crate root)"


def check(crate):
    known = modules(os.path.join(ROOT, crate, "src"))
    graph = edges(known)
    problems = []
    for component in circles(graph):
        problems.append(f"{crate}: files in a circle: " + ", ".join(sorted(map(name, component))))
    wings = {}
    for module, targets in graph.items():
        if not module:
            continue
        wing = module[0]
        wings.setdefault(wing, set())
        for target in targets:
            if target and target[0] != wing:
                wings[wing].add(target[0])
    for wing in list(wings):
        for target in wings[wing]:
            wings.setdefault(target, set())
    problems += upward_imports(crate, wings)
    for component in circles(wings):
        chain = []
        for wing in sorted(component):
            into = sorted(t for t in wings[wing] if t in component)
            chain.append(f"{wing} -> {', '.join(into)}")
        problems.append(f"{crate}: wings in a circle: " + "; ".join(chain))
    return problems


def upward_imports(crate, wings):
    """Every import of a wing from a lower floor, and every wing without a floor."""
    order = WING_ORDER.get(crate)
    if order is None:
        return []
    floor = {wing: index for index, wing in enumerate(order)}
    problems = [
        f"{crate}: wing `{wing}` has no place in WING_ORDER (scripts/check-imports.py)"
        for wing in sorted(wings)
        if wing not in floor
    ]
    for wing in sorted(w for w in wings if w in floor):
        for target in sorted(t for t in wings[wing] if t in floor):
            if floor[target] > floor[wing]:
                problems.append(f"{crate}: `{wing}` imports `{target}`, a wing above it")
    return problems


def main():
    crates = sys.argv[1:] or CRATES
    problems = [problem for crate in crates for problem in check(crate)]
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
