"""The machine checks, run by the README's test command (and so by .ci/run): ruff over the
repository and mypy over fastlaunch/, with their settings in pyproject.toml.  (The import-cycle
check, .pyx imports and cimports included, is tests/unit/test_imports.py.)  Both tools are in
the [test] extra; where one is not installed its test is skipped, saying so."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_tool(module: str, args: list, timeout: int) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]' installs it)")
    return subprocess.run([sys.executable, "-m", module] + args, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_ruff_finds_nothing():
    out = _run_tool("ruff", ["check", "--no-cache", "--output-format", "concise", "."], 600)
    assert out.returncode == 0, f"ruff check (pyproject.toml [tool.ruff]):\n{out.stdout}{out.stderr}"


def test_mypy_finds_nothing():
    # its cache (.mypy_cache, ignored by git) makes a second run take seconds
    out = _run_tool("mypy", [], 1200)
    assert out.returncode == 0, f"mypy (pyproject.toml [tool.mypy]):\n{out.stdout}{out.stderr}"
