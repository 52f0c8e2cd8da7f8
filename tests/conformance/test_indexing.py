"""Gather (x[idx], x[:, idx], np.take, np.take_along_axis), scatter (x[idx] = v, x[idx] += v,
np.add.at / maximum.at / minimum.at ...), duplicate-index semantics, out-of-range indices."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl

from .harness import check, check_many, cover, make, param, rng_for, short

GATHER, SCATTER = "gather", "scatter"
GATHERX = "x[idx] (integer-array indexing)"
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint16, np.uint64, np.bool_]
IDX_DTYPES = [np.int64, np.int32, np.int8, np.uint8, np.uint64]


def _idx(n, size, dtype=np.int64, key=(), allow_negative=True):
    """n indices into an axis of `size`, with repeats and (for signed dtypes) negative ones."""
    rng = rng_for("idx", n, size, np.dtype(dtype).str, *key)
    lo = -size if allow_negative and np.dtype(dtype).kind == "i" else 0
    return rng.integers(lo, size, n).astype(dtype)


GATHERS = {
    "x[i]": lambda x, y, i, j, k: x[i],
    "x[i2d]": lambda x, y, i, j, k: x[k],
    "x[:, j]": lambda x, y, i, j, k: x[:, j],
    "x[i, :]": lambda x, y, i, j, k: x[i, :],
    "x[i, j[:4]] (paired)": lambda x, y, i, j, k: x[i[:4], j[:4]],
    "x[i, 2]": lambda x, y, i, j, k: x[i, 2],
    "x[-1, j]": lambda x, y, i, j, k: x[-1, j],
    "x[1:, j]": lambda x, y, i, j, k: x[1:, j],
    "x[::-1, j][:, ::2]": lambda x, y, i, j, k: x[::-1, j][:, ::2],
    "x.T[j]": lambda x, y, i, j, k: x.T[j],
    "y[i[:3], :, j[:3]] (non-adjacent)": lambda x, y, i, j, k: y[i[:3] % 3, :, j[:3] % 5],
    "y[:, i % 4]": lambda x, y, i, j, k: y[:, i % 4],
    "(x * 2)[i] (computed)": lambda x, y, i, j, k: (x * 2)[i],
    "x[i].sum(axis=0)": lambda x, y, i, j, k: x[i].sum(axis=0),
    "x[i][j % 6]": lambda x, y, i, j, k: x[i][j % 6],
    "x[i[0]] (0-d index)": lambda x, y, i, j, k: x[i[0]],
    "x[i[:0]] (empty)": lambda x, y, i, j, k: x[i[:0]],
    "x[const]": lambda x, y, i, j, k: x[np.array([0, 5, -1, 0])],
    "x[list]": lambda x, y, i, j, k: x[[1, 1, -2]],
    "x[const bool mask]": lambda x, y, i, j, k: x[np.array([True, False, True, False, False, True])],
    "take flat": lambda x, y, i, j, k: np.take(x, k),
    "take axis=1": lambda x, y, i, j, k: np.take(x, j, axis=1),
    "take axis=-1 wrap": lambda x, y, i, j, k: np.take(x, j * 3, axis=-1, mode="wrap"),
    "take clip": lambda x, y, i, j, k: np.take(x, j * 3, axis=1, mode="clip"),
    "x.take": lambda x, y, i, j, k: x.take(i, axis=0),
    "take scalar index": lambda x, y, i, j, k: np.take(x, 3),
}


def _gather_params():
    out = []
    for dt in DTYPES:
        out.append(param(dt, np.int64, name=GATHERX, dtype=dt, id=f"{short(dt)}-idx_int64"))
    for it in IDX_DTYPES[1:]:
        out.append(param(np.float32, it, name=GATHERX, dtype=f"idx {short(it)}",
                         id=f"float32-idx_{short(it)}"))
    return out


@pytest.mark.parametrize(("dtype", "idx_dtype"), _gather_params())
def test_gather(dtype, idx_dtype):
    x = make((6, 7), dtype, "T")
    y = make((3, 4, 5), dtype, "neg")
    i = _idx(9, 6, idx_dtype)
    j = _idx(5, 7, idx_dtype, key=("j",))
    k = _idx(12, 42, idx_dtype, key=("k",), allow_negative=False).reshape(3, 4)
    check_many(GATHERS, x, y, i, j, k, tol="reduce")


for _n in (GATHERX, "np.take", "ndarray.take"):
    cover(_n, GATHER, [short(d) for d in DTYPES], test="test_indexing.py::test_gather",
          note="index arrays passed as arguments (int8/16/32/64, uint8/64) and constants, "
               "negative and repeated indices, 1-D and 2-D index arrays, mixed with slices and "
               "ints, non-adjacent index arrays, gathers from computed arrays")


@pytest.mark.parametrize("dtype", [param(d, name="np.take_along_axis", dtype=d, id=short(d))
                                   for d in (np.float32, np.int64, np.bool_)])
def test_take_along_axis(dtype):
    x = make((6, 7), dtype, "T")
    y = make((3, 4, 5), dtype)
    ia = _idx(42, 7, key=("a",)).reshape(6, 7)
    ib = _idx(6, 6, key=("b",), allow_negative=False).reshape(6, 1)
    ic = _idx(60, 4, key=("c",)).reshape(3, 4, 5)
    check_many({
        "axis=1": lambda x, y, ia, ib, ic: np.take_along_axis(x, ia, axis=1),
        "axis=0 broadcast": lambda x, y, ia, ib, ic: np.take_along_axis(x, ib, axis=0),
        "axis=-1 (3-D)": lambda x, y, ia, ib, ic: np.take_along_axis(y, ic % 5, axis=-1),
        "axis=1 (3-D)": lambda x, y, ia, ib, ic: np.take_along_axis(y, ic, axis=1),
        "axis=None": lambda x, y, ia, ib, ic: np.take_along_axis(x, ib.ravel(), axis=None),
    }, x, y, ia, ib, ic)


cover("np.take_along_axis", GATHER, [np.float32, np.int64, np.bool_],
      test="test_indexing.py::test_take_along_axis")


# ---- scatter ---------------------------------------------------------------------------------------
def _set(x, key, v):
    x[key] = v
    return x


def _iadd(x, key, v):
    x[key] += v
    return x


def _isub(x, key, v):
    x[key] -= v
    return x


def _at(uf, x, key, v):
    uf.at(x, key, v)
    return x


SCATTERS = {
    "x[i] = v": lambda x, i, j, v: _set(x, i, v[:len(i)]),
    "x[i] = 0": lambda x, i, j, v: _set(x, i, 0),
    "x[i] = v[0] (broadcast row)": lambda x, i, j, v: _set(x, i, v[0]),
    "x[i] += v (dups: last wins)": lambda x, i, j, v: _iadd(x, i, v[:len(i)]),
    "x[:, j] = v": lambda x, i, j, v: _set(x, (slice(None), j), v[:, :len(j)]),
    "x[:, j] -= 1": lambda x, i, j, v: _isub(x, (slice(None), j), 1),
    "x[i, j[:4]] = v": lambda x, i, j, v: _set(x, (i[:4], j[:4]), v[0, :4]),
    "x[i, 3] = v": lambda x, i, j, v: _set(x, (i, 3), v[:len(i), 0]),
    "np.add.at(x, i, v)": lambda x, i, j, v: _at(np.add, x, i, v[:len(i)]),
    "np.add.at(x, i, 1)": lambda x, i, j, v: _at(np.add, x, i, 1),
    "np.add.at(x, (i, j), v)": lambda x, i, j, v: _at(np.add, x, (i[:5], j[:5]), v[0, :5]),
    "np.add.at(x, (slice, j), v)": lambda x, i, j, v: _at(np.add, x, (slice(None), j),
                                                          v[:, :len(j)]),
    "np.maximum.at(x, i, v)": lambda x, i, j, v: _at(np.maximum, x, i, v[:len(i)]),
    "np.minimum.at(x, j, v)": lambda x, i, j, v: _at(np.minimum, x, (slice(None), j), v[:, :len(j)]),
    "np.subtract.at(x, i, v)": lambda x, i, j, v: _at(np.subtract, x, i, v[:len(i)]),
    "np.multiply.at(x, i, v)": lambda x, i, j, v: _at(np.multiply, x, i, v[:len(i)]),
}


def _scatter_params():
    out = []
    for label in SCATTERS:
        name = label[:label.index(".at") + 3] if ".at" in label else "x[idx] = v / x[idx] += v"
        for dt in (np.float32, np.float64, np.int32, np.uint8, np.bool_):
            if label == "np.add.at(x, i, 1)" and dt == np.bool_:
                continue            # see test_ufunc_at_casting
            out.append(param(label, dt, name=name, dtype=dt, id=f"{label}-{short(dt)}"))
    return out


@pytest.mark.parametrize(("label", "dtype"), _scatter_params())
def test_scatter_on_input(label, dtype):
    """Scatter into an argument: the caller's array is updated (and returned)."""
    f = SCATTERS[label]
    x = make((6, 7), dtype, "T", special=False)
    i = _idx(8, 6)                       # repeated indices included
    j = _idx(5, 7, key=("j",))
    v = make((8, 7), dtype, key=("v",), special=False)
    check(lambda x, i, j, v: (f(x, i, j, v), i.shape), x, i, j, v, tol="exact")


