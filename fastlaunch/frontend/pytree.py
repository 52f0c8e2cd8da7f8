"""Nested tuples, lists, dicts and objects of leaves: flattening for arguments and results.

Objects are taken apart when their class is registered (`register_class`, JAX's pytree
registration), is a dataclass, or is the class of a compiled method's `self`: array and
container attributes are children (traced leaves, read afresh on every call), every other
attribute is static, keyed by value in the signature."""
from __future__ import annotations

import dataclasses
import struct

import numpy as np

from .. import forking


class TreeDef:
    """The shape of a nested container: rebuilds it from a flat list of leaves."""

    __slots__ = ("kind", "children", "meta", "_builder")

    def __init__(self, kind: str, children=(), meta=None):
        # leaf | none | const | tuple | list | dict | namedtuple | object | complex
        self.kind = kind
        self.children = tuple(children)
        self.meta = meta            # dict keys, the namedtuple class, an ObjectKey, a const's str
        self._builder = None

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves):
        builder = self._builder
        if builder is None:
            if self.kind == "leaf":
                return next(iter(leaves))
            # generated at the second use: a tree unflattened once (a call's arguments
            # rebuilt by the slow path) is not worth compiling an expression for
            self._builder = _USED_ONCE
            return self._build(iter(leaves))
        if builder is _USED_ONCE:
            builder = self.builder()
        if type(leaves) is not list:
            leaves = list(leaves)
        return builder(leaves)

    def builder(self):
        """The function (a list of leaves) -> the tree, generated once: a replay returning a
        dict or list rebuilds it on every call with one generated expression (a display of
        the leaves) instead of a recursive walk (link.py hands it to the executable)."""
        builder = self._builder
        if builder is None or builder is _USED_ONCE:
            builder = self._builder = _make_builder(self)
        return builder

    def __getstate__(self):
        return (self.kind, self.children, self.meta)      # not the generated builder

    def __setstate__(self, state):
        self.kind, self.children, self.meta = state
        self._builder = None

    def _build(self, it):
        if self.kind == "leaf":
            return next(it)
        if self.kind == "none":
            return None
        if self.kind == "const":
            return self.meta
        items = [c._build(it) for c in self.children]
        if self.kind == "complex":
            return build_complex(self.meta, items[0], items[1])
        if self.kind == "tuple":
            return tuple(items)
        if self.kind == "list":
            return items
        if self.kind == "namedtuple":
            return self.meta(*items)
        if self.kind == "object":
            return self.meta.rebuild(items)
        return dict(zip(self.meta, items))

    def to_json(self):
        """A JSON-able description (saved programs); dict keys must be str, int or float."""
        out = {"kind": self.kind}
        if self.kind in ("namedtuple", "object"):
            raise TypeError(f"a saved program cannot return a {self.kind}; return a tuple or dict")
        if self.kind == "dict":
            if not all(type(k) in (str, int, float) for k in self.meta):
                raise TypeError("a saved program's result dicts need str, int or float keys")
            out["keys"] = list(self.meta)
        if self.kind == "const":
            out["value"] = self.meta
        if self.kind == "complex":
            out["type"] = self.meta.__name__
        if self.children:
            out["children"] = [c.to_json() for c in self.children]
        return out

    @staticmethod
    def from_json(data) -> "TreeDef":
        children = [TreeDef.from_json(c) for c in data.get("children", ())]
        meta = tuple(data["keys"]) if data["kind"] == "dict" else None
        if data["kind"] == "complex":
            meta = _COMPLEX_TYPES.get(data.get("type"))
            if meta is None or len(children) != 2 or any(c.kind != "leaf" for c in children):
                raise TypeError("a complex tree node holds two leaves and a complex type")
        if data["kind"] == "const":
            if type(data.get("value")) is not str:
                raise TypeError("a const tree node holds a str")
            meta = data["value"]
        return TreeDef(data["kind"], children, meta)

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind
                and self.meta == other.meta and self.children == other.children)

    def __hash__(self):
        return hash((self.kind, self.children, self.meta if self.kind != "dict" else tuple(self.meta)))

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind == "const":
            return repr(self.meta)
        if self.kind == "complex":
            return f"{self.meta.__name__}(*, *)"
        inner = ", ".join(map(repr, self.children))
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children))
            return "{" + inner + "}"
        if self.kind == "object":
            return f"{self.meta.cls.__name__}({inner})"
        return f"({inner})" if self.kind != "list" else f"[{inner}]"


