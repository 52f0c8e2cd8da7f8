"""Symbolic sizes ("automatic dynamic"): one trace serves every size of a size class.

A *size class* is a signature with its array dims replaced by 0, 1 or "n >= 2" (dtypes, ranks,
C-contiguous host arrays, scalars' types, containers' keys and static arguments as they are).
When a function meets a second size of a class (or at once with `dynamic=True`), `build`
makes a `Template` from the trace at hand (the *base*) and a few probe traces of the same
function at other sizes (`Compiled._trace(sample=True)`: traced, fused, scheduled and
recorded, nothing compiled): each distinct dim >= 2 of the call is a symbol (dims that are
equal share one: an equal-extents relation), moved alone to a probe value, then all together
at check points.

A symbol stays symbolic only if every probe that moves it gives the same kernels (source text
equal: the code reads no extent, so its machine code serves every size), the same program
structure (opcodes, roles, dtypes, constants' bytes, results' layout, runtime checks), and the
same sizes read by Python (`trace.watch_sizes`: a shape, size or length read outside
fastlaunch, such as `range(x.shape[0])` or `if n > 8`, is a value the trace used); otherwise
it is *specialised*: the template holds its value and a call must match it. Every integer of
the program (LAUNCH extents, ALLOC sizes, slots' element ranges, kernels' ranges, results'
shapes) is then fitted as a multilinear polynomial in the symbols with integer coefficients
(exact at the 2^k corners), and must match at two check points (a size that is no such
polynomial, a ceiling division, a clamp, is refused). Anything unexplained leaves the class
static, with the reason in `stats`.

A call of the class at a new size (`instantiate`, from the slow path, no trace and no
compile) evaluates the expressions, checks the relations the trace relied on (equal dims
equal, distinct symbols distinct, specialised dims at their value, every size expression of
the sign it had in the base trace: a slice bound stays within its extent, no launch or
allocation turns negative or empty) and the CPU's schedule regime (each kernel on the side of
the streaming-store threshold its code was built for; thread counts recomputed from the
size), verifies the concrete program with `bytecode.verify` (so an instance cannot address
memory outside its buffers, whatever the template says) and links it with the base's kernels:
an ordinary entry, so later calls at that size are plain replays. A call that breaks a
relation finds no instance and is traced: another entry, never a wrong size.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations

import numpy as np

from . import artifact, bytecode
from .link import link

# A symbolic build traces 2^k + 2 times for k symbols: beyond MAX_SYMBOLS the class stays static
MAX_SYMBOLS = 3
# Templates kept per size class (one per schedule regime, or per pattern of specialised dims)
MAX_TEMPLATES = 4
# Symbolic builds a class may fail (its sizes stay static after that): a build at sizes that
# happen to be equal (n == m) specialises both, a later one may not
MAX_FAILED_BUILDS = 2
_INT = object()          # the placeholder of an integer in a split structure


@dataclass
class Sample:
    """What a probe trace gives (jit.Compiled._trace(sample=True))."""
    program: object
    sources: list
    results: list
    out_tree: object
    int_bounds: dict
    special: list
    effects: bool
    guards: tuple = ()      # basic indexing's guards (trace.watch_sizes): their signs are kept


class Refused(Exception):
    """Why a class (or one symbol of it) cannot be symbolic."""


# ---- size classes ---------------------------------------------------------------------------
def class_key(leaf_objs, keys, statics):
    """The size class of a call's flattened leaves, or None where one is not symbolic."""
    out = []
    for leaf in leaf_objs:
        if type(leaf) is np.ndarray:
            if not leaf.flags.c_contiguous or not leaf.flags.aligned or \
                    not leaf.dtype.isnative:
                return None
            out.append((leaf.dtype.str, tuple(d if d < 2 else -1 for d in leaf.shape)))
        elif type(leaf) in (bool, int, float):
            out.append(type(leaf))
        elif isinstance(leaf, np.generic):
            out.append(leaf.dtype.str)
        else:
            return None
    try:
        key = (tuple(out), tuple(keys), tuple(statics))
        hash(key)
    except TypeError:
        return None
    return key


