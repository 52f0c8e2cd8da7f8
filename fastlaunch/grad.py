"""Gradients of unchanged NumPy code: `grad`, `value_and_grad`, `vjp`, `jvp`, `stop_gradient`,
`custom_vjp`, `custom_jvp`, with JAX's conventions.

A transformed function is a compiled function (`jit.Compiled`) whose traced body runs the
user's function on marked variables and then builds the backward pass into the same graph
(ir/adjoint.py): the first call for a signature traces, fuses and compiles forward and backward
together, every later call replays one program.  Inside another traced function (an Adam step
that calls `fl.value_and_grad`, a step of `fl.iterate`) the body runs directly in that trace.

Forward mode (`jvp`) walks the graph in creation order (adjoint.forward): each op's tangent
is its adjoint rule transposed on the spot, and a loop's tangent is a loop that carries the
values and their tangents, so forward mode reaches through fl.iterate, backward loops
included (Hessian-vector products of a loop's loss).
"""
from __future__ import annotations

import functools
import inspect
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, ParamSpec

import numpy as np

from .ir import adjoint, ops
from .frontend import pytree, roll
from .ir.graph import Node
from .frontend.trace import Tracer, current_graph, new_tracer, tracing

if TYPE_CHECKING:
    from .jit import Compiled

# Typing (jit.py's pattern): a transformed function keeps fn's parameters P, so a type checker
# checks calls of fl.grad(loss) as calls of loss
P = ParamSpec("P")

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "stop_gradient", "custom_vjp", "custom_jvp"]


# ---- arguments and results -------------------------------------------------------------------
def _argnums(argnums, fname: str) -> tuple:
    single = isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool)
    nums = (argnums,) if single else argnums
    try:
        nums = tuple(nums)
    except TypeError:
        raise TypeError(f"{fname}: argnums must be an int or a tuple of ints, got "
                        f"{argnums!r:.60}") from None
    if not nums or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                           for i in nums):
        raise TypeError(f"{fname}: argnums must be an int or a non-empty tuple of ints, got "
                        f"{argnums!r:.60}")
    if len(set(int(i) for i in nums)) != len(nums):
        raise ValueError(f"{fname}: argnums {tuple(nums)} repeats an argument")
    return tuple(int(i) for i in nums)


def _arg_label(fn, i: int) -> str:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return f"argument {i} ({params[i].name!r})" if i < len(params) else f"argument {i}"


def _leaf_node(leaf, what: str):
    """(node, weak, scalar) of one differentiable leaf; a TypeError naming it otherwise."""
    g = current_graph()
    if isinstance(leaf, Tracer):
        node, weak, scalar = leaf.node, leaf.weak, leaf.scalar
    elif getattr(type(leaf), "__fl_tracer__", None) is not None:
        t = type(leaf).__fl_tracer__(leaf)
        if t is None:
            leaf = leaf.view(np.ndarray)
            node, weak, scalar = _captured(g, leaf), None, False
        else:
            node, weak, scalar = t.node, t.weak, t.scalar
    elif type(leaf) is float:
        node, weak, scalar = ops.literal(g, leaf, np.float64), float, True
    elif isinstance(leaf, (np.ndarray, np.generic)) and leaf.dtype.kind == "f":
        node, weak, scalar = _captured(g, np.asarray(leaf)), None, isinstance(leaf, np.generic)
    else:
        kind = type(leaf).__name__ if not hasattr(leaf, "dtype") else str(leaf.dtype)
        raise TypeError(f"{what} is a {kind}: only floating-point arguments have gradients "
                        f"(cast it with .astype(float), or leave it out of argnums)")
    if not adjoint.differentiable(node.dtype):
        raise TypeError(f"{what} is {node.dtype}: only floating-point arguments have gradients "
                        f"(integer and bool values have none; complex ones are not supported)")
    return node, weak, scalar


def _captured(g, arr: np.ndarray) -> Node:
    from .frontend.numpy.registry import capture
    return capture(arr)


