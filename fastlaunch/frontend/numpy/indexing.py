"""Indexing: basic and advanced `x[key]` and assignment, boolean masks (`MaskedSelection`,
`WhereIndices`), `take`/`take_along_axis`, `put`/`place`/`copyto`/`choose`, diagonals and
triangles, `unravel_index`/`ravel_multi_index`, `ix_`, and the refused data-dependent sizes."""
from __future__ import annotations

import math

import numpy as np

from ... import naming
from ...errors import TracingError
from ...ir import ops
from ...ir.graph import Node, Op
from ..trace import Storage, Tracer, Unreturnable, current_graph, frame, view_of
from .registry import FUNCTIONS, implements


# ---- indexing ----------------------------------------------------------------------------
def _is_advanced(k) -> bool:
    return is_tracer(k) or isinstance(k, (np.ndarray, list))


_INTP_OVERFLOW = "Python int too large to convert to C long"


def _fits_intp(k):
    """A traced index as NumPy takes it: a 0-d uint64 is taken as a Python int
    (operator.index), so one of 2**63 or more overflows intp where an index array's values
    wrap.  The gather reads element 0 then, so that the overflow is the error raised."""
    if k.ndim != 0 or k.dtype != np.uint64:
        return k
    g = current_graph()
    fits = ops.elementwise(g, Op.LT, np.bool_, [node_of(k), ops.literal(g, 2**63, np.uint64)])
    ops.add_check(g, fits, OverflowError, _INTP_OVERFLOW)
    return wrap(ops.where(g, (fits, None), (node_of(k), None),
                          (ops.literal(g, 0, np.uint64), None)), scalar=k.scalar)


def _normalize_key(key, ndim: int) -> tuple:
    """Expand a key to one entry per dim (plus Nones): ints, slices, None, and index arrays."""
    if not isinstance(key, tuple):
        key = (key,)
    out = []
    for k in key:
        if isinstance(k, range):         # x[range(n), y]: the index array it stands for
            k = np.arange(k.start, k.stop, k.step)
        elif type(k) is tuple:           # x[:, (0, 1)] is x[:, [0, 1]], as in NumPy
            k = array(list(k)) if any(is_tracer(v) for v in k) else \
                np.array(k, dtype=np.intp if not k else None)
        if k is None or k is Ellipsis or isinstance(k, slice):
            out.append(k)
        elif is_tracer(k):             # before the scalar tests: a traced scalar looks like one
            if k.dtype == np.bool_:
                raise TracingError(
                    "boolean-mask indexing (x[mask]) gives an array whose size depends on the "
                    "data, which cannot be traced; use np.where(mask, x, fill) to keep the shape")
            if k.dtype.kind not in "iu":
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            out.append(_fits_intp(k))
        elif isinstance(k, (bool, np.bool_)):
            raise TracingError("indexing with a boolean scalar is not supported by fastlaunch")
        elif isinstance(k, (int, np.integer)):
            if 2**63 <= int(k) < 2**64:
                raise OverflowError(_INTP_OVERFLOW)
            out.append(int(k))
        elif is_tracer(k) and k.dtype == np.bool_:
            raise TracingError(
                "boolean-mask indexing (x[mask]) gives an array whose size depends on the data, "
                "which cannot be traced; use np.where(mask, x, fill) to keep the shape")
        elif isinstance(k, (np.ndarray, list)) and np.asarray(k).dtype == np.bool_:
            out += [i for i in np.nonzero(np.asarray(k))]   # a constant mask: fixed indices
        elif is_tracer(k) or isinstance(k, (np.ndarray, list)):
            arr = k if is_tracer(k) else np.asarray(k)
            if arr.dtype.kind not in "iu" and not (isinstance(k, list) and len(k) == 0):
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            if not is_tracer(k) and arr.ndim == 0 and arr.dtype == np.uint64 and arr >= 2**63:
                raise OverflowError(_INTP_OVERFLOW)
            out.append(_fits_intp(k) if is_tracer(k) else arr.astype(np.intp))
        else:
            raise TracingError(f"indexing with {type(k).__name__} is not supported by fastlaunch")
    if sum(1 for k in out if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in out if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, "
                         f"but {used} were indexed")
    at = next((i for i, k in enumerate(out) if k is Ellipsis), None)
    if at is not None:
        out[at:at + 1] = [slice(None)] * (ndim - used)
    else:
        out += [slice(None)] * (ndim - used)
    return tuple(out)


def _basic_view(t: Tracer, key: tuple) -> Tracer:
    """t[key] for a normalized key of ints, slices and None: a view sharing t's storage."""
    shape = t.shape
    dims = [k for k in key if k is not None]
    for d, (k, n) in enumerate(zip(dims, shape)):
        if isinstance(k, int) and not -n <= k < n:
            raise IndexError(f"index {k} is out of bounds for axis {d} with size {n}")
    wrapped, d = [], 0
    for k in key:                         # negative ints count from the end of their axis
        if k is not None:
            k = k % shape[d] if isinstance(k, int) else k
            d += 1
        wrapped.append(k)
    key = tuple(wrapped)
    scalar = bool(dims) and all(isinstance(k, int) for k in dims) and None not in key
    return view_of(t, frame(t).index(key), scalar=scalar)