def class_signature(compiled, call, leaf_objs) -> bytes | None:
    """The call's signature words with every dim of 2 or more as 2: the containers' structure
    (a tuple is not a list), tags and dtypes as the dispatcher encodes them."""
    from .. import _core
    masked = {i: np.empty(tuple(min(d, 2) for d in leaf.shape), leaf.dtype)
              for i, leaf in enumerate(leaf_objs) if type(leaf) is np.ndarray}
    enc = _core.encode(compiled._replace_leaves(call, masked), compiled._static)
    return None if enc is None else enc[0]


def symbols_of(leaf_objs) -> list:
    """[(value, [(leaf, axis), ...])]: each distinct dim >= 2 and where it occurs."""
    found: dict = {}
    for i, leaf in enumerate(leaf_objs):
        if type(leaf) is np.ndarray:
            for ax, d in enumerate(leaf.shape):
                if d >= 2:
                    found.setdefault(d, []).append((i, ax))
    return sorted(found.items(), key=lambda kv: kv[1][0])


# ---- programs as a structure plus integers ----------------------------------------------------
def _split(obj, ints: list):
    if obj is None or isinstance(obj, (bool, np.bool_, enum.Enum, str, bytes, float)):
        return obj
    if isinstance(obj, (int, np.integer)):
        ints.append(int(obj))
        return _INT
    if isinstance(obj, np.ndarray):          # code and argument lists only (consts apart)
        if obj.dtype.kind not in "iu":
            raise Refused("an array in the program's tables")
        ints.extend(int(v) for v in obj.ravel())
        return ("ndarray", obj.dtype.str, obj.size)
    if isinstance(obj, (list, tuple)):
        return (type(obj), tuple(_split(x, ints) for x in obj))
    if isinstance(obj, dict):
        return (dict, tuple((k, _split(v, ints)) for k, v in sorted(obj.items())))
    if dataclasses.is_dataclass(obj):
        return (type(obj), tuple((f.name, _split(getattr(obj, f.name), ints))
                                 for f in dataclasses.fields(obj)))
    raise Refused(f"a {type(obj).__name__} in the program")


def _build(skel, it):
    if skel is _INT:
        return next(it)
    if not isinstance(skel, tuple) or not skel:
        return skel
    head = skel[0]
    if head == "ndarray":
        return np.fromiter((next(it) for _ in range(skel[2])), dtype=np.dtype(skel[1]),
                           count=skel[2])
    if head in (list, tuple):
        return head(_build(x, it) for x in skel[1])
    if head is dict:
        return {k: _build(v, it) for k, v in skel[1]}
    if isinstance(head, type) and dataclasses.is_dataclass(head):
        return head(**{name: _build(v, it) for name, v in skel[1]})
    return skel


def _fold(skel, built, ints: list, at: int, live: set):
    """The skeleton with every subtree that holds no templated integer (positions in
    `live`) replaced by ("K", its built object, how many integers it spans): an instance
    shares those objects with the base and rebuilds only what changes.  Returns (tree, at)."""
    start = at
    if skel is _INT:
        return skel, at + 1
    if not isinstance(skel, tuple) or not skel:
        return skel, at
    head = skel[0]
    if head == "ndarray":
        at += skel[2]
        kids = None
    elif head in (list, tuple):
        kids = []
        for x, b in zip(skel[1], built):
            k, at = _fold(x, b, ints, at, live)
            kids.append(k)
        tree = (head, tuple(kids))
    elif head is dict:
        kids = []
        for (key, v) in skel[1]:
            k, at = _fold(v, built[key], ints, at, live)
            kids.append((key, k))
        tree = (dict, tuple(kids))
    elif isinstance(head, type) and dataclasses.is_dataclass(head):
        kids = []
        for name, v in skel[1]:
            k, at = _fold(v, getattr(built, name), ints, at, live)
            kids.append((name, k))
        tree = (head, tuple(kids))
    else:
        return skel, at
    if not any(p in live for p in range(start, at)):
        return ("K", built, at - start), at
    if kids is None:
        return skel, at
    return tree, at


