"""Shape and joining: reshape/transpose/axes, broadcasting, `atleast_*`, concatenate/stack/split,
`pad`/`tile`/`repeat`/flips/`roll`/`rot90`, `insert`, `sliding_window_view` and read-only
`as_strided` as gathers, the sequence-argument entries (`intercepting`)."""
from __future__ import annotations

import builtins
import math

import numpy as np

from .. import trace
from ...errors import TracingError
from ...ir import ops
from ...ir.graph import Node, Op, check_shape
from ..interception import Interception
from ..trace import Storage, Tracer, current_graph, frame, memory_layout, tracing, view_of
from .registry import FUNCTIONS, implements


# ---- construction from traced arrays ---------------------------------------------------------
def _filled(shape, dtype, value) -> Tracer:
    g = current_graph()
    dt = ops.check_dtype(dtype, "array construction")
    shape = check_shape(shape, dt)      # a new array: NumPy's array checks, not its iterator's
    return wrap(ops.broadcast_to(g, ops.literal(g, value, dt), shape), scalar=False)


def _like(a, dtype, shape, value):
    n = node_of(a)
    dt = np.dtype(dtype) if dtype is not None else n.dtype
    if shape is None:
        shape = n.shape
    elif isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    return _filled(tuple(shape), dt, value)


@implements(np.reshape)
def reshape(a, *shape, order="C", newshape=None, copy=None):
    if newshape is not None:
        shape = (newshape,)
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    if order not in ("C", "A", "F"):
        raise TracingError(f"reshape(order={order!r}) is not supported by fastlaunch")
    t = _as_tracer(a)
    new_shape = ops.normalize_shape(shape, t.size)
    if order == "F" and t.ndim > 1 or order == "F" and len(new_shape) > 1:
        # Fortran order: the reversed axes reshaped in C order, reversed back
        return transpose(reshape(transpose(t), new_shape[::-1]))
    # views of a NumPy scalar stay scalars; of a Python scalar, 0-d arrays (np.asarray first)
    scalar = t.scalar and not new_shape and not t.python
    vm = frame(t).squeeze_expand(new_shape)
    if vm is not None:
        return view_of(t, vm, scalar=scalar)
    return view_of(t, reshape=new_shape, scalar=scalar)


@implements(np.ravel)
def ravel(a, order="C"):
    return reshape(a, (-1,), order=order)


def flatten(a, order="C"):
    return copy(reshape(a, (-1,), order=order))


@implements(np.transpose)
def transpose(a, axes=None):
    t = _as_tracer(a)
    if axes is None:
        axes = tuple(reversed(range(t.ndim)))
    axes = tuple(int(ax) % max(t.ndim, 1) for ax in axes)
    if sorted(axes) != list(range(t.ndim)):
        raise ValueError("axes don't match array")
    # a NumPy scalar's views stay scalars; a Python scalar's are 0-d arrays (np.asarray first)
    return view_of(t, frame(t).transpose(axes), scalar=t.scalar and t.ndim == 0 and
                   not t.python)


@implements(np.swapaxes)
def swapaxes(a, axis1, axis2):
    nd = node_of(a).ndim
    perm = list(range(nd))
    i, j = ops.normalize_axes(axis1, nd)[0], ops.normalize_axes(axis2, nd)[0]
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