# Trees larger or deeper than this are rebuilt by the recursive walk (TreeDef._build): the
# generated expression would be long, and Python's compiler limits nesting.
_BUILDER_MAX_NODES = 512
_BUILDER_MAX_DEPTH = 32


_USED_ONCE = object()       # TreeDef._builder of a tree unflattened once so far (by a walk)


def _make_builder(tree: TreeDef):
    """A function leaves -> the tree: `lambda L: {k0: L[0], k1: (L[1], L[2])}`, with every
    non-literal (dict keys, classes, consts) a name bound to the object, so that any key
    rebuilds as itself."""
    names: dict = {}
    count = [0, 0]              # leaves used, nodes written

    def bind(obj) -> str:
        name = f"_o{len(names)}"
        names[name] = obj
        return name

    def expr(node: TreeDef, depth: int) -> str:
        count[1] += 1
        if count[1] > _BUILDER_MAX_NODES or depth > _BUILDER_MAX_DEPTH:
            raise _TooLarge
        kind = node.kind
        if kind == "leaf":
            count[0] += 1
            return f"L[{count[0] - 1}]"
        if kind == "none":
            return "None"
        if kind == "const":
            return bind(node.meta)
        items = [expr(c, depth + 1) for c in node.children]
        if kind == "tuple":
            return "(" + "".join(i + ", " for i in items) + ")"
        if kind == "list":
            return "[" + ", ".join(items) + "]"
        if kind == "dict":
            return "{" + ", ".join(f"{bind(k)}: {i}" for k, i in zip(node.meta, items)) + "}"
        if kind == "namedtuple":
            return f"{bind(node.meta)}({', '.join(items)})"
        if kind == "complex":
            return f"{bind(build_complex)}({bind(node.meta)}, {items[0]}, {items[1]})"
        return f"{bind(node.meta.rebuild)}([{', '.join(items)}])"       # object

    try:
        body = expr(tree, 0)
    except _TooLarge:
        return lambda leaves: tree._build(iter(leaves))
    return eval(f"lambda L: {body}", names)     # noqa: S307  (built above from our own parts)


class _TooLarge(Exception):
    pass


# ---- complex scalars --------------------------------------------------------------------
# A complex scalar argument is a node of two leaves, its real and imaginary parts (Python
# floats, or NumPy float32/float64 scalars): every leaf stays one 8-byte slot word.
_COMPLEX_TYPES = {"complex": complex, "complex64": np.complex64, "complex128": np.complex128}
_PART_TYPE = {complex: float, np.complex64: np.float32, np.complex128: np.float64}
# While tracing, the parts are tracers: frontend/trace.py's hook builds the complex tracer from them
COMPLEX_BUILDERS: list = []


def build_complex(cls, re, im):
    if COMPLEX_BUILDERS and not (type(re) in (float, np.float32, np.float64)
                                 and type(im) in (float, np.float32, np.float64)):
        return COMPLEX_BUILDERS[0](cls, re, im)
    if cls is complex:
        return complex(float(re), float(im))
    out = np.zeros(1, cls)
    out.view(_PART_TYPE[cls])[:] = (re, im)
    return out[0]


# ---- objects ----------------------------------------------------------------------------
_REGISTRY: dict = {}          # class -> (flatten, unflatten) or None (attribute-based)
_REGISTRY_LOCK = forking.lock(forking.TABLE)


