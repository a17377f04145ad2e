#!/usr/bin/env python3
"""The shape of the code, checked (run by scripts/check-graph.sh, a gate of scripts/test.sh).

1. Import circles: within each crate, the modules (one per source file) and the
   `crate::`, `super::`, `self::` and child-module paths each file names. A path to an
   item that a module re-exports (`pub use child::Item`) counts as a path to the module
   that defines it. The crate root (lib.rs / main.rs) is not a node: it declares and
   re-exports. Fails on a circle among a crate's modules.
2. The crate graph: regenerated from `cargo metadata` into the block of docs/design.md
   between `<!-- crate-graph:begin -->` and `<!-- crate-graph:end -->`. With `--fix` the
   block is rewritten; without it the check fails when the checked-in block is stale.
4. Environment variables: every `CKPTFS_*` variable the code reads (crates' sources,
   the Python package, scripts/test.sh, .ci/run, tests/*/run.sh) is in docs/design.md's table between
   `<!-- env-table:begin -->` and `<!-- env-table:end -->`, and every one there is read.
3. Forbidden dependencies: no library crate depends (normal dependencies) on the
   benchmark crate, the network simulator, clap or anyhow; the C library
   (`cargo tree -e normal -p ckptfs-capi`) links no tokio, fuser, clap or node daemon.

Usage: check_graph.py [--fix] [--imports-only] [--list-imports]
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Crates that are programs' code, not libraries: they may use clap and anyhow.
TOOL_CRATES = {
    "ckptfs-cli",  # the ckptfs binary
    "ckptfs-bench",  # the benchmark harness behind `ckptfs bench` (used by the CLI only)
}
# What no library crate may depend on (normal dependencies).
FORBIDDEN_FOR_LIBRARIES = {"ckptfs-bench", "ckptfs-netsim", "clap", "anyhow"}
# What the C library must not link.
FORBIDDEN_IN_CAPI = {"tokio", "fuser", "clap", "ckptfs-node"}

# Known exceptions: (crate, dependency) -> why. Delete an entry when it is fixed.
ALLOWED_DEPS = {
    # An optional dependency behind the `cli` feature, which only the ckptfs binary
    # enables (the `ckptfs policy` subcommands); a daemon using the policy links no clap.
    ("ckptfs-policy", "clap"): "optional, feature `cli`",
}
# What the C library may still link (nothing: the pool and partner clients are blocking),
# and import circles still allowed, per crate.
ALLOWED_IN_CAPI: set = set()
ALLOWED_CIRCLE_CRATES: set = set()
# Circles known when inline paths (`crate::x::f()`) were first counted (round 3), each
# exactly as found: a circle that changes (a module joins or leaves) fails, so no new
# one hides behind them. Delete an entry when its crate is split.
ALLOWED_CIRCLES = {
}

# `--use-only`: count `use` lines only (the check before round 3).
USE_ONLY = "--use-only" in sys.argv[1:]

BEGIN = "<!-- crate-graph:begin -->"
END = "<!-- crate-graph:end -->"


# ---------------------------------------------------------------------------
# Rust source reading
# ---------------------------------------------------------------------------


def strip_code(src):
    """The source with comments, string and char literals blanked (lengths kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            close = '"' + m.group(1)
            j = src.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}, self}` -> [['a','b'], ['a','c','d'], ['a','c','e'], ['a']]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def go(prefix, s):
        if "{" in s:
            head, rest = s.split("{", 1)
            rest = rest[: rest.rfind("}")]
            head_parts = [p for p in head.split("::") if p]
            res = []
            for part in split_top(rest):
                res.extend(go(prefix + head_parts, part))
            return res
        s = s.split(" as ", 1)[0]
        parts = [p for p in s.split("::") if p]
        if parts and parts[-1] in ("self", "*"):
            parts = parts[:-1]
        return [prefix + parts]

    return go([], tree)


class Module:
    def __init__(self, path, file, is_dir):
        self.path = path  # list of components; [] is the crate root
        self.file = file
        self.is_dir = is_dir  # mod.rs / lib.rs: its children live beside it
        self.children = set()
        self.reexports = {}  # name -> absolute path (components)
        self.refs = []  # (absolute path components, line)


def crate_modules(src_dir, root_file):
    """Every file module of the crate reachable from its root, by `mod x;` declarations."""
    mods = {}

    def load(path, file, is_dir):
        m = Module(path, file, is_dir)
        mods[tuple(path)] = m
        with open(file, encoding="utf-8") as f:
            m.src = f.read()
        m.code = strip_code(m.src)
        base = os.path.dirname(file) if is_dir else os.path.splitext(file)[0]
        for dm in re.finditer(r"(?m)^[ \t]*(?:#\[[^\]]*\][ \t]*\n[ \t]*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", m.code):
            name = dm.group(1)
            attr = re.search(r'#\[path\s*=\s*"([^"]+)"\]', m.src[dm.start() : dm.end()])
            if attr:
                f2 = os.path.join(os.path.dirname(file), attr.group(1))
                cand = [(f2, False)]
            else:
                cand = [(os.path.join(base, name + ".rs"), False), (os.path.join(base, name, "mod.rs"), True)]
            for f2, d2 in cand:
                if os.path.exists(f2):
                    m.children.add(name)
                    load(path + [name], f2, d2)
                    break
        return m

    load([], os.path.join(src_dir, root_file), True)
    return mods


def inline_mod_ranges(code):
    """(start, end) of each inline `mod x { ... }` block, cfg(test) or not."""
    ranges = []
    for m in re.finditer(r"\bmod\s+\w+\s*\{", code):
        ranges.append((m.end() - 1, matching_brace(code, m.end() - 1)))
    return ranges


def test_ranges(src_code):
    """Ranges of `#[cfg(test)] mod ... { }` blocks (their paths are not the crate's graph)."""
    out = []
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub\s+)?mod\s+\w+\s*\{", src_code):
        out.append((m.start(), matching_brace(src_code, m.end() - 1)))
    return out


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def collect_refs(mods):
    for key, m in mods.items():
        code = m.code
        tests = test_ranges(code)
        inl = inline_mod_ranges(code)

        def in_ranges(pos, rs):
            return sum(1 for a, b in rs if a <= pos <= b)

        def absolute(parts, pos):
            """Absolute module path of a path written at `pos` in this file, or None."""
            if not parts:
                return None
            depth = in_ranges(pos, inl)
            if parts[0] == "crate":
                return parts[1:]
            if parts[0] == "super":
                k = 0
                while k < len(parts) and parts[k] == "super":
                    k += 1
                k -= depth  # `super` of an inline module is this file
                if k < 0:
                    return None
                if k > len(m.path):
                    return None
                return list(m.path[: len(m.path) - k]) + parts[k + depth :]
            if parts[0] == "self":
                if depth:
                    return None
                return list(m.path) + parts[1:]
            if parts[0] in m.children and depth == 0:
                return list(m.path) + parts
            return None

        # `use` statements (trees) and `pub use` re-exports.
        use_spans = []
        for u in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
            pos = u.start()
            use_spans.append((u.start(), u.end()))
            if re.search(r"#\[cfg\(doc\)\]\s*$", m.src[:pos]):
                continue  # an import for doc links only
            if in_ranges(pos, tests):
                continue
            for parts in expand_use_tree(u.group(2)):
                a = absolute(parts, pos)
                if a is None:
                    continue
                line = code.count("\n", 0, pos) + 1
                m.refs.append((a, line))
                if u.group(1) and parts and in_ranges(pos, inl) == 0:
                    m.reexports[parts[-1]] = a
        if USE_ONLY:
            continue
        # Paths in expressions and types: crate::a::b, super::x, child::y.
        for p in re.finditer(r"(?<![\w:])((?:crate|super|self|" + IDENT + r")(?:::" + IDENT + r")+)", code):
            pos = p.start()
            if in_ranges(pos, tests):
                continue
            if in_ranges(pos, use_spans):  # handled above
                continue
            parts = p.group(1).split("::")
            a = absolute(parts, pos)
            if a is None:
                continue
            m.refs.append((a, code.count("\n", 0, pos) + 1))


def resolve(mods, parts, depth=0):
    """The file module a path lands in (following re-exports), as a tuple."""
    best = ()
    for k in range(len(parts), -1, -1):
        if tuple(parts[:k]) in mods:
            best = tuple(parts[:k])
            break
    rest = parts[len(best) :]
    if rest and depth < 8:
        target = mods[best].reexports.get(rest[0])
        if target is not None and list(target) != list(parts):
            return resolve(mods, list(target) + rest[1:], depth + 1)
    return best


def module_graph(mods):
    edges = {}
    for key, m in mods.items():
        if key == ():
            continue
        for a, line in m.refs:
            t = resolve(mods, a)
            if t == () or t == key:
                continue
            # A module and the modules inside it are one unit: a child names its
            # parent's items (`super::`), the parent declares and re-exports its children.
            if t[: len(key)] == key or key[: len(t)] == t:
                continue
            edges.setdefault(key, {}).setdefault(t, line)
    return edges


def find_cycles(nodes, edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def modname(k):
    return "::".join(k) if k else "crate"


def check_imports(packages, list_imports):
    failures = []
    for pkg in packages:
        for tgt in pkg["targets"]:
            if not set(tgt["kind"]) & {"lib", "bin", "cdylib", "staticlib", "rlib"}:
                continue
            src = tgt["src_path"]
            mods = crate_modules(os.path.dirname(src), os.path.basename(src))
            collect_refs(mods)
            edges = module_graph(mods)
            name = pkg["name"] + ("" if "bin" not in tgt["kind"] else f" (bin {tgt['name']})")
            if list_imports:
                for k in sorted(edges):
                    print(f"{name}: {modname(k)} -> {', '.join(modname(t) for t in sorted(edges[k]))}")
            for comp in find_cycles(mods.keys() - {()}, edges):
                files = {modname(k): os.path.relpath(mods[k].file, ROOT) for k in comp}
                lines = []
                for a in comp:
                    for b, line in sorted(edges.get(a, {}).items()):
                        if b in comp:
                            lines.append(f"    {files[modname(a)]}:{line}: {modname(a)} -> {modname(b)}")
                msg = f"{name}: import circle among {', '.join(modname(k) for k in comp)}\n" + "\n".join(lines)
                known = ALLOWED_CIRCLES.get((name, frozenset(modname(k) for k in comp)))
                if pkg["name"] in ALLOWED_CIRCLE_CRATES:
                    print(f"allowed (removed by the level split): {msg.splitlines()[0]}")
                elif known:
                    print(f"allowed (known, to split: {known}): {msg.splitlines()[0]}")
                else:
                    failures.append(msg)
    return failures


# ---------------------------------------------------------------------------
# Crate graph and dependency rules
# ---------------------------------------------------------------------------


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def is_library(pkg):
    return pkg["name"] not in TOOL_CRATES and any("lib" in t["kind"] or "cdylib" in t["kind"] for t in pkg["targets"])


def graph_block(packages):
    names = {p["name"] for p in packages}
    lines = [
        BEGIN,
        "<!-- generated by scripts/check-graph.sh --fix from `cargo metadata`; do not edit -->",
        "",
        "```mermaid",
        "graph TD",
    ]
    table = ["", "| crate | depends on (ckptfs crates) | dev-only |", "|---|---|---|"]
    for p in sorted(packages, key=lambda p: p["name"]):
        normal = sorted({d["name"] for d in p["dependencies"] if d["name"] in names and d["kind"] is None})
        dev = sorted({d["name"] for d in p["dependencies"] if d["name"] in names and d["kind"] == "dev"} - set(normal))
        for d in normal:
            lines.append(f"  {p['name']} --> {d}")
        short = lambda xs: ", ".join(x.removeprefix("ckptfs-") for x in xs) or "none"
        table.append(f"| {p['name']} | {short(normal)} | {short(dev) if dev else ''} |")
    lines.append("```")
    lines.extend(table)
    lines.append("")
    lines.append(END)
    return "\n".join(lines)


def check_design_block(packages, fix):
    path = os.path.join(ROOT, "docs", "design.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < 0:
        return [f"docs/design.md: no {BEGIN} ... {END} block"]
    new = text[:b] + graph_block(packages) + text[e + len(END) :]
    if new == text:
        return []
    if fix:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        print("docs/design.md: crate graph rewritten")
        return []
    return ["docs/design.md: the crate graph block is stale (run scripts/check-graph.sh --fix)"]


def check_deps(packages):
    failures = []
    for p in packages:
        if not is_library(p):
            continue
        for d in p["dependencies"]:
            if d["kind"] is not None or d["name"] not in FORBIDDEN_FOR_LIBRARIES:
                continue
            if (p["name"], d["name"]) in ALLOWED_DEPS and d.get("optional"):
                continue
            failures.append(f"{p['name']}: library crate depends on {d['name']}")
    tree = subprocess.run(
        ["cargo", "tree", "-e", "normal", "-p", "ckptfs-capi", "--prefix", "none", "--offline"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    linked = {line.split()[0] for line in tree.splitlines() if line.strip()}
    for bad in sorted(FORBIDDEN_IN_CAPI & linked):
        if bad in ALLOWED_IN_CAPI:
            print(f"allowed (removed by the level split): ckptfs-capi links {bad}")
        else:
            failures.append(f"ckptfs-capi: `cargo tree -e normal -p ckptfs-capi` contains {bad}")
    return failures


def self_test():
    """The import check on made-up crates: a circle found, the allowed shapes not."""
    import tempfile

    cases = {
        # a <-> b through `use`: a circle
        "circle": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\npub struct A;\n",
                    "b.rs": "use crate::a::A;\npub struct B;\n"}, 1),
        # a -> b through a re-export at the root, b -> a through super: a circle
        "reexport": ({"lib.rs": "mod a;\nmod b;\npub use b::B;\n", "a.rs": "use crate::B;\npub struct A;\n",
                      "b.rs": "use super::a::{self, A};\npub struct B;\n"}, 1),
        # a parent and its child name each other: one unit, no circle
        "parent": ({"lib.rs": "mod p;\n", "p/mod.rs": "mod c;\npub use c::C;\npub struct P;\n",
                    "p/c.rs": "use super::P;\npub struct C;\n"}, 0),
        # a test module's `use super::*` and a comment or string naming crate::b: no circle
        "tests": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\npub struct A;\n",
                   "b.rs": "// use crate::a::A;\nconst S: &str = \"use crate::a::A;\";\n"
                           "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n"}, 0),
    }
    bad = 0
    for name, (files, want) in cases.items():
        with tempfile.TemporaryDirectory(prefix="check-graph-") as d:
            for f, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, f)), exist_ok=True)
                with open(os.path.join(d, f), "w") as fh:
                    fh.write(text)
            mods = crate_modules(d, "lib.rs")
            collect_refs(mods)
            got = len(find_cycles(mods.keys() - {()}, module_graph(mods)))
            if got != want:
                print(f"self-test {name}: {got} circles, expected {want}", file=sys.stderr)
                bad += 1
    print("check-graph self-test: " + ("FAILED" if bad else "ok"))
    return 1 if bad else 0