@implements(np.moveaxis)
def moveaxis(a, source, destination):
    nd = node_of(a).ndim
    src = [ops.normalize_axes(s, nd)[0] for s in np.atleast_1d(source)]
    dst = [ops.normalize_axes(d, nd)[0] for d in np.atleast_1d(destination)]
    order = [n for n in range(nd) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


@implements(np.expand_dims)
def expand_dims(a, axis):
    shape = list(node_of(a).shape)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = len(shape) + len(axes)
    for ax in sorted(int(x) % nd for x in axes):
        shape.insert(ax, 1)
    return reshape(a, tuple(shape))


@implements(np.squeeze)
def squeeze(a, axis=None):
    shape = node_of(a).shape
    if axis is None:
        drop = {i for i, s in enumerate(shape) if s == 1}
    else:
        drop = set(ops.normalize_axes(axis, len(shape)))
        if any(shape[i] != 1 for i in drop):
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(a, tuple(s for i, s in enumerate(shape) if i not in drop))


@implements(np.broadcast_to)
def broadcast_to(a, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError("all elements of broadcast shape must be non-negative")
    n = ops.broadcast_to(current_graph(), node_of(a), shape)
    return Tracer(Storage(n, frozen_reason="the result of np.broadcast_to is read-only"))


@implements(np.atleast_1d)
def atleast_1d(*arys):
    out = tuple(a if node_of(a).ndim >= 1 else reshape(a, (1,)) for a in arys)
    return out[0] if len(out) == 1 else out


@implements(np.atleast_2d)
def atleast_2d(*arys):
    out = []
    for a in arys:
        nd = node_of(a).ndim
        out.append(a if nd >= 2 else reshape(a, (1,) * (2 - nd) + node_of(a).shape))
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.shape)
def shape_(a):
    if trace._size_watchers:
        trace.note_size_read(node_of(a).shape, 0)
    return node_of(a).shape


@implements(np.ndim)
def ndim_(a):
    return node_of(a).ndim


@implements(np.size)
def size_(a, axis=None):
    n = node_of(a)
    if trace._size_watchers:
        trace.note_size_read(n.shape, 0)
    return n.size if axis is None else n.shape[axis]


@implements(np.result_type)
def result_type(*arrays_and_dtypes):
    return np.result_type(*[a.dtype if is_tracer(a) else a for a in arrays_and_dtypes])


# ---- joining (copies) ------------------------------------------------------------------------
@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_extra("concatenate", out=out)
    g = current_graph()
    parts = [operand(a) for a in arrays]
    if not parts:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        parts = [(ops.reshape(g, n, (-1,)), w) for n, w in parts]
        axis = 0
    dt = np.dtype(dtype) if dtype is not None else ops.result_type([(n, None) for n, _ in parts])
    nodes = [ops.cast(g, n, dt) for n, _ in parts]
    nd = nodes[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ax = ops.normalize_axes(axis, nd)[0]
    for n in nodes:
        if n.ndim != nd or any(n.shape[d] != nodes[0].shape[d] for d in range(nd) if d != ax):
            raise ValueError("all the input array dimensions except for the concatenation axis "
                             "must match exactly")
    total = sum(n.shape[ax] for n in nodes)
    shape_out = list(nodes[0].shape)
    shape_out[ax] = total
    base = ops.broadcast_to(g, ops.literal(g, 0, dt), shape_out)
    at = 0
    for n in nodes:
        start = [0] * nd
        start[ax] = at
        base = ops.set_region(g, base, start, [1] * nd, n.shape, n)
        at += n.shape[ax]
    return wrap(base, scalar=False)


@implements(np.stack)
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    nd = node_of(arrays[0]).ndim + 1
    ax = ops.normalize_axes(axis, nd)[0]
    return concatenate([expand_dims(_as_tracer(a), ax) for a in arrays], axis=ax, out=out,
                       dtype=dtype)


@implements(np.hstack)
def hstack(tup, dtype=None, casting="same_kind"):
    arrs = [atleast_1d(a) for a in tup]
    return concatenate(arrs, axis=0 if node_of(arrs[0]).ndim == 1 else 1, dtype=dtype)


@implements(np.vstack)
def vstack(tup, dtype=None, casting="same_kind"):
    return concatenate([atleast_2d(a) for a in tup], axis=0, dtype=dtype)


builtins_type = builtins.type


def view(self, dtype=None, type=None):
    """ndarray.view: the same values (a plain ndarray type), or their bits as `dtype`."""
    if type is not None and type is not np.ndarray:
        raise TracingError(f"x.view(type={getattr(type, '__name__', type)}) inside a traced "
                           f"function: only plain ndarrays are traced")
    if dtype is None or (isinstance(dtype, builtins_type) and issubclass(dtype, np.ndarray)):
        return self
    dt = ops.check_dtype(dtype, "x.view(dtype)")
    return wrap(ops.bitcast(current_graph(), node_of(self), dt), scalar=self.scalar)


class FlatIter:
    """x.flat while tracing: indexing in C order (ints, slices, index arrays), reading and
    writing."""

    def __init__(self, base: Tracer):
        self.base = base

    def __getitem__(self, key):
        if self.base.ndim == 1:
            return self.base[key]
        return ravel(self.base)[key]

    def __setitem__(self, key, value):
        if is_tracer(key):
            raise TracingError("x.flat[traced index] = v is not supported by fastlaunch; "
                               "use x.reshape(-1) on a copy, or np.put")
        idx = np.arange(self.base.size)[key]
        if np.ndim(idx) == 0:
            self.base[np.unravel_index(int(idx), self.base.shape)] = value
        else:
            self.base[np.unravel_index(idx, self.base.shape)] = value

    def __len__(self):
        return self.base.size

    def __iter__(self):
        flat = ravel(self.base)
        return (flat[i] for i in range(self.base.size))


def _set_shape(self, value):
    """`x.shape = s`: x itself becomes the reshaped view (NumPy's in-place reshape), where
    NumPy can do that without a copy; otherwise NumPy's AttributeError."""
    view = self._view
    whole = self._reshape is None and (view is None or view.is_identity)
    if whole and self._storage.position is not None:
        raise TracingError(
            "assigning x.shape of an argument array changes the caller's array object, "
            "which fastlaunch cannot replay; use x = x.reshape(shape) inside the function")
    r = reshape(self, value)
    if not whole and r._reshape is not None:
        raise AttributeError("Incompatible shape for in-place modification. Use "
                             "`.reshape()` to make a copy with the desired shape.")
    self._storage, self._view, self._reshape, self._post = \
        r._storage, r._view, r._reshape, r._post
    self._node, self._version = None, -1
    self.scalar = r.scalar


# ==== shifts and differences ======================================================================
@implements(np.roll)
def roll(a, shift, axis=None):
    t = _as_tracer(a)
    if t.ndim == 1 and type(shift) is int and (axis is None or type(axis) is int and
                                                 axis in (0, -1)):
        # a 1-D stencil's shift, made every step of a time loop: the nodes the general path
        # below makes (iota - offset, gathered; ravel and reshape are no-ops), directly
        return wrap(_roll_1d(t.node, shift), scalar=False)
    if axis is None:
        return reshape(roll(ravel(t), shift, 0), t.shape)
    total = dict.fromkeys(range(t.ndim), 0)
    if type(shift) is int and type(axis) is int:
        # the common call (a loop's stencil makes it every step): no arrays to broadcast
        total[_axis(axis, t.ndim)] = shift
    else:
        axes = _axes(axis, t.ndim, allow_duplicate=True)
        shift_arr = np.asarray(_static_values(shift, "np.roll's shift"))
        if shift_arr.dtype.kind not in "iub":
            raise TypeError(f"np.roll's shift must be integers, not {shift_arr.dtype}")
        pairs = np.broadcast(shift_arr, np.asarray(axes))
        if pairs.ndim > 1:
            raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
        for sh, ax in pairs:
            total[int(ax)] += int(sh)
    index_of = {}
    for ax, offset in total.items():
        n = t.shape[ax]
        offset %= n or 1
        if offset:
            # source index i - offset in [-offset, n - offset): the gather wraps negatives
            index_of[ax] = (n, lambda it, o=offset: _ew(Op.SUB, _INTP, it, _lit(o, _INTP)))
    return wrap(_reindex(t.node, index_of), scalar=False)


def _roll_1d(src: Node, shift: int) -> Node:
    n = src.shape[0]
    offset = shift % (n or 1)
    if not offset:
        return src
    g = current_graph()
    it = ops.iota(g, (n,), 0, _INTP)
    index = g.add(Op.SUB, _INTP, (n,), (it, ops.literal(g, offset, _INTP)))
    # every index lies in [-offset, n - offset): within the gather's bounds, nothing to check
    return g.add(Op.GATHER, src.dtype, (n,), (src, index), axis=0)


def _shifted_pair(t: Tracer, axis: int):
    hi = [slice(None)] * t.ndim
    lo = [slice(None)] * t.ndim
    hi[axis] = slice(1, None)
    lo[axis] = slice(None, -1)
    return getitem(t, tuple(hi)), getitem(t, tuple(lo))


# ==== padding, tiling, windows ======================================================================
def _as_pairs(x, ndim: int, as_index=False):
    """NumPy's pad-width broadcasting: a scalar, (before, after), or one pair per axis."""
    x = np.array(x)
    if as_index:
        x = np.round(x).astype(np.intp, copy=False)
    if x.ndim < 3:
        if x.size == 1:
            x = x.ravel()
            if as_index and x[0] < 0:
                raise ValueError("index can't contain negative values")
            return ((x[0].item(), x[0].item()),) * ndim
        if x.size == 2 and x.shape != (2, 1):
            x = x.ravel()
            if as_index and (x[0] < 0 or x[1] < 0):
                raise ValueError("index can't contain negative values")
            return ((x[0].item(), x[1].item()),) * ndim
    if as_index and x.size and x.min() < 0:
        raise ValueError("index can't contain negative values")
    return [tuple(p) for p in np.broadcast_to(x, (ndim, 2)).tolist()]


_PAD_KWARGS = {"constant": {"constant_values"}, "edge": set(), "wrap": set(),
               "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}
_PAD_NUMPY_ONLY = ("linear_ramp", "maximum", "mean", "median", "minimum", "empty")


def _pad_index(mode: str, n: int, before: int):
    """The source index of output position `it` along one padded axis of length n."""
    def rel(it):
        return _ew(Op.SUB, _INTP, it, _lit(before, _INTP))

    def mod(x, m):
        return _ew(Op.MOD, _INTP, x, _lit(m, _INTP))

    if mode == "edge" or (mode == "reflect" and n == 1):
        return lambda it: _ew(Op.MINIMUM, _INTP, _ew(Op.MAXIMUM, _INTP, rel(it), _lit(0, _INTP)),
                              _lit(n - 1, _INTP))
    if mode == "wrap":
        return lambda it: mod(rel(it), n)
    if mode == "symmetric":        # period 2n: n elements, then the same mirrored
        def sym(it):
            m = mod(rel(it), 2 * n)
            return _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, m, _lit(n, _INTP)), m,
                       _ew(Op.SUB, _INTP, _lit(2 * n - 1, _INTP), m))
        return sym

    def reflect(it):                # period 2n - 2: the edges are not repeated
        m = mod(rel(it), 2 * n - 2)
        return _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, m, _lit(n, _INTP)), m,
                   _ew(Op.SUB, _INTP, _lit(2 * n - 2, _INTP), m))
    return reflect


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    t = _as_tracer(array)
    nd = t.ndim
    if callable(mode):
        raise TracingError("np.pad with a function as mode is not supported by fastlaunch")
    if mode in _PAD_NUMPY_ONLY:
        raise TracingError(f"np.pad(mode={mode!r}) is not supported by fastlaunch yet; "
                           f"supported: {', '.join(_PAD_KWARGS)}")
    if mode not in _PAD_KWARGS:
        raise ValueError(f"mode '{mode}' is not supported")
    unsupported = set(kwargs) - _PAD_KWARGS[mode]
    if unsupported:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
    widths = _as_pairs(_static_array(pad_width, "np.pad's pad_width"), nd, as_index=True)
    if mode in ("reflect", "symmetric") and kwargs.get("reflect_type") == "odd":
        # (NumPy takes any other reflect_type as 'even')
        raise TracingError("np.pad(reflect_type='odd') is not supported by fastlaunch yet")
    g = current_graph()
    shape = tuple(b + s + a for s, (b, a) in zip(t.shape, widths))
    if not any(b or a for b, a in widths):
        return copy(t)
    if mode != "constant":
        for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)):
            if s == 0 and (b or a):
                raise ValueError(f"can't extend empty axis {ax} using modes other than "
                                 f"'constant' or 'empty'")
        if t.size == 0:
            return wrap(ops.broadcast_to(g, ops.literal(g, 0, t.dtype), shape), scalar=False)
        index_of = {ax: (shape[ax], _pad_index(mode, s, b))
                    for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)) if b or a}
        return wrap(_reindex(t.node, index_of), scalar=False)
    return _pad_constant(t, widths, shape, kwargs.get("constant_values", 0))