def register_class(cls: type, flatten=None, unflatten=None) -> type:
    """Let compiled functions take (and return) instances of `cls`, taken apart into leaves.

    Without functions: by attributes (`vars(obj)`), as for dataclasses: NumPy arrays and
    lists/tuples/dicts/registered objects among them are children, traced and read afresh on
    every call (a new array assigned to such an attribute inside the function is replayed onto
    the caller's object); every other attribute (numbers, strings, flags) is static: part of
    the signature, keyed by value, so a new value traces again.  With `flatten(obj) ->
    (children, aux)` and `unflatten(aux, children) -> obj` (JAX's convention): the children are
    taken apart further and `aux` (hashable) is static.  Returns cls (usable as a decorator).

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> @fl.register_class
        ... class Layer:
        ...     def __init__(self, w, scale):
        ...         self.w, self.scale = w, scale     # w: traced; scale: static, by value
        >>> apply = fl.compile(lambda layer, x: layer.w @ x * layer.scale)
        >>> apply(Layer(np.eye(2), 3.0), np.ones(2))
        array([3., 3.])
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_class: expected a class, got {cls!r:.60}")
    if (flatten is None) != (unflatten is None):
        raise TypeError("register_class: give both flatten and unflatten, or neither")
    if flatten is not None and not (callable(flatten) and callable(unflatten)):
        raise TypeError("register_class: flatten and unflatten must be callable")
    if flatten is None and not _has_dict(cls):
        raise TypeError(f"register_class: {cls.__name__} instances have no __dict__ (__slots__?): "
                        f"give flatten and unflatten functions")
    with _REGISTRY_LOCK:
        _REGISTRY[cls] = None if flatten is None else (flatten, unflatten)
        _HOW.clear()
    return cls


def register_method_class(cls: type) -> None:
    """The class of a compiled method's `self`: taken apart by attributes (see register_class),
    unless registered otherwise already."""
    if cls not in _REGISTRY and _has_dict(cls):
        with _REGISTRY_LOCK:
            _REGISTRY.setdefault(cls, None)
            _HOW.clear()


def _has_dict(cls) -> bool:
    """Whether instances of cls have a __dict__ (O(1): object_parts asks on every call)."""
    return cls.__dictoffset__ != 0


# Array types of fastlaunch's own beyond np.ndarray (frontend/trace.py adds its Tracer): attributes
# holding them are children too, so an object built inside a traced function returns them.
LEAF_TYPES: set = set()


_STATIC_TYPES = frozenset({bool, int, float, complex, str, bytes, type(None), np.float64,
                           np.float32, np.int64, np.int32, np.bool_})
_CONTAINERS = frozenset({tuple, list, dict})


def _is_child(v) -> bool:
    """Attribute values traced (as leaves or subtrees) rather than keyed by value."""
    t = type(v)
    if t in _STATIC_TYPES:
        return False
    return (t is np.ndarray or t in _CONTAINERS or t in LEAF_TYPES or isinstance(v, np.ndarray)
            or (isinstance(v, tuple) and hasattr(t, "_fields"))
            or t in _REGISTRY or (dataclasses.is_dataclass(v) and not isinstance(v, type))
            or hasattr(t, "__cuda_array_interface__") or getattr(t, "__fl_device__", False))


def static_key(value):
    """What a static argument's value is keyed by: its type as well as its value (1 and 1.0,
    np.float64(2) and 2.0 trace differently), floats by their bits (0.0 and -0.0 differ; every
    NaN of one sign is one key, so a static NaN does not re-trace on every call).  The
    dispatcher keys static arguments by it (_core.encode)."""
    t = type(value)
    if t is float or isinstance(value, np.floating):
        f = float(value)
        if f != f:
            return (t, "nan", bool(np.signbit(f)))
        return (t, struct.pack("<d", f))
    if t is tuple:
        return (t,) + tuple(static_key(v) for v in value)
    if t is frozenset:
        return (t, frozenset(static_key(v) for v in value))
    return (t, value)



def _same_static(a, b) -> bool:
    """Static values as the signature compares them (static_key: type and value; floats by
    their bits, so 0.0 and -0.0 differ and a NaN matches itself)."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is float or isinstance(a, (np.floating, tuple, frozenset)):
        return static_key(a) == static_key(b)
    try:
        return bool(a == b)
    except Exception:         # noqa: BLE001  (a user type's __eq__ may raise)
        return False


