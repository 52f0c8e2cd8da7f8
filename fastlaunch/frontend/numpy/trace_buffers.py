"""NumPy arrays created inside a traced function: constants until a traced value reaches them.

Code written for NumPy allocates and fills: `out = np.zeros((n, m)); out[i] = x[i] * 2`,
`np.add.at(counts, idx, 1)`, `np.add(a, b, out=buf)`.  While a trace runs in this thread,
NumPy's creation functions (np.zeros, np.empty, np.arange, ...) called through the `numpy`
namespace return a TraceBuffer: an ndarray subclass that behaves exactly like the array NumPy
would have made (a constant, folded at trace time) until a traced value is written into it,
or it meets one in an operation that writes it.  From then on it is *promoted*: its contents
are a traced buffer, and every use of it (indexing, ufuncs, NumPy functions, methods) goes to
that tracer.  Views made before the promotion (indexing, reshape, .T, np.reshape, np.split,
as_strided, ...) follow their base: each is the same operation on the base's tracer.

A promoted buffer's own memory is stale: the values are in the tracer.  Whatever reads memory
rather than values raises a TracingError that names the array and the call: the buffer
protocol (memoryview, np.frombuffer, Cython; checked in C by _bufferguard), the attributes
that hand out the address (__array_interface__, ctypes, data), NumPy's C code making an array
from it (__array_finalize__), a view made some way we do not follow; and so does a traced
write into memory handed out earlier (a memoryview or np.frombuffer array still held, an
address taken).  C code that an installed library hands its own arrays to cannot be seen,
so the creation functions called from an installed package's code (not NumPy's, not ours)
return NumPy's arrays: writing a traced value into one raises (Tracer.__array__), naming the
library function.  np.asarray(g) of an array made outside fn is g itself, not a buffer.

The creation functions are replaced for tracing threads only, while some thread traces
(frontend/interception.py): other threads calling NumPy meanwhile see NumPy itself.  Names imported
directly (`from numpy import zeros`) are replaced in the traced function's own module (its
globals) by stand-ins that call NumPy's in other threads; in other modules (a helper imported
from elsewhere) such a name is not intercepted: its arrays stay plain constants.
"""
from __future__ import annotations

import linecache
import os
import site
import sys
import sysconfig

import numpy as np

from ... import _bufferguard, naming
from . import creation as np_creation, indexing, registry
from ...errors import TracingError
from ..interception import Interception
from ..trace import Tracer, tracing

_NO_VIEW_WRITE = ("writing a traced value through a view of an array created inside the traced "
                  "function that fastlaunch cannot follow (made by {how}) is not supported; "
                  "index the array itself (out[i] = ...), or take the view after the write")