class _Vars:
    """The differentiated arguments: each float leaf replaced by a fresh variable."""

    def __init__(self, fn, args: list, argnums: tuple, fname: str):
        g = current_graph()
        self.nodes: list[Node] = []
        self.trees: list = []
        self.leaf_info: list = []         # per variable: (weak, scalar)
        self.originals: list = []         # per variable: (original leaf, its variable tracer)
        for i in argnums:
            if i >= len(args) or i < -len(args):
                raise ValueError(f"{fname}: argnums names argument {i}, but the function was "
                                 f"called with {len(args)} positional argument"
                                 f"{'' if len(args) == 1 else 's'}")
            i %= len(args)
            leaves, tree = pytree.flatten(args[i])
            label = _arg_label(fn, i)
            _refuse_static_floats(tree, f"{fname}: {label}")
            new = []
            for k, leaf in enumerate(leaves):
                what = f"{fname}: {label}" + (f", leaf {k} of its {len(leaves)}"
                                              if tree.kind != "leaf" else "")
                node, weak, scalar = _leaf_node(leaf, what)
                var = adjoint.mark(g, node, "var")
                t = new_tracer(var, weak, scalar)
                self.nodes.append(var)
                self.leaf_info.append((weak, scalar))
                self.originals.append((leaf, t))
                new.append(t)
            self.trees.append(tree)
            args[i] = tree.unflatten(new)

    def write_back(self) -> None:
        """In-place writes the function made to a differentiated argument reach the caller's
        array, as calling the function itself would (NumPy's semantics)."""
        for leaf, t in self.originals:
            if isinstance(leaf, Tracer) and t._storage.version:
                leaf._assign(ops.cast(current_graph(), t.node, leaf.dtype), "an in-place update")

    def gradients(self, cts: list) -> list:
        """Per differentiated argument, its gradient in the argument's own structure."""
        g = current_graph()
        out, k = [], 0
        for tree in self.trees:
            leaves = []
            for _ in range(tree.num_leaves):
                var, (_weak, scalar) = self.nodes[k], self.leaf_info[k]
                ct = cts[k]
                if ct is None:
                    ct = ops.broadcast_to(g, ops.literal(g, 0, var.dtype), var.shape)
                leaves.append(new_tracer(ops.cast(g, ct, var.dtype), None, scalar))
                k += 1
            out.append(tree.unflatten(leaves))
        return out


def _refuse_static_floats(tree, what: str) -> None:
    """An object's float attributes are static (keyed by value in the signature, frontend/pytree.py),
    so they cannot be variables: refused rather than given a gradient of zero."""
    if tree.kind == "object" and tree.meta.custom is None:
        for name, value in tree.meta.statics:
            if isinstance(value, (float, np.floating)):
                raise TypeError(
                    f"{what}: attribute {name!r} of its {tree.meta.cls.__name__} is a float "
                    f"({value!r}), which fastlaunch keys by value (a static attribute) and "
                    f"cannot differentiate: store it as a 0-d array (np.asarray({value!r})) "
                    f"to get its gradient")
    for child in tree.children:
        _refuse_static_floats(child, what)


def _value_node(out, fname: str, what: str = "the function's result") -> Node:
    from .frontend.numpy.registry import operand
    try:
        node, _ = operand(out)
    except TypeError:
        raise TypeError(f"{fname}: {what} must be a scalar array, got a "
                        f"{type(out).__name__}") from None
    return node


def _scalar_loss(out, fname: str) -> Node:
    node = _value_node(out, fname)
    if node.ndim != 0:
        raise TypeError(f"{fname} needs a function that returns a scalar (a 0-d array or a "
                        f"NumPy scalar), got an array of shape {node.shape}: reduce it (np.sum, "
                        f"np.mean), or use fl.vjp for a vector-valued function")
    if not adjoint.differentiable(node.dtype):
        raise TypeError(f"{fname} needs a function that returns a floating-point value, got "
                        f"{node.dtype}")
    return node


def _split_aux(out, has_aux: bool, fname: str):
    if not has_aux:
        return out, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{fname}(has_aux=True) needs a function that returns a pair "
                        f"(value, auxiliary data), got a {type(out).__name__}")
    return out[0], out[1]