def _builder(tree):
    """A function (ints, at) -> (object, next position) that builds the structure of a folded
    tree (_fold) with an instance's integers: the tree is walked once, here."""
    if tree is _INT:
        return lambda ints, at: (ints[at], at + 1)
    if not isinstance(tree, tuple) or not tree:
        return lambda ints, at: (tree, at)
    head = tree[0]
    if head == "K":
        obj, n = tree[1], tree[2]
        return lambda ints, at: (obj, at + n)
    if head == "ndarray":
        dt, n = np.dtype(tree[1]), tree[2]
        return lambda ints, at: (np.array(ints[at:at + n], dtype=dt), at + n)
    if head in (list, tuple, dict) or (isinstance(head, type) and
                                       dataclasses.is_dataclass(head)):
        named = head is dict or head not in (list, tuple)
        names = [k for k, _ in tree[1]] if named else None
        kids = [_builder(x) for _, x in tree[1]] if named else [_builder(x) for x in tree[1]]

        def build(ints, at):
            out = []
            for kid in kids:
                v, at = kid(ints, at)
                out.append(v)
            if head is dict:
                return dict(zip(names, out)), at
            if named:
                return head(**dict(zip(names, out))), at
            return head(out), at
        return build
    return lambda ints, at: (tree, at)


def _parts(sample: Sample, cpu: bool):
    """(skeleton, ints, consts) of a sample: kernel names and the CPU's thread counts left
    out (names are the base's; threads follow from the size at each instance)."""
    p = sample.program
    kernels = [dataclasses.replace(k, name="", params=tuple(k.params[:1]) if cpu else k.params)
               for k in p.kernels]
    consts = [(slot, arr.dtype.str, arr.shape, arr.tobytes()) for slot, arr in p.consts]
    body = dataclasses.replace(p, kernels=kernels, consts=[])
    ints: list = []
    skel = _split((body, sample.results, sample.int_bounds, tuple(sample.guards)), ints)
    return skel, ints, (consts, sample.sources, sample.out_tree, sample.special, sample.effects)


# ---- multilinear fits -----------------------------------------------------------------------
def _fit(values: dict, syms: list, base: list, alt: list) -> list:
    """Monomials [(coefficient, symbol indices)] of the multilinear polynomial through
    values[corner] (corner: frozenset of the symbols at alt, the rest at base)."""
    poly: dict = {}
    for r in range(len(syms) + 1):
        for t in combinations(syms, r):
            c = sum((-1) ** (len(t) - len(u)) * values[frozenset(u)]
                    for k in range(len(t) + 1) for u in combinations(t, k))
            if c == 0:
                continue
            scale = Fraction(c)
            for j in t:
                scale /= alt[j] - base[j]
            # prod (x_j - b_j) over t, expanded
            for k in range(len(t) + 1):
                for u in combinations(t, k):
                    coef = scale
                    for j in t:
                        if j not in u:
                            coef *= -base[j]
                    poly[u] = poly.get(u, 0) + coef
    out = []
    for mono, coef in poly.items():
        if coef == 0:
            continue
        if coef.denominator != 1:
            raise Refused("a size that is not an integer polynomial of the sizes")
        out.append((int(coef), mono))
    return out


def _eval(poly: list, x: list) -> int:
    total = 0
    for coef, mono in poly:
        term = coef
        for j in mono:
            term *= x[j]
        total += term
    return total


# ---- templates -------------------------------------------------------------------------------
@dataclass
class Template:
    key: tuple
    where: list                 # per symbol: [(leaf, axis)] sharing it
    fixed: dict                 # (leaf, axis) -> value: specialised dims
    skeleton: object            # _builder of the folded tree: what does not change is the base's
    base_ints: list
    exprs: list                 # (position, polynomial, sign of the base value)
    consts: list
    base: object                # the base entry (its info: the base artifact)
    stream_side: list           # CPU: per kernel, whether it moved more than STREAM_BYTES
    description: str
    guards: tuple = ()          # the base trace's indexing guards (their signs are kept)
    instances: int = 0
    refusals: dict = field(default_factory=dict)

    def values(self, leaf_objs):
        """The symbols' values in this call, or None where a relation does not hold."""
        for i, v in self.base.info.specialized_values.items():  # scalars the trace used as values
            if type(leaf_objs[i]) is not type(v) or leaf_objs[i] != v:
                return None
        for (i, ax), v in self.fixed.items():
            if leaf_objs[i].shape[ax] != v:
                return None
        x = []
        for places in self.where:
            i, ax = places[0]
            v = leaf_objs[i].shape[ax]
            for i2, ax2 in places[1:]:
                if leaf_objs[i2].shape[ax2] != v:
                    return None
            x.append(v)
        if len(set(x)) != len(x) or set(x) & set(self.fixed.values()):
            return None
        return x