class TraceBuffer(np.ndarray):
    """See the module docstring.  _fl_tracer: the root's tracer once promoted; _fl_view:
    (parent, fn) for a view whose tracer is fn(the parent's tracer), followed whatever the
    parent becomes (basic indexing, reshape, .T, np.reshape, ...); _fl_alias: the buffer
    whose memory a view made some other way shares (it may not be used once that buffer is
    promoted: its memory would be stale); _fl_origin: where the array was made, for messages."""

    _fl_tracer = None
    _fl_view = None
    _fl_alias = None
    _fl_origin = None

    def __array_finalize__(self, obj):
        if not isinstance(obj, TraceBuffer):
            return
        self._fl_origin = obj._fl_origin
        if obj._fl_get(False) is not None:
            # NumPy is making an array from a promoted buffer's memory (np.ndarray.copy(buf),
            # a C function's cast of it): those bytes are not the traced values
            raise TracingError(_stale_message(obj, "NumPy's C code made an array from it"))
        if obj.size and np.may_share_memory(np.ndarray.view(self, np.ndarray),
                                            np.ndarray.view(obj, np.ndarray)):
            self._fl_alias = obj           # a view (reshape, .T, ...); followed if we can

    # ---- promotion ---------------------------------------------------------------------
    def _fl_get(self, promote: bool):
        """The tracer standing for this array (promoting it when asked), or None."""
        if self._fl_view is not None:
            parent, fn = self._fl_view
            base = parent._fl_get(promote)
            if base is None:
                return None
            t = fn(base)
            if isinstance(t, Tracer) and isinstance(base, Tracer) and \
                    t._storage is not base._storage and t._storage.frozen_reason is None:
                # the traced function gave a copy where NumPy gives a view: readable, but a
                # write into it would be lost
                t._storage.frozen_reason = _NO_VIEW_WRITE.format(how=self._fl_how)
            return t
        if self._fl_alias is not None:
            if promote:
                raise TracingError(_NO_VIEW_WRITE.format(how="a NumPy function or method "
                                                             "fastlaunch does not trace"))
            if self._fl_alias._fl_get(False) is not None:
                raise TracingError(_stale_message(
                    self._fl_alias, "through a view made before a traced value was written "
                                    "into it, in a way fastlaunch does not follow: take the "
                                    "view after the write"))
            return None
        if self._fl_tracer is None:
            if not promote:
                return None
            if self._fl_exports or self._fl_escaped:
                raise TracingError(self._fl_escape_message())
            # the current contents, as a fresh writeable traced buffer
            self._fl_tracer = registry.wrap(registry.capture(np.array(self.view(np.ndarray))),
                                             scalar=False)
        return self._fl_tracer

    _fl_how = "a view"
    _fl_exports = 0          # buffers (memoryviews, np.frombuffer arrays, ...) of it held now
    _fl_escaped = None       # where its address went to foreign code (x.ctypes, ...)

    def _fl_root(self):
        b = self
        while True:
            if b._fl_view is not None:
                b = b._fl_view[0]
            elif b._fl_alias is not None:
                b = b._fl_alias
            else:
                return b

    def _fl_escape_message(self) -> str:
        origin = self._fl_origin or "an array created inside the traced function"
        held = (self._fl_escaped if self._fl_escaped else
                "a memoryview, an np.frombuffer array or a C object made from it earlier, "
                "which still holds its memory")
        return (f"a traced value is written into {origin}, whose memory was handed to code "
                f"that reads it directly ({held}): that code would read stale memory, since "
                f"the traced values are not in it. Make the array a NumPy value first (np.copy) "
                f"or write the traced values before that call, and use NumPy functions on it")

    def _fl_follow(self, parent, fn, how: str):
        """Make this array (a view of `parent`'s memory) the view fn(parent's tracer)."""
        self._fl_view = (parent, fn)
        self._fl_alias = None
        self._fl_how = how

    def __fl_tracer__(self):
        """The protocol frontend/trace.py and frontend/numpy/ read: the tracer, or None (a constant)."""
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
            result = _rewrap(super().__array_function__(
                func, tuple(t for t in types if not issubclass(t, TraceBuffer)) or (np.ndarray,),
                _plain(args), _plain(kwargs)))
            # np.reshape(buf, ...), np.split(buf, ...): views of a buffer follow it
            _follow_views(result, args, kwargs,
                          lambda a, k: func(*a, **k), f"{naming.public_name(func)}")
            return result
        # a traced value is involved: every buffer taking part is promoted (reading a promoted
        # constant is harmless; a destination such as np.copyto's must be)
        return func(*_traced(args, promote=True), **_traced(kwargs, promote=True))

    # ---- indexing ----------------------------------------------------------------------
    def __getitem__(self, key):
        t = self._fl_get(_any_traced(key))
        if t is not None:
            # a key still constant stays a NumPy value: a constant mask's count is known
            return t[_traced(key, promote=False)]
        result = super().__getitem__(key)
        if isinstance(result, TraceBuffer):
            if result._fl_alias is self:       # basic indexing: a view that follows us
                result._fl_follow(self, lambda base: indexing.getitem(base, key), "indexing")
            else:
                result._fl_alias = None        # advanced indexing: an independent copy
        return result

    def __setitem__(self, key, value):
        if self._fl_get(False) is not None or _any_traced(key) or _any_traced(value):
            t = self._fl_get(True)
            t[_traced(key, promote=False)] = _traced(value, promote=True)
            return
        super().__setitem__(key, value)

    # ---- everything else goes to the tracer once promoted --------------------------------
    def __getattribute__(self, name):
        if name.startswith("_fl"):
            return super().__getattribute__(name)
        get = super().__getattribute__("_fl_get")
        if name in _RAW_MEMORY:
            if get(False) is not None:
                raise TracingError(_stale_message(self, f"x.{name}"))
            if name in _ADDRESS:
                # the address escapes: a later traced write into this memory is refused
                root = super().__getattribute__("_fl_root")()
                if root._fl_escaped is None:
                    root._fl_escaped = f"x.{name} at {_calling_code()}"
            return super().__getattribute__(name)
        if name.startswith("__"):
            return super().__getattribute__(name)
        t = get(False)
        if t is not None:
            return getattr(t, name)
        value = super().__getattribute__(name)
        if isinstance(value, TraceBuffer) and value._fl_alias is self:     # x.T, x.real
            value._fl_follow(self, lambda base: getattr(base, name), f"x.{name}")
        elif callable(value) and not isinstance(value, type):
            method = value

            def call(*args, **kwargs):
                if _any_traced(args) or _any_traced(kwargs):
                    # F.dot(x) with x traced: NumPy's C method would convert x; the method of
                    # the buffer's tracer (promoted: the method may write it, x.put(...))
                    return getattr(self._fl_get(True), name)(*_traced(args, promote=True),
                                                             **_traced(kwargs, promote=True))
                result = method(*args, **kwargs)
                if name in _VIEW_METHODS and isinstance(result, TraceBuffer) and \
                        result._fl_alias is self:   # x.reshape(...), x.view(...), ...
                    result._fl_follow(self, lambda base: getattr(base, name)(*args, **kwargs),
                                      f"x.{name}()")
                return result
            return call
        return value

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
    __array__ = _fl_concrete("__array__")
    __repr__ = _fl_concrete("__repr__")
    del _fl_concrete

    def __index__(self):
        t = self._fl_get(False)
        if t is None:
            return super().__index__()
        if t.ndim or t.dtype.kind not in "iub":
            # NumPy's TypeError, which bytes(x) and others take as "not an index"
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return t.__index__()

    def __str__(self):
        t = self._fl_get(False)
        return repr(t) if t is not None else super().__str__()

    def __copy__(self):
        t = self._fl_get(False)
        return np_creation.copy(t) if t is not None else super().__copy__()

    def __deepcopy__(self, memo):
        t = self._fl_get(False)
        return np_creation.copy(t) if t is not None else super().__deepcopy__(memo)

    def __reduce__(self):
        if self._fl_get(False) is not None:
            raise TracingError("a traced buffer cannot be pickled inside a traced function")
        return np.array(self.view(np.ndarray)).__reduce__()