# Names that are C constants or test data, not variables.
NOT_VARIABLES = re.compile(
    r"^CKPTFS_((KIND|LEVEL|MOUNT|STATE|VERSION)_[A-Z_]*|H|VELOC_H|NAME_MAX|PATH_MAX|OPTIONS_INIT"
    r"|CHUNK_MEMORY|CHUNK_SPILL|MAGIC|VERSION|X|TEST_KEY_X)$"
)


def check_env_table():
    names = set()
    roots = [os.path.join(ROOT, "crates"), os.path.join(ROOT, "python")]
    files = [os.path.join(ROOT, "scripts", "test.sh"), os.path.join(ROOT, ".ci", "run")]
    tests = os.path.join(ROOT, "tests")
    files += [os.path.join(tests, d, "run.sh") for d in sorted(os.listdir(tests))]
    files = [f for f in files if os.path.exists(f)]
    for r in roots:
        for dirpath, dirnames, filenames in os.walk(r):
            dirnames[:] = [d for d in dirnames if d not in ("target", "tests", "examples", "__pycache__")]
            files += [os.path.join(dirpath, f) for f in filenames if f.endswith((".rs", ".py", ".c", ".h"))]
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            names |= set(re.findall(r"\bCKPTFS_[A-Z0-9_]*[A-Z0-9]\b", fh.read()))
    names = {n for n in names if not NOT_VARIABLES.match(n)}
    with open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8") as fh:
        text = fh.read()
    b, e = text.find("<!-- env-table:begin -->"), text.find("<!-- env-table:end -->")
    if b < 0 or e < 0:
        return ["docs/design.md: no env-table block"]
    table = set(re.findall(r"\bCKPTFS_[A-Z0-9_]*[A-Z0-9]\b", text[b:e]))
    out = [f"{n}: read by the code, missing from docs/design.md's environment table" for n in sorted(names - table)]
    out += [f"{n}: in docs/design.md's environment table, read nowhere" for n in sorted(table - names)]
    return out


def main():
    args = set(sys.argv[1:])
    if "--self-test" in args:
        return self_test()
    meta = metadata()
    members = set(meta["workspace_members"])
    packages = [p for p in meta["packages"] if p["id"] in members]
    failures = check_imports(packages, "--list-imports" in args)
    if "--imports-only" not in args:
        failures += check_design_block(packages, "--fix" in args)
        failures += check_deps(packages)
        failures += check_env_table()
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    if failures:
        return 1
    print("check-graph: no import circle, crate graph current, no forbidden dependency, every variable listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