def _pad_constant(t: Tracer, widths, shape, values) -> Tracer:
    g = current_graph()
    nd = t.ndim
    if is_tracer(values) and values.ndim == 0:
        pairs = [(values, values)] * nd
    else:
        arr = _static_array(values, "np.pad's constant_values")
        pairs = _as_pairs(arr, nd)

    def value_node(v):
        if is_tracer(v):
            return ops.cast(g, v.node, t.dtype, v.weak, wraps=v.weak is None)
        return scalar_assigned(g, v, t.dtype)

    if t.size == 0:
        result = ops.broadcast_to(g, ops.literal(g, 0, t.dtype), shape)
    else:
        index_of = {ax: (shape[ax], _pad_index("edge", s, b))
                    for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)) if b or a}
        result = _reindex(t.node, index_of)
    # axis by axis, as NumPy fills them: a corner takes the value of the last axis padding it
    for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)):
        if not (b or a):
            continue
        it = _iota(tuple(shape[ax] if d == ax else 1 for d in range(nd)), ax)
        inside = _ew(Op.LOGICAL_AND, np.bool_, _ew(Op.GE, np.bool_, it, _lit(b, _INTP)),
                     _ew(Op.LT, np.bool_, it, _lit(b + s, _INTP)))
        vb, va = (value_node(v) for v in pairs[ax])
        fill = _ew(Op.WHERE, t.dtype, _ew(Op.LT, np.bool_, it, _lit(b, _INTP)), vb, va)
        result = _ew(Op.WHERE, t.dtype, inside, result, fill)
    return wrap(ops.broadcast_to(g, result, shape), scalar=False)


