"""Compiled functions and worker tasks that other processes import by name (spawned workers of
concurrent.futures, joblib and Dask unpickle them from here): imported by the tests in
tests/jit/test_pickle.py and tests/ecosystem/."""
import numpy as np

import fastlaunch as fl


@fl.compile
def smooth(x):
    """A module-level compiled function: pickled by reference."""
    return np.where(x > 0, np.sqrt(np.abs(x)), x * x) - x.mean()


def scale_and_shift(x, a, b):
    return np.tanh(x) * a + b


# compiled from a module-level function under another name: pickled by value (its options
# travel with it), the function itself by reference
scaled = fl.compile(scale_and_shift, static_argnums=(2,), max_entries=7)


@fl.compile(static_argnames="power")
def normalise(x, power):
    y = np.abs(x) ** power
    return y / (y.sum() + 1.0)


def numpy_pipeline(x):
    y = np.where(x > 0, np.sqrt(np.abs(x)), x * x) - x.mean()
    return np.tanh(y) * 2.0 + 1


def call_and_report(compiled, *args):
    """Run in a worker: the result, and what the worker had to do to produce it."""
    from fastlaunch.backends import get_backend
    out = compiled(*args)
    return out, {"compiled_kernels": get_backend(compiled.backend.name).compile_count,
                 "traces": compiled.stats["traces"],
                 "programs_loaded": compiled.stats["programs_loaded"],
                 "entries": compiled.stats["entries"]}


def first_call_seconds(payload, args):
    """Run in a fresh worker: unpickle the compiled function, time its first call."""
    import pickle
    import time

    from fastlaunch.backends import get_backend
    t0 = time.perf_counter()
    compiled = pickle.loads(payload)
    t1 = time.perf_counter()
    compiled(*args)
    t2 = time.perf_counter()
    return {"unpickle": t1 - t0, "first_call": t2 - t1,
            "compiled_kernels": get_backend(compiled.backend.name).compile_count,
            "traces": compiled.stats["traces"]}


@fl.compile
def soft_clip(x, lo):
    """Elementwise (no reduction over a chunk's size): a short last chunk is another size of
    the same size class, so its sizes become symbolic (program/symbolic.py)."""
    return np.where(x > lo, np.tanh(x) * 2.0 + 1.0, lo * np.exp(x - lo))


def worker_traces(name):
    """Run in a worker: how often that process traced the compiled function `name`."""
    return globals()[name].stats["traces"]