def _one(x: Node, g) -> Node:
    return ops.literal(g, 1, x.dtype)


# ---- Python loops rolled before the backward pass ---------------------------------------------
# reverse-mode differentiations whose function is running, per thread: a differentiation
# inside another one leaves its loops unrolled, because the backward loops that rolling
# gives are not differentiated in reverse mode again (loops.loop_adjoint refuses them)
_active = threading.local()


class _reverse:
    """Counts a reverse-mode differentiation's function as running (`_active`)."""

    def __enter__(self):
        _active.depth = getattr(_active, "depth", 0) + 1

    def __exit__(self, *exc):
        _active.depth -= 1


def _held_tracers(tree, variables: "_Vars") -> list:
    """The tracers the differentiation still holds once the function returned: in `tree`,
    its results (value and aux) and its arguments (an argument updated in place is written
    back), and the differentiated arguments' originals."""
    found = []
    try:
        leaves, _ = pytree.flatten(tree)
    except (TypeError, ValueError):      # an argument pytree cannot take apart: results only
        leaves, _ = pytree.flatten(tree[0])
    for leaf in leaves:
        hook = getattr(type(leaf), "__fl_tracer__", None)
        if hook is not None:
            leaf = hook(leaf)
        if isinstance(leaf, Tracer):
            found.append(leaf)
    return found + [t for _, t in variables.originals]


def _roll_before_backward(g, variables: "_Vars", held, nodes: list) -> list:
    """Roll the Python loops the function ran (roll.roll_traced) before the backward pass
    is built on them, so that it is a loop too (loops.loop_adjoint, checkpointed) rather
    than one backward step per unrolled iteration.  Rebinds the held tracers and the trace's
    runtime checks to the rolled values; returns `nodes` (the seeds) likewise rebound."""
    if getattr(_active, "depth", 0) or g.sites is None or not variables.nodes:
        return nodes
    tracers = _held_tracers(held, variables)
    storages = {id(t._storage): t._storage for t in tracers if t._storage.graph is g}
    roots = list(nodes) + [st.node for st in storages.values()] + [c for c, _, _ in g.checks]
    mapped = roll.roll_traced(g, min(v.index for v in variables.nodes), roots)
    if not mapped:
        return nodes
    for st in storages.values():
        st.node = mapped.get(st.node.index, st.node)
    for t in tracers:
        t._node = None               # read again from its storage
    g.checks = [(mapped.get(c.index, c), e, m) for c, e, m in g.checks]
    return [mapped.get(n.index, n) for n in nodes]


# ---- traced bodies ------------------------------------------------------------------------------
def _traced_value_and_grad(fn, args, kwargs, argnums, has_aux, fname):
    g = current_graph()
    args = list(args)
    variables = _Vars(fn, args, argnums, fname)
    with _reverse():
        out = fn(*args, **kwargs)
    value, aux = _split_aux(out, has_aux, fname)
    loss = _scalar_loss(value, fname)
    loss, = _roll_before_backward(g, variables, (out, args, kwargs), [loss])
    cts = adjoint.backward(g, [(loss, _one(loss, g))], variables.nodes)
    variables.write_back()
    return value, aux, variables.gradients(cts)


def _traced_vjp(fn, primals, has_aux, fname):
    g = current_graph()
    args = list(primals)
    variables = _Vars(fn, args, tuple(range(len(args))), fname)
    with _reverse():
        out = fn(*args)
    value, aux = _split_aux(out, has_aux, fname)
    out_leaves, out_tree = pytree.flatten(value)
    out_nodes = [_value_node(o, fname, "each result") for o in out_leaves]
    out_nodes = _roll_before_backward(g, variables, (out, args), out_nodes)
    variables.write_back()

    def pullback(cotangent):
        ct_leaves, ct_tree = pytree.flatten(cotangent)
        if len(ct_leaves) != len(out_nodes):
            raise ValueError(f"{fname}: the cotangent has {len(ct_leaves)} leaves, the result "
                             f"{len(out_nodes)}: give one array per result, in its structure")
        seeds = []
        for k, (node, c) in enumerate(zip(out_nodes, ct_leaves)):
            cn = _value_node(c, fname, "each cotangent")
            if cn.shape != node.shape:
                raise ValueError(f"{fname}: cotangent {k} has shape {cn.shape}, its result "
                                 f"{node.shape}")
            if adjoint.differentiable(node.dtype):
                seeds.append((node, ops.cast(g, cn, node.dtype)))
        return tuple(variables.gradients(adjoint.backward(g, seeds, variables.nodes)))
    return value, aux, pullback