@pytest.mark.parametrize(("label", "dtype"), _scatter_params())
def test_scatter_on_new_array(label, dtype):
    """Scatter into an array made inside the function from traced values."""
    f = SCATTERS[label]
    x = make((6, 7), dtype, special=False)
    i = _idx(8, 6)
    j = _idx(5, 7, key=("j",))
    v = make((8, 7), dtype, key=("v",), special=False)
    check(lambda x, i, j, v: (f(np.zeros_like(x), i, j, v), f(x.copy(), i, j, v)), x, i, j, v,
          tol="exact")


for _n in ("x[idx] = v / x[idx] += v", "np.add.at", "np.maximum.at", "np.minimum.at",
           "np.subtract.at", "np.multiply.at"):
    cover(_n, SCATTER, ["float32", "float64", "int32", "uint8", "bool"],
          test="test_indexing.py::test_scatter_on_input",
          note="duplicate indices: x[idx] = v and x[idx] += v keep the last write (buffered), "
               "ufunc.at accumulates every one (unbuffered), as NumPy; negative indices; into "
               "arguments and into arrays made inside the function")


ATCAST = "ufunc.at (value casting)"


@pytest.mark.parametrize("case", [param(c, name=ATCAST, id=c) for c in
                                  ("bool += 1", "int8 += 1.5", "int32 max= 2.5", "uint8 *= -1")])
