"""The public API as a user meets it: help() texts with examples that run, and types that a
checker (mypy) applies to calls of compiled functions, loops and loaded programs."""
import doctest
import inspect
import os
import pathlib
import pydoc
import re
import site
import subprocess
import sys
import textwrap

import pytest

import fastlaunch as fl
from fastlaunch.backends import available_backends

# the callables a user gets from the package; the errors and warnings are documented classes
# without examples
PUBLIC = [name for name in fl.__all__
          if callable(getattr(fl, name)) and not (isinstance(getattr(fl, name), type) and
                                                  issubclass(getattr(fl, name), Warning |
                                                             Exception))]
WITH_EXAMPLES = [name for name in PUBLIC
                 if inspect.isfunction(getattr(fl, name)) or
                 name in ("Compiled", "Iterated", "LoadedProgram")]


def test_every_public_function_has_a_docstring_with_an_example():
    missing = [name for name in WITH_EXAMPLES
               if ">>> " not in (inspect.getdoc(getattr(fl, name)) or "")]
    assert not missing, f"public callables without an example in their docstring: {missing}"
    for name in PUBLIC:
        assert inspect.getdoc(getattr(fl, name)), name


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    """The examples are doctests: they run, and print what they show."""
    monkeypatch.chdir(tmp_path)                   # examples that save programs write here
    tests = doctest.DocTestFinder(recurse=False).find(getattr(fl, name), name, globs={})
    assert tests and tests[0].examples, name
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    out = []
    for t in tests:
        runner.run(t, out=out.append)
    assert runner.failures == 0, "".join(out)


def test_help_of_compile_names_every_backend_and_shows_an_example():
    text = pydoc.render_doc(fl.compile, renderer=pydoc.plaintext)
    for backend in available_backends():
        assert f'"{backend}"' in text, (backend, text)
    assert '"cuda"' in text and "Example:" in text and "@fl.compile" in text


USER_FILE = '''
from __future__ import annotations

import numpy as np
import numpy.typing as npt

import fastlaunch as fl

Array = npt.NDArray[np.float64]


@fl.compile
def step(p: Array, target: Array, lr: float) -> tuple[Array, Array]:
    r = np.sin(p) - target
    return p - lr * 2 * r * np.cos(p), r * r


@fl.compile(static_argnames="n")
def power(x: Array, n: int) -> Array:
    return x ** n


class Model:
    def __init__(self) -> None:
        self.w = np.ones(3)

    @fl.compile
    def forward(self, x: Array) -> Array:
        return self.w * x


p = np.zeros(4)
new_p, loss = step(p, np.full(4, 0.5), 0.1)
q: Array = new_p
y: Array = power(p, n=3)
step.lower(p, p, 0.1)
step.save("step.flp", p, p, 0.1)
loop = fl.iterated(step, 10, carry="p")
out = loop(p, p, 0.1)
p2, losses = fl.iterate(step, 10, p, p, 0.1, carry="p")
loaded = fl.load("step.flp")
loaded(p, p, 0.1)
z: Array = Model().forward(np.ones(3))


def loss_of(p: Array, target: Array) -> float:
    return float(np.mean((p - target) ** 2))


d = fl.grad(loss_of)(p, p)
value, dp = fl.value_and_grad(loss_of)(p, p)

step(p)                       # line 52: missing arguments
step(p, p, "fast")            # line 53: lr is a float
power(p, n="3")               # line 54: n is an int
loop(p)                       # line 55: the loop takes the step's arguments
Model().forward(1, 2)         # line 56: one argument after self
w: int = step(p, p, 0.1)      # line 57: the result type is the function's
fl.grad(loss_of)(p)           # line 58: the gradient takes the function's arguments
fl.value_and_grad(loss_of)(p, "t")  # line 59: and their types
'''


def test_mypy_checks_calls_of_compiled_functions_against_their_parameters(tmp_path):
    """mypy on a user's file: `@fl.compile`, `@fl.compile(...)`, a compiled method, fl.iterated,
    fl.load, fl.grad and fl.value_and_grad are accepted where called as the functions they
    wrap; the wrong calls, and only they, are errors.  (Before: "Too many arguments" on
    every call of a compiled function: compile returned a Union.)"""
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.importorskip("mypy", reason="mypy is in the [test] extra")
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent(USER_FILE).lstrip("\n"))
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    package_root = pathlib.Path(fl.__file__).resolve().parents[1]
    installed = {pathlib.Path(p).resolve() for p in site.getsitepackages() +
                 [site.getusersitepackages()]}
    if package_root not in installed:
        env["MYPYPATH"] = str(package_root)       # a checkout run in place, not installed
    # the package's own modules are checked the way mypy checks an installed package's:
    # followed for their types, their own errors not reported
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), "--show-error-codes", str(user)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    errors = {int(m[1]) for m in re.finditer(r"user\.py:(\d+): error:", done.stdout)}
    assert errors == set(range(52, 60)), "\n".join([done.stdout, done.stderr])
    assert done.returncode == 1