def _traced_jvp(fn, primals, tangents, has_aux, fname):
    g = current_graph()
    args = list(primals)
    variables = _Vars(fn, args, tuple(range(len(args))), fname)
    t_nodes = []
    for k, (p, t) in enumerate(zip(primals, tangents)):
        p_leaves, p_tree = pytree.flatten(p)
        t_leaves, t_tree = pytree.flatten(t)
        if len(p_leaves) != len(t_leaves):
            raise ValueError(f"{fname}: tangent {k} does not have the structure of primal {k}")
        for _pl, tl in zip(p_leaves, t_leaves):
            tn = _value_node(tl, fname, "each tangent")
            pn = variables.nodes[len(t_nodes)]
            if tn.shape != pn.shape:
                raise ValueError(f"{fname}: tangent {k} has shape {tn.shape}, its primal "
                                 f"{pn.shape}")
            t_nodes.append(ops.cast(g, tn, pn.dtype))
    out = fn(*args)
    value, aux = _split_aux(out, has_aux, fname)
    out_leaves, out_tree = pytree.flatten(value)
    out_nodes = [_value_node(o, fname, "each result") for o in out_leaves]
    variables.write_back()
    jt = adjoint.forward(g, {v.index: t for v, t in zip(variables.nodes, t_nodes)}, out_nodes)
    tangent_leaves = []
    for n, c in zip(out_nodes, jt):
        if c is None:
            zero_dt = n.dtype if adjoint.differentiable(n.dtype) else np.dtype(np.float64)
            c = ops.broadcast_to(g, ops.literal(g, 0, zero_dt), n.shape)
        tangent_leaves.append(new_tracer(c, None, n.ndim == 0))
    return value, aux, out_tree.unflatten(tangent_leaves)


# ---- the transformed functions ------------------------------------------------------------------
class _Body:
    """The traced body of a transformed function: what `jit.Compiled` traces.  Carries the
    user function's signature, name and globals, so that binding, messages and interception
    behave as for the function itself."""

    def __init__(self, fn, kind: str, argnums=0, has_aux: bool = False):
        self.fn = fn
        self.kind = kind
        self.argnums = argnums
        self.has_aux = has_aux
        name = getattr(fn, "__name__", type(fn).__name__)
        self.__name__ = f"{kind}({name})"
        self.__qualname__ = f"{kind}({getattr(fn, '__qualname__', name)})"
        self.__module__ = getattr(fn, "__module__", None)
        self.__doc__ = getattr(fn, "__doc__", None)
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        if sig is not None and kind in ("vjp_pullback", "jvp"):
            # (primals..., cotangent) or (primals, tangents): positional only
            sig = None
        if sig is not None:
            self.__signature__ = sig

    @property
    def __globals__(self):
        return getattr(self.fn, "__globals__", {})

    @property
    def __code__(self):
        return getattr(self.fn, "__code__", None)

    @property
    def __closure__(self):
        return getattr(self.fn, "__closure__", None)

    def __reduce__(self):
        return (_Body, (self.fn, self.kind, self.argnums, self.has_aux))

    def forward_program(self, backend: str, args, kwargs):
        """The program of the function alone for these arguments (`Compiled.dis` compares
        its peak temporaries with the gradient's)."""
        from .jit import Compiled
        return Compiled(self.fn, backend=backend).lower(*args, **kwargs).program

    def __call__(self, *args, **kwargs):
        fname = f"fl.{self.kind}"
        if self.kind in ("grad", "value_and_grad"):
            nums = _argnums(self.argnums, fname)
            value, aux, grads = _traced_value_and_grad(self.fn, args, kwargs, nums, self.has_aux,
                                                       fname)
            if isinstance(self.argnums, (int, np.integer)):
                grads = grads[0]
            else:
                grads = tuple(grads)
            if self.kind == "grad":
                return (grads, aux) if self.has_aux else grads
            return ((value, aux), grads) if self.has_aux else (value, grads)
        if self.kind == "vjp_pullback":
            *primals, ct = args
            _, _, pullback = _traced_vjp(self.fn, primals, self.has_aux, "fl.vjp")
            return pullback(ct)
        if self.kind == "jvp":
            primals, tangents = args
            value, aux, tangent = _traced_jvp(self.fn, list(primals), list(tangents),
                                              self.has_aux, "fl.jvp")
            return (value, tangent, aux) if self.has_aux else (value, tangent)
        raise AssertionError(self.kind)


