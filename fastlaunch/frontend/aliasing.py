"""Arguments that overlap in memory: the geometry behind `Compiled`'s aliased calls.

When an argument updated in place overlaps another argument (`f(x, x)`, `f(x[1:], x[:-1])`,
`f(M.T, M)`), jit.py traces a program of its own for that overlap.  This module finds the
overlapping groups among a call's leaves, says whether each is one view passed several times
or a group of views over one span of memory, and expresses each member as a view of that
span (`MemberView`) that a tracer can be written through.  Pure NumPy geometry: it knows
nothing of tracing, programs or backends.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def stand_in(x: np.ndarray) -> np.ndarray:
    """An array with x's dtype, shape and strides over memory of its own (never written)."""
    lo = sum(min(0, (n - 1) * st) for n, st in zip(x.shape, x.strides) if n)
    hi = sum(max(0, (n - 1) * st) for n, st in zip(x.shape, x.strides) if n) + x.itemsize
    if x.size == 0:
        return np.empty_like(x)
    base = np.empty((hi - lo + x.itemsize - 1) // x.itemsize, x.dtype)
    return np.lib.stride_tricks.as_strided(base[(-lo) // x.itemsize:], x.shape, x.strides)



def overlap_groups(leaves, spans: bool = False) -> list:
    """The array leaves that overlap in memory, in groups (transitively): lists of leaf
    positions, each in order, each of two or more.  spans: leaves whose byte spans meet
    overlap too (x[::2] and x[1::2]): a crossing backend copies each span whole."""
    arrays = [(k, x) for k, x in enumerate(leaves) if isinstance(x, np.ndarray) and x.size]
    parent = {k: k for k, _ in arrays}

    def root(k):
        while parent[k] != k:
            k = parent[k]
        return k
    for a, (k, x) in enumerate(arrays):
        for k2, y in arrays[a + 1:]:
            if root(k) != root(k2) and (np.shares_memory(x, y) or
                                        spans and spans_meet(x, y)):
                parent[max(root(k), root(k2))] = min(root(k), root(k2))
    groups: dict = {}
    for k, _ in arrays:
        groups.setdefault(root(k), []).append(k)
    return [g for g in groups.values() if len(g) > 1]


def spans_meet(x: np.ndarray, y: np.ndarray) -> bool:
    bounds = getattr(np.lib, "array_utils", np).byte_bounds
    (a0, a1), (b0, b1) = bounds(x), bounds(y)
    return a0 < b1 and b0 < a1


@dataclass(frozen=True)
class MemberView:
    """One member of an overlapping group, as a view of the group's 1-D span (`base`):
    `offset`, `shape` and `strides` in elements of base.  `of(t)` builds it from base's
    tracer out of the views the tracer writes through: the member's dims of size > 1, sorted
    by |stride| (s1 > s2 > ... > sk, each a multiple of the next), are a slice of base with
    step sk from `offset - sum(cuts[j] * s[j+1])`, reshaped (C order) to (n1, s1/s2, ...,
    s(k-1)/sk) and cut to [cuts[j], cuts[j] + n(j+1)) along the inner dims; then put back in
    the member's order, reversed where its stride is negative, with its size-1 dims."""
    offset: int
    shape: tuple
    strides: tuple
    cuts: tuple = ()

    def _plan(self):
        dims = [(s, n, d) for d, (n, s) in enumerate(zip(self.shape, self.strides)) if n > 1]
        start = self.offset + sum((n - 1) * s for s, n, _ in dims if s < 0)
        flips = {d for s, _, d in dims if s < 0}
        walk = sorted(((abs(s), n, d) for s, n, d in dims), key=lambda x: -x[0])
        return start, flips, walk

    def chunk(self, room: int):
        """(cuts, first, end): the inner-dim cuts that start the reshaped slice as early as
        `room` elements before base allows (so that it reaches as little past the member's
        last element as it can), and the slice's element range [first, end) in base; None
        when the member is no such view (a stride of 0, or dims that do not nest: elements
        of its own that overlap, or rows that interleave)."""
        start, _, walk = self._plan()
        if not walk:
            return (), start, start + 1
        if any(s == 0 for s, _, _ in walk):
            return None
        for (s1, _, _), (s2, n2, _) in zip(walk, walk[1:]):
            if s1 % s2 or s1 < n2 * s2:
                return None
        cuts, left = [], start + room
        for (s1, _, _), (s2, n2, _) in zip(walk, walk[1:]):
            c = min((s1 - n2 * s2) // s2, left // s2)
            cuts.append(c)
            left -= c * s2
        first = start - sum(c * s2 for c, (s2, _, _) in zip(cuts, walk[1:]))
        return tuple(cuts), first, first + walk[0][1] * walk[0][0] - walk[-1][0] + 1

    def of(self, base):
        start, flips, walk = self._plan()
        if not walk:
            return base[start:start + 1].reshape(self.shape)
        s1, n1, _ = walk[0]
        inner = walk[-1][0]
        first = start - sum(c * s2 for c, (s2, _, _) in zip(self.cuts, walk[1:]))
        v = base[first:first + n1 * s1:inner]
        if len(walk) > 1:
            v = v.reshape((n1,) + tuple(a // b for (a, _, _), (b, _, _) in zip(walk, walk[1:])))
            v = v[(slice(None),) + tuple(slice(c, c + n) for c, (_, n, _) in
                                         zip(self.cuts, walk[1:]))]
            order = [d for _, _, d in walk]
            v = v.transpose(sorted(range(len(order)), key=lambda i: order[i]))
        if flips:
            v = v[tuple(slice(None, None, -1) if d in flips else slice(None)
                        for d in sorted(d for _, _, d in walk))]
        return v.reshape(self.shape)


def _owner_bounds(x: np.ndarray):
    """The byte range of the memory x is a view of, where it is known to be one block (the
    deepest ndarray in its .base chain, if contiguous); else None."""
    while isinstance(x.base, np.ndarray):
        x = x.base
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        return None
    bounds = getattr(np.lib, "array_utils", np).byte_bounds
    return bounds(x)


def group_layout(xs: list):
    """(span, members) for a group of overlapping arrays: `span` a 1-D view of the memory
    they cover, `members` each one's MemberView over it; or a string saying why there is
    none.  The span is the range the arrays touch, widened where a member's reshaped slice
    needs memory around it (a block of columns reads whole rows): only inside the memory of
    the array they come from."""
    dt = xs[0].dtype
    if any(x.dtype != dt for x in xs):
        return ("they have different dtypes (" + ", ".join(str(x.dtype) for x in xs) +
                "), so one element of one is not one element of the other")
    isz = dt.itemsize
    bounds = []
    for x in xs:
        ptr = x.__array_interface__["data"][0]
        lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides))
        hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides)) + isz
        bounds.append((ptr, lo, hi))
    low = min(lo for _, lo, _ in bounds)
    high = max(hi for _, _, hi in bounds)
    members = []
    for x, (ptr, _, _) in zip(xs, bounds):
        steps = tuple(s if n > 1 else 0 for n, s in zip(x.shape, x.strides))
        if (ptr - low) % isz or any(s % isz for s in steps):
            return ("their offsets or strides are not whole elements of " + str(dt) +
                    " apart (views made with .view() or as_strided)")
        members.append(MemberView((ptr - low) // isz, x.shape, tuple(s // isz for s in steps)))
    owner = _owner_bounds(xs[0])
    room = (low - owner[0]) // isz if owner is not None and owner[0] <= low else 0
    chunks = [m.chunk(room) for m in members]
    if None in chunks:
        return ("one of them is a view whose own elements overlap or interleave (a stride of "
                "0 or an as_strided window), which fastlaunch cannot write through")
    first = min(0, min(f for _, f, _ in chunks))             # elements before `low`
    end = max((high - low) // isz, max(e for _, _, e in chunks))
    if low + end * isz > high and (owner is None or low + end * isz > owner[1]):
        return ("the views' rows cannot be reached inside the memory of the array they "
                "come from")
    members = [MemberView(m.offset - first, m.shape, m.strides, c)
               for m, (c, _, _) in zip(members, chunks)]
    # the span starts where the lowest member starts once its negative strides are reversed
    x = min(zip(xs, bounds), key=lambda t: t[1][1])[0]
    x = x[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in x.strides)]
    if first:
        # earlier memory of the owner: a view of it from the owner's own start
        o = x
        while isinstance(o.base, np.ndarray):
            o = o.base
        o = o.reshape(-1, order="A").view(np.uint8)
        at = low + first * isz - owner[0]
        o = o[at:at + (end - first) * isz]
        span = o.view(dt) if o.flags.writeable == x.flags.writeable else \
            np.lib.stride_tricks.as_strided(o.view(dt), writeable=False)
        return span, members
    span = np.lib.stride_tricks.as_strided(x, (end - first,), (isz,),
                                           writeable=x.flags.writeable)
    return span, members


def same_view(x: np.ndarray, y: np.ndarray) -> bool:
    return (x.__array_interface__["data"][0] == y.__array_interface__["data"][0]
            and x.shape == y.shape and x.strides == y.strides and x.dtype == y.dtype)


@dataclass
class AliasPlan:
    """How a call whose leaves overlap is traced: `aliases` {leaf: the leaf whose storage it
    shares} for the same view passed again; `views` {member leaf: (base leaf, MemberView)} and
    `substitute` {base leaf: the 1-D span array passed in its place} for other groups;
    `layout` the groups' layouts (part of the program's key); `refused` [(leaves, why)] for
    groups that cannot be expressed so."""
    aliases: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)
    substitute: dict = field(default_factory=dict)
    layout: list = field(default_factory=list)
    refused: list = field(default_factory=list)


def plan(leaves, spans: bool = False) -> AliasPlan:
    """The AliasPlan of a call's flattened leaves (spans: as overlap_groups takes it)."""
    out = AliasPlan()
    for group in overlap_groups(leaves, spans=spans):
        first = leaves[group[0]]
        if all(same_view(first, leaves[k]) for k in group[1:]):
            for k in group[1:]:
                out.aliases[k] = group[0]
            continue
        found = group_layout([leaves[k] for k in group])
        if isinstance(found, str):
            out.refused.append((group, found))
            continue
        span, members = found
        out.substitute[group[0]] = span
        for k, m in zip(group, members):
            out.views[k] = (group[0], m)
        out.layout.append((tuple(group), span.shape[0], tuple(members)))
    return out


def self_overlapping(arr: np.ndarray) -> bool:
    """Whether two elements of `arr` may share memory: false when, taking the axes by
    increasing |stride|, each stride steps past everything the smaller axes reach (the
    layout of every array NumPy allocates, and of its basic-indexing views).  An empty
    array has no elements to share (NumPy gives some, copies of empty ones, zero strides)."""
    if arr.size == 0:
        return False
    reach = 0
    for n, st in sorted(((n, abs(st)) for n, st in zip(arr.shape, arr.strides) if n > 1),
                        key=lambda t: t[1]):
        if st < reach + arr.itemsize:
            return True
        reach += st * (n - 1)
    return False
