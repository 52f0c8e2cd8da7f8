"""NumPy arrays created inside a traced function: constants until a traced value reaches them.

Code written for NumPy allocates and fills: `out = np.zeros((n, m)); out[i] = x[i] * 2`,
`np.add.at(counts, idx, 1)`, `np.add(a, b, out=buf)`.  While a trace runs in this thread,
NumPy's creation functions (np.zeros, np.empty, np.arange, ...) called through the `numpy`
namespace return a TraceBuffer: an ndarray subclass that behaves exactly like the array NumPy
would have made (a constant, folded at trace time) until a traced value is written into it,
or it meets one in an operation that writes it.  From then on it is *promoted*: its contents
are a traced buffer, and every use of it (indexing, ufuncs, NumPy functions, methods) goes to
that tracer.  Views made by indexing before the promotion follow their base.

The creation functions are replaced for tracing threads only, while some thread traces
(interception.py): other threads calling NumPy meanwhile see NumPy itself.  Names imported
directly (`from numpy import zeros`) are replaced in the traced function's own module (its
globals) by stand-ins that call NumPy's in other threads; in other modules (a helper imported
from elsewhere) such a name is not intercepted: its arrays stay plain constants.
"""
from __future__ import annotations


import numpy as np

from . import numpy_api
from .errors import TracingError
from .interception import Interception
from .trace import Tracer, tracing

_NO_VIEW_WRITE = ("writing a traced value through a view made by reshape/transpose/ravel of "
                  "an array created inside the traced function is not supported; index the "
                  "array itself (out[i] = ...), or take the view after the write")


class TraceBuffer(np.ndarray):
    """See the module docstring.  _fl_tracer: the root's tracer once promoted; _fl_view:
    (parent, key) for a view made by basic indexing; _fl_derived: a view made any other way."""

    _fl_tracer = None
    _fl_view = None
    _fl_derived = False

    def __array_finalize__(self, obj):
        if isinstance(obj, TraceBuffer) and obj.size and np.may_share_memory(self, obj):
            self._fl_derived = True        # a view of a buffer (reshape, .T, ...)

    # ---- promotion ---------------------------------------------------------------------
    def _fl_get(self, promote: bool):
        """The tracer standing for this array (promoting it when asked), or None."""
        if self._fl_view is not None:
            parent, key = self._fl_view
            base = parent._fl_get(promote)
            return None if base is None else numpy_api.getitem(base, key)
        if self._fl_tracer is None:
            if not promote:
                return None
            if self._fl_derived:
                raise TracingError(_NO_VIEW_WRITE)
            # the current contents, as a fresh writeable traced buffer
            self._fl_tracer = numpy_api.wrap(numpy_api.capture(np.array(self.view(np.ndarray))),
                                             scalar=False)
        return self._fl_tracer

    def __fl_tracer__(self):
        """The protocol trace.py and numpy_api.py read: the tracer, or None (a constant)."""
        return self._fl_get(False)

    # ---- NumPy protocols ---------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        outs = out if isinstance(out, tuple) else (() if out is None else (out,))
        traced = _any_traced(inputs + tuple(outs)) or (method == "at" and _any_traced(kwargs))
        if not traced:
            result = super().__array_ufunc__(ufunc, method, *_plain(inputs), **_plain(kwargs))
            if out is not None:         # `buf += 1` must keep the very same object
                return out if isinstance(out, tuple) and len(out) > 1 else outs[0]
            return _rewrap(result)
        # a write into a buffer (out=, ufunc.at) promotes it; reads just use its value
        promote_first = method == "at"
        args = tuple(_traced(x, promote=(promote_first and i == 0)) for i, x in enumerate(inputs))
        if out is not None:
            kwargs["out"] = tuple(_traced(o, promote=True) for o in outs)
        result = getattr(ufunc, method)(*args, **kwargs)
        if out is not None:
            return out if isinstance(out, tuple) and len(out) > 1 else outs[0]
        return result

    def __array_function__(self, func, types, args, kwargs):
        if not (_any_traced(args) or _any_traced(kwargs)):
            return _rewrap(super().__array_function__(
                func, tuple(t for t in types if not issubclass(t, TraceBuffer)) or (np.ndarray,),
                _plain(args), _plain(kwargs)))
        # a traced value is involved: every buffer taking part is promoted (reading a promoted
        # constant is harmless; a destination such as np.copyto's must be)
        return func(*_traced(args, promote=True), **_traced(kwargs, promote=True))

    # ---- indexing ----------------------------------------------------------------------
    def __getitem__(self, key):
        t = self._fl_get(_any_traced(key))
        if t is not None:
            return t[_traced(key, promote=True)]
        result = super().__getitem__(key)
        if isinstance(result, TraceBuffer):
            if np.may_share_memory(result, self):
                result._fl_view = (self, key)     # basic indexing: a view that follows us
                result._fl_derived = False
            else:
                result._fl_derived = False        # advanced indexing: an independent copy
        return result

    def __setitem__(self, key, value):
        if self._fl_tracer is not None or self._fl_view is not None and \
                self._fl_get(False) is not None or _any_traced(key) or _any_traced(value):
            t = self._fl_get(True)
            t[_traced(key, promote=True)] = _traced(value, promote=True)
            return
        super().__setitem__(key, value)

    # ---- everything else goes to the tracer once promoted --------------------------------
    def __getattribute__(self, name):
        if name.startswith("_fl") or name.startswith("__"):
            return super().__getattribute__(name)
        t = super().__getattribute__("_fl_get")(False)
        if t is not None:
            return getattr(t, name)
        return super().__getattribute__(name)

    def __iter__(self):
        t = self._fl_get(False)
        return iter(t) if t is not None else super().__iter__()

    def _fl_concrete(name):
        def method(self, *args):
            t = self._fl_get(False)
            if t is not None:
                return getattr(t, name)(*args)
            return getattr(super(TraceBuffer, self), name)(*args)
        return method

    __bool__ = _fl_concrete("__bool__")
    __float__ = _fl_concrete("__float__")
    __int__ = _fl_concrete("__int__")
    __index__ = _fl_concrete("__index__")
    __array__ = _fl_concrete("__array__")
    __repr__ = _fl_concrete("__repr__")
    del _fl_concrete

    def __reduce__(self):
        if self._fl_get(False) is not None:
            raise TracingError("a traced buffer cannot be pickled or copied with copy.deepcopy "
                               "inside a traced function")
        return np.array(self.view(np.ndarray)).__reduce__()


