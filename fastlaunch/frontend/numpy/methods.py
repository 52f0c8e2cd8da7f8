"""The ndarray methods, operators and attributes installed on `Tracer` (`x + y`, `x.sum()`, `x.T`,
`x.item()`, ...), each calling its family's function; imported last."""
from __future__ import annotations

import sys

import numpy as np

from ... import naming
from ...ir import ops
from ..trace import Tracer, current_graph
from .indexing import getitem, put, setitem
from .reductions import all_, any_, argmax, argmin, max_, mean, min_, prod_, std, sum_, var
from .registry import _tracer_array_function, _tracer_array_ufunc
from .shaping import _set_shape, _strides, flatten, squeeze, swapaxes, view
from .sorting import _partition_inplace, _sort_inplace
from .ufuncs import _imag, _real, astype, clip


Tracer.__array_ufunc__ = _tracer_array_ufunc
Tracer.__array_function__ = _tracer_array_function
Tracer.__setitem__ = setitem


# ---- methods and operators on Tracer ----------------------------------------------------------
def _method(name, impl):
    setattr(Tracer, name, impl)


def _binary(ufunc):
    def forward(self, other):
        if isinstance(other, MaskedSelection):
            return NotImplemented            # its reflected operator: the masked elements
        return call_ufunc(ufunc, (self, other), _operator=True)

    def reflected(self, other):
        if isinstance(other, MaskedSelection):
            return NotImplemented
        return call_ufunc(ufunc, (other, self), _operator=True)

    def inplace(self, other):
        if self.scalar or self.weak is not None:
            return call_ufunc(ufunc, (self, other), _operator=True)
        return call_ufunc(ufunc, (self, other), out=(self,))
    return forward, reflected, inplace


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("and", np.bitwise_and),
                   ("or", np.bitwise_or), ("xor", np.bitwise_xor), ("lshift", np.left_shift),
                   ("rshift", np.right_shift)]:
    _f, _r, _i = _binary(_uf)
    _method(f"__{_name}__", _f)
    _method(f"__r{_name}__", _r)
    _method(f"__i{_name}__", _i)
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal)]:
    _method(f"__{_name}__", _binary(_uf)[0])


def _equality(ufunc, same: bool):
    compare = _binary(ufunc)[0]

    def method(self, other):
        if isinstance(other, (str, bytes)) or other is None:
            # `pad == "same"`, `x != None`: a Python scalar compares as Python does, an array
            # elementwise as NumPy 2 does (never equal)
            if self.weak is not None or self.scalar:
                return not same
            return wrap(ops.broadcast_to(current_graph(), ops.literal(current_graph(), not same,
                                                                      np.bool_), self.shape),
                        scalar=False)
        return compare(self, other)
    return method


_method("__eq__", _equality(np.equal, True))
_method("__ne__", _equality(np.not_equal, False))


def _divmod(self, other):
    return (self // other, self % other)


def _rdivmod(self, other):
    return (other // self, other % self)


_method("__divmod__", _divmod)
_method("__rdivmod__", _rdivmod)
_method("__neg__", lambda self: call_ufunc(np.negative, (self,), _operator=True)
        if self.weak is None else _weak_unary(np.negative, self))
_method("__pos__", lambda self: self if self.weak is not None else call_ufunc(np.positive, (self,)))
_method("__abs__", lambda self: call_ufunc(np.absolute, (self,)) if self.weak is None
        else _weak_unary(np.absolute, self))
_method("__invert__", lambda self: call_ufunc(np.invert, (self,)))
_method("__matmul__", lambda self, other: matmul(self, other))
_method("__rmatmul__", lambda self, other: matmul(other, self))
_method("__getitem__", getitem)


def _weak_unary(ufunc, t):
    r = call_ufunc(ufunc, (t,), _operator=True)
    r.weak = float if t.weak is complex and ufunc is np.absolute else t.weak
    return r


_method("astype", astype)


Tracer.flat = property(lambda self: FlatIter(self))
Tracer.imag = property(_imag, lambda self, v: _set_part(self, v, "imag"))
_method("view", view)
_method("conj", lambda self: call_ufunc(np.conjugate, (self,)) if self.dtype.kind == "c" else self)
_method("conjugate", lambda self: call_ufunc(np.conjugate, (self,)) if self.dtype.kind == "c"
        else self)


def _tracer_getattr(self, name):
    """An ndarray method without a method of its own here: the NumPy function of that name
    when fastlaunch traces it (x.repeat -> np.repeat); else an AttributeError that says so."""
    if not name.startswith("_") and hasattr(np.ndarray, name):
        func = getattr(np, name, None)
        impl = FUNCTIONS.get(func) if func is not None else None
        if impl is not None:
            return lambda *args, **kwargs: impl(self, *args, **kwargs)
        library, where = naming.converting_function(sys._getframe(1))
        by = f" (read by {library}, called at {where})" if library else ""
        raise AttributeError(f"x.{name} (ndarray.{name}) is not supported by fastlaunch "
                             f"yet{by}")
    raise AttributeError(f"'Tracer' object has no attribute {name!r}")


Tracer.__getattr__ = _tracer_getattr
_method("copy", lambda self, order="C": copy(self))
_method("reshape", lambda self, *shape, order="C", copy=None: reshape(self, *shape, order=order))
_method("ravel", lambda self, order="C": ravel(self, order))
_method("flatten", flatten)
_method("transpose", lambda self, *axes: transpose(
    self, axes[0] if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)) else (axes or None)))
