"""Nested tuples, lists and dicts of leaves: flattening for arguments and results."""
from __future__ import annotations


class TreeDef:
    """The shape of a nested container: rebuilds it from a flat list of leaves."""

    __slots__ = ("kind", "children", "meta")

    def __init__(self, kind: str, children=(), meta=None):
        self.kind = kind            # leaf | none | const | tuple | list | dict | namedtuple
        self.children = tuple(children)
        self.meta = meta            # dict keys, the namedtuple class, or a const's str

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves):
        it = iter(leaves)
        out = self._build(it)
        return out

    def _build(self, it):
        if self.kind == "leaf":
            return next(it)
        if self.kind == "none":
            return None
        if self.kind == "const":
            return self.meta
        items = [c._build(it) for c in self.children]
        if self.kind == "tuple":
            return tuple(items)
        if self.kind == "list":
            return items
        if self.kind == "namedtuple":
            return self.meta(*items)
        return dict(zip(self.meta, items))

    def to_json(self):
        """A JSON-able description (saved programs); dict keys must be str, int or float."""
        out = {"kind": self.kind}
        if self.kind == "namedtuple":
            raise TypeError("a saved program cannot return a namedtuple; return a tuple or dict")
        if self.kind == "dict":
            if not all(type(k) in (str, int, float) for k in self.meta):
                raise TypeError("a saved program's result dicts need str, int or float keys")
            out["keys"] = list(self.meta)
        if self.kind == "const":
            out["value"] = self.meta
        if self.children:
            out["children"] = [c.to_json() for c in self.children]
        return out

    @staticmethod
    def from_json(data) -> "TreeDef":
        children = [TreeDef.from_json(c) for c in data.get("children", ())]
        meta = tuple(data["keys"]) if data["kind"] == "dict" else None
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
        inner = ", ".join(map(repr, self.children))
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children))
            return "{" + inner + "}"
        return f"({inner})" if self.kind != "list" else f"[{inner}]"


# Deeper nesting than this is refused: a container that holds itself would recurse forever.
MAX_DEPTH = 100


class NestingError(TypeError):
    """An argument or result nests containers more than MAX_DEPTH levels deep."""


def flatten(tree) -> tuple[list, TreeDef]:
    leaves: list = []
    return leaves, _flatten(tree, leaves, 0)


def _flatten(x, leaves, depth) -> TreeDef:
    t = type(x)
    if t in (tuple, list, dict) or (isinstance(x, tuple) and hasattr(t, "_fields")):
        if depth >= MAX_DEPTH:
            raise NestingError(f"containers nested more than {MAX_DEPTH} levels deep (a list, "
                               f"tuple or dict that contains itself?)")
        depth += 1
    if t is tuple:
        return TreeDef("tuple", [_flatten(c, leaves, depth) for c in x])
    if t is list:
        return TreeDef("list", [_flatten(c, leaves, depth) for c in x])
    if t is dict:
        return TreeDef("dict", [_flatten(v, leaves, depth) for v in x.values()], tuple(x))
    if x is None:
        return TreeDef("none")
    if t is str:
        # a string in an argument or result (a config dict's "mode": "train") is structure,
        # not data: keyed by value, handed to the function and returned as it is
        return TreeDef("const", meta=x)
    if isinstance(x, tuple) and hasattr(t, "_fields"):
        return TreeDef("namedtuple", [_flatten(c, leaves, depth) for c in x], t)
    leaves.append(x)
    return TreeDef("leaf")
