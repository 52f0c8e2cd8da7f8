"""The module graph of fastlaunch has no cycles (every import counts, also those inside
functions, and the Cython modules' imports and cimports: a .pyx and its .pxd are one module),
and no module imports the package __init__.

One package is one node of the graph: the families of the traced NumPy surface
(fastlaunch/frontend/numpy/) call each other's functions, as numpy_api.py and numpy_funcs.py
did inside one module each before issue 26 split them.  Within it, the imports that run while a
family is imported (its top, before its first definition) must follow the package's
FAMILY_ORDER, and importing any of its modules first works (both checked below)."""
import ast
import os
import re
import subprocess
import sys

import fastlaunch

ROOT = os.path.dirname(fastlaunch.__file__)
UNITS = ("fastlaunch.frontend.numpy",)


def _unit(name: str) -> str:
    for u in UNITS:
        if name.startswith(u + "."):
            return u
    return name


def modules() -> dict:
    """module name -> its source paths: a .py file, or a Cython module's .pyx and .pxd."""
    out: dict = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in sorted(files):
            if f.endswith((".py", ".pyx", ".pxd")):
                rel = os.path.relpath(os.path.join(dirpath, f), os.path.dirname(ROOT))
                name = rel.rsplit(".", 1)[0].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[:-9]
                out.setdefault(name, []).append(os.path.join(dirpath, f))
    return out


# Cython's import statements (a .pyx is not Python): `import a.b [as c], d`, `cimport a`,
# `from a.b import x, y` / `cimport (x,\n y)`; comments and strings aside, at a line's start
_CYTHON_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<mod>[\w.]+)[ \t]+c?import[ \t]+(?P<names>\([^)]*\)|[^\n#]*)"
    r"|c?import[ \t]+(?P<plain>[^\n#]*))", re.M)


def cython_imports(text: str) -> list:
    """(module, [names]) per import or cimport of a Cython source; names [] for `import m`."""
    out = []
    for m in _CYTHON_IMPORT.finditer(text):
        if m.group("mod"):
            names = [n.split(" as ")[0].strip() for n in m.group("names").strip("()").split(",")]
            out.append((m.group("mod"), [n for n in names if n and n != "*"]))
        else:
            out += [(n.split(" as ")[0].strip(), []) for n in m.group("plain").split(",")]
    return out


def _statements(path: str, package: str) -> list:
    """(module, [names]) per import statement of a source file, relative imports resolved."""
    text = open(path).read()
    if not path.endswith(".py"):
        return cython_imports(text)
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, [a.name for a in node.names]))
    return out


def imports_of(name: str, path: str, known: set) -> set:
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for mod, names in _statements(path, package):
        # `from . import ops` imports fastlaunch.ir.ops, not the package's __init__
        subs = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in known]
        targets = subs if names and len(subs) == len(names) else [mod] + subs
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph(units: bool = True) -> dict:
    """module -> the modules it imports; with `units`, the modules of each of UNITS as one."""
    mods = modules()
    known = set(mods)
    g = {m: set().union(*(imports_of(m, p, known) for p in paths))
         for m, paths in mods.items()}
    if not units:
        return g
    out: dict = {}
    for m, deps in g.items():
        u = _unit(m)
        out.setdefault(u, set()).update(_unit(d) for d in deps)
        out[u].discard(u)
    return out


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


def test_cython_modules_are_in_the_graph():
    """Before: only .py files were read, so a cycle through a .pyx (_core imported pytree,
    pytree imported _core) went unseen."""
    g = graph()
    assert {"fastlaunch.frontend.pytree", "fastlaunch.env", "fastlaunch._launch"} <= g["fastlaunch._core"]
    assert "fastlaunch._core" in g["fastlaunch._cuda"] and "fastlaunch._core" in g["fastlaunch._devsim"]
    assert "fastlaunch.errors" in g["fastlaunch._cuda"]
    assert cython_imports("from a.b cimport (x,\n    y as z)\nimport c, d.e as f  # g\n"
                          "    from h import *\n") == \
        [("a.b", ["x", "y"]), ("c", []), ("d.e", []), ("h", [])]


def test_a_cycle_through_a_cython_module_is_found():
    g = graph()
    g["fastlaunch.frontend.pytree"] = g["fastlaunch.frontend.pytree"] | {"fastlaunch._core"}
    cycle = find_cycle(g)
    assert cycle is not None and "fastlaunch._core" in cycle and "fastlaunch.frontend.pytree" in cycle


def _top_imports(path: str, package: str) -> set:
    """The sibling modules a module imports before its first definition."""
    tree = ast.parse(open(path).read())
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign)):
            break
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(f"{package}.{node.module}")
            else:
                out.update(f"{package}.{a.name}" for a in node.names)
    return out


def test_numpy_families_import_in_order():
    from fastlaunch.frontend import numpy as surface
    order = [f"fastlaunch.frontend.numpy.{f}" for f in surface.FAMILY_ORDER]
    for k, fam in enumerate(order):
        path = os.path.join(ROOT, "frontend", "numpy", fam.rsplit(".", 1)[1] + ".py")
        early = _top_imports(path, "fastlaunch.frontend.numpy") & set(order)
        assert early <= set(order[:k]), (fam, sorted(early - set(order[:k])))


def test_each_numpy_module_can_be_imported_first():
    """In a fresh process each (the package's __init__ runs first, then the module)."""
    names = sorted(m for m in modules() if m.startswith("fastlaunch.frontend.numpy."))
    assert len(names) > 8, names
    for name in names:
        out = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True,
                             text=True, cwd=os.path.dirname(ROOT), timeout=300)
        assert out.returncode == 0, f"import {name}:\n{out.stderr}"