@implements(np.tile)
def tile(A, reps):
    t = _as_tracer(A)
    try:
        tup = tuple(reps)
    except TypeError:
        tup = (reps,)
    tup = tuple(_static_int(r, "np.tile's reps") for r in tup)
    d = len(tup)
    if t.ndim < d:
        t = reshape(t, (1,) * (d - t.ndim) + t.shape)
    if d < t.ndim:
        tup = (1,) * (t.ndim - d) + tup
    shape_out = tuple(s * r for s, r in zip(t.shape, tup))
    if any(s < 0 for s in shape_out):
        raise ValueError("negative dimensions are not allowed")
    g = current_graph()
    if all(r == 1 for r in tup):
        return copy(t)
    # (s0, s1) -> (1, s0, 1, s1) -> broadcast (r0, s0, r1, s1) -> (r0*s0, r1*s1): views only
    n = ops.reshape(g, t.node, tuple(x for s in t.shape for x in (1, s)))
    n = ops.broadcast_to(g, n, tuple(x for s, r in zip(t.shape, tup) for x in (r, s)))
    return wrap(ops.reshape(g, n, shape_out), scalar=False)


@implements(np.repeat)
def repeat(a, repeats, axis=None):
    t = _as_tracer(a)
    if axis is None:
        t, axis = ravel(t), 0
    else:
        axis = _axis(axis, t.ndim)
    if is_tracer(repeats) and repeats.ndim:
        raise TracingError("np.repeat with traced repeats gives an array whose size depends on "
                           "the data; pass the repeats as a constant (a NumPy array or list)")
    r = np.asarray(_static_int(repeats, "np.repeat's repeats") if is_tracer(repeats) else repeats)
    # NumPy converts Python numbers and lists like int() does, arrays only by a safe cast
    if isinstance(repeats, np.ndarray) and not np.can_cast(r.dtype, np.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {r.dtype!r} to {np.dtype(np.intp)!r} "
                        f"according to the rule 'safe'")
    r = r.astype(np.intp)
    if (r < 0).any():
        raise ValueError("repeats may not contain negative values.")
    n = t.shape[axis]
    g = current_graph()
    if r.size == 1:
        k = int(r.ravel()[0])
        shape = t.shape[:axis + 1] + (1,) + t.shape[axis + 1:]
        view = ops.broadcast_to(g, ops.reshape(g, t.node, shape),
                                t.shape[:axis + 1] + (k,) + t.shape[axis + 1:])
        return wrap(ops.reshape(g, view, t.shape[:axis] + (n * k,) + t.shape[axis + 1:]),
                    scalar=False)
    if r.ndim != 1 or r.size != n:
        raise ValueError(f"operands could not be broadcast together with shape ({n},) "
                         f"({r.size},)")
    src = np.repeat(np.arange(n, dtype=np.intp), r)
    return wrap(ops.gather(g, t.node, [g.add_const(src)], axis), scalar=False)


