"""Every Python code block of README.md runs as written, each in a fresh process (in a scratch
folder, with its own kernel cache), and does what its comments say."""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

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
