"""The programs in examples/ are plain NumPy; compiled, they must give NumPy's results."""
import importlib.util
import pathlib

import numpy as np
import pytest

import fastlaunch as fl

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

CASES = {
    "kmeans": ("kmeans_step", dict(n=3000, k=5)),
    "softmax": ("softmax", dict(rows=33, cols=100)),
    "black_scholes": ("black_scholes", dict(n=10001)),
    "diffusion": ("diffusion_step", dict(n=67)),
    "particles": ("particle_step", dict(n=5003, grid=16)),
    "dask_pipeline": ("block_step", dict(n=10007)),
}


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_matches_numpy(name):
    fn_name, sizes = CASES[name]
    module = load(name)
    fn = getattr(module, fn_name)
    compiled = fl.compile(fn)
    for seed in (0, 1):
        args = module.example_inputs(seed=seed, **sizes)
        want, got = fn(*args), compiled(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert np.asarray(g).dtype == np.asarray(w).dtype
            assert np.shape(g) == np.shape(w)
            if np.asarray(w).dtype.kind in "iub":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    assert compiled.stats["traces"] == 1   # the second seed replayed


def test_dask_pipeline_example_runs_as_a_script():
    """The copyable Dask example, as a user runs it (threaded scheduler, small sizes)."""
    pytest.importorskip("dask.array")
    import os
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(EXAMPLES / "dask_pipeline.py"), "--n", "40000",
                           "--chunk", "10000"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr
    assert "results equal to NumPy's" in done.stdout