# what reads an array's memory rather than its values (the buffer protocol is checked by
# _bufferguard, below)
_RAW_MEMORY = frozenset(("__array_interface__", "__array_struct__", "ctypes", "data", "tobytes",
                         "tofile", "tostring", "dump", "dumps", "__dlpack__",
                         "__dlpack_device__"))
_ADDRESS = frozenset(("__array_interface__", "__array_struct__", "ctypes", "__dlpack__"))
# methods whose result may be a view of the array
_VIEW_METHODS = frozenset(("reshape", "ravel", "transpose", "swapaxes", "squeeze", "view",
                           "diagonal", "conj", "conjugate"))


def _stale_message(buffer, how: str) -> str:
    """Why reading `buffer`'s memory (`how`) cannot be had while tracing."""
    origin = buffer._fl_origin or "an array created inside the traced function"
    return (f"{_calling_code()} reads the memory of {origin} ({how}), which holds traced "
            f"values since a traced value was written into it; its memory does not: while "
            f"tracing, fastlaunch records operations on values, so the memory that C code, the "
            f"buffer protocol, ctypes or __array_interface__ read would be stale. Use NumPy "
            f"functions on the array inside the compiled function, or make that call outside it")


def _calling_code() -> str:
    """The call that asked: a library function as the user called it, or the user's line."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in \
            ("fastlaunch", "copy"):
        frame = frame.f_back
    if frame is None:
        return "code"
    library, where = naming.converting_function(frame)
    if library:
        return f"{library} (called at {where})"
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return (f"the code at {frame.f_code.co_filename}:{frame.f_lineno}"
            + (f" (`{line}`)" if line else ""))


def _buffer_get(obj):
    """The buffer protocol's check (see _bufferguard): a promoted buffer's memory is stale; a
    constant's exports are counted, so that no traced value is written under them."""
    if obj._fl_get(False) is not None:
        raise TracingError(_stale_message(obj, "the buffer protocol: memoryview, np.frombuffer, "
                                               "bytes(), a C or Cython function"))
    obj._fl_root()._fl_exports += 1


def _buffer_release(obj):
    obj._fl_root()._fl_exports -= 1


_bufferguard.guard(TraceBuffer, _buffer_get, _buffer_release)


def _follow_views(result, args, kwargs, call, how: str):
    """Arrays in `result` (of call(args, kwargs) on constants) that share memory with a
    TraceBuffer argument follow it: they are call(...) of its tracer once it is promoted."""
    buffers = [x for x in _leaves_of((args, kwargs)) if isinstance(x, TraceBuffer)]
    if not buffers:
        return
    outs = [result] if isinstance(result, np.ndarray) else \
        list(result) if type(result) in (list, tuple) else []
    for i, r in enumerate(outs):
        if not isinstance(r, TraceBuffer) or not r.size:
            continue
        shared = [b for b in buffers
                  if np.may_share_memory(np.ndarray.view(r, np.ndarray),
                                         np.ndarray.view(b, np.ndarray))]
        if len(shared) != 1:
            if shared:
                r._fl_alias = shared[0]
            continue
        parent = shared[0]

        def fn(base, parent=parent, i=i):
            out = call(*_swap((args, kwargs), parent, base))
            return out if isinstance(result, np.ndarray) else out[i]
        r._fl_follow(parent, fn, how)