def _compiled(body: _Body) -> Any:
    from .jit import Compiled
    return Compiled(body)


def _check_fn(fn, fname: str) -> None:
    if not callable(fn):
        raise TypeError(f"{fname}: expected a function to differentiate, got "
                        f"{type(fn).__name__} {fn!r:.60}")


def _check_flag(value, name: str, fname: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fname}: {name} must be True or False, got {value!r:.60}")
    return bool(value)


def grad(fn: Callable[P, Any], argnums: int | tuple = 0,
         has_aux: bool = False) -> Compiled[P, Any]:
    """The gradient of `fn`, a function returning a scalar, with respect to its positional
    argument(s) `argnums`, as a compiled function: forward and backward pass traced once per
    signature and replayed as one fused program.

    The gradient has the structure and dtypes of the selected arguments (arrays, Python
    floats, and tuples, lists, dicts, dataclasses or registered classes of them).  With
    `has_aux=True`, `fn` returns `(value, aux)` and the result is `(gradient, aux)`.

    >>> import numpy as np, fastlaunch as fl
    >>> def loss(p, target):
    ...     return np.mean((np.sin(p) + p * p - target) ** 2)
    >>> g = fl.grad(loss)(np.zeros(3), np.ones(3))      # d loss / d p
    >>> np.allclose(g, 2 * (0 - 1) * (np.cos(0) + 0) / 3)
    True
    """
    _check_fn(fn, "fl.grad")
    _argnums(argnums, "fl.grad")
    return _compiled(_Body(fn, "grad", argnums, _check_flag(has_aux, "has_aux", "fl.grad")))


def value_and_grad(fn: Callable[P, Any], argnums: int | tuple = 0,
                   has_aux: bool = False) -> Compiled[P, tuple[Any, Any]]:
    """`fn`'s value and its gradient (see `grad`) from one compiled program: returns
    `(value, gradient)`, or `((value, aux), gradient)` with `has_aux=True`.

    >>> import numpy as np, fastlaunch as fl
    >>> f = fl.value_and_grad(lambda x: np.sum(x ** 3))
    >>> value, g = f(np.array([1.0, 2.0]))
    >>> float(value), g.tolist()
    (9.0, [3.0, 12.0])
    """
    _check_fn(fn, "fl.value_and_grad")
    _argnums(argnums, "fl.value_and_grad")
    return _compiled(_Body(fn, "value_and_grad", argnums,
                           _check_flag(has_aux, "has_aux", "fl.value_and_grad")))


_PULLBACKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _cached(cache, fn, key, make):
    try:
        per_fn = cache.setdefault(fn, {})
    except TypeError:               # not weakly referenceable: not cached
        return make()
    found = per_fn.get(key)
    if found is None:
        found = per_fn[key] = make()
    return found