def _advanced(t: Tracer, key: tuple):
    """Split a key with index arrays: (view of t holding every indexed dim, first indexed axis,
    index operands).  Ints join the index arrays, as in NumPy; when the indexed dims are not
    adjacent they move to the front (NumPy's rule for where the broadcast dims go)."""
    if any(k is None for k in key):
        raise TracingError("mixing np.newaxis with array indices is not supported by fastlaunch")
    adv = [d for d, k in enumerate(key) if _is_advanced(k) or isinstance(k, int)]
    view = _basic_view(t, tuple(slice(None) if d in adv else k for d, k in enumerate(key)))
    indices = [key[d] for d in adv]
    if adv == list(range(adv[0], adv[0] + len(adv))):
        return view, adv[0], indices
    rest = [d for d in range(len(key)) if d not in adv]
    return transpose(view, adv + rest), 0, indices


def _mask_key(t: Tracer, key):
    """A key that selects with a traced mask and basic indices after it, x[mask, d] (or the
    indices of np.where(mask)): (x's view by the basic part, the mask), else None."""
    if not isinstance(key, tuple):
        key = (key,)
    parts = list(key)
    if parts and type(parts[0]) is tuple and parts[0] and \
            all(isinstance(k, WhereIndices) for k in parts[0]):
        parts[0:1] = list(parts[0])          # x[np.where(m), d]: np.where's tuple inside
    if not parts or not isinstance(parts[0], WhereIndices) and \
            not (is_tracer(parts[0]) and parts[0].dtype == np.bool_ and len(parts) > 1):
        return None
    if isinstance(parts[0], WhereIndices):
        mask = parts[0].mask
        n = mask.ndim
        if len(parts) < n or any(not isinstance(k, WhereIndices) or k.mask is not mask or
                                 k.axis != d for d, k in enumerate(parts[:n])):
            raise TracingError(WhereIndices.why)
        rest = parts[n:]
    else:
        mask, rest = parts[0], parts[1:]
        n = mask.ndim
    if any(is_tracer(k) or not isinstance(k, (int, np.integer, slice)) for k in rest):
        raise TracingError(_MASK_HINT)
    if not rest:
        return t, mask
    return getitem(t, (slice(None),) * n + tuple(rest)), mask


def getitem(t: Tracer, key):
    found = _mask_key(t, key)
    if found is not None:
        t, key = found
    mask = _traced_mask(t, key)
    if mask is not None:
        return MaskedSelection(t, mask, wrap(node_of(t), scalar=False))
    ellipsis = key is Ellipsis or (isinstance(key, tuple) and any(k is Ellipsis for k in key))
    key = _normalize_key(key, t.ndim)
    if not any(_is_advanced(k) for k in key):
        out = _basic_view(t, key)
        # a 0-d result is a NumPy scalar (x[0], x[()]) unless the key holds an Ellipsis
        out.scalar = out.ndim == 0 and not ellipsis
        return out
    view, axis, indices = _advanced(t, key)
    g = current_graph()
    idx = [node_of(i) for i in indices]
    n = ops.gather(g, view.node, idx, axis)
    if n.ndim and all(isinstance(i, int) or is_tracer(i) and i.ndim == 0 for i in indices):
        # NumPy's x[i] for an integer i is a view: writes into it reach x (`x[i][j] += v`,
        # `row = x[i]; row *= 2`).  Ours is a gather (i is known only when the function
        # runs): each write into it is written back into x[key] (a scatter)
        return Tracer(Storage(n, through=lambda value: setitem(t, key, value)))
    return wrap(n, scalar=n.ndim == 0 and all(i.ndim == 0 for i in idx))


def setitem(t: Tracer, key, value):
    found = _mask_key(t, key)
    if found is not None:
        t, key = found
    mask = _traced_mask(t, key)
    if mask is not None:
        _masked_assign(t, mask, value)
        return
    key = _normalize_key(key, t.ndim)
    if any(_is_advanced(k) for k in key):
        _scatter_into(t, key, node_of(value), "set", "item assignment (x[idx] = value)")
        return
    target = _basic_view(t, key)
    target.scalar = False
    g = current_graph()
    v = node_of(value)
    target._assign(ops.broadcast_to(g, ops.cast(g, v, t.dtype), target.shape),
                   "item assignment (x[...] = value)")


# ---- boolean masks: x[mask] = v, x[mask] += v, x[mask].sum() ---------------------------------
# x[mask] has a data-dependent size, but these uses of it do not: an assignment through the
# mask keeps x's shape (a where), and a reduction of the selection is a reduction of
# where(mask, x, identity).  x[mask] therefore returns a MaskedSelection that supports just
# those uses and names the alternative for everything else.
_MASK_HINT = ("x[mask] has a size that depends on the data, which cannot be traced; what "
              "works: x[mask] = v and x[mask] += v with a scalar (or a value broadcast over the "
              "unmasked trailing axes), z[mask] = f(x[mask]) (elementwise, the same mask), "
              "x[mask].sum()/.mean()/.prod()/.any()/.all(), or np.where(mask, x, fill) to "
              "keep the shape")