def test_ufunc_at_casting(case):
    """ufunc.at casts the values to the array's dtype unsafely (NumPy: no casting error)."""
    i = np.array([0, 2, 2])
    x = {"bool += 1": np.zeros(4, bool), "int8 += 1.5": np.zeros(4, np.int8),
         "int32 max= 2.5": np.zeros(4, np.int32), "uint8 *= -1": np.full(4, 3, np.uint8)}[case]
    uf, v = {"bool += 1": (np.add, 1), "int8 += 1.5": (np.add, 1.5),
             "int32 max= 2.5": (np.maximum, 2.5), "uint8 *= -1": (np.multiply, -1)}[case]
    check(lambda x, i: _at(uf, x, i, v), x, i)


cover(ATCAST, SCATTER, ["bool", "int8", "int32", "uint8"], test="test_indexing.py::test_ufunc_at_casting")


def test_scatter_into_numpy_array_made_inside():
    """np.zeros(n) inside the function takes traced values as in NumPy (it becomes a traced
    buffer once one is written: fastlaunch/frontend/numpy/trace_buffers.py)."""
    check(lambda x, i: _set(np.zeros(6), i, x[:3]), make((6,), np.float64), np.array([0, 1, 1]))
    check(lambda x, i: _at(np.add, np.zeros(6), i, x[:3]), make((6,), np.float64),
          np.array([0, 1, 1]), tol="reduce")


cover("x[idx] = v / x[idx] += v", SCATTER,
      test="test_indexing.py::test_scatter_into_numpy_array_made_inside",
      note="also into a NumPy array created inside the function (np.zeros(n))")