def vjp(fn: Callable, *primals: Any, has_aux: bool = False) -> Any:
    """`(fn(*primals), vjp_fn)`: `vjp_fn(cotangent)` returns the cotangents of the primals
    (a tuple, one per primal, in their structures), J^T cotangent.  With `has_aux=True`,
    `(value, vjp_fn, aux)`.  Outside a traced function, the value and each `vjp_fn` call are
    compiled programs (the pullback recomputes what it needs of the forward pass, fused).

    >>> import numpy as np, fastlaunch as fl
    >>> y, pullback = fl.vjp(lambda x: np.sin(x) * 2, np.zeros(2))
    >>> pullback(np.ones(2))[0].tolist()
    [2.0, 2.0]
    """
    _check_fn(fn, "fl.vjp")
    has_aux = _check_flag(has_aux, "has_aux", "fl.vjp")
    if not primals:
        raise TypeError("fl.vjp needs at least one primal argument: fl.vjp(fn, *primals)")
    if tracing():
        value, aux, pullback = _traced_vjp(fn, primals, has_aux, "fl.vjp")
        return (value, pullback, aux) if has_aux else (value, pullback)
    from .jit import Compiled
    forward = _cached(_PULLBACKS, fn, "forward", lambda: Compiled(fn))
    backward = _cached(_PULLBACKS, fn, ("pullback", has_aux),
                       lambda: _compiled(_Body(fn, "vjp_pullback", 0, has_aux)))
    out = forward(*primals)
    value, aux = _split_aux(out, has_aux, "fl.vjp")
    kept = [pytree.flatten(p)[1].unflatten([np.array(x, copy=True) if isinstance(x, np.ndarray)
                                            else x for x in pytree.flatten(p)[0]])
            for p in primals]

    def vjp_fn(cotangent):
        return backward(*kept, cotangent)
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def jvp(fn: Callable, primals: tuple | list, tangents: tuple | list,
        has_aux: bool = False) -> Any:
    """Forward mode: `(fn(*primals), J tangents)`, the directional derivative along
    `tangents` (one per primal, in its structure); with `has_aux=True`,
    `(value, tangent, aux)`.  Hessian-vector products: `fl.jvp(fl.grad(f), (x,), (v,))[1]`.

    >>> import numpy as np, fastlaunch as fl
    >>> y, t = fl.jvp(lambda x: x * x, (np.array([3.0]),), (np.array([1.0]),))
    >>> t.tolist()
    [6.0]
    """
    _check_fn(fn, "fl.jvp")
    has_aux = _check_flag(has_aux, "has_aux", "fl.jvp")
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("fl.jvp(fn, primals, tangents): primals and tangents must be tuples "
                        "(one entry per argument of fn)")
    if len(primals) != len(tangents):
        raise ValueError(f"fl.jvp: {len(primals)} primals but {len(tangents)} tangents")
    if tracing():
        value, aux, tangent = _traced_jvp(fn, list(primals), list(tangents), has_aux, "fl.jvp")
        return (value, tangent, aux) if has_aux else (value, tangent)
    compiled = _cached(_PULLBACKS, fn, ("jvp", has_aux),
                       lambda: _compiled(_Body(fn, "jvp", 0, has_aux)))
    return compiled(tuple(primals), tuple(tangents))


def stop_gradient(x: Any) -> Any:
    """x, through which no gradient flows (its derivative is taken as zero); a NumPy array
    outside a traced function is returned as it is.

    >>> import numpy as np, fastlaunch as fl
    >>> fl.grad(lambda x: np.sum(x * fl.stop_gradient(x)))(np.array([3.0])).tolist()
    [3.0]
    """
    leaves, tree = pytree.flatten(x)
    if not any(isinstance(v, Tracer) for v in leaves):
        return x
    g = current_graph()
    out = [new_tracer(adjoint.mark(g, v.node, "stop"), v.weak, v.scalar)
           if isinstance(v, Tracer) else v for v in leaves]
    return tree.unflatten(out)


# ---- user rules --------------------------------------------------------------------------------
def _differentiable_leaves(args) -> list:
    """(position in the flattened args, node) of each traced float leaf."""
    leaves, _ = pytree.flatten(list(args))
    out = []
    for k, leaf in enumerate(leaves):
        if isinstance(leaf, Tracer) and adjoint.differentiable(leaf.dtype):
            out.append((k, leaf.node))
    return out