@implements(np.flip)
def flip(m, axis=None):
    t = _as_tracer(m)
    if axis is None:
        key = (slice(None, None, -1),) * t.ndim
    else:
        key = [slice(None)] * t.ndim
        for ax in _axes(axis, t.ndim):
            key[ax] = slice(None, None, -1)
        key = tuple(key)
    return getitem(t, key)


@implements(np.fliplr)
def fliplr(m):
    t = _as_tracer(m)
    if t.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return getitem(t, (slice(None), slice(None, None, -1)))


@implements(np.flipud)
def flipud(m):
    t = _as_tracer(m)
    if t.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return getitem(t, (slice(None, None, -1), Ellipsis))


@implements(np.rot90)
def rot90(m, k=1, axes=(0, 1)):
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    t = _as_tracer(m)
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == t.ndim:
        raise ValueError("Axes must be different.")
    if axes[0] >= t.ndim or axes[0] < -t.ndim or axes[1] >= t.ndim or axes[1] < -t.ndim:
        raise ValueError(f"Axes={axes} out of range for array of ndim={t.ndim}.")
    k = _static_int(k, "np.rot90's k") % 4
    if k == 0:
        return getitem(t, slice(None))
    if k == 2:
        return flip(flip(t, axes[0]), axes[1])
    perm = list(range(t.ndim))
    perm[axes[0]], perm[axes[1]] = perm[axes[1]], perm[axes[0]]
    if k == 1:
        return transpose(flip(t, axes[1]), perm)
    return flip(transpose(t, perm), axes[1])


_WINDOW_READ_ONLY = ("a view made by sliding_window_view or as_strided is read-only in "
                     "fastlaunch (its elements overlap); copy it first (w.copy()) to write")