def test_scatter_errors_like_numpy():
    x = make((6, 7), np.float64)
    check(lambda x, i: _set(x, i, x[:2]), x, np.array([0, 1, 2]))          # shape mismatch
    check(lambda x, i: _at(np.add, x, i, x[:2]), x, np.array([0, 1, 2]))   # shape mismatch
    check(lambda x, i: x[i.astype(np.float64)], x, np.array([0, 1]))       # float index


# ---- out-of-range indices -----------------------------------------------------------------------------
_OOR_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, fastlaunch as fl

    def setitem(x, i):
        x[i] = -1.0
        return x

    def add_at(x, i):
        np.add.at(x, i, -1.0)
        return x

    case = sys.argv[1]
    fn = fl.compile({"gather": lambda x, i: x[i], "take": lambda x, i: np.take(x, i),
                     "take_along_axis": lambda x, i: np.take_along_axis(x, i, axis=0),
                     "setitem": setitem, "add.at": add_at}[case])
    for bad in [20, -21, 10**9, -(10**9), 2**62]:
        big = np.arange(40, dtype=np.float64) + 1000.0
        x = big[10:30]                      # the compiled function sees these 20 elements
        sentinel = big.copy()
        out = {"case": case, "bad": bad}
        print("running", case, bad, file=sys.stderr, flush=True)
        try:
            r = fn(x, np.array([0, 3, bad]))
            out["result"] = [float(v) for v in np.ravel(r)]
        except IndexError as e:
            out["error"] = "IndexError"
        except Exception as e:
            out["error"] = type(e).__name__ + ": " + str(e)[:200]
        out["outside_intact"] = bool(np.array_equal(big[:10], sentinel[:10]) and
                                     np.array_equal(big[30:], sentinel[30:]))
        # the same compiled function still works with valid indices afterwards
        y = np.arange(20, dtype=np.float64)
        ok = fn(y.copy(), np.array([0, 3, 19]))
        expect = {"gather": y[[0, 3, 19]], "take": y[[0, 3, 19]],
                  "take_along_axis": y[[0, 3, 19]]}.get(case)
        if expect is None:
            expect = y.copy()
            if case == "setitem":
                expect[[0, 3, 19]] = -1.0
            else:
                np.add.at(expect, [0, 3, 19], -1.0)
        out["valid_after"] = bool(np.array_equal(ok, expect))
        print(json.dumps(out), flush=True)
""")


@pytest.mark.parametrize("case", [
    param("gather", name=GATHERX), param("take", name="np.take"),
    param("take_along_axis", name="np.take_along_axis"),
    param("setitem", name="x[idx] = v / x[idx] += v"), param("add.at", name="np.add.at")])
def test_out_of_range_index(case):
    """An index past either end (20, -21, 10**9, -10**9, 2**62 into 20 elements) raises
    IndexError at call time (as NumPy), or else the behaviour is documented: either way the
    process must not crash, reads must return values of the array (never memory outside it),
    writes must stay inside it, and the compiled function keeps working.  Runs in a
    subprocess, so that a crash is reported as a failure."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", _OOR_SCRIPT, case], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"crashed (rc={proc.returncode}): {proc.stderr[-2000:]}"
    valid = set((np.arange(20) + 1010.0).tolist()) | {-1.0, 1009.0}
    for line in proc.stdout.strip().splitlines():
        out = json.loads(line)
        if out.get("error", "").startswith(("TracingError", "NotImplementedError")):
            raise fl.TracingError(out["error"])
        assert out["outside_intact"], f"a write went outside the array: {out}"
        assert out["valid_after"], f"wrong result with valid indices after the error: {out}"
        if "error" in out:
            assert out["error"] == "IndexError", out
        elif case in ("gather", "take", "take_along_axis"):
            assert set(out["result"]) <= valid, f"read outside the array: {out}"


cover("out-of-range indices", GATHER, note="x[idx], np.take, np.take_along_axis, x[idx] = v, "
      "np.add.at with an index past either end (20, -21, +-10**9, 2**62 into 20 elements): "
      "fastlaunch raises IndexError at call time, as NumPy; the test also accepts documented "
      "non-raising behaviour, but never a crash, a read outside the array or a write outside "
      "it, and the compiled function keeps working afterwards")