def _mark_outputs(out, rule_of) -> Any:
    """The outputs of a call with a user rule, each float tracer under one shared custom mark
    (tag); rule_of(tag, output nodes) registers the rule."""
    g = current_graph()
    leaves, tree = pytree.flatten(out)
    tag = adjoint.new_tag()
    marked, nodes = [], []
    for leaf in leaves:
        if isinstance(leaf, Tracer) and adjoint.differentiable(leaf.dtype):
            m = adjoint.mark(g, leaf.node, "custom", tag)
            nodes.append(m)
            marked.append(new_tracer(m, leaf.weak, leaf.scalar))
        else:
            nodes.append(None)
            marked.append(leaf)
    rule_of(tag, nodes, leaves, tree)
    return tree.unflatten(marked)


class custom_vjp:
    """A function with a user-given reverse-mode rule (JAX's `jax.custom_vjp`)::

        @fl.custom_vjp
        def f(x): ...
        def f_fwd(x): return f(x), residuals
        def f_bwd(residuals, ct): return (ct_x,)      # one per positional argument
        f.defvjp(f_fwd, f_bwd)

    Differentiating a function that calls `f` uses `f_bwd` for it; called directly, `f` is
    just `f`.

    >>> import numpy as np, fastlaunch as fl
    >>> @fl.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> clip_gradient.defvjp(lambda x: (x, None), lambda res, ct: (np.clip(ct, -1, 1),))
    >>> fl.grad(lambda x: np.sum(clip_gradient(x) * 5))(np.ones(2)).tolist()
    [1.0, 1.0]
    """

    def __init__(self, fun: Callable, nondiff_argnums: tuple = ()):
        _check_fn(fun, "fl.custom_vjp")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        _check_fn(fwd, "custom_vjp.defvjp (fwd)")
        _check_fn(bwd, "custom_vjp.defvjp (bwd)")
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if not tracing() or not any(isinstance(v, Tracer) for v in pytree.flatten(list(args))[0]):
            return self.fun(*args)
        if self.fwd is None:
            raise TypeError(f"{self.__name__}: a custom_vjp function needs its rule: call "
                            f".defvjp(fwd, bwd) before using it")
        out, residuals = self.fwd(*args)
        inputs = _differentiable_leaves(args)
        arg_leaves, arg_tree = pytree.flatten(list(args))
        g = current_graph()
        bwd, name, nondiff = self.bwd, self.__name__, self.nondiff_argnums

        def register(tag, out_nodes, out_leaves, out_tree):
            def pullback(cts):
                ct_leaves = []
                it = iter(cts)
                for node, _leaf in zip(out_nodes, out_leaves):
                    if node is None:
                        ct_leaves.append(None)
                        continue
                    c = next(it)
                    if c is None:
                        c = ops.broadcast_to(g, ops.literal(g, 0, node.dtype), node.shape)
                    ct_leaves.append(new_tracer(c, None, node.ndim == 0))
                ct = out_tree.unflatten(ct_leaves)
                extra = tuple(args[i] for i in nondiff)
                got = bwd(*extra, residuals, ct)
                if not isinstance(got, tuple):
                    raise TypeError(f"{name}: the custom_vjp backward rule must return a tuple "
                                    f"(one cotangent per positional argument), got "
                                    f"{type(got).__name__}")
                diff_positions = [i for i in range(len(args)) if i not in nondiff]
                if len(got) != len(diff_positions):
                    raise TypeError(f"{name}: the custom_vjp backward rule returned "
                                    f"{len(got)} cotangents for {len(diff_positions)} "
                                    f"differentiable arguments")
                full = [None] * len(args)
                for i, c in zip(diff_positions, got):
                    full[i] = c
                flat = []
                for a, c in zip(args, full):
                    n = len(pytree.flatten(a)[0])
                    if c is None:
                        flat += [None] * n
                    else:
                        cl, _ = pytree.flatten(c)
                        if len(cl) != n:
                            raise TypeError(f"{name}: a cotangent from the backward rule does "
                                            f"not have its argument's structure")
                        flat += cl
                by_pos = dict(inputs)
                result = []
                for k, node in by_pos.items():
                    c = flat[k]
                    result.append(None if c is None else
                                  ops.broadcast_to(g, _value_node(c, name, "a cotangent"),
                                                   node.shape))
                return result
            adjoint.register_custom(g, tag, adjoint.CustomRule(
                [n for _, n in inputs], [n for n in out_nodes if n is not None],
                lambda outs: pullback(outs)))
        del arg_leaves, arg_tree
        return _mark_outputs(out, register)