def _traced_mask(t: Tracer, key):
    """The traced boolean array of a key that is exactly one (x[mask]), else None."""
    if isinstance(key, tuple):
        if len(key) != 1:
            return None
        key = key[0]
    if not (is_tracer(key) and key.dtype == np.bool_) or isinstance(key, MaskedSelection):
        return None
    if key.ndim == 0 or key.ndim > t.ndim:
        raise IndexError(f"too many indices for array: array is {t.ndim}-dimensional, but "
                         f"{key.ndim} were indexed" if key.ndim else _MASK_HINT)
    for axis, (a, b) in enumerate(zip(t.shape, key.shape)):
        if a != b:
            raise IndexError(f"boolean index did not match indexed array along axis {axis}; "
                             f"size of axis is {a} but size of corresponding boolean axis is {b}")
    return key


def _mask_value(t: Tracer, mask: Tracer, value, what: str):
    """`value` as it broadcasts over the trailing (unmasked) axes of t: NumPy broadcasts it
    against the selection's shape (count,) + trailing, so only a leading length-1 axis (or
    none) keeps that independent of the count."""
    if type(value) in (bool, int, float) or isinstance(value, np.generic):
        return value                   # keeps NEP 50's weak Python scalars weak
    g = current_graph()
    v = node_of(value)
    trailing = t.shape[mask.ndim:]
    if v.ndim == len(trailing) + 1:
        if v.shape[0] != 1:
            raise TracingError(f"{what}: a value of shape {v.shape} must match the number of "
                               f"True elements of the mask, which is data-dependent; "
                               f"{_MASK_HINT}")
        v = ops.reshape(g, v, v.shape[1:])
    if v.ndim > len(trailing):
        raise TracingError(f"{what}: a value of shape {v.shape} for a selection of trailing "
                           f"shape {trailing}; {_MASK_HINT}")
    try:
        np.broadcast_shapes(v.shape, trailing)
    except ValueError:
        raise ValueError(f"shape mismatch: value array of shape {tuple(value_shape(value))} "
                         f"could not be broadcast to indexing result with trailing shape "
                         f"{trailing}") from None
    return wrap(v, scalar=False)


def value_shape(value):
    return np.shape(value) if not is_tracer(value) else value.shape


def _expanded_mask(t: Tracer, mask: Tracer) -> Tracer:
    g = current_graph()
    n = node_of(mask)
    return wrap(ops.reshape(g, n, n.shape + (1,) * (t.ndim - mask.ndim)), scalar=False)


def _masked_assign(t: Tracer, mask: Tracer, value):
    what = "boolean-mask assignment (x[mask] = v)"
    if isinstance(value, MaskedSelection):
        # z[m] = f(x[m]): both sides select the same elements (the same mask node), so
        # this is where(m, f(x), z) whatever the count
        trailing, vt = t.shape[mask.ndim:], value.values.shape[value.mask.ndim:]
        if not _same_mask(value.mask, mask) or len(vt) != len(trailing) or \
                np.broadcast_shapes(vt, trailing) != trailing:
            raise TracingError(f"{what}: assigning a selection by another mask (or of "
                               f"another shape); {_MASK_HINT}")
        new = value.values
    else:
        new = _mask_value(t, mask, value, what)
    g = current_graph()
    merged = where(_expanded_mask(t, mask),
                   wrap(ops.cast(g, node_of(new), t.dtype), scalar=False), t)
    setitem(t, Ellipsis, merged)


def _same_mask(a: Tracer, b: Tracer) -> bool:
    """The same mask: one tracer, or the same node (x > 0 written twice is one node)."""
    return a is b or node_of(a) is node_of(b)


def _selection_elementwise(ufunc, inputs, kwargs):
    """f(x[m], y[m], scalar): the selection of f(x, y, scalar) by the same mask m. Every
    element is computed and the unselected ones are dropped (by a reduction's fill or a
    masked assignment's where), so the count never needs to be known."""
    what = f"{naming.public_name(ufunc)} of x[mask]"
    if kwargs.get("out") is not None or ufunc.nout != 1 or \
            any(k not in ("dtype", "casting") for k in kwargs if k != "out"):
        raise TracingError(f"{what} with out=, where= or several outputs; {_MASK_HINT}")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    first = next(x for x in inputs if isinstance(x, MaskedSelection))
    operands = []
    for x in inputs:
        if isinstance(x, MaskedSelection):
            if not _same_mask(x.mask, first.mask) or x.values.ndim != first.values.ndim:
                raise TracingError(f"{what}: selections by different masks (or of different "
                                   f"ranks) combined; {_MASK_HINT}")
            operands.append(x.values)
        else:
            # a scalar or a value over the trailing axes broadcasts against the whole array
            operands.append(_mask_value(first.values, first.mask, x, what))
    result = call_ufunc(ufunc, tuple(operands), **kwargs)
    return MaskedSelection(result, first.mask, result)


def _selection_operator(ufunc, reflected=False):
    def op(self, other):
        return _selection_elementwise(ufunc, (other, self) if reflected else (self, other), {})
    return op


