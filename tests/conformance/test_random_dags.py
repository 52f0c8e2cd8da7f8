"""Hypothesis: random expression DAGs, run with NumPy and compiled, compared.

A program is real Python source (printed by hypothesis on failure, ready to paste):

    def f(x0, x1):
        v2 = np.sin(x0)
        v3 = np.add(v2, x1)
        v4 = v3.sum(axis=(0,), keepdims=True)
        return (v4, v2)

Inputs: 1-3 arrays of mixed dtypes whose shapes broadcast against each other, in random memory
layouts (transposed, stepped, negative strides), sometimes with special values, plus sometimes
a Python scalar argument (a runtime parameter).  Ops: elementwise ufuncs, Python-scalar
operands, np.where, astype, reductions over random axes with keepdims, cumsum/cumprod, views
(transpose, slices with negative steps, reshape, expand_dims, swapaxes, broadcast_to),
concatenate, gathers with constant indices and matmul.  Integer overflow and integer division
by zero are generated (NumPy's results: wrap, 0).

How values are compared.  Alongside NumPy's result V of every value the generator keeps E, an
elementwise bound on how far a correct implementation may be from V:
  * E = 0 where V is exactly reproducible: inputs; IEEE-exact operations (+ - * / sqrt, min,
    max, casts, comparisons, floor, integer arithmetic...) of exactly reproducible operands;
    max/min/argmax, integer sums.  Those positions are compared exactly (NaN == NaN).
  * E > 0 after libm functions (a few ulps) and float sums (summation order), propagated
    through later operations by first-order error analysis (|y|Ex + |x|Ey for x*y, ...).
  * E = inf where the result is not determined: a comparison, floor or truthiness test whose
    operand is within its error bound of the threshold; a platform-defined float -> int cast
    (NaN, inf, out of range).  Those positions are not compared (dtype and shape still are).
Operations that are ill-conditioned on inexact operands (floor_divide, power, argmax, ...) are
only generated on exactly reproducible operands.

Each program runs three times compiled: on its inputs, again on copies of them (the replay),
and on new values of the same signature (harness.new_values), whose results and bounds the
generator's steps recompute (`_evaluate`).
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import fastlaunch as fl

from .harness import Mismatch, assert_same, cover, make, new_values, public_error_class

DTYPES = [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.float32, np.float64,
                                np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                np.uint32, np.uint64, np.bool_)]
LAYOUTS = ["C", "C", "T", "step", "neg", "negstep"]
MAX_DEPTH = 8

# Constructs with a known, open bug (tests/conformance/status.py) are not generated, so that
# this test finds new problems.  Set FL_DAG_KNOWN_BUGS=1 to generate them anyway.
import os  # noqa: E402

SKIP_KNOWN_BUGS = not os.environ.get("FL_DAG_KNOWN_BUGS")


_CMP = ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal")


def _known_bug(name, dts, params=None, shapes=(), pyonly=False) -> bool:
    """Constructs with an open entry in status.py (keep in sync when bugs are fixed).  None of
    the open entries (Python ints beyond 64 bits) is generated here."""
    return False


# ---- error bounds ------------------------------------------------------------------------------
def _f64(x):
    return np.asarray(x).astype(np.float64)


def _eps(dt):
    dt = np.dtype(dt)
    return float(np.finfo(dt).eps) if dt.kind == "f" else 0.0


def _tiny(dt):
    dt = np.dtype(dt)
    return float(np.finfo(dt).smallest_subnormal) * 4 if dt.kind == "f" else 0.0


def _round(V, active):
    """Rounding of a float result computed from inexact operands: one ulp where active."""
    V = np.asarray(V)
    if V.dtype.kind != "f":
        return 0.0
    with np.errstate(all="ignore"):
        return np.where(active, 2 * _eps(V.dtype) * np.abs(_f64(V)) + _tiny(V.dtype), 0.0)


def _libm(V):
    """A libm / SIMD-math function result: within a few ulps (NumPy and fastlaunch each)."""
    V = np.asarray(V)
    if V.dtype.kind != "f":
        return 0.0
    with np.errstate(all="ignore"):
        r = 16 * _eps(V.dtype) * np.abs(_f64(V)) + 64 * _tiny(V.dtype) / 4
        return np.where(np.isfinite(V), r, 0.0)


def _clean(E, V):
    E = np.broadcast_to(np.asarray(E, np.float64), np.shape(V)).copy()
    E[np.isnan(E)] = np.inf
    return E


def _inf_where(mask, E):
    return np.where(mask, np.inf, E)


def _any_inf(*Es):
    out = None
    for E in Es:
        m = np.isinf(E)
        out = m if out is None else np.logical_or(out, m)
    return out


def is_exact(E) -> bool:
    """All positions either exact (0) or undetermined (inf): safe operand of any operation."""
    E = np.asarray(E)
    return bool(np.all((E == 0) | np.isinf(E)))


# ---- ops ---------------------------------------------------------------------------------------------
@dataclass
class Op:
    name: str
    arity: int
    kind: str                   # how E propagates, see err()
    template: str               # Python source: {0}, {1} operands, {p[...]} params
    needs_exact: bool = False   # only generated on exactly reproducible operands
    params: object = None       # draw(data, operands) -> dict, or None


def _axis_params(data, vals):
    nd = np.ndim(vals[0])
    choice = data.draw(st.sampled_from(["none", "int", "neg", "tuple"]))
    if nd == 0 or choice == "none":
        axis = None
    elif choice == "int":
        axis = data.draw(st.integers(0, nd - 1))
    elif choice == "neg":
        axis = -data.draw(st.integers(1, nd))
    else:
        axis = tuple(sorted(data.draw(st.sets(st.integers(0, nd - 1), min_size=1, max_size=nd))))
    return {"axis": axis, "keepdims": data.draw(st.booleans())}


def _int_axis_params(data, vals):
    nd = np.ndim(vals[0])
    if nd == 0:
        return {"axis": None}
    if data.draw(st.booleans()):
        return {"axis": data.draw(st.integers(-nd, nd - 1))}
    return {"axis": None}


def _argred_params(data, vals):
    nd = np.ndim(vals[0])
    axis = None if nd == 0 or data.draw(st.booleans()) else data.draw(st.integers(-nd, nd - 1))
    return {"axis": axis, "keepdims": data.draw(st.booleans())}


def _perm_params(data, vals):
    nd = np.ndim(vals[0])
    return {"perm": tuple(data.draw(st.permutations(list(range(nd)))))}


def _slice_params(data, vals):
    parts = []
    for n in np.shape(vals[0]):
        step = data.draw(st.sampled_from([1, 1, 2, -1, -2, 3]))
        start = data.draw(st.one_of(st.none(), st.integers(-n - 1, n)))
        stop = data.draw(st.one_of(st.none(), st.integers(-n - 1, n + 1)))
        parts.append(f"{'' if start is None else start}:{'' if stop is None else stop}:{step}")
    if not parts:
        return {"key": "..."}
    if data.draw(st.booleans()):
        parts.insert(data.draw(st.integers(0, len(parts))), "None")
    if data.draw(st.booleans()) and np.shape(vals[0])[0] > 0:
        parts[0] = str(data.draw(st.integers(-np.shape(vals[0])[0], np.shape(vals[0])[0] - 1)))
    return {"key": ", ".join(parts)}


def _expand_params(data, vals):
    nd = np.ndim(vals[0])
    return {"axis": data.draw(st.integers(-nd - 1, nd))}


def _swap_params(data, vals):
    nd = np.ndim(vals[0])
    if nd == 0:
        return None
    return {"a": data.draw(st.integers(-nd, nd - 1)), "b": data.draw(st.integers(-nd, nd - 1))}


def _bcast_params(data, vals):
    return {"shape": (data.draw(st.sampled_from([1, 2, 3])),) + tuple(np.shape(vals[0]))}


def _astype_params(data, vals):
    return {"dtype": data.draw(st.sampled_from([d.name for d in DTYPES]))}


def _scalar_params(data, vals):
    return {"s": data.draw(st.sampled_from([2, -3, 0, 7, 0.5, -1.5, 2.0, 1e10, 300]))}


def _take_params(data, vals):
    shape = np.shape(vals[0])
    if not shape or shape[0] == 0:
        return None
    nd = len(shape)
    axis = data.draw(st.integers(0, nd - 1))
    n = shape[axis]
    if n == 0:
        return None
    idx = data.draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=6))
    return {"axis": axis, "idx": idx}


ELEMENTWISE_1 = [
    Op("sin", 1, "transc_lip1", "np.sin({0})"),
    Op("negative", 1, "lip1", "np.negative({0})"),
    Op("absolute", 1, "lip1", "np.absolute({0})"),
    Op("square", 1, "square", "np.square({0})"),
    Op("sqrt", 1, "sqrt", "np.sqrt({0})"),
    Op("cos", 1, "transc_lip1", "np.cos({0})"),
    Op("tanh", 1, "transc_lip1", "np.tanh({0})"),
    Op("arctan", 1, "transc_lip1", "np.arctan({0})"),
    Op("exp", 1, "exp", "np.exp({0})"),
    Op("log1p", 1, "log1p", "np.log1p({0})"),
    Op("floor", 1, "step", "np.floor({0})"),
    Op("ceil", 1, "step", "np.ceil({0})"),
    Op("rint", 1, "step", "np.rint({0})"),
    Op("trunc", 1, "step", "np.trunc({0})"),
    Op("sign", 1, "step", "np.sign({0})"),
    Op("isnan", 1, "exact", "np.isnan({0})", needs_exact=True),
    Op("isfinite", 1, "exact", "np.isfinite({0})", needs_exact=True),
    Op("signbit", 1, "exact", "np.signbit({0})", needs_exact=True),
    Op("logical_not", 1, "truth1", "np.logical_not({0})"),
    Op("invert", 1, "exact", "np.invert({0})", needs_exact=True),
    Op("cbrt", 1, "exact_libm", "np.cbrt({0})", needs_exact=True),
    Op("log", 1, "exact_libm", "np.log({0})", needs_exact=True),
    Op("exp2", 1, "exact_libm", "np.exp2({0})", needs_exact=True),
    Op("arcsinh", 1, "exact_libm", "np.arcsinh({0})", needs_exact=True),
    Op("reciprocal", 1, "recip", "np.reciprocal({0})", needs_exact=True),
    Op("nan_to_num", 1, "exact", "np.nan_to_num({0})", needs_exact=True),
    Op("astype", 1, "astype", "{0}.astype(np.{p[dtype]})", params=_astype_params),
]

ELEMENTWISE_2 = [
    Op("add", 2, "add", "np.add({0}, {1})"),
    Op("subtract", 2, "add", "np.subtract({0}, {1})"),
    Op("multiply", 2, "mul", "np.multiply({0}, {1})"),
    Op("true_divide", 2, "div", "np.true_divide({0}, {1})"),
    Op("maximum", 2, "lip1", "np.maximum({0}, {1})"),
    Op("minimum", 2, "lip1", "np.minimum({0}, {1})"),
    Op("fmax", 2, "lip1", "np.fmax({0}, {1})"),
    Op("fmin", 2, "lip1", "np.fmin({0}, {1})"),
    Op("less", 2, "cmp", "np.less({0}, {1})"),
    Op("greater_equal", 2, "cmp", "np.greater_equal({0}, {1})"),
    Op("equal", 2, "cmp", "np.equal({0}, {1})"),
    Op("not_equal", 2, "cmp", "np.not_equal({0}, {1})"),
    Op("logical_and", 2, "truth2", "np.logical_and({0}, {1})"),
    Op("logical_xor", 2, "truth2", "np.logical_xor({0}, {1})"),
    Op("floor_divide", 2, "exact", "np.floor_divide({0}, {1})", needs_exact=True),
    Op("remainder", 2, "exact", "np.remainder({0}, {1})", needs_exact=True),
    Op("fmod", 2, "exact", "np.fmod({0}, {1})", needs_exact=True),
    Op("copysign", 2, "exact", "np.copysign({0}, {1})", needs_exact=True),
    Op("bitwise_and", 2, "exact", "np.bitwise_and({0}, {1})", needs_exact=True),
    Op("bitwise_or", 2, "exact", "np.bitwise_or({0}, {1})", needs_exact=True),
    Op("bitwise_xor", 2, "exact", "np.bitwise_xor({0}, {1})", needs_exact=True),
    Op("left_shift", 2, "exact", "np.left_shift({0}, {1})", needs_exact=True),
    Op("right_shift", 2, "exact", "np.right_shift({0}, {1})", needs_exact=True),
    Op("power", 2, "exact_libm", "np.power({0}, np.bitwise_and({1}, 7))", needs_exact=True),
    Op("float_power", 2, "exact_libm", "np.power({0}, {1})", needs_exact=True),
    Op("arctan2", 2, "exact_libm", "np.arctan2({0}, {1})", needs_exact=True),
    Op("hypot", 2, "exact_libm", "np.hypot({0}, {1})", needs_exact=True),
    Op("logaddexp", 2, "exact_libm", "np.logaddexp({0}, {1})", needs_exact=True),
    Op("heaviside", 2, "exact", "np.heaviside({0}, {1})", needs_exact=True),
]

SCALAR_OPS = [
    Op("add", 1, "add", "({0} + {p[s]!r})", params=_scalar_params),
    Op("subtract", 1, "add", "({p[s]!r} - {0})", params=_scalar_params),
    Op("multiply", 1, "mul", "({0} * {p[s]!r})", params=_scalar_params),
    Op("true_divide", 1, "div", "({0} / {p[s]!r})", params=_scalar_params),
    Op("floor_divide", 1, "exact", "({0} // {p[s]!r})", needs_exact=True, params=_scalar_params),
    Op("remainder", 1, "exact", "({p[s]!r} % {0})", needs_exact=True, params=_scalar_params),
    Op("maximum", 1, "lip1", "np.maximum({0}, {p[s]!r})", params=_scalar_params),
    Op("less", 1, "cmp", "({0} < {p[s]!r})", params=_scalar_params),
    Op("power", 1, "exact_libm", "({0} ** 2)", needs_exact=True),
]

OTHER = [
    Op("where", 3, "where", "np.where({0}, {1}, {2})"),
    Op("sum", 1, "sum", "{0}.sum(axis={p[axis]!r}, keepdims={p[keepdims]!r})", params=_axis_params),
    Op("mean", 1, "mean", "np.mean({0}, axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       params=_axis_params),
    Op("prod", 1, "prod", "np.prod({0}, axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       params=_axis_params),
    Op("max", 1, "maxred", "{0}.max(axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       params=_axis_params),
    Op("min", 1, "maxred", "np.min({0}, axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       params=_axis_params),
    Op("any", 1, "exact_red", "np.any({0}, axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       needs_exact=True, params=_axis_params),
    Op("all", 1, "exact_red", "{0}.all(axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       needs_exact=True, params=_axis_params),
    Op("argmax", 1, "exact_red", "np.argmax({0}, axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       needs_exact=True, params=_argred_params),
    Op("argmin", 1, "exact_red", "{0}.argmin(axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       needs_exact=True, params=_argred_params),
    Op("var", 1, "var", "np.var({0}, axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       needs_exact=True, params=_axis_params),
    Op("std", 1, "std", "{0}.std(axis={p[axis]!r}, keepdims={p[keepdims]!r})",
       needs_exact=True, params=_axis_params),
    Op("cumsum", 1, "cumsum", "np.cumsum({0}, axis={p[axis]!r})", params=_int_axis_params),
    Op("cumprod", 1, "cumprod", "np.cumprod({0}, axis={p[axis]!r})", params=_int_axis_params),
    Op("transpose", 1, "view", "np.transpose({0}, {p[perm]!r})", params=_perm_params),
    Op(".T", 1, "view", "{0}.T"),
    Op("slice", 1, "view", "{0}[{p[key]}]", params=_slice_params),
    Op("reshape", 1, "view", "{0}.reshape(-1)"),
    Op("expand_dims", 1, "view", "np.expand_dims({0}, {p[axis]!r})", params=_expand_params),
    Op("swapaxes", 1, "view", "np.swapaxes({0}, {p[a]!r}, {p[b]!r})", params=_swap_params),
    Op("broadcast_to", 1, "view", "np.broadcast_to({0}, {p[shape]!r})", params=_bcast_params),
    Op("concatenate", 1, "view", "np.concatenate([{0}, {0}[::-1]], axis=0)"),
    Op("take", 1, "view", "np.take({0}, np.array({p[idx]!r}, dtype=np.intp), axis={p[axis]!r})",
       params=_take_params),
    Op("matmul", 1, "matmul", "np.matmul({0}, np.swapaxes({0}, -1, -2))"),
    Op("dot1d", 1, "matmul", "np.dot({0}, {0})",
       params=lambda data, vals: {} if np.ndim(vals[0]) == 1 else None),
]

ALL_OPS = [ELEMENTWISE_2[0]] + ELEMENTWISE_1 * 2 + ELEMENTWISE_2 * 2 + SCALAR_OPS + OTHER


def _err(op: Op, vals, errs, V, params):
    """Elementwise error bound of the result V of `op` on operands vals (bounds errs)."""
    k = op.kind
    with np.errstate(all="ignore"):
        Es = [np.broadcast_to(e, np.shape(v)) for e, v in zip(errs, vals)]
        if k == "view":
            return _clean(_apply_same(op, Es, params), V)
        shape = np.shape(V)
        if k in ("lip1", "add", "mul", "div", "square", "sqrt", "transc_lip1", "exp", "log1p",
                 "step", "truth1", "cmp", "truth2", "exact", "exact_libm", "astype", "where",
                 "recip"):
            Eb = [np.broadcast_to(e, shape) for e in Es]
            xs = [np.broadcast_to(_f64(v), shape) if np.ndim(v) <= len(shape) else _f64(v)
                  for v in vals]
            active = sum(Eb) > 0 if Eb else np.zeros(shape, bool)
            if k == "lip1":
                E = np.maximum.reduce(Eb) if len(Eb) > 1 else Eb[0]
            elif k == "add":
                E = sum(Eb) + _round(V, active)
            elif k == "mul":
                if len(Eb) == 1:
                    E = Eb[0] * abs(_scalar(params)) + _round(V, active)
                else:
                    E = np.abs(xs[1]) * Eb[0] + np.abs(xs[0]) * Eb[1] + Eb[0] * Eb[1] + \
                        _round(V, active)
            elif k == "div":
                if len(Eb) == 1:
                    s = abs(_scalar(params))
                    E = np.where(active, Eb[0] / s if s else np.inf, 0.0) + _round(V, active)
                else:
                    den = np.abs(xs[1]) - Eb[1]
                    E = np.where(Eb[1] > 0, (Eb[0] + np.abs(_f64(V)) * Eb[1]) / den,
                                 Eb[0] / np.abs(xs[1])) + _round(V, active)
                    E = np.where((Eb[1] > 0) & (den <= 0), np.inf, E)
                    E = np.where(active, E, 0.0)
            elif k == "square":
                E = 2 * np.abs(xs[0]) * Eb[0] + Eb[0] ** 2 + _round(V, active)
            elif k == "sqrt":
                E = np.sqrt(Eb[0]) + _round(V, active)
                E = _inf_where((xs[0] - Eb[0] < 0) & (xs[0] + Eb[0] >= 0) & active, E)
            elif k == "transc_lip1":
                E = Eb[0] + _libm(V)
            elif k == "exp":
                E = np.abs(_f64(V)) * np.expm1(Eb[0]) + _libm(V)
            elif k == "log1p":
                E = Eb[0] / (1 + xs[0] - Eb[0]) + _libm(V)
                E = _inf_where(active & (1 + xs[0] - Eb[0] <= 0), E)
            elif k == "step":
                f = getattr(np, op.name)
                lo, hi = f(xs[0] - Eb[0]), f(xs[0] + Eb[0])
                E = np.where(active & ~((lo == hi) | (np.isnan(lo) & np.isnan(hi))), np.inf, 0.0)
            elif k == "truth1":
                E = np.where(active & (np.abs(xs[0]) <= Eb[0]), np.inf, 0.0)
            elif k == "cmp":
                other = xs[1] if len(xs) > 1 else _scalar(params)
                tot = Eb[0] + (Eb[1] if len(Eb) > 1 else 0.0)
                E = np.where((tot > 0) & ~(np.abs(xs[0] - other) > tot), np.inf, 0.0)
            elif k == "truth2":
                E = np.where((active & (np.abs(xs[0]) <= Eb[0])) |
                             (active & (np.abs(xs[1]) <= Eb[1])), np.inf, 0.0)
            elif k == "exact":
                E = np.zeros(shape)
            elif k == "recip":      # integer 1 // 0 is platform-defined in NumPy
                E = np.where((xs[0] == 0) & (np.asarray(V).dtype.kind in "iub"), np.inf, 0.0)
            elif k == "exact_libm":
                E = _libm(V) + np.zeros(shape)
            elif k == "astype":
                E = _astype_err(vals[0], Eb[0], V)
            elif k == "where":
                c = xs[0]
                unsure = (Eb[0] > 0) & (np.abs(c) <= Eb[0])
                E = np.where(c != 0, Eb[1], Eb[2])
                E = _inf_where(unsure | np.isnan(c) & (Eb[0] > 0), E)
            inf = _any_inf(*Eb) if Eb else None
            if inf is not None:
                E = _inf_where(inf, E)
            E = _clean(E, V)
            if np.asarray(V).dtype.kind == "f":       # inexact results that over/underflowed
                E = _inf_where((E > 0) & ~np.isfinite(_f64(V)), E)
            return E
        x, Ex = _f64(vals[0]), np.asarray(Es[0], np.float64)
        ax, kd = params.get("axis"), params.get("keepdims", False)
        infs = np.isinf(Ex)
        if k in ("sum", "mean", "prod", "maxred", "exact_red", "var", "std"):
            n = max(1, int(np.size(x) / max(np.size(V), 1))) if np.size(x) else 1
            inf_out = np.any(infs, axis=ax, keepdims=kd)
            Ef = np.where(infs, 0.0, Ex)
            eps = _eps(np.asarray(V).dtype)
            if k in ("sum", "mean"):
                absx = np.where(np.isfinite(x), np.abs(x), 0.0)
                E = np.sum(Ef, axis=ax, keepdims=kd) + 2 * n * eps * np.sum(absx, axis=ax, keepdims=kd)
                if k == "mean":
                    E = E / n + _round(V, True)
            elif k == "prod":
                rel = np.where(Ef > 0, Ef / np.abs(x), 0.0)
                E = np.abs(_f64(V)) * (np.sum(rel, axis=ax, keepdims=kd) + 2 * n * eps) if eps else \
                    np.zeros(np.shape(V))
            elif k == "maxred":
                E = np.max(Ef, axis=ax, keepdims=kd, initial=0.0)
            elif k == "exact_red":
                E = np.zeros(np.shape(V))
            else:   # var / std of an exact operand
                mu = np.mean(x, axis=ax, keepdims=True)
                e_mu = 2 * n * eps * np.mean(np.abs(x), axis=ax, keepdims=True)
                d = np.abs(x - mu)
                ev = 4 * np.mean(d, axis=ax, keepdims=kd) * np.max(e_mu, axis=ax, keepdims=kd) + \
                    4 * n * eps * np.mean(d * d, axis=ax, keepdims=kd) + \
                    np.max(e_mu, axis=ax, keepdims=kd) ** 2
                if k == "std":
                    s = np.sqrt(np.mean(d * d, axis=ax, keepdims=kd))
                    E = np.minimum(np.sqrt(ev), np.where(s > 0, ev / (2 * s), np.inf)) + \
                        _round(V, True)
                else:
                    E = ev + _round(V, True)
            E = _inf_where(inf_out, np.broadcast_to(E, np.shape(V)))
            E = _clean(E, V)
            if np.asarray(V).dtype.kind == "f":
                E = _inf_where((E > 0) & ~np.isfinite(_f64(V)), E)
            return E
        if k in ("cumsum", "cumprod"):
            xa = x.ravel() if ax is None else x
            Ea = Ex.ravel() if ax is None else Ex
            a = 0 if ax is None else ax
            n = xa.shape[a] if xa.ndim else 1
            eps = _eps(np.asarray(V).dtype)
            infc = np.maximum.accumulate(np.isinf(Ea), axis=a) if xa.size else np.isinf(Ea)
            Ef = np.where(np.isinf(Ea), 0.0, Ea)
            if k == "cumsum":
                absx = np.where(np.isfinite(xa), np.abs(xa), 0.0)
                E = np.cumsum(Ef, axis=a) + 2 * n * eps * np.cumsum(absx, axis=a)
            else:
                rel = np.where(Ef > 0, Ef / np.abs(xa), 0.0)
                E = np.abs(_f64(V)) * (np.cumsum(rel, axis=a) + 2 * n * eps) if eps else 0.0 * xa
            E = _clean(_inf_where(infc, E), V)
            if np.asarray(V).dtype.kind == "f":
                E = _inf_where((E > 0) & ~np.isfinite(_f64(V)), E)
            return E
        if k == "matmul":
            a = np.where(np.isfinite(x), np.abs(x), 0.0)
            Ef = np.where(np.isinf(Ex), 0.0, Ex)
            if x.ndim == 1:
                mm = lambda p, q: np.dot(p, q)     # noqa: E731
                kdim = x.shape[0]
            else:
                mm = lambda p, q: np.matmul(p, np.swapaxes(q, -1, -2))   # noqa: E731
                kdim = x.shape[-1]
            eps = _eps(np.asarray(V).dtype)
            E = 2 * kdim * eps * mm(a, a) + mm(Ef, a) + mm(a, Ef) + mm(Ef, Ef)
            inf = mm(np.isinf(Ex).astype(np.float64), np.ones_like(a)) + \
                mm(np.ones_like(a), np.isinf(Ex).astype(np.float64))
            E = _clean(_inf_where(inf > 0, E), V)
            if np.asarray(V).dtype.kind == "f":
                E = _inf_where((E > 0) & ~np.isfinite(_f64(V)), E)
            return E
    raise AssertionError(k)


def _scalar(params):
    return float(params["s"]) if params and "s" in params else 2.0


def _astype_err(x, Ex, V):
    src, dst = np.asarray(x).dtype, np.asarray(V).dtype
    xf = _f64(x)
    active = Ex > 0
    if dst.kind == "f":
        return Ex + _round(V, active)
    if dst.kind == "b":
        return np.where(active & (np.abs(xf) <= Ex), np.inf, 0.0)
    if src.kind != "f":
        return np.zeros(np.shape(V))
    ii = np.iinfo(dst)
    t_lo, t_hi = np.trunc(xf - Ex), np.trunc(xf + Ex)
    defined = np.isfinite(xf) & (t_lo >= float(ii.min)) & (t_hi <= float(ii.max)) & \
        (t_hi < 2.0 ** (ii.bits - (1 if ii.min < 0 else 0)))
    E = np.where(defined & (t_lo == t_hi), 0.0, np.inf)
    return E


def _apply_same(op, Es, params):
    """A structural op (view, gather, concatenate) applied to the error arrays."""
    src = op.template.format(*[f"e{i}" for i in range(len(Es))], p=params or {})
    return eval(src, {"np": np}, {f"e{i}": np.asarray(e, np.float64) for i, e in enumerate(Es)})


# ---- programs ----------------------------------------------------------------------------------------
@dataclass
class Program:
    inputs: list                      # (description, value)
    lines: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    steps: list = field(default_factory=list)     # per line: (op, operand positions, params)
    out_positions: list = field(default_factory=list)

    def source(self) -> str:
        args = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        body = "\n".join(f"    {ln}" for ln in self.lines) or "    pass"
        outs = ", ".join(self.outputs)
        return f"def f({args}):\n{body}\n    return ({outs},)\n"

    def function(self):
        ns = {"np": np}
        exec(self.source(), ns)   # noqa: S102 - generated test programs
        return ns["f"]

    def __repr__(self):
        ins = "\n".join(f"#   x{i} = {d}" for i, (d, _) in enumerate(self.inputs))
        return f"\n# inputs:\n{ins}\n{self.source()}"


def _draw_input(data, full):
    dt = data.draw(st.sampled_from(DTYPES))
    nd = len(full)
    keep = data.draw(st.integers(0, nd))
    shape = list(full[nd - keep:])
    shape = [1 if data.draw(st.integers(0, 4)) == 0 else s for s in shape]
    layout = data.draw(st.sampled_from(LAYOUTS))
    seed = data.draw(st.integers(0, 2**32 - 1))
    special = data.draw(st.integers(0, 3)) == 0
    arr = make(tuple(shape), dt, layout, rng=np.random.default_rng(seed), special=special)
    desc = (f"make({tuple(shape)}, np.{dt.name}, {layout!r}, "
            f"rng=np.random.default_rng({seed}), special={special})")
    return desc, arr


@st.composite
def programs(draw, max_ops=12):
    data = _Draw(draw)
    full = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5, 7]), min_size=0, max_size=3)))
    n_in = draw(st.integers(1, 3))
    prog = Program([_draw_input(data, full) for _ in range(n_in)])
    if draw(st.integers(0, 4)) == 0:           # a Python scalar argument (runtime parameter)
        s = draw(st.sampled_from([2.5, -1.0, 3, 0, -7]))
        prog.inputs.append((repr(s), s))
    vals = [v for _, v in prog.inputs]
    errs = [np.zeros(np.shape(v)) for v in vals]
    depth = [0] * len(vals)
    names = [f"x{i}" for i in range(len(vals))]
    n_ops = draw(st.integers(3, max_ops))
    for _ in range(n_ops):
        op = draw(st.sampled_from(ALL_OPS))
        usable = [i for i in range(len(vals)) if depth[i] < MAX_DEPTH]
        if not usable:
            break
        # prefer recent values, so that chains get deep
        picks = [usable[-1 - min(draw(st.integers(0, 6)), len(usable) - 1)]
                 if draw(st.booleans()) else draw(st.sampled_from(usable))
                 for _ in range(max(op.arity, 1))]
        operands = [vals[i] for i in picks]
        if op.needs_exact and not all(is_exact(errs[i]) for i in picks):
            continue
        if _known_bug(op.name, [np.asarray(v).dtype for v in operands]):
            continue
        params = op.params(data, operands) if op.params else {}
        if op.name == "where" and any(type(v) is int for v in operands):
            params = dict(params or {}, pyint=True)
        pyints = [v for v in operands if type(v) is int]
        if params is not None and "s" in params and type(params["s"]) is int:
            pyints.append(params["s"])
        if op.name in _CMP and any(
                np.asarray(v).dtype.kind in "iu" and not np.iinfo(np.asarray(v).dtype).min <= p
                <= np.iinfo(np.asarray(v).dtype).max
                for v in operands if type(v) is not int for p in pyints):
            params = dict(params or {}, pyint_out_of_range=True)
        if params is None or _known_bug(op.name, [np.asarray(v).dtype for v in operands], params,
                                        [np.shape(v) for v in operands],
                                        all(type(v) in (int, float) for v in operands)):
            continue
        src = op.template.format(*[names[i] for i in picks], p=params)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                V = eval(src, {"np": np}, dict(zip(names, vals)))
        except Exception:   # noqa: BLE001 - NumPy rejects this combination: draw another op
            continue
        if op.name == "slice" and np.size(V) == 0 and 1 in np.shape(operands[0]) and \
                _known_bug("slice", [], {"empty_from_one": True}):
            continue
        if not isinstance(V, (np.ndarray, np.generic)) or np.asarray(V).dtype not in \
                [np.dtype(t) for t in "?bhilqBHILQefd"] or np.size(V) > 20000:
            continue
        if _known_bug(op.name, [np.asarray(V).dtype]):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            E = _err(op, operands, [errs[i] for i in picks], V, params)
        name = f"v{len(vals)}"
        prog.lines.append(f"{name} = {src}")
        prog.steps.append((op, picks, params))
        vals.append(V)
        errs.append(E)
        depth.append(1 + max(depth[i] for i in picks))
        names.append(name)
    if not prog.lines:
        prog.lines.append(f"v{len(vals)} = np.add(x0, 1)")
        prog.steps.append((ADD_ONE, [0], {}))
        with np.errstate(all="ignore"):
            V = vals[0] + 1 if np.asarray(vals[0]).dtype != np.bool_ else np.add(vals[0], 1)
        vals.append(V)
        errs.append(np.where(np.isinf(errs[0]), np.inf, 0.0) if np.ndim(V) else np.zeros(()))
        names.append(f"v{len(vals) - 1}")
    # every value no later op consumes is a result (so that no op is dead code), plus a few
    # intermediate ones
    used = set()
    for ln in prog.lines:
        used.update(int(m) for m in re.findall(r"\bv(\d+)\b", ln.split(" = ", 1)[1]))
    sinks = [i for i in range(len(prog.inputs), len(vals)) if i not in used]
    outs = [len(vals) - 1] + sinks + draw(st.lists(st.integers(len(prog.inputs), len(vals) - 1),
                                                   max_size=2, unique=True))
    outs = list(dict.fromkeys(outs))
    prog.outputs = [names[i] for i in outs]
    prog.bounds = [errs[i] for i in outs]
    prog.out_positions = outs
    return prog


ADD_ONE = Op("add one", 1, "exact", "np.add({0}, 1)")


def _evaluate(prog: Program, inputs: list):
    """NumPy's values of the program's results on other inputs, and their error bounds,
    computed as `programs` computed them: (results, bounds), or the exception NumPy raises.
    An operation generated only on exact operands gets an undetermined (inf) bound where its
    operand is not exact on these inputs."""
    vals = list(inputs)
    errs = [np.zeros(np.shape(v)) for v in vals]
    for op, picks, params in prog.steps:
        operands = [vals[i] for i in picks]
        src = op.template.format(*[f"a{k}" for k in range(len(picks))], p=params)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                V = eval(src, {"np": np}, {f"a{k}": v for k, v in enumerate(operands)})
        except Exception as err:   # noqa: BLE001 - the compiled function must raise it too
            return err
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if op.needs_exact and not all(is_exact(errs[i]) for i in picks):
                E = np.full(np.shape(V), np.inf)
            else:
                E = _err(op, operands, [errs[i] for i in picks], V, params)
        vals.append(V)
        errs.append(E)
    return [vals[i] for i in prog.out_positions], [errs[i] for i in prog.out_positions]


class _Draw:
    """Adapter: param drawers call data.draw(strategy)."""
    def __init__(self, draw):
        self.draw = draw


# ---- running ------------------------------------------------------------------------------------------
def _fresh(v):
    if isinstance(v, np.ndarray):
        if v.strides and 0 in v.strides:
            return v
        out = np.empty_like(v, order="K")
        out[...] = v
        return v.copy() if not v.flags.writeable else out
    return v


def run_program(prog: Program):
    f = prog.function()
    args = [_fresh(v) for _, v in prog.inputs]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        expected = f(*[_fresh(v) for _, v in prog.inputs])
    cf = fl.compile(f)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        got = cf(*args)
        again = cf(*[_fresh(v) for _, v in prog.inputs])
    for label, result in (("", got), (" (replayed call)", again)):
        assert_same(expected, result, values=False, path="result" + label)
        for i, (e, g, E) in enumerate(zip(expected, result, prog.bounds)):
            _compare(e, g, E, f"result[{i}] ({prog.outputs[i]}){label}")
    # the same program on new values of the same signature, against NumPy's on those values
    fresh = new_values([v for _, v in prog.inputs])
    if fresh is None:
        return
    evaluated = _evaluate(prog, fresh)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if isinstance(evaluated, Exception):
            with pytest.raises(public_error_class(evaluated)):
                cf(*[_fresh(v) for v in fresh])
            return
        third = cf(*[_fresh(v) for v in fresh])
    expected3, bounds3 = evaluated
    label = " (replayed on new values)"
    assert_same(tuple(expected3), third, values=False, path="result" + label)
    for i, (e, g, E) in enumerate(zip(expected3, third, bounds3)):
        _compare(e, g, E, f"result[{i}] ({prog.outputs[i]}){label}")
    assert len(cf.traces) == 1, f"replay re-traced: {cf.stats}"


def _compare(e, g, E, path):
    e, g = np.asarray(e), np.asarray(g)
    E = np.broadcast_to(E, e.shape)
    if e.dtype.kind != "f":
        bad = (E == 0) & (e != g)
    else:
        with np.errstate(all="ignore"):
            ef, gf = e.astype(np.float64), g.astype(np.float64)
            exact_bad = (E == 0) & ~((ef == gf) | (np.isnan(ef) & np.isnan(gf)))
            tiny = 4 * float(np.finfo(e.dtype).smallest_subnormal)
            approx = (E > 0) & np.isfinite(E)
            approx_bad = approx & ~(np.abs(gf - ef) <= 4 * E + tiny)
        bad = exact_bad | approx_bad
    if bad.any():
        where = [tuple(int(p) for p in w) for w in np.argwhere(bad)[:6]] if bad.ndim else [()]
        shown = "\n".join(f"  at {w}: got {g[w]!r}, expected {e[w]!r}, bound {E[w]!r}"
                          for w in where)
        raise Mismatch(f"{path}: {int(bad.sum())} of {bad.size} values differ:\n{shown}")


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True,
              database=None)


@settings(max_examples=60, derandomize=True, **COMMON)
@given(programs())
def test_random_dag(prog):
    note(repr(prog))
    run_program(prog)


@pytest.mark.slow
@settings(max_examples=2000, **COMMON)
@given(programs())
def test_random_dag_slow(prog):
    note(repr(prog))
    run_program(prog)


cover("random expression DAGs (hypothesis)", "arithmetic",
      note="tests/conformance/test_random_dags.py: depth <= 8, mixed dtypes, broadcasting, "
           "layouts, reductions over random axes with keepdims, cumsum/cumprod, views, "
           "gathers, matmul; 60 examples by default, 2000 with -m slow",
      test="test_random_dags.py")
