"""The layers' import rules (docs/architecture.md, "The layout"), read from the module graph of
tests/unit/test_imports.py (every import, also inside functions, and the Cython modules'
imports and cimports):

- the IR (fastlaunch/ir/) imports only itself, the shared modules and the opcode enums: never
  the front end, the backends, codegen or the program;
- the tracing front end (fastlaunch/frontend/) never imports the backends, codegen or the
  program;
- codegen imports only itself and the IR (it knows nothing of Python call signatures);
- the backends never import the front end;
- nothing below the public API imports its drivers (jit, iterate, grad) except those
  drivers, the program's artifact/saved modules that consume `Compiled`'s public members,
  and __main__."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_imports import graph  # noqa: E402

SHARED = {"fastlaunch.env", "fastlaunch.errors", "fastlaunch.naming", "fastlaunch.forking",
          "fastlaunch._version"}
RUNTIME_ENUMS = {"fastlaunch._launch"}


def _under(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def _violations(layer: str, allowed) -> list:
    g = graph()
    return sorted(f"{m} -> {d}" for m, deps in g.items() if _under(m, layer)
                  for d in deps if not allowed(d))


def test_the_layers_exist():
    g = graph()
    for pkg in ("fastlaunch.frontend", "fastlaunch.frontend.numpy", "fastlaunch.ir",
                "fastlaunch.program", "fastlaunch.backends", "fastlaunch.codegen"):
        assert pkg in g, pkg
    assert "fastlaunch.ir.graph" in g and "fastlaunch.frontend.trace" in g


def test_ir_imports_only_the_ir_and_shared_modules():
    bad = _violations("fastlaunch.ir", lambda d: _under(d, "fastlaunch.ir") or d in SHARED
                      or d in RUNTIME_ENUMS)
    assert not bad, bad


def test_frontend_never_imports_backends_codegen_or_program():
    bad = _violations("fastlaunch.frontend", lambda d: not any(
        _under(d, p) for p in ("fastlaunch.backends", "fastlaunch.codegen",
                               "fastlaunch.program", "fastlaunch.jit", "fastlaunch.iterate")))
    assert not bad, bad


def test_codegen_imports_only_itself_and_the_ir():
    bad = _violations("fastlaunch.codegen", lambda d: _under(d, "fastlaunch.codegen")
                      or _under(d, "fastlaunch.ir"))
    assert not bad, bad


def test_backends_never_import_the_frontend():
    bad = _violations("fastlaunch.backends", lambda d: not _under(d, "fastlaunch.frontend")
                      and d not in ("fastlaunch.jit", "fastlaunch.iterate", "fastlaunch.grad"))
    assert not bad, bad


def test_a_violation_is_found():
    g = graph()
    g["fastlaunch.ir.fuse"] = g["fastlaunch.ir.fuse"] | {"fastlaunch.backends.cpu"}
    bad = sorted(f"{m} -> {d}" for m, deps in g.items() if _under(m, "fastlaunch.ir")
                 for d in deps if not (_under(d, "fastlaunch.ir") or d in SHARED
                                       or d in RUNTIME_ENUMS))
    assert bad == ["fastlaunch.ir.fuse -> fastlaunch.backends.cpu"]