def _selection_inplace(ufunc):
    def op(self, other):
        v = _mask_value(self.base, self.mask, other, f"x[mask] {ufunc.__name__}= v")
        vals = wrap(node_of(self.values), scalar=False)
        # NumPy's in-place casting rules (same_kind), as for the selection's own copy
        call_ufunc(ufunc, (vals, v), out=vals)
        return MaskedSelection(self.base, self.mask, vals)
    return op


class WhereIndices(Unreturnable):
    """One of the index arrays np.where(mask) returns while tracing: their length depends on
    the data, so they stand for the mask, as an index only."""
    why = ("the indices np.where(cond) returns have a count that depends on the data, which "
           "cannot be traced; they work as an index of an array of cond's shape (x[idx] = v, "
           "x[idx, d] *= -1, x[idx].sum()); otherwise use np.where(cond, a, b) or the boolean "
           "mask itself")

    def __init__(self, mask: Tracer, axis: int):
        self.mask, self.axis = mask, axis

    def __getattr__(self, name):
        raise TracingError(self.why)

    def __len__(self):
        raise TracingError(self.why)

    def __array__(self, dtype=None, copy=None):
        raise TracingError(self.why)

    def _refuse(self, *args, **kwargs):
        raise TracingError(self.why)

    # indexing them (candidates[:, None]) is the same data-dependent count
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __iter__ = _refuse
    __getitem__ = __setitem__ = _refuse
    __array_ufunc__ = None


