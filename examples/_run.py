"""Shared by the examples: run one function with NumPy and compiled, check, and time both."""
import time

import numpy as np

import fastlaunch as fl


def compare(fn, args, repeats=20):
    compiled = fl.compile(fn)
    want, got = fn(*args), compiled(*args)
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    times = {}
    for name, f in (("numpy", fn), ("fastlaunch", compiled)):
        f(*args)
        t0 = time.perf_counter()
        for _ in range(repeats):
            f(*args)
        times[name] = (time.perf_counter() - t0) / repeats
    print(f"{fn.__name__}: results equal; numpy {times['numpy'] * 1e3:.3f} ms, "
          f"fastlaunch {times['fastlaunch'] * 1e3:.3f} ms "
          f"({times['numpy'] / times['fastlaunch']:.1f}x)")
