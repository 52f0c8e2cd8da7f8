"""Every Python code block of README.md runs as written, each in a fresh process (in a scratch
folder, with its own kernel cache), and does what its comments say."""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(),
                    re.MULTILINE | re.DOTALL)


def test_the_readme_has_python_samples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path):
    code = BLOCKS[index]
    for module in re.findall(r"^\s*import (dask|distributed)\b", code, re.MULTILINE):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    if 'backend="cuda"' in code:
        try:
            from fastlaunch import _cuda
            why = _cuda.driver_error()
        except ImportError:
            why = "fastlaunch was built without its CUDA extension"
        if why:
            pytest.skip(f"a CUDA sample needs a usable NVIDIA GPU: {why}")
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(code)
    env = dict(os.environ, FASTLAUNCH_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"README block {index}:\n{code}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"README block {index} printed nothing"


@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_readme_pool_sample_traces_once_per_worker(context, tmp_path):
    """The README's process-pool sample, at 20 chunks over its 2 workers, traces `energy` at
    most once per worker (FASTLAUNCH_LOG prints each trace).  Before: once per task (20),
    since each task unpickled the function anew and the worker dropped it after the task."""
    [code] = [b for b in BLOCKS if "ProcessPoolExecutor" in b]
    assert "np.array_split(np.arange(100_000.0), 4)" in code and "ProcessPoolExecutor(2," in code
    code = code.replace("np.arange(100_000.0), 4)", "np.arange(100_000.0), 20)")
    code = code.replace('get_context("spawn")', f'get_context("{context}")')
    script = tmp_path / "pool_sample.py"
    script.write_text(code)
    env = dict(os.environ, FASTLAUNCH_CACHE_DIR=str(tmp_path / "cache"), FASTLAUNCH_LOG="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    x = np.arange(100_000.0)
    assert float(done.stdout) == pytest.approx(float((x * x).sum()), rel=1e-12)
    traces = done.stderr.count("[fastlaunch] traced energy")
    assert 1 <= traces <= 2, f"{traces} traces in a pool of 2 workers:\n{done.stderr[-3000:]}"