def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    t = _as_tracer(x)
    window = tuple(window_shape) if np.iterable(window_shape) else (window_shape,)
    window = tuple(_static_int(w, "window_shape") for w in window)
    if writeable:
        raise TracingError("sliding_window_view(writeable=True): writing through overlapping "
                           "windows is not supported by fastlaunch")
    if any(w < 0 for w in window):
        raise ValueError("`window_shape` cannot contain negative values")
    if axis is None:
        axis = tuple(range(t.ndim))
        if len(window) != len(axis):
            raise ValueError(f"Since axis is `None`, must provide window_shape for all "
                             f"dimensions of `x`; got {len(window)} window_shape elements and "
                             f"`x.ndim` is {t.ndim}.")
    else:
        axis = _axes(axis, t.ndim, allow_duplicate=True)
        if len(window) != len(axis):
            raise ValueError(f"Must provide matching length window_shape and axis; got "
                             f"{len(window)} window_shape elements and {len(axis)} axes "
                             f"elements.")
    trimmed = list(t.shape)
    for ax, w in zip(axis, window):
        if trimmed[ax] < w:
            raise ValueError("window shape cannot be larger than input array shape")
        trimmed[ax] -= w - 1
    out_shape = tuple(trimmed) + window
    if t.ndim == 0:
        return _read_only(t.node, _WINDOW_READ_ONLY)
    g = current_graph()
    # x[i_d + sum of the window offsets along d] for every axis d: one gather
    index = []
    for d in range(t.ndim):
        ix = _iota(out_shape, d)
        for k, ax in enumerate(axis):
            if ax == d:
                ix = _ew(Op.ADD, _INTP, ix, _iota(out_shape, t.ndim + k))
        index.append(ix)
    return _read_only(ops.gather(g, t.node, index, 0), _WINDOW_READ_ONLY)


FUNCTIONS[np.lib.stride_tricks.sliding_window_view] = sliding_window_view


def _c_strides(shape, itemsize) -> tuple:
    out, acc = [], itemsize
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


def _strides(t) -> tuple:
    """A traced array's strides in bytes: its place in its storage taken as a C-ordered
    array (memory_layout), as NumPy's view of a C-contiguous array reports them; C-contiguous
    for a reshape NumPy would copy."""
    layout = memory_layout(t)
    if layout is None:
        return _c_strides(t.shape, t.dtype.itemsize)
    return tuple(s * t.dtype.itemsize for s in layout[2])