class MaskedSelection(Unreturnable):
    """x[mask] while tracing: see _MASK_HINT for what it supports."""
    why = _MASK_HINT

    def __init__(self, base: Tracer, mask: Tracer, values: Tracer):
        self.base, self.mask, self.values = base, mask, values
        self.dtype = values.dtype
        self.ndim = 1 + base.ndim - mask.ndim

    def _filled(self, fill) -> Tracer:
        return where(_expanded_mask(self.base, self.mask), self.values,
                     wrap(ops.literal(current_graph(), self.dtype.type(fill), self.dtype)))

    def _axis(self, axis):
        if axis is None:
            return None
        axes = axis if isinstance(axis, tuple) else (axis,)
        if tuple(a % self.ndim for a in axes) != (0,):
            raise TracingError(f"reductions of x[mask] over axis={axis}: only axis=None or 0; "
                               f"{_MASK_HINT}")
        return tuple(range(self.mask.ndim))

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return sum_(self._filled(0), self._axis(axis), dtype)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return _reduce(Op.PROD, self._filled(1), self._axis(axis), False, dtype)

    def any(self, axis=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return any_(self._filled(False), self._axis(axis))

    def all(self, axis=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return all_(self._filled(True), self._axis(axis))

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        axes = self._axis(axis)
        count = count_nonzero(self.mask)
        if axes is None:
            count = count * int(np.prod(self.base.shape[self.mask.ndim:], dtype=np.int64))
        acc, res = _mean_dtype(self.dtype, dtype)
        count = astype(count, acc)
        total = sum_(self._filled(0), axes, acc)
        return astype(call_ufunc(np.true_divide, (total, count)), res)

    def _plain(self, out, keepdims):
        if out is not None or keepdims:
            raise TracingError(f"reductions of x[mask] with out= or keepdims=; {_MASK_HINT}")

    def max(self, *args, **kwargs):
        raise TracingError("x[mask].max()/.min() of a possibly empty selection cannot be "
                           "traced (NumPy raises on an empty one); use "
                           "np.where(mask, x, -np.inf).max() (or +np.inf with .min())")

    min = max

    def __array_function__(self, func, types, args, kwargs):
        method = _MASKED_FUNCTIONS.get(func)
        if method is None or args[0] is not self:
            raise TracingError(f"np.{getattr(func, '__name__', func)} of x[mask]: {_MASK_HINT}")
        if method == "count_nonzero":
            return count_nonzero(self._filled(False))
        return getattr(self, method)(*args[1:], **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__":
            return _selection_elementwise(ufunc, inputs, kwargs)
        raise TracingError(f"{naming.public_name(ufunc)}.{method} of x[mask]: {_MASK_HINT}")

    __hash__ = object.__hash__

    def __neg__(self):
        return _selection_elementwise(np.negative, (self,), {})

    def __pos__(self):
        return _selection_elementwise(np.positive, (self,), {})

    def __abs__(self):
        return _selection_elementwise(np.absolute, (self,), {})

    def __invert__(self):
        return _selection_elementwise(np.invert, (self,), {})

    def _refuse(self, *args, **kwargs):
        raise TracingError(_MASK_HINT)

    __len__ = __iter__ = __array__ = __getitem__ = __setitem__ = __bool__ = _refuse
    __float__ = __int__ = __index__ = _refuse

    @property
    def shape(self):
        raise TracingError(_MASK_HINT)

    size = shape

    def __getattr__(self, name):
        if name.startswith("__"):      # protocol probes (NumPy, copy, pickle) just miss
            raise AttributeError(name)
        raise TracingError(f"x[mask].{name}: {_MASK_HINT}")


_MASKED_FUNCTIONS = {np.sum: "sum", np.prod: "prod", np.any: "any", np.all: "all",
                     np.mean: "mean", np.max: "max", np.min: "min", np.amax: "max",
                     np.amin: "min", np.count_nonzero: "count_nonzero"}
for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("and", np.bitwise_and),
                   ("or", np.bitwise_or), ("xor", np.bitwise_xor), ("lshift", np.left_shift),
                   ("rshift", np.right_shift)]:
    setattr(MaskedSelection, f"__i{_name}__", _selection_inplace(_uf))
    setattr(MaskedSelection, f"__{_name}__", _selection_operator(_uf))
    setattr(MaskedSelection, f"__r{_name}__", _selection_operator(_uf, reflected=True))
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(MaskedSelection, f"__{_name}__", _selection_operator(_uf))


def _scatter_into(t: Tracer, key, values: Node, mode: str, what: str):
    key = _normalize_key(key, t.ndim)
    if not any(_is_advanced(k) for k in key):
        # a basic key: write through a view, combining with the current values
        target = _basic_view(t, key)
        target.scalar = False
        g = current_graph()
        v = ops.broadcast_to(g, ops.cast(g, values, t.dtype), target.shape)
        if mode != "set":
            v = _combine(g, mode, target.node, v)
        target._assign(v, what)
        return
    view, axis, indices = _advanced(t, key)
    g = current_graph()
    new = ops.scatter(g, view.node, values, [node_of(i) for i in indices], axis, mode)
    view.scalar = False
    view._assign(new, what)


def _combine(g, mode: str, old: Node, new: Node) -> Node:
    op = {"add": Op.ADD, "mul": Op.MUL, "max": Op.MAXIMUM, "min": Op.MINIMUM}[mode]
    return ops.elementwise(g, op, old.dtype, [old, new])


@implements(np.take)
def take(a, indices, axis=None, out=None, mode="raise"):
    _no_extra("take", out=out)
    t = _as_tracer(a)
    if axis is None:
        t, axis = ravel(t), 0
    axis = ops.normalize_axes(axis, t.ndim)[0]
    g = current_graph()
    idx = node_of(indices)
    size = t.shape[axis]
    if mode in ("wrap", "clip") and size:
        idx = ops.cast(g, idx, np.intp)
        if mode == "wrap":
            idx = ops.elementwise(g, Op.MOD, idx.dtype, [idx, ops.literal(g, size, idx.dtype)])
        else:
            lo, hi = ops.literal(g, 0, idx.dtype), ops.literal(g, size - 1, idx.dtype)
            idx = ops.elementwise(g, Op.MINIMUM, idx.dtype,
                                  [ops.elementwise(g, Op.MAXIMUM, idx.dtype, [idx, lo]), hi])
    elif mode != "raise":
        raise ValueError(f"clipmode not understood: {mode!r}")
    n = ops.gather(g, t.node, [idx], axis)
    return wrap(n, scalar=n.ndim == 0)


@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    t = _as_tracer(arr)
    idx = node_of(indices)
    if axis is None:
        t, axis = ravel(t), 0
    if idx.ndim != t.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    axis = ops.normalize_axes(axis, t.ndim)[0]
    g = current_graph()
    picks = []
    for d in range(t.ndim):
        if d == axis:
            picks.append(idx)
        else:
            shape = tuple(t.shape[d] if j == d else 1 for j in range(t.ndim))
            picks.append(ops.iota(g, shape, d, np.intp))
    return wrap(ops.gather(g, t.node, picks, 0), scalar=False)


@implements(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    """A view: axis1 and axis2 moved last and merged, then a slice of step m + 1."""
    t = _as_tracer(a)
    if t.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    ax1 = ops.normalize_axes(axis1, t.ndim)[0]
    ax2 = ops.normalize_axes(axis2, t.ndim)[0]
    if ax1 == ax2:
        raise ValueError("axis1 and axis2 cannot be the same")
    g = current_graph()
    offset = int(offset)
    rest = [d for d in range(t.ndim) if d not in (ax1, ax2)]
    moved = ops.transpose(g, t.node, rest + [ax1, ax2])
    n, m = moved.shape[-2:]
    lead = moved.shape[:-2]
    k = max(0, min(n, m - offset)) if offset >= 0 else max(0, min(n + offset, m))
    flat = ops.reshape(g, moved, lead + (n * m,))
    start = (offset if offset >= 0 else -offset * m) if k else 0
    r = ops.slice_view(g, flat, (0,) * len(lead) + (start,), (1,) * len(lead) + (m + 1,),
                       lead + (k,))
    return _readonly(r, "np.diagonal")


@implements(np.diag)
def diag(v, k=0):
    t = _as_tracer(v)
    k = int(k)
    if t.ndim == 2:
        r = diagonal(t, k)
        return wrap(r.node, scalar=False)
    if t.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    g = current_graph()
    n = t.shape[0] + abs(k)
    zeros = ops.broadcast_to(g, ops.literal(g, 0, t.dtype), (n * n,))
    start = k if k >= 0 else -k * n
    r = ops.set_region(g, zeros, (start,), (n + 1,), (t.shape[0],), t.node)
    return wrap(ops.reshape(g, r, (n, n)), scalar=False)


@implements(np.trace)
def trace_(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _no_extra("trace", out=out)
    return sum_(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def _tri_mask(shape2, k, lower: bool) -> Tracer:
    g = current_graph()
    n = shape2[0]
    m = shape2[1] if len(shape2) > 1 else n
    rows = wrap(ops.iota(g, (n, m), 0, np.intp), scalar=False)
    cols = wrap(ops.iota(g, (n, m), 1, np.intp), scalar=False)
    d = cols - rows
    return call_ufunc(np.less_equal if lower else np.greater_equal, (d, int(k)))


def _tri_select(m, k, lower):
    t = _as_tracer(m)
    if t.ndim == 0:
        raise TypeError("tri() missing 1 required positional argument: 'N'")
    r = where(_tri_mask(t.shape[-2:], k, lower), t, np.zeros(1, t.dtype))
    return r


@implements(np.tril)
def tril(m, k=0):
    return _tri_select(m, k, True)


@implements(np.triu)
def triu(m, k=0):
    return _tri_select(m, k, False)


@implements(np.ix_)
def ix_(*args):
    out = []
    nd = len(args)
    for k, new in enumerate(args):
        t = _as_tracer(new)
        if t.ndim != 1:
            raise ValueError("Cross index must be 1 dimensional")
        if t.dtype.kind == "b":
            raise TracingError("np.ix_ of a traced boolean mask has a data-dependent size, "
                               "which cannot be traced")
        out.append(reshape(t, (1,) * k + (t.shape[0],) + (1,) * (nd - k - 1)))
    return tuple(out)


# ---- data-dependent output sizes ---------------------------------------------------------------
def _data_dependent(name):
    def refuse(*args, **kwargs):
        raise TracingError(f"{name} returns an array whose size depends on the data, which "
                           f"cannot be traced; keep the shape with np.where(cond, x, fill)")
    return refuse


for _f in (np.nonzero, np.argwhere, np.flatnonzero, np.unique, np.extract, np.compress):
    FUNCTIONS[_f] = _data_dependent(f"np.{_f.__name__}")


def _reindex(src: Node, index_of: dict) -> Node:
    """src re-indexed along some axes in one gather: out[..., i, ...] = src[..., f(i), ...].
    index_of: axis -> (output length, f), f(iota) the source index (intp node) for an iota of
    the output positions shaped to broadcast along that axis.  The other axes keep theirs."""
    if not index_of:
        return src
    g = current_graph()
    lo, hi = min(index_of), max(index_of)
    lens = [index_of[d][0] if d in index_of else src.shape[d] for d in range(lo, hi + 1)]
    nodes = []
    for k, d in enumerate(range(lo, hi + 1)):
        shape = tuple(n if j == k else 1 for j, n in enumerate(lens))
        it = _iota(shape, k)
        nodes.append(index_of[d][1](it) if d in index_of else it)
    return ops.gather(g, src, nodes, lo)


@implements(np.choose)
def choose(a, choices, out=None, mode="raise"):
    g = current_graph()
    an = node_of(a)
    if not np.can_cast(an.dtype, np.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {an.dtype!r} to {np.dtype(np.intp)!r} "
                        f"according to the rule 'safe'")
    if is_tracer(choices) or isinstance(choices, np.ndarray):
        items = [getitem(_as_tracer(choices), i) for i in range(len(choices))]
    else:
        items = list(choices)
    n = len(items)
    if n == 0:
        raise ValueError("0-length sequence.")
    parts = [operand(c) if type(c) in (int, float, bool) or is_tracer(c)
             else operand(np.asarray(c)) for c in items]
    dtype = ops.check_dtype(np.result_type(*(w(0) if w is not None else nd.dtype
                                             for nd, w in parts)), "np.choose")
    shape = ops.broadcast_shapes(an.shape, *(nd.shape for nd, _ in parts))
    idx = ops.cast(g, an, _INTP)
    if mode == "raise":
        # the index itself, validated: a value outside [0, n) raises ValueError at run time
        idx = ops.gather(g, g.add_const(np.arange(n, dtype=np.intp)), [idx], 0, strict=True)
    elif mode == "wrap":
        idx = _ew(Op.MOD, _INTP, idx, _lit(n, _INTP))
    elif mode == "clip":
        idx = _ew(Op.MINIMUM, _INTP, _ew(Op.MAXIMUM, _INTP, idx, _lit(0, _INTP)),
                  _lit(n - 1, _INTP))
    else:
        raise ValueError(f"clipmode not understood: {mode!r}")
    # NumPy's choose converts the choices to their common type unsafely (300 in int8 wraps)
    result = ops.cast(g, parts[-1][0], dtype, wraps=True)
    for k in range(n - 2, -1, -1):
        c = ops.cast(g, parts[k][0], dtype, wraps=True)
        result = _ew(Op.WHERE, dtype, _ew(Op.EQ, np.bool_, idx, _lit(k, _INTP)), c, result)
    r = wrap(ops.broadcast_to(g, result, shape), scalar=False)
    if out is not None:
        setitem(out, Ellipsis, r)
        return out
    return r


# ==== in-place writes: put, place, copyto ==============================================================
def _target(a, name: str) -> Tracer:
    if not is_tracer(a):
        if isinstance(a, np.ndarray):
            raise TracingError(f"{name} needs its first argument to be a traced array; a NumPy "
                               f"array cannot receive traced values")
        raise TypeError(f"argument 1 must be numpy.ndarray, not {type(a).__name__}")
    return a


def put(a, ind, v, mode="raise"):
    t = _target(a, "np.put")
    g = current_graph()
    if not is_tracer(ind) and not isinstance(ind, np.ndarray):
        ind = np.array(ind, dtype=np.intp)     # NumPy converts sequences unsafely ([1.5] -> 1)
    ind_n = ops.reshape(g, node_of(ind), (-1,))
    if not np.can_cast(ind_n.dtype, np.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {ind_n.dtype!r} to "
                        f"{np.dtype(np.intp)!r} according to the rule 'safe'")
    vn = ops.reshape(g, ops.cast(g, node_of(v), t.dtype, wraps=True), (-1,))
    ni, nv, size = ind_n.size, vn.size, t.size
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode not understood: {mode!r}")
    if ni == 0 or nv == 0:
        return None
    if size == 0:
        raise IndexError("cannot replace elements of an empty array")
    idx = ops.cast(g, ind_n, _INTP)
    if mode == "wrap":
        idx = _ew(Op.MOD, _INTP, idx, _lit(size, _INTP))
    elif mode == "clip":
        idx = _ew(Op.MINIMUM, _INTP, _ew(Op.MAXIMUM, _INTP, idx, _lit(0, _INTP)),
                  _lit(size - 1, _INTP))
    else:
        # negative indices count from the end; anything still outside [0, size) is sent past
        # the end, where the checked scatter raises IndexError
        idx = _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, idx, _lit(0, _INTP)),
                  _ew(Op.ADD, _INTP, idx, _lit(size, _INTP)), idx)
        idx = _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, idx, _lit(0, _INTP)),
                  _lit(size, _INTP), idx)
    if nv != ni:       # v repeats as needed (or is cut)
        vn = ops.gather(g, vn, [_ew(Op.MOD, _INTP, _iota((ni,), 0), _lit(nv, _INTP))], 0)
    if t.ndim == 0:
        flat = ops.scatter(g, ops.reshape(g, t.node, (1,)), vn, [idx], 0, "set")
        t._assign(ops.reshape(g, flat, ()), "np.put")
        return None
    # the flat index split over the axes, so that the write stays an in-place scatter
    strides = _c_strides(t.shape, 1)
    per_axis = []
    for d, (s, n) in enumerate(zip(strides, t.shape)):
        q = _ew(Op.FLOORDIV, _INTP, idx, _lit(s, _INTP)) if s != 1 else idx
        per_axis.append(q if d == 0 else _ew(Op.MOD, _INTP, q, _lit(n, _INTP)))
    t._assign(ops.scatter(g, t.node, vn, per_axis, 0, "set"), "np.put")
    return None


FUNCTIONS[np.put] = put


@implements(np.place)
def place(arr, mask, vals):
    t = _target(arr, "np.place")
    g = current_graph()
    m = ops.reshape(g, ops.cast(g, node_of(mask), np.bool_), (-1,))
    if m.size != t.size:
        raise ValueError("place: mask and data must be the same size")
    vn = ops.reshape(g, ops.cast(g, node_of(vals), t.dtype, wraps=True), (-1,))
    if vn.size == 0:
        values = ops._constant_values(g, m)
        if values is not None and not np.asarray(values).any():
            return None
        if values is not None:
            raise ValueError("Cannot insert from an empty array!")
        raise TracingError("np.place with an empty vals raises when the traced mask has any "
                           "True element, which is not known while tracing")
    # the k-th True element (in C order) takes vals[k % len(vals)]
    k = ops.scan(g, Op.CUMSUM, ops.cast(g, m, _INTP), 0)
    k = _ew(Op.MOD, _INTP, _ew(Op.SUB, _INTP, k, _lit(1, _INTP)), _lit(vn.size, _INTP))
    new = _ew(Op.WHERE, t.dtype, m, ops.gather(g, vn, [k], 0), ops.reshape(g, t.node, (-1,)))
    setitem(t, Ellipsis, wrap(ops.reshape(g, new, t.shape), scalar=False))
    return None


@implements(np.copyto)
def copyto(dst, src, casting="same_kind", where=True):
    t = _target(dst, "np.copyto")
    g = current_graph()
    sn, sw = operand(src)
    if sw is None and not np.can_cast(sn.dtype, t.dtype, casting):
        what = "scalar" if sn.ndim == 0 and not is_tracer(src) else "array data"
        raise TypeError(f"Cannot cast {what} from {sn.dtype!r} to {t.dtype!r} according to "
                        f"the rule {casting!r}")
    # a Python scalar casts by kind (bool < int < float < complex), not by value
    rank = {bool: 0, int: 1, float: 2, complex: 3}
    if sw in rank and casting != "unsafe" and \
            rank[sw] > {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}.get(t.dtype.kind, 3):
        src_dt = np.dtype({int: np.int64, float: np.float64, complex: np.complex128}[sw])
        raise TypeError(f"Cannot cast scalar from {src_dt!r} to {t.dtype!r} according "
                        f"to the rule {casting!r}")
    if ops.broadcast_shapes(sn.shape, t.shape) != t.shape:
        raise ValueError(f"could not broadcast input array from shape {sn.shape} into shape "
                         f"{t.shape}")
    value = ops.cast(g, sn, t.dtype, sw)
    if where is not True:
        wn = node_of(where)
        if wn.dtype != np.bool_:
            raise TypeError(f"Cannot cast array data from {wn.dtype!r} to dtype('bool') "
                            f"according to the rule 'safe'")
        if ops.broadcast_shapes(wn.shape, t.shape) != t.shape:
            raise ValueError(f"could not broadcast where mask from shape {wn.shape} into shape "
                             f"{t.shape}")
        value = _ew(Op.WHERE, t.dtype, wn, value, t.node)
    setitem(t, Ellipsis, wrap(value, scalar=False))
    return None


def take_(a, idx):
    return take(a if is_tracer(a) else wrap(node_of(a), scalar=False), idx)


@implements(np.unravel_index)
def unravel_index(indices, shape, order="C"):
    if _any_traced(shape):
        raise TracingError("np.unravel_index with a traced shape is not supported by "
                           "fastlaunch; the shape must be known when tracing")
    dims = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    t = _as_tracer(indices)
    if t.dtype.kind not in "iub":
        raise TypeError("only int indices permitted")
    size = math.prod(dims)
    idx = t.astype(np.intp)
    require(all_((idx >= 0) & (idx < size)), ValueError,
            f"index out of bounds in np.unravel_index for array with size {size}")
    out = []
    rest = idx
    for d in (reversed(dims) if order == "C" else dims):
        out.append(rest % d if d else rest)
        rest = rest // d if d else rest
    out = out[::-1] if order == "C" else out
    return tuple(o[()] if o.ndim == 0 else o for o in out)


@implements(np.ravel_multi_index)
def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    if _any_traced(dims):
        raise TracingError("np.ravel_multi_index with traced dims is not supported by "
                           "fastlaunch")
    dims = tuple(int(s) for s in dims)
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    idx = [_as_tracer(m) if _any_traced(m) else wrap(node_of(np.asarray(m)), scalar=False)
           for m in multi_index]
    strides, acc = [], 1
    for d in (reversed(dims) if order == "C" else dims):
        strides.append(acc)
        acc *= d
    strides = strides[::-1] if order == "C" else strides
    total = None
    for m, d, s, md in zip(idx, dims, strides, modes):
        if m.dtype.kind not in "iub":
            raise TypeError("only int indices permitted")
        m = m.astype(np.intp)
        if md == "wrap":
            m = m % d
        elif md == "clip":
            m = np.clip(m, 0, d - 1)
        elif md == "raise":
            require(all_((m >= 0) & (m < d)), ValueError, "invalid entry in coordinates array")
        else:
            raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {md!r})")
        total = m * s if total is None else total + m * s
    return total[()] if total.ndim == 0 else total