def _moved(k) -> int:
    return sum((hi - lo + 1) * np.dtype(dt).itemsize
               for (lo, hi), kind, dt in zip(k.arg_ranges, k.arg_kinds, k.arg_dtypes)
               if kind == "buffer" and hi >= lo)


def _stream_bytes(backend):
    if backend.name != "cpu":
        return None
    from ..backends import cpu_schedule
    return cpu_schedule.STREAM_BYTES


def build(compiled, call, enc, has_kwargs: bool, base_entry, base_watch, key):
    """A Template for the class of `call` (key: the dispatcher's class key, class_key and
    class_signature, which a shipped template's receiver looks up), whose trace gave
    `base_entry` (base_watch: the trace.watch_sizes of that trace: the sizes it read in
    Python, its indexing guards), or raise Refused saying why not."""
    from ..frontend.trace import watch_sizes
    _, leaf_objs, keys, statics = enc
    if base_entry.post is not None:
        raise Refused("the function changes its container arguments")
    syms = symbols_of(leaf_objs)
    if not syms:
        raise Refused("no dim of 2 or more")
    if len(syms) > MAX_SYMBOLS:
        raise Refused(f"more than {MAX_SYMBOLS} distinct sizes")
    backend = compiled.backend
    cpu = backend.name == "cpu"
    base_reads, base_guards = base_watch.reads, tuple(base_watch.guards)
    base_parts = _parts(_base_sample(base_entry.info, backend, base_guards), cpu)
    base_vals = [v for v, _ in syms]
    used = set(base_vals)

    def probe_value(j, step):
        v = base_vals[j] + step
        while v in used:
            v += 1
        used.add(v)
        return v

    def probe(x):
        """The sample at symbol values x (None for a symbol: its base value)."""
        objs = list(leaf_objs)
        for j, (_, places) in enumerate(syms):
            if x[j] is None:
                continue
            for i, _ in {p[0]: 0 for p in places}.items():
                shape = list(objs[i].shape)
                for i2, ax in places:
                    if i2 == i:
                        shape[ax] = x[j]
                objs[i] = np.empty(shape, objs[i].dtype)
        fake = _replace_leaves(compiled, call, objs)
        fenc = (enc[0], objs, keys, statics)
        with watch_sizes() as w:
            s = compiled._trace(fake, fenc, has_kwargs, install=False, sample=True)
        return dataclasses.replace(s, guards=tuple(w.guards)), w.reads

    def compare(s, reads):
        """(the sample's integers, None) where it has the base's structure, else
        (None, why not)."""
        if reads != base_reads:
            return None, "Python reads it (a shape, size or len() used as a value)"
        parts = _parts(s, cpu)
        if parts[2][1] != base_parts[2][1]:
            return None, "the kernels' code depends on it"
        if parts[0] != base_parts[0] or len(parts[1]) != len(base_parts[1]) or \
                parts[2] != base_parts[2]:
            return None, "the program's structure or constants depend on it"
        return parts[1], None

    def same(s, reads):
        return compare(s, reads)[0]

    # each symbol alone: symbolic or specialised
    alt = [probe_value(j, 7 + 2 * j) for j in range(len(syms))]
    live, fixed, why = [], {}, []
    corner: dict = {frozenset(): base_parts[1]}
    for j, (v, places) in enumerate(syms):
        x: list = [None] * len(syms)
        x[j] = alt[j]
        try:
            ints, detail = compare(*probe(x))
        except Exception as err:            # noqa: BLE001 - any failure specialises the size
            ints, detail = None, f"the trace fails at another size ({type(err).__name__})"
        if ints is None:
            for p in places:
                fixed[p] = v
            why.append(f"{v} (leaf {places[0][0]} dim {places[0][1]}): {detail}")
        else:
            live.append(j)
            corner[frozenset([j])] = ints
    if not live:
        raise Refused("every size is specialised: " + "; ".join(why))
    # the other corners of the live symbols, then two check points
    for r in range(2, len(live) + 1):
        for t in combinations(live, r):
            x = [alt[j] if j in t else None for j in range(len(syms))]
            ints = same(*probe(x))
            if ints is None:
                raise Refused("the sizes interact (a probe with several sizes moved differs)")
            corner[frozenset(t)] = ints
    positions = [p for p in range(len(base_parts[1]))
                 if any(c[p] != base_parts[1][p] for c in corner.values())]
    exprs = []
    for p in positions:
        poly = _fit({c: v[p] for c, v in corner.items()}, live, base_vals, alt)
        exprs.append((p, poly, (base_parts[1][p] > 0) - (base_parts[1][p] < 0)))
    for step in (61, 389):
        xs = [probe_value(j, step + 3 * j) if j in live else None for j in range(len(syms))]
        ints = same(*probe(xs))
        if ints is None:
            raise Refused("a check point's program differs")
        full = [xs[j] if xs[j] is not None else base_vals[j] for j in range(len(syms))]
        for p, poly, _ in exprs:
            if _eval(poly, full) != ints[p]:
                raise Refused("a size that no size expression explains (a ceiling division, "
                              "a clamp)")
        for p in range(len(ints)):
            if p not in positions and ints[p] != base_parts[1][p]:
                raise Refused("a size that changes only away from the probes")
    where = [places for j, (_, places) in enumerate(syms) if j in live]
    names = ", ".join(f"n{k} = leaf {pl[0][0]} dim {pl[0][1]}" + (
        f" (= {', '.join(f'leaf {i} dim {a}' for i, a in pl[1:])})" if len(pl) > 1 else "")
        for k, pl in enumerate(where))
    desc = f"symbolic sizes {names}"
    if why:
        desc += "; specialised: " + "; ".join(why)
    # expressions are over the live symbols only, renumbered 0..
    renum = {j: k for k, j in enumerate(live)}
    exprs = [(p, [(c, tuple(renum[j] for j in mono)) for c, mono in poly], sign)
             for p, poly, sign in exprs]
    return _assemble(backend, key, where, fixed, exprs, base_entry, base_parts, desc,
                     base_guards)