def as_strided(x, shape=None, strides=None, subok=False, writeable=True):
    """np.lib.stride_tricks.as_strided for a traced x: strides in bytes over the memory of
    x's storage taken as a C-ordered array, from x's first element (what a traced array's
    .strides reports): any elements of that storage, as a gather."""
    t = _as_tracer(x)
    item = t.dtype.itemsize
    shape = t.shape if shape is None else tuple(_static_int(s, "as_strided's shape")
                                                for s in shape)
    strides = _strides(t) if strides is None else \
        tuple(_static_int(s, "as_strided's strides") for s in strides)
    if len(shape) != len(strides):
        raise ValueError("mismatch in length of strides and shape")
    if any(s % item for s in strides):
        raise TracingError(f"as_strided: strides {strides} are not multiples of the item size "
                           f"{item}; fastlaunch addresses whole elements")
    steps = [s // item for s in strides]
    g = current_graph()
    if math.prod(shape) == 0:
        return _read_only(ops.broadcast_to(g, ops.literal(g, 0, t.dtype), shape),
                          _WINDOW_READ_ONLY)
    layout = memory_layout(t)
    base, first = (layout[0], layout[1]) if layout is not None else (t.node, 0)
    lo = first + sum(min(0, e * (n - 1)) for e, n in zip(steps, shape))
    hi = first + sum(max(0, e * (n - 1)) for e, n in zip(steps, shape))
    if lo < 0 or hi >= base.size:
        raise ValueError(f"as_strided: shape {shape} with strides {strides} reads elements "
                         f"[{lo}, {hi}] of the {base.size} elements of the array's memory "
                         f"(NumPy would read memory outside it)")
    index = _lit(first, _INTP)
    for d, e in enumerate(steps):
        if e:
            index = _ew(Op.ADD, _INTP, index, _ew(Op.MUL, _INTP, _iota(shape, d), _lit(e, _INTP)))
    index = ops.broadcast_to(g, index, shape)
    return _read_only(ops.gather(g, ops.reshape(g, base, (-1,)), [index], 0),
                      _WINDOW_READ_ONLY)


def _as_strided_entries():
    original = np.lib.stride_tricks.as_strided

    def entry(x, shape=None, strides=None, subok=False, writeable=True):
        if tracing() and _any_traced(x):
            return as_strided(x, shape, strides, subok, writeable)
        if tracing() and isinstance(x, TraceBuffer):
            # a view of a constant buffer made inside fn: NumPy's view while it stays one,
            # the traced (read-only) view of its tracer once a traced value is written into it
            view = original(x.view(np.ndarray), shape, strides, subok, writeable).view(TraceBuffer)
            view._fl_follow(x, lambda base: as_strided(base, shape, strides, subok, writeable),
                            "np.lib.stride_tricks.as_strided")
            return view
        return original(x, shape, strides, subok, writeable)
    entry.__wrapped__ = original
    return [(np.lib.stride_tricks, "as_strided", entry)]


# NumPy functions real code calls with Python lists or tuples of traced values
# (np.sum([a, b]), np.linalg.norm([dx, dy]), np.diag([sx, sy])): NumPy dispatches on the
# sequence, not on what it holds, and converts it in C, which a tracer cannot answer.  Their
# entries make such a sequence an array first (np.array of tracers is traced), then call
# NumPy's function, which dispatches to ours.  Name -> how many leading arguments are arrays.
SEQUENCE_ARGUMENTS = {
    "sum": 1, "prod": 1, "mean": 1, "max": 1, "min": 1, "amax": 1, "amin": 1, "average": 1,
    "std": 1, "var": 1, "median": 1, "ptp": 1, "cumsum": 1, "cumprod": 1, "argmax": 1,
    "argmin": 1, "all": 1, "any": 1, "clip": 1, "round": 1, "around": 1, "diag": 1,
    "trace": 1, "sort": 1, "flip": 1, "diff": 1, "atleast_1d": 1, "atleast_2d": 1,
    "transpose": 1, "dot": 2, "cross": 2, "outer": 2, "inner": 2, "polyval": 2,
    "linalg.norm": 1, "linalg.inv": 1, "linalg.det": 1, "linalg.solve": 2,
}


def _traced_sequence(x) -> bool:
    return isinstance(x, (list, tuple)) and _any_traced(x)


def _sequence_entry(original, arrays: int):
    def entry(*args, **kwargs):
        if tracing() and any(_traced_sequence(a) for a in args[:arrays]):
            args = tuple(array(a) if k < arrays and _traced_sequence(a) else a
                         for k, a in enumerate(args))
        return original(*args, **kwargs)
    entry.__name__ = getattr(original, "__name__", "entry")
    entry.__qualname__ = getattr(original, "__qualname__", entry.__name__)
    entry.__doc__ = getattr(original, "__doc__", None)
    entry.__wrapped__ = original
    entry._fl_entry = True               # naming.py looks through it
    return entry


def _entries():
    out = list(_as_strided_entries())
    for name, arrays in SEQUENCE_ARGUMENTS.items():
        owner = np
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, attr, None)
        if original is not None:
            out.append((owner, attr, _sequence_entry(original, arrays)))
    return out


# While this block runs: np.lib.stride_tricks.as_strided takes traced arrays (it is no
# NumPy-dispatched function: it reads the array's memory interface), and the functions of
# SEQUENCE_ARGUMENTS take lists of traced values.  As for the creation functions: calls
# through the module attribute, and the names imported into the traced function's module
# (`from numpy.lib.stride_tricks import as_strided`).
intercepting = Interception(_entries).active


# ==== splitting and stacking ======================================================================
@implements(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    t = _as_tracer(ary)
    total = t.shape[axis] if t.ndim else len(t)
    try:
        sections = len(indices_or_sections)
    except TypeError:
        sections = None
    if sections is not None:
        points = [0] + [_static_int(i, "a split index") for i in indices_or_sections] + [total]
        count = sections + 1
    else:
        count = _static_int(indices_or_sections, "the number of sections")
        if count <= 0:
            raise ValueError("number sections must be larger than 0.")
        each, extras = divmod(total, count)
        points = np.array([0] + extras * [each + 1] + (count - extras) * [each],
                          dtype=np.intp).cumsum().tolist()
    ax = _axis(axis, t.ndim)
    out = []
    for i in range(count):
        key = [slice(None)] * t.ndim
        key[ax] = slice(points[i], points[i + 1])
        out.append(getitem(t, tuple(key)))
    return out


@implements(np.split)
def split(ary, indices_or_sections, axis=0):
    try:
        len(indices_or_sections)
    except TypeError:
        sections = _static_int(indices_or_sections, "the number of sections")
        n = _as_tracer(ary).shape[axis]
        if sections and n % sections:
            raise ValueError("array split does not result in an equal division") from None
    return array_split(ary, indices_or_sections, axis)


@implements(np.hsplit)
def hsplit(ary, indices_or_sections):
    t = _as_tracer(ary)
    if t.ndim == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(t, indices_or_sections, 1 if t.ndim > 1 else 0)


@implements(np.vsplit)
def vsplit(ary, indices_or_sections):
    t = _as_tracer(ary)
    if t.ndim < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(t, indices_or_sections, 0)


@implements(np.dsplit)
def dsplit(ary, indices_or_sections):
    t = _as_tracer(ary)
    if t.ndim < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(t, indices_or_sections, 2)


@implements(np.atleast_3d)
def atleast_3d(*arys):
    out = []
    for a in arys:
        t = _as_tracer(a)
        if t.ndim == 0:
            out.append(reshape(t, (1, 1, 1)))
        elif t.ndim == 1:
            out.append(getitem(t, (None, slice(None), None)))
        elif t.ndim == 2:
            out.append(getitem(t, (slice(None), slice(None), None)))
        else:
            out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.column_stack)