def _leaves_of(x):
    if type(x) in (list, tuple):
        for v in x:
            yield from _leaves_of(v)
    elif type(x) is dict:
        for v in x.values():
            yield from _leaves_of(v)
    else:
        yield x


def _swap(x, old, new):
    if x is old:
        return new
    if type(x) in (list, tuple):
        return type(x)(_swap(v, old, new) for v in x)
    if type(x) is dict:
        return {k: _swap(v, old, new) for k, v in x.items()}
    return x


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
            "geomspace", "array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray",
            "copy")
_CONVERSIONS = ("array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray")


def _intercepted(name, original):
    def creation(*args, **kwargs):
        if not tracing():
            return original(*args, **kwargs)
        if _any_traced(args) or _any_traced(kwargs):
            args, kwargs = _traced(args, promote=False), _traced(kwargs, promote=False)
            if name in _CONVERSIONS:
                # no NumPy dispatch for these
                return np_creation.array(*args, **kwargs)
            if name == "full":
                return _full(original, *args, **kwargs)
            # made from traced values: NumPy dispatches to the tracer
            return original(*args, **kwargs)
        caller = sys._getframe(1)
        if _library_code(caller):
            # an installed library's own arrays stay NumPy's: such code may hand them to C,
            # which would read a promoted buffer's stale memory; a traced value written into
            # one is an error naming the library function (Tracer.__array__)
            return original(*args, **kwargs)
        result = original(*args, **kwargs)
        if type(result) is not np.ndarray or result.dtype.kind not in "biufc":
            return result
        sources = [a for a in _leaves_of((args, kwargs)) if isinstance(a, np.ndarray)]
        shared = [a for a in sources if result.size and np.may_share_memory(
            result, np.ndarray.view(a, np.ndarray))]
        if shared and not isinstance(shared[0], TraceBuffer):
            # np.asarray(g) is g itself: an array the function did not make, which it cannot
            # write (a traced value written into it is an error); read, it is a constant
            return result
        buf = result.view(TraceBuffer)
        buf._fl_origin = f"the array made by np.{name} at {_where(caller)}"
        if shared:                  # np.asarray(buf) is buf
            buf._fl_follow(shared[0], lambda base: base, f"np.{name}")
        return buf
    creation.__name__ = original.__name__
    creation.__qualname__ = getattr(original, "__qualname__", original.__name__)
    creation.__doc__ = original.__doc__
    creation.__wrapped__ = original
    return creation


def _where(frame) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _library_dirs() -> tuple:
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    try:
        paths.update(site.getsitepackages())
        paths.add(site.getusersitepackages())
    except AttributeError:          # a virtualenv's old site module
        pass
    return tuple(sorted({os.path.join(os.path.realpath(p), "") for p in paths}))


_LIBRARY_DIRS = _library_dirs()
_library_files: dict = {}           # code file name -> whether an installed library's


def _library_code(frame) -> bool:
    """Whether `frame` runs an installed package's code (site-packages, the standard
    library), other than NumPy's and ours: not the user's."""
    if frame.f_globals.get("__name__", "").split(".")[0] in ("numpy", "fastlaunch"):
        return False
    name = frame.f_code.co_filename
    found = _library_files.get(name)
    if found is None:
        found = _library_files[name] = os.path.realpath(name).startswith(_LIBRARY_DIRS)
    return found


def _full(original, shape, fill_value, dtype=None, order="C", **kwargs):
    """np.full with a traced fill value: a broadcast of the value (cast to dtype)."""
    if dtype is None:
        dtype = fill_value.dtype if isinstance(fill_value, Tracer) else np.asarray(fill_value).dtype
    base = np.broadcast_to(np.zeros((), dtype), (shape,) if np.ndim(shape) == 0 else shape)
    return np_creation.full_like(base, fill_value, dtype=dtype)


def _entries():
    return [(np, name, _intercepted(name, getattr(np, name))) for name in CREATION]


# numpy's creation functions make TraceBuffers in tracing threads while in this block; also
# those imported by name into `namespace` (the traced function's globals)
intercepting = Interception(_entries).active