class custom_jvp:
    """A function with a user-given forward-mode rule (JAX's `jax.custom_jvp`)::

        @fl.custom_jvp
        def f(x): ...
        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return f(x), derivative * t

    The rule must be linear in the tangents; reverse mode uses its transpose.

    >>> import numpy as np, fastlaunch as fl
    >>> @fl.custom_jvp
    ... def safe_log1pexp(x):
    ...     return np.logaddexp(0.0, x)
    >>> @safe_log1pexp.defjvp
    ... def _(primals, tangents):
    ...     (x,), (t,) = primals, tangents
    ...     return safe_log1pexp(x), t / (1 + np.exp(-x))
    >>> float(fl.grad(lambda x: np.sum(safe_log1pexp(x)))(np.array([0.0]))[0])
    0.5
    """

    def __init__(self, fun: Callable, nondiff_argnums: tuple = ()):
        _check_fn(fun, "fl.custom_jvp")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None

    def defjvp(self, jvp_rule: Callable) -> Callable:
        _check_fn(jvp_rule, "custom_jvp.defjvp")
        self.jvp = jvp_rule
        return jvp_rule

    def __call__(self, *args):
        if not tracing() or not any(isinstance(v, Tracer) for v in pytree.flatten(list(args))[0]):
            return self.fun(*args)
        if self.jvp is None:
            raise TypeError(f"{self.__name__}: a custom_jvp function needs its rule: use "
                            f"@f.defjvp before calling it")
        out = self.fun(*args)
        inputs = _differentiable_leaves(args)
        g = current_graph()
        rule, name, nondiff = self.jvp, self.__name__, self.nondiff_argnums

        def register(tag, out_nodes, out_leaves, out_tree):
            def pullback(cts):
                # the rule's tangent output, as a function of tangent variables, transposed
                tvars = {k: adjoint.mark(g, ops.broadcast_to(g, ops.literal(g, 0, n.dtype),
                                                             n.shape), "var")
                         for k, n in inputs}
                primal_args, tangent_args = [], []
                pos = 0
                for i, a in enumerate(args):
                    leaves, tree = pytree.flatten(a)
                    tl = []
                    for leaf in leaves:
                        if pos in tvars:
                            tl.append(new_tracer(tvars[pos], None, tvars[pos].ndim == 0))
                        else:
                            zero_like = np.zeros(np.shape(leaf), np.float64)
                            tl.append(zero_like)
                        pos += 1
                    if i in nondiff:
                        continue
                    primal_args.append(a)
                    tangent_args.append(tree.unflatten(tl))
                extra = tuple(args[i] for i in nondiff)
                got = rule(*extra, tuple(primal_args), tuple(tangent_args)) if extra else \
                    rule(tuple(primal_args), tuple(tangent_args))
                if not isinstance(got, (tuple, list)) or len(got) != 2:
                    raise TypeError(f"{name}: a custom_jvp rule returns (primal_out, "
                                    f"tangent_out)")
                t_leaves, _ = pytree.flatten(got[1])
                seeds = []
                it = iter(cts)
                for node, tl in zip(out_nodes, t_leaves):
                    if node is None:
                        continue
                    c = next(it)
                    if c is not None:
                        tn = _value_node(tl, name, "a tangent output")
                        seeds.append((ops.broadcast_to(g, ops.cast(g, tn, node.dtype),
                                                       node.shape), c))
                keys = list(tvars)
                found = adjoint.backward(g, seeds, [tvars[k] for k in keys])
                return found
            adjoint.register_custom(g, tag, adjoint.CustomRule(
                [n for _, n in inputs], [n for n in out_nodes if n is not None], pullback))
        return _mark_outputs(out, register)
