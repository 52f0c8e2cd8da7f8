"""The module graph of fastlaunch has no cycles (every import counts, also those inside
functions), and no module imports the package __init__."""
import ast
import os

import fastlaunch

ROOT = os.path.dirname(fastlaunch.__file__)


def modules() -> dict:
    """module name -> source path, for every .py file (and Cython extension) of the package."""
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith((".py", ".pyx")):
                rel = os.path.relpath(os.path.join(dirpath, f), os.path.dirname(ROOT))
                name = rel.rsplit(".", 1)[0].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[:-9]
                out[name] = os.path.join(dirpath, f)
    return out


def imports_of(name: str, path: str, known: set) -> set:
    tree = ast.parse(open(path).read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from . import ops` imports fastlaunch.ops, not the package's __init__
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
            targets = subs if len(subs) == len(node.names) else [mod] + subs
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> dict:
    mods = modules()
    known = set(mods)
    return {m: imports_of(m, p, known) if p.endswith(".py") else set()
            for m, p in mods.items()}


def find_cycle(g: dict):
    state: dict = {}
    stack: list = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                c = visit(n)
                if c:
                    return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def test_no_import_cycles():
    g = graph()
    cycle = find_cycle(g)
    assert cycle is None, " -> ".join(cycle)


def test_no_module_imports_the_package():
    g = graph()
    offenders = [m for m, deps in g.items() if "fastlaunch" in deps and m != "fastlaunch"]
    assert not offenders, offenders
