"""env.py is the one place the FASTLAUNCH_* environment variables are read (issue 26): no other
module of the package reads the environment for them, every variable env.py reads is in its
docstring and in the README's table, and the ones that used to be read elsewhere are checked
with a clear error."""
import ast
import os
import re

import pytest

import fastlaunch
from fastlaunch import env

PACKAGE = os.path.dirname(fastlaunch.__file__)
README = os.path.join(os.path.dirname(PACKAGE), "README.md")


def _sources():
    for dirpath, _, files in os.walk(PACKAGE):
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            if f.endswith((".py", ".pyx", ".pxd", ".c", ".h")) and not (
                    f.endswith(".c") and os.path.exists(path[:-2] + ".pyx")):   # generated C
                yield path


def _python_reads(path: str) -> list:
    """Reads of os.environ / os.getenv whose key is not a literal other than FASTLAUNCH_*:
    os.environ.get(k), os.environ[k], k in os.environ, os.getenv(k)."""
    out = []
    for node in ast.walk(ast.parse(open(path).read())):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "getenv" or node.func.attr in ("get", "pop", "setdefault")
                and ast.unparse(node.func.value) == "os.environ"):
            key = node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            key = node.slice
        elif isinstance(node, ast.Compare) and any(ast.unparse(c) == "os.environ"
                                                   for c in node.comparators):
            key = node.left
        else:
            continue
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)
                and not key.value.startswith("FASTLAUNCH_")):
            out.append(f"{os.path.relpath(path, PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_but_env_reads_a_fastlaunch_variable():
    """Before: FASTLAUNCH_NO_LIBMVEC (cpu.py), FASTLAUNCH_LIBDEVICE, FASTLAUNCH_PTXAS,
    FASTLAUNCH_CUDA_ARCH (cuda.py), FASTLAUNCH_CACHE_DIR, FASTLAUNCH_CACHE_TRUST (backends/cache.py),
    FASTLAUNCH_BACKEND (device.py) and FASTLAUNCH_LIBCUDA (cuda_driver.c) were read outside
    env.py, unchecked."""
    found = []
    for path in _sources():
        if path == os.path.join(PACKAGE, "env.py"):
            continue
        if path.endswith(".py"):
            found += _python_reads(path)
        else:
            text = open(path).read()
            found += [f"{os.path.relpath(path, PACKAGE)}: {m.group(0)}" for m in
                      re.finditer(r"(getenv|secure_getenv|environ)\b[^\n]*", text)
                      if "FASTLAUNCH" in m.group(0) or "environ" in m.group(0)]
    assert not found, "read the environment through fastlaunch/env.py:\n" + "\n".join(found)


def _env_variables() -> set:
    return set(re.findall(r'"(FASTLAUNCH_[A-Z_]+)"', open(os.path.join(PACKAGE, "env.py")).read()))


def test_every_variable_is_documented():
    variables = _env_variables()
    assert {"FASTLAUNCH_MATH", "FASTLAUNCH_LIBCUDA", "FASTLAUNCH_NO_LIBMVEC"} <= variables
    readme = open(README).read()
    for name in variables:
        assert name in env.__doc__, f"{name}: not in env.py's docstring"
        if name != "FASTLAUNCH_NO_LIBMVEC":          # a testing switch
            assert f"`{name}`" in readme, f"{name}: not in the README's Environment table"


def test_the_math_default_is_documented_as_it_is(monkeypatch):
    """Before: env.py's docstring said "inline" was the default; it is "auto"."""
    monkeypatch.delenv("FASTLAUNCH_MATH", raising=False)
    assert env.math_mode() == "auto"
    assert '"auto" (the default' in env.__doc__ and '"inline" (the default' not in env.__doc__


@pytest.mark.parametrize("name, value, reader, expected", [
    ("FASTLAUNCH_CACHE_TRUST", "shraed", env.cache_trust, "expected 'shared' or 'private'"),
    ("FASTLAUNCH_NO_LIBMVEC", "maybe", env.no_libmvec, "expected one of 1, true"),
    ("FASTLAUNCH_CUDA_ARCH", "ampere", env.cuda_arch, "expected a GPU arch such as sm_80"),
    ("FASTLAUNCH_LIBDEVICE", "/nonexistent/libdevice.10.bc", env.libdevice_path,
     "expected the path of libdevice.10.bc"),
    ("FASTLAUNCH_PTXAS", "/nonexistent/ptxas", env.ptxas_path, "expected the path of ptxas"),
])
def test_a_bad_value_names_the_variable(monkeypatch, name, value, reader, expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(env.EnvironmentVariableError, match=re.escape(f"{name}={value!r}: ")) \
            as caught:
        reader()
    assert expected in str(caught.value)


def test_the_values_that_mean_something(monkeypatch, tmp_path):
    for name in ("FASTLAUNCH_CACHE_DIR", "FASTLAUNCH_LIBDEVICE", "FASTLAUNCH_PTXAS"):
        monkeypatch.delenv(name, raising=False)
    assert env.cache_dir() is None and env.libdevice_path() is None and env.ptxas_path() is None
    for name in ("FASTLAUNCH_CACHE_DIR", "FASTLAUNCH_LIBDEVICE", "FASTLAUNCH_PTXAS"):
        monkeypatch.setenv(name, "")                 # set empty: none (not the default)
    assert env.cache_dir() == "" and env.libdevice_path() == "" and env.ptxas_path() == ""
    tool = tmp_path / "ptxas"
    tool.write_text("#!/bin/sh\n")
    monkeypatch.setenv("FASTLAUNCH_PTXAS", str(tool))
    with pytest.raises(env.EnvironmentVariableError):        # not executable
        env.ptxas_path()
    tool.chmod(0o755)
    assert env.ptxas_path() == str(tool)
    monkeypatch.setenv("FASTLAUNCH_CACHE_TRUST", " Shared ")
    assert env.cache_trust() == "shared"
    monkeypatch.setenv("FASTLAUNCH_NO_LIBMVEC", "off")
    assert env.no_libmvec() is False
    monkeypatch.setenv("FASTLAUNCH_CUDA_ARCH", "sm_90a")
    assert env.cuda_arch() == "sm_90a"


def test_an_unknown_cuda_arch_from_the_environment_names_the_variable(monkeypatch):
    from fastlaunch.backends import cuda
    monkeypatch.setenv("FASTLAUNCH_CUDA_ARCH", "sm_12")
    with pytest.raises(env.EnvironmentVariableError, match="FASTLAUNCH_CUDA_ARCH='sm_12'"):
        cuda.CUDABackend(cache_dir=None)