def column_stack(tup):
    arrays = []
    for v in tup:
        t = _as_tracer(v)
        if t.ndim < 2:
            t = transpose(reshape(t, (1,) * (2 - t.ndim) + t.shape))
        arrays.append(t)
    return concatenate(arrays, 1)


@implements(np.dstack)
def dstack(tup):
    arrs = atleast_3d(*tup)
    if not isinstance(arrs, tuple):
        arrs = (arrs,)
    return concatenate(arrs, 2)


@implements(np.insert)
def insert(arr, obj, values, axis=None):
    """NumPy's algorithm, for insertion indices known while tracing: a new array of the grown
    shape, the values written at their (shifted) positions, the old elements at the rest."""
    if _any_traced(obj):
        raise TracingError("np.insert with traced insertion indices is not supported by "
                           "fastlaunch: the result's layout would depend on the data; pass "
                           "them as a NumPy array or list")
    t = _as_tracer(arr)
    if axis is None:
        t = reshape(t, (-1,))
        axis = 0
    axis = _axis(axis, t.ndim)
    n = t.shape[axis]
    values = _as_tracer(values).astype(t.dtype) if _any_traced(values) else \
        np.asarray(values).astype(t.dtype)
    slobj = [slice(None)] * t.ndim
    if isinstance(obj, slice):
        indices = np.arange(*obj.indices(n), dtype=np.intp)
    else:
        indices = np.array(obj)
        if indices.dtype == bool:
            raise TracingError("np.insert with a boolean obj is not supported by fastlaunch")
        if indices.ndim > 1:
            raise ValueError("index array argument obj to insert must be one dimensional or "
                             "scalar")
    if indices.ndim == 0:
        index = int(indices)
        if index < -n or index > n:
            raise IndexError(f"index {index} is out of bounds for axis {axis} with size {n}")
        index = index + n if index < 0 else index
        v = values if is_tracer(values) else array(values)
        if v.ndim < t.ndim:
            v = reshape(v, (1,) * (t.ndim - v.ndim) + tuple(v.shape))
        v = _moveaxis(v, 0, axis)        # NumPy: values[:, ...] go along the axis
        numnew = v.shape[axis]
        shape = list(t.shape)
        shape[axis] += numnew
        new = _filled(tuple(shape), t.dtype, 0)
        slobj[axis] = slice(None, index)
        setitem(new, tuple(slobj), getitem(t, tuple(slobj)))
        slobj[axis] = slice(index, index + numnew)
        setitem(new, tuple(slobj), v)
        slobj[axis] = slice(index + numnew, None)
        rest = [slice(None)] * t.ndim
        rest[axis] = slice(index, None)
        setitem(new, tuple(slobj), getitem(t, tuple(rest)))
        return new
    indices = indices.astype(np.intp)
    if ((indices < -n) | (indices > n)).any():
        bad = int(indices[(indices < -n) | (indices > n)][0])
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")
    indices[indices < 0] += n
    numnew = len(indices)
    order = indices.argsort(kind="mergesort")
    indices[order] += np.arange(numnew)
    shape = list(t.shape)
    shape[axis] += numnew
    old = np.ones(shape[axis], dtype=bool)
    old[indices] = False
    new = _filled(tuple(shape), t.dtype, 0)
    slobj[axis] = indices
    setitem(new, tuple(slobj), values if is_tracer(values) else array(values))
    slobj[axis] = np.flatnonzero(old)
    setitem(new, tuple(slobj), t)
    return new


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import (  # noqa: E402
    _INTP, _as_tracer, _axes, _axis, _ew, _iota, _lit, _moveaxis, _read_only, _static_array,
    _static_int, _static_values, scalar_assigned)
from .creation import array, copy  # noqa: E402
from .indexing import _reindex, getitem, setitem  # noqa: E402
from .reductions import _no_extra  # noqa: E402
from .registry import is_tracer, node_of, operand, wrap  # noqa: E402
from .trace_buffers import TraceBuffer, _any_traced  # noqa: E402