def _assemble(backend, key, where, fixed, exprs, base_entry, base_parts, desc,
              guards: tuple) -> Template:
    """The Template of a base entry and its fitted size expressions: the program's
    unchanging parts folded once (an instance rebuilds only what its sizes change)."""
    base_prog = base_entry.info.program
    stream = _stream_bytes(backend)
    sides = [(_moved(k) > stream) if stream is not None else False for k in base_prog.kernels]
    built = _build(base_parts[0], iter(base_parts[1]))
    tree, _ = _fold(base_parts[0], built, base_parts[1], 0, {p for p, _, _ in exprs})
    return Template(key, where, fixed, _builder(tree), list(base_parts[1]), exprs,
                    base_prog.consts, base_entry, sides, desc, guards)


def _base_sample(art, backend, guards: tuple) -> Sample:
    return Sample(art.program, [backend.source(k) for k in art.plan.compiled_kernels()],
                  list(art.results), art.out_tree, dict(art.int_bounds),
                  sorted(art.specialized_values), False, guards)


# ---- shipped templates (Compiled pickled with its programs) ---------------------------------
def shipped(template: Template) -> dict:
    """What a template's receiver needs besides its base entry's program (which travels as
    saved-program bytes): plain data, checked again by `restore`."""
    return {"key": template.key, "where": [list(pl) for pl in template.where],
            "fixed": dict(template.fixed), "exprs": list(template.exprs),
            "base_ints": list(template.base_ints), "guards": list(template.guards),
            "description": template.description}