def _any_traced(x) -> bool:
    if isinstance(x, Tracer):
        return True
    if isinstance(x, TraceBuffer):
        return x._fl_get(False) is not None
    if isinstance(x, (list, tuple)):
        return any(_any_traced(v) for v in x)
    if isinstance(x, dict):
        return any(_any_traced(v) for v in x.values())
    return False


def _traced(x, promote: bool):
    """x with every TraceBuffer replaced by its tracer (promoted when `promote`) or, if it
    stays a constant, by a plain ndarray view."""
    if isinstance(x, TraceBuffer):
        t = x._fl_get(promote)
        return t if t is not None else x.view(np.ndarray)
    if type(x) in (list, tuple):
        return type(x)(_traced(v, promote) for v in x)
    if type(x) is dict:
        return {k: _traced(v, promote) for k, v in x.items()}
    return x


def _plain(x):
    if isinstance(x, TraceBuffer):
        return x.view(np.ndarray)
    if type(x) in (list, tuple):
        return type(x)(_plain(v) for v in x)
    if type(x) is dict:
        return {k: _plain(v) for k, v in x.items()}
    return x


def _rewrap(x):
    """Results of constant operations stay buffers, so traced values may still be written."""
    if type(x) is np.ndarray:
        return x.view(TraceBuffer)
    if type(x) in (list, tuple):
        return type(x)(_rewrap(v) for v in x)
    return x


# ---- the creation functions ------------------------------------------------------------------
CREATION = ("zeros", "ones", "empty", "full", "arange", "linspace", "eye", "identity",
            "zeros_like", "ones_like", "empty_like", "full_like", "tri", "logspace",
            "geomspace", "array", "asarray", "asanyarray", "ascontiguousarray", "copy")


def _intercepted(name, original):
    def creation(*args, **kwargs):
        if not tracing():
            return original(*args, **kwargs)
        if _any_traced(args) or _any_traced(kwargs):
            args, kwargs = _traced(args, promote=False), _traced(kwargs, promote=False)
            if name in ("array", "asarray", "asanyarray", "ascontiguousarray"):
                # no NumPy dispatch for these
                return numpy_api.array(*args, **kwargs)
            if name == "full":
                return _full(original, *args, **kwargs)
            # made from traced values: NumPy dispatches to the tracer
            return original(*args, **kwargs)
        result = original(*args, **kwargs)
        if type(result) is np.ndarray and result.dtype.kind in "biufc":
            return result.view(TraceBuffer)
        return result
    creation.__name__ = original.__name__
    creation.__qualname__ = getattr(original, "__qualname__", original.__name__)
    creation.__doc__ = original.__doc__
    creation.__wrapped__ = original
    return creation


def _full(original, shape, fill_value, dtype=None, order="C", **kwargs):
    """np.full with a traced fill value: a broadcast of the value (cast to dtype)."""
    if dtype is None:
        dtype = fill_value.dtype if isinstance(fill_value, Tracer) else np.asarray(fill_value).dtype
    base = np.broadcast_to(np.zeros((), dtype), (shape,) if np.ndim(shape) == 0 else shape)
    return numpy_api.full_like(base, fill_value, dtype=dtype)


def _entries():
    return [(np, name, _intercepted(name, getattr(np, name))) for name in CREATION]


# numpy's creation functions make TraceBuffers in tracing threads while in this block; also
# those imported by name into `namespace` (the traced function's globals)
intercepting = Interception(_entries).active
