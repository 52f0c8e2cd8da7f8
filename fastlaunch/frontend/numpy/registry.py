"""The dispatch of NumPy calls on tracers: `FUNCTIONS` and `implements`, `__array_function__` /
`__array_ufunc__` (`UFUNC_METHODS`), operands and wrapping of nodes as tracers; anything
unregistered raises `TracingError`."""
from __future__ import annotations

import numpy as np

from ... import naming
from ...errors import TracingError
from ...ir import ops
from ...ir.graph import Node
from ..trace import Tracer, current_graph, new_tracer


FUNCTIONS: dict = {}


def implements(*funcs):
    def register(impl):
        for f in funcs:
            FUNCTIONS[f] = impl
        return impl
    return register


def is_tracer(x) -> bool:
    return isinstance(x, Tracer)


# ---- operands ----------------------------------------------------------------------------
def operand(x) -> tuple[Node, type | None]:
    """(node, weak Python type) for anything that may meet a tracer in NumPy code."""
    g = current_graph()
    if isinstance(x, Tracer):
        return x.node, x.weak
    hook = getattr(type(x), "__fl_tracer__", None)
    if hook is not None:         # an array made inside fn (creation.TraceBuffer)
        t = hook(x)
        if t is not None:
            return t.node, t.weak
        x = x.view(np.ndarray)
    if type(x) in (bool, int, float, complex):
        return ops.weak_literal(g, x)
    if isinstance(x, np.generic):
        ops.check_dtype(x.dtype, "a NumPy scalar in the traced function")
        return ops.literal(g, x, x.dtype), None
    if isinstance(x, (list, tuple)) and any(isinstance(v, Tracer) for v in _leaves(x)):
        return array(x).node, None
    if isinstance(x, (np.ndarray, list, tuple)):
        arr = np.asarray(x)
        ops.check_dtype(arr.dtype, "an array captured by the traced function")
        return capture(arr), None
    raise TypeError(f"cannot use a {type(x).__name__} as an array in a traced function")


def node_of(x) -> Node:
    return operand(x)[0]


def capture(arr: np.ndarray) -> Node:
    """A NumPy array from outside the trace: a constant, frozen at trace time.  Uniform arrays
    (np.zeros, np.ones, np.full) become a broadcast literal and cost no memory traffic."""
    g = current_graph()
    if arr.ndim == 0:
        return ops.literal(g, arr[()], arr.dtype)
    flat = arr.reshape(-1)
    if flat.size:
        first = flat[0]
        uniform = bool(np.all(flat == first))   # NaN never compares equal: stays a constant
        if uniform and arr.dtype.kind == "f":
            uniform = bool(np.all(np.signbit(flat) == np.signbit(first)))
        if uniform and arr.dtype.kind == "c":
            uniform = bool(np.all(np.signbit(flat.real) == np.signbit(first.real))
                           and np.all(np.signbit(flat.imag) == np.signbit(first.imag)))
        if uniform:
            return ops.broadcast_to(g, ops.literal(g, first, arr.dtype), arr.shape)
    return g.add_const(arr)


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


def wrap(node: Node, weak=None, scalar=None) -> Tracer:
    return new_tracer(node, weak, scalar)


def _python_result_type(ufunc, weak_types) -> type | None:
    """Python's own result type when every operand is a weak Python scalar (e.g. lr * 2)."""
    if ufunc in (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal):
        return bool
    if complex in weak_types:
        return complex
    if ufunc is np.true_divide:
        return float
    if float in weak_types:
        return float
    if ufunc in (np.bitwise_and, np.bitwise_or, np.bitwise_xor) and all(t is bool for t in weak_types):
        return bool
    return int


def array_function(func, args, kwargs):
    impl = FUNCTIONS.get(func)
    if impl is None:
        if (getattr(func, "__module__", None) or "").startswith("numpy.fft"):
            raise TracingError(f"np.fft.{getattr(func, '__name__', func)} is not supported by "
                               f"fastlaunch (complex arithmetic is, but no FFT)")
        raise TracingError(naming.unsupported(func))
    return impl(*args, **kwargs)


# ---- ufuncs ------------------------------------------------------------------------------
# ufunc methods composed in frontend/numpy/ (reduceat), registered there
UFUNC_METHODS: dict = {}
_UNSUPPORTED_UFUNC_KWARGS = ("where", "axes", "axis", "order", "subok", "signature", "extobj")


def array_ufunc(ufunc, method, inputs, kwargs):
    if method == "__call__":
        if ufunc is np.matmul:
            out = kwargs.pop("out", None)
            _no_extra("matmul", **kwargs)
            r = matmul(*inputs)
            return _write_out(out[0] if isinstance(out, tuple) else out, r.node, "matmul") \
                if out is not None else r
        return call_ufunc(ufunc, inputs, **kwargs)
    if method == "reduce":
        return ufunc_reduce(ufunc, *inputs, **kwargs)
    if method == "at":
        return ufunc_at(ufunc, *inputs, **kwargs)
    if method == "accumulate":
        return ufunc_accumulate(ufunc, *inputs, **kwargs)
    if method == "outer":
        return ufunc_outer(ufunc, *inputs, **kwargs)
    if method in UFUNC_METHODS:
        return UFUNC_METHODS[method](ufunc, *inputs, **kwargs)
    raise TracingError(f"{naming.public_name(ufunc)}.{method} is not supported by fastlaunch "
                       f"yet")


def _tracer_array_ufunc(self, ufunc, method, *inputs, **kwargs):
    return array_ufunc(ufunc, method, inputs, kwargs)


def _tracer_array_function(self, func, types, args, kwargs):
    return array_function(func, args, kwargs)


def _traceable(func) -> bool:
    """Whether a call of `func` on tracers is recorded (error messages suggest only these)."""
    if isinstance(func, np.ufunc):
        return func is np.matmul or func in ops.OP_OF_UFUNC or func in ops._UFUNC_AS
    return func in FUNCTIONS


naming.set_supported(_traceable)


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .creation import array  # noqa: E402
from .linalg import matmul  # noqa: E402
from .reductions import _no_extra  # noqa: E402
from .ufuncs import (  # noqa: E402
    _write_out, call_ufunc, ufunc_accumulate, ufunc_at, ufunc_outer, ufunc_reduce)