def _int(v) -> bool:
    return type(v) is int


def restore(compiled, base_entry, record) -> Template:
    """A shipped template over `base_entry` (the receiver's entry of the shipped base
    program), or raise Refused: the base program split here must give the sender's integers,
    so that every size expression addresses the same place; instances are verified as any."""
    try:
        key, where, fixed, exprs = (record["key"], record["where"], record["fixed"],
                                    record["exprs"])
        base_ints, desc = record["base_ints"], record["description"]
        guards = record["guards"]
    except (TypeError, KeyError) as err:
        raise Refused(f"a shipped template without {err}") from None
    nsym = len(where)
    ok = (isinstance(where, list) and 0 < nsym <= MAX_SYMBOLS and isinstance(desc, str) and
          all(isinstance(pl, list) and pl and all(
              isinstance(p, tuple) and len(p) == 2 and all(map(_int, p)) for p in pl)
              for pl in where) and
          isinstance(fixed, dict) and all(
              isinstance(k, tuple) and len(k) == 2 and all(map(_int, k)) and _int(v)
              for k, v in fixed.items()) and
          isinstance(exprs, list) and all(
              isinstance(e, tuple) and len(e) == 3 and _int(e[0]) and e[2] in (-1, 0, 1) and
              isinstance(e[1], list) and all(
                  isinstance(m, tuple) and len(m) == 2 and _int(m[0]) and
                  isinstance(m[1], tuple) and all(_int(j) and 0 <= j < nsym for j in m[1])
                  for m in e[1])
              for e in exprs))
    if not ok or not isinstance(guards, list) or not all(map(_int, guards)):
        raise Refused("a shipped template of the wrong form")
    backend = compiled.backend
    base_parts = _parts(_base_sample(base_entry.info, backend, tuple(guards)),
                        backend.name == "cpu")
    if base_parts[1] != base_ints:
        raise Refused("a shipped template whose base program differs here")
    if any(not 0 <= p < len(base_ints) for p, _, _ in exprs):
        raise Refused("a shipped template's size expression outside its program")
    return _assemble(backend, key, [[tuple(p) for p in pl] for pl in where], dict(fixed),
                     exprs, base_entry, base_parts, desc, tuple(guards))


def _replace_leaves(compiled, call, objs):
    return compiled._replace_leaves(call, dict(enumerate(objs)))


def instantiate(compiled, template: Template, enc):
    """An entry of `template` for this call's sizes, or None where a relation does not hold
    (the caller then traces). No trace, no compile: the base's kernels, the program's sizes
    evaluated, verified and linked."""
    sig, leaf_objs, keys, statics = enc
    x = template.values(leaf_objs)
    if x is None:
        return None
    ints = list(template.base_ints)
    for p, poly, sign in template.exprs:
        v = _eval(poly, x)
        if (v > 0) - (v < 0) != sign:
            return None                      # a bound crossed: another trace decides
        ints[p] = v
    (body, results, int_bounds, _guards), _ = template.skeleton(ints, 0)
    base = template.base
    backend = compiled.backend
    base_prog = base.info.program
    stream = _stream_bytes(backend)
    kernels = []
    for k, old, side in zip(body.kernels, base_prog.kernels, template.stream_side):
        params = old.params
        if stream is not None:
            if (_moved(k) > stream) != side:
                return None                  # the static schedule would pick other code
            from ..backends.cpu_schedule import launch_threads
            params = (k.params[0], launch_threads(k.launch_size, k.params[0]))
        kernels.append(dataclasses.replace(k, name=old.name, params=params))
    program = dataclasses.replace(body, kernels=kernels, consts=template.consts)
    try:
        bytecode.verify(program, backend.memory.kernel_space)
    except bytecode.VerifyError as err:
        template.refusals[str(err)[:200]] = template.refusals.get(str(err)[:200], 0) + 1
        return None
    # (the artifact's leaves stay the base's: they only word later traces' reasons)
    art = artifact.from_instance(base.info, program, results, int_bounds, template,
                                 signature=sig, keys=keys, statics=statics)
    entry = link(art, backend)
    template.instances += 1
    return entry