_method("swapaxes", swapaxes)
_method("squeeze", squeeze)
Tracer.T = property(lambda self: transpose(self))
Tracer.mT = property(lambda self: swapaxes(self, -1, -2))
Tracer.real = property(_real, lambda self, v: _set_part(self, v, "real"))
for _name, _impl in [("sum", sum_), ("prod", prod_), ("max", max_), ("min", min_), ("any", any_),
                     ("all", all_), ("argmax", argmax), ("argmin", argmin), ("mean", mean),
                     ("var", var), ("std", std), ("clip", clip)]:
    _method(_name, _impl)
_method("round", lambda self, decimals=0, out=None: round_(self, decimals, out))


Tracer.shape = property(Tracer.shape.fget, _set_shape, doc="the array's shape (settable)")
_method("fill", lambda self, value: setitem(self, Ellipsis, value))
_PY_SCALAR = {"f": (float, np.float64), "i": (int, np.int64), "u": (int, np.int64),
              "b": (None, np.bool_)}


def _item(self, *args):
    """x.item(): the Python number NumPy returns, as a traced weak scalar (NEP 50: a Python
    float times a float32 array stays float32); an `if` on it still needs its value."""
    if len(args) == 1 and isinstance(args[0], tuple):
        args = args[0]
    if len(args) == 1:
        t = getitem(reshape(self, (-1,)), args[0])
    elif args:
        t = getitem(self, tuple(args))
    else:
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        t = reshape(self, ())
    kind = _PY_SCALAR.get(t.dtype.kind)
    if kind is None or t.ndim:
        return _TRACER_ITEM(t)           # frontend/trace.py's error: the value is needed
    weak, dtype = kind
    return wrap(ops.cast(current_graph(), t.node, dtype), weak=weak, scalar=True)


def _tolist(self):
    """x.tolist(): nested lists of traced Python numbers (x.item() of each element)."""
    if self.ndim == 0:
        return _item(self)
    if self.size > _TOLIST_ELEMENTS or self.dtype.kind not in _PY_SCALAR:
        return _TRACER_TOLIST(self)
    return [_tolist(getitem(self, i)) for i in range(self.shape[0])]


_TOLIST_ELEMENTS = 4096
_TRACER_ITEM, _TRACER_TOLIST = Tracer.item, Tracer.tolist
_method("item", _item)
_method("tolist", _tolist)
_method("nonzero", lambda self: _data_dependent("x.nonzero()")())
_method("dot", lambda self, other, out=None: dot(self, other, out))
_method("cumsum", lambda self, axis=None, dtype=None, out=None: cumsum(self, axis, dtype, out))
_method("cumprod", lambda self, axis=None, dtype=None, out=None: cumprod(self, axis, dtype, out))
_method("sort", _sort_inplace)
_method("diagonal", lambda self, offset=0, axis1=0, axis2=1: diagonal(self, offset, axis1, axis2))
_method("trace", lambda self, offset=0, axis1=0, axis2=1, dtype=None, out=None:
        trace_(self, offset, axis1, axis2, dtype, out))
_method("partition", _partition_inplace)
_method("argsort", lambda self, axis=-1, kind=None, order=None, *, stable=None:
        argsort(self, axis, kind, order, stable=stable))
_method("argpartition", lambda self, kth, axis=-1, kind="introselect", order=None:
        argpartition(self, kth, axis, kind, order))
_method("searchsorted", lambda self, v, side="left", sorter=None:
        searchsorted(self, v, side, sorter))
_method("take", lambda self, indices, axis=None, out=None, mode="raise":
        take(self, indices, axis, out, mode))


Tracer.strides = property(_strides, doc="The strides of the value in its storage's memory, "
                                        "taken as a C-ordered array (a view of an argument "
                                        "reports NumPy's strides for a C-contiguous one).")


Tracer.put = put


# ---- methods ---------------------------------------------------------------------------------
Tracer.repeat = lambda self, repeats, axis=None: repeat(self, repeats, axis)
Tracer.choose = lambda self, choices, out=None, mode="raise": choose(self, choices, out, mode)


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .creation import copy  # noqa: E402
from .indexing import MaskedSelection, _data_dependent, choose, diagonal, take, trace_  # noqa: E402
from .linalg import dot, matmul  # noqa: E402
from .reductions import cumprod, cumsum  # noqa: E402
from .registry import FUNCTIONS, wrap  # noqa: E402
from .shaping import FlatIter, ravel, repeat, reshape, transpose  # noqa: E402
from .sorting import argpartition, argsort, searchsorted  # noqa: E402
from .ufuncs import _set_part, call_ufunc, round_  # noqa: E402