class ObjectKey:
    """An object node's static part: its class, which attributes are children, and the value
    of every other one.  Equal keys rebuild equal objects; compared by value."""

    __slots__ = ("cls", "names", "statics", "aux", "custom", "_hash")

    def __init__(self, cls, names=(), statics=(), aux=None, custom=None):
        self.cls, self.names, self.statics, self.aux, self.custom = cls, names, statics, aux, custom
        self._hash = None

    def __eq__(self, other):
        if self is other:
            return True
        if type(other) is not ObjectKey or self.cls is not other.cls or \
                self.names != other.names or self.custom is not other.custom or \
                len(self.statics) != len(other.statics):
            return False
        # asked on every call with an object argument: the attribute's value is most often
        # the very object it was (a flag, a cached float), which decides without a call
        for (k1, v1), (k2, v2) in zip(self.statics, other.statics):
            if k1 is not k2 and k1 != k2 or v1 is not v2 and not _same_static(v1, v2):
                return False
        return self.aux is other.aux or _same_static(self.aux, other.aux)

    def __hash__(self):
        if self._hash is None:
            try:
                self._hash = hash((self.cls, self.names,
                                   tuple((k, static_key(v)) for k, v in self.statics),
                                   self.aux))
            except TypeError:       # an unhashable static value: equality still decides
                self._hash = hash((self.cls, self.names))
        return self._hash

    def rebuild(self, children):
        if self.custom is not None:
            return self.custom[1](self.aux, list(children))
        obj = self.cls.__new__(self.cls)
        d = obj.__dict__
        d.update(self.statics)
        d.update(zip(self.names, children))
        return obj

    def __repr__(self):
        return f"ObjectKey({self.cls.__qualname__}, children={self.names})"


# class -> how object_parts takes its instances apart: a registered (flatten, unflatten)
# pair, None (by attributes), or False (not at all).  Asked on every call with an object
# argument, so cached per class; register_class clears it.
_HOW: dict = {}
_UNKNOWN = object()


def _how(cls):
    how = _REGISTRY.get(cls, False)
    if how is False and dataclasses.is_dataclass(cls) and _has_dict(cls):
        how = None
    _HOW[cls] = how
    return how


def object_parts(obj):
    """(ObjectKey, children) for an object taken apart here, else None."""
    cls = type(obj)
    how = _HOW.get(cls, _UNKNOWN)
    if how is _UNKNOWN:
        how = _how(cls)
    if how is False:
        return None
    if how is not None:
        children, aux = how[0](obj)
        return ObjectKey(cls, (), (), aux, how), list(children)
    names, children, statics = [], [], []
    for k, v in obj.__dict__.items():
        t = type(v)
        if t is np.ndarray or (t not in _STATIC_TYPES and _is_child(v)):
            names.append(k)
            children.append(v)
        else:
            statics.append((k, v))
    return ObjectKey(cls, tuple(names), tuple(statics)), children


# Deeper nesting than this is refused: a container that holds itself would recurse forever.
MAX_DEPTH = 100


class NestingError(TypeError):
    """An argument or result nests containers more than MAX_DEPTH levels deep."""


_PLAIN = frozenset({tuple, list, dict, bool, int, float, complex, str, bytes, type(None)})


def flatten(tree) -> tuple[list, TreeDef]:
    leaves: list = []
    return leaves, _flatten(tree, leaves, 0)


def _flatten(x, leaves, depth) -> TreeDef:
    t = type(x)
    parts = None
    if t not in _PLAIN and not isinstance(x, (np.ndarray, np.generic)):
        parts = object_parts(x)
    if t in (tuple, list, dict) or (isinstance(x, tuple) and hasattr(t, "_fields")) or \
            parts is not None:
        if depth >= MAX_DEPTH:
            raise NestingError(f"containers nested more than {MAX_DEPTH} levels deep (a list, "
                               f"tuple, dict or object that contains itself?)")
        depth += 1
    if parts is not None:
        key, children = parts
        return TreeDef("object", [_flatten(c, leaves, depth) for c in children], key)
    if t is tuple:
        return TreeDef("tuple", [_flatten(c, leaves, depth) for c in x])
    if t is list:
        return TreeDef("list", [_flatten(c, leaves, depth) for c in x])
    if t is dict:
        return TreeDef("dict", [_flatten(v, leaves, depth) for v in x.values()], tuple(x))
    if x is None:
        return TreeDef("none")
    if t is str and depth > 0:
        # a string inside an argument or result (a config dict's "mode": "train") is
        # structure, not data: keyed by value, handed to the function and returned as it is;
        # a str argument itself stays a leaf, refused with the argument's name
        return TreeDef("const", meta=x)
    if isinstance(x, tuple) and hasattr(t, "_fields"):
        return TreeDef("namedtuple", [_flatten(c, leaves, depth) for c in x], t)
    if t in _PART_TYPE:
        part = _PART_TYPE[t]
        leaves += [part(x.real), part(x.imag)]
        return TreeDef("complex", [TreeDef("leaf"), TreeDef("leaf")], t)
    leaves.append(x)
    return TreeDef("leaf")