@implements(np.fill_diagonal)
def fill_diagonal(a, val, wrap=False):
    t = _target(a, "np.fill_diagonal")
    if t.ndim < 2:
        raise ValueError("array must be at least 2-d")
    if t.ndim == 2:
        step = t.shape[1] + 1
        end = t.size if wrap else min(t.shape[1] * t.shape[1], t.size)
    else:
        if len(set(t.shape)) != 1:
            raise ValueError("All dimensions of input must be of equal length")
        step = 1 + int(np.cumprod(t.shape[:-1]).sum())
        end = t.size
    flat = np.arange(0, end, step)
    if not flat.size:
        return None
    where_ = np.unravel_index(flat, t.shape)
    g = current_graph()
    vn = ops.reshape(g, ops.cast(g, node_of(val), t.dtype, wraps=True), (-1,))
    if vn.size == 0:
        return None
    if vn.size != flat.size:           # val repeats (or is cut), as a.flat[...] = val does
        vn = ops.gather(g, vn, [_ew(Op.MOD, _INTP, _iota((flat.size,), 0),
                                    _lit(vn.size, _INTP))], 0)
    setitem(t, where_, _as_value(vn))
    return None


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import _INTP, _as_tracer, _as_value, _ew, _iota, _lit, _readonly, require  # noqa: E402
from .creation import array  # noqa: E402
from .reductions import (  # noqa: E402
    _mean_dtype, _no_extra, _reduce, all_, any_, count_nonzero, sum_)
from .registry import is_tracer, node_of, operand, wrap  # noqa: E402
from .shaping import _c_strides, ravel, reshape, transpose  # noqa: E402
from .ufuncs import astype, call_ufunc, where  # noqa: E402
from .trace_buffers import _any_traced  # noqa: E402
