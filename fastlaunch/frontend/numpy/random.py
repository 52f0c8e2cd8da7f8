"""Random numbers drawn inside a traced function: fresh on every call, from the kernels.

NumPy code draws with `np.random.<fn>(...)` (the legacy global generator), a Generator made
inside the function (`np.random.default_rng()`), or a Generator passed as an argument.
Evaluated at trace time, each would hand every later call the same "random" numbers.  While a
thread traces, these become RANDOM nodes of the graph (ir.Op.RANDOM): counter-based Philox
numbers computed by the kernels from a 64-bit key that changes on every call (the executable
draws it, or, for a Generator argument, it is drawn from that Generator at each call).

The streams are not NumPy's: the same seed gives other numbers than NumPy would, with the
same distributions (tests/jit/test_random.py checks moments and Kolmogorov-Smirnov).
`np.random.default_rng(seed)` with a fixed seed inside the function gives the same numbers on
every call, as in NumPy, so it is left to NumPy (a constant).
"""
from __future__ import annotations

import math
import operator

import numpy as np

from . import common, indexing, registry, sorting
from ...ir import ops
from ...errors import TracingError
from ..interception import Interception
from ..trace import Tracer, current_graph, tracing

_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


def _shape(size) -> tuple | None:
    if size is None:
        return None
    if isinstance(size, Tracer):
        raise TracingError("a random draw's size must be a Python int or tuple, not a traced "
                           "value")
    return (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)


def _traced(x) -> bool:
    from .trace_buffers import _any_traced
    return _any_traced(x)


def _result_shape(size, *params) -> tuple:
    """NumPy's: `size`, or the broadcast shape of the distribution's parameters."""
    shape = _shape(size)
    if shape is not None:
        return shape
    return np.broadcast_shapes(*(np.shape(p) if not isinstance(p, Tracer) else p.shape
                                 for p in params)) if params else ()


class TracedGenerator:
    """A numpy.random.Generator inside a traced function.  `key`: the 0-d uint64 node of the
    call's random key."""

    def __init__(self, key_node):
        self._key = key_node

    def _draw(self, dist: str, shape: tuple, dtype) -> Tracer:
        g = current_graph()
        node = ops.random(g, self._key, dist, shape, np.dtype(dtype))
        return registry.wrap(node, scalar=len(shape) == 0)

    # ---- Generator methods ---------------------------------------------------------------
    def random(self, size=None, dtype=np.float64, out=None):
        dt = np.dtype(dtype)
        if dt not in _FLOATS:
            raise TypeError(f"Unsupported dtype {dt} for random")
        return _into(out, self._draw("uniform", _shape(size) or (), dt), "random")

    def uniform(self, low=0.0, high=1.0, size=None):
        u = self._draw("uniform", _result_shape(size, low, high), np.float64)
        return low + (np.subtract(high, low)) * u

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        dt = np.dtype(dtype)
        if dt not in _FLOATS:
            raise TypeError(f"Unsupported dtype {dt} for standard_normal")
        return _into(out, self._draw("normal", _shape(size) or (), dt), "standard_normal")

    def normal(self, loc=0.0, scale=1.0, size=None):
        z = self._draw("normal", _result_shape(size, loc, scale), np.float64)
        return loc + np.multiply(scale, z)

    def exponential(self, scale=1.0, size=None):
        u = self._draw("uniform", _result_shape(size, scale), np.float64)
        return np.multiply(scale, -np.log1p(-u))

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        if high is None:
            low, high = 0, low
        dt = np.dtype(dtype)
        if dt.kind not in "iu":
            raise TypeError(f"Unsupported dtype {dt} for integers")
        shape = _result_shape(size, low, high)
        if not isinstance(low, Tracer) and not isinstance(high, Tracer):
            lo, hi = np.asarray(low), np.asarray(high) + (1 if endpoint else 0)
            if np.any(hi <= lo):
                raise ValueError("low >= high" if not endpoint else "low > high")
        bits = self._draw("u64", shape, np.uint64)
        span = np.subtract(high, low, dtype=np.int64) + (1 if endpoint else 0)
        # bits mod span: a bias of at most span / 2**64 (documented in the README)
        offset = np.remainder(bits, np.asarray(span).astype(np.uint64) if not isinstance(
            span, Tracer) else span.astype(np.uint64))
        return (np.add(offset.astype(np.int64), low, dtype=np.int64)).astype(dt)

    def choice(self, a, size=None, replace=True, p=None, axis=0, shuffle=True, *,
               _legacy=False):
        """Draws from a population: an int n (arange(n)) or the entries of an array along
        `axis`, with replacement, uniformly (integers below) or with probabilities p (the
        inverse of their cumulative sum at a uniform number, as NumPy's legacy choice)."""
        if not replace:
            raise TracingError("choice(..., replace=False) inside a traced function is not "
                               "supported by fastlaunch (a permutation); draw with "
                               "replacement, or pass the choice in as an argument")
        if np.ndim(a) == 0 and not isinstance(a, Tracer):
            pop = None
            n = operator.index(a)
            if n <= 0 and _shape(size) != (0,) * len(_shape(size) or (1,)):
                raise ValueError("a must be a positive integer unless no samples are taken")
        else:
            pop = common._as_tracer(a) if (isinstance(a, Tracer) or _traced(a)) \
                else np.array(a)
            if pop.ndim == 0:
                raise ValueError("a must be a sequence or an integer, not a 0-d array")
            if _legacy and pop.ndim != 1:
                raise ValueError("a must be 1-dimensional")
            axis = common._axis(axis, pop.ndim)
            n = pop.shape[axis]
            if n == 0 and math.prod(_shape(size) or ()) != 0:
                raise ValueError("a cannot be empty unless no samples are taken")
        shape = _shape(size) or ()
        if p is None:
            idx = self.integers(0, max(n, 1), size=shape)
        else:
            idx = self._inverse_cdf(p, n, shape)
        if pop is None:
            return idx
        if isinstance(pop, np.ndarray):
            pop = common._as_tracer(pop)
        out = indexing.take(pop, idx, axis=axis)
        return out

    def _inverse_cdf(self, p, n, shape):
        traced = isinstance(p, Tracer) or _traced(p)
        pt = common._as_tracer(p).astype(np.float64) if traced else \
            np.asarray(p, dtype=np.float64)
        if pt.ndim != 1:
            raise ValueError("'p' must be 1-dimensional")
        if pt.shape[0] != n:
            raise ValueError("'a' and 'p' must have same size")
        pdt = p.dtype if traced else np.asarray(p).dtype
        atol = np.sqrt(np.finfo(np.float64).eps)     # NumPy's tolerance for the sum
        if pdt.kind == "f":
            atol = max(atol, np.sqrt(np.finfo(pdt).eps))
        total = np.sum(pt)
        common.require(np.logical_not(np.isnan(total)), ValueError,
                            "probabilities contain NaN")
        common.require(np.logical_not(np.any(pt < 0)), ValueError,
                            "probabilities are not non-negative")
        common.require(np.abs(total - 1.0) <= atol, ValueError,
                            "probabilities do not sum to 1")
        cdf = np.cumsum(common._as_tracer(pt))
        cdf = cdf / cdf[-1]
        u = self.random(shape)
        idx = sorting.searchsorted(cdf, u, side="right")
        # u < 1 and cdf[-1] == 1 keep idx below n; a NaN p (refused above) could not
        return np.minimum(idx, n - 1)

    def _unsupported(self, name):
        def method(*args, **kwargs):
            raise TracingError(f"Generator.{name} inside a traced function is not supported by "
                               f"fastlaunch; random, uniform, standard_normal, normal, "
                               f"exponential, integers and choice are")
        return method

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._unsupported(name)


def _into(out, value, what):
    if out is None:
        return value
    out[...] = value
    return out


def call_generator() -> TracedGenerator:
    """The generator of the call's own key (np.random.* and default_rng() in the function)."""
    g = current_graph()
    return TracedGenerator(ops.rng_key(g))


# ---- np.random.* while tracing ----------------------------------------------------------------
def _legacy():
    gen = call_generator
    return {
        "random": lambda size=None: gen().random(size),
        "random_sample": lambda size=None: gen().random(size),
        "ranf": lambda size=None: gen().random(size),
        "sample": lambda size=None: gen().random(size),
        "rand": lambda *dims: gen().random(dims or None),
        "randn": lambda *dims: gen().standard_normal(dims or None),
        "uniform": lambda low=0.0, high=1.0, size=None: gen().uniform(low, high, size),
        "normal": lambda loc=0.0, scale=1.0, size=None: gen().normal(loc, scale, size),
        "standard_normal": lambda size=None: gen().standard_normal(size),
        "exponential": lambda scale=1.0, size=None: gen().exponential(scale, size),
        "randint": lambda low, high=None, size=None, dtype=int:
            gen().integers(low, high, size, dtype=np.dtype(dtype)),
        "choice": lambda a, size=None, replace=True, p=None:
            gen().choice(a, size, replace, p, _legacy=True),
    }


_REFUSED = ("shuffle", "permutation", "seed", "set_state", "get_state", "binomial",
            "poisson", "gamma", "beta")


def _default_rng(original):
    def default_rng(seed=None):
        if tracing() and seed is None:
            return call_generator()      # fresh numbers on every call
        gen = original(seed)             # a fixed seed: the same numbers every call, as NumPy
        if tracing() and type(gen) is np.random.Generator and gen is not seed:
            return SeededGenerator(gen.bit_generator)
        return gen
    return default_rng


class SeededGenerator(np.random.Generator):
    """A fixed-seed Generator made inside a traced function: NumPy's numbers (constants), but
    `out=` takes an array made inside the function or a traced one.  NumPy's C code would
    write into the array's memory, which no longer holds the values of an array a traced
    value was written into: the numbers are drawn, then assigned."""

    def _into(self, method, out, kwargs):
        kwargs["size"] = out.shape
        kwargs["dtype"] = out.dtype
        out[...] = getattr(super(), method)(**kwargs)
        return out

    def random(self, size=None, dtype=np.float64, out=None):
        if out is None or type(out) is np.ndarray:
            return super().random(size, dtype, out)
        return self._into("random", out, {})

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        if out is None or type(out) is np.ndarray:
            return super().standard_normal(size, dtype, out)
        return self._into("standard_normal", out, {})

    def standard_exponential(self, size=None, dtype=np.float64, method="zig", out=None):
        if out is None or type(out) is np.ndarray:
            return super().standard_exponential(size, dtype, method, out)
        return self._into("standard_exponential", out, {"method": method})

    def standard_gamma(self, shape, size=None, dtype=np.float64, out=None):
        if out is None or type(out) is np.ndarray:
            return super().standard_gamma(shape, size, dtype, out)
        return self._into("standard_gamma", out, {"shape": shape})


def _intercepted(name, original, impl):
    def draw(*args, **kwargs):
        if not tracing():
            return original(*args, **kwargs)
        return impl(*args, **kwargs)
    draw.__name__ = getattr(original, "__name__", name)
    draw.__doc__ = getattr(original, "__doc__", None)
    draw.__wrapped__ = original
    return draw


def _refused(name, original):
    def refuse(*args, **kwargs):
        if not tracing():
            return original(*args, **kwargs)
        raise TracingError(f"np.random.{name} inside a traced function is not supported by "
                           f"fastlaunch (its value would be frozen at trace time); draw with "
                           f"np.random.random/uniform/normal/standard_normal/randint/choice, or "
                           f"a Generator's random/uniform/normal/standard_normal/integers/choice")
    refuse.__wrapped__ = original
    return refuse


def _entries():
    impls = _legacy()
    for name in list(impls) + list(_REFUSED) + ["default_rng"]:
        original = getattr(np.random, name, None)
        if original is None:
            continue
        if name == "default_rng":
            yield np.random, name, _default_rng(original)
        elif name in impls:
            yield np.random, name, _intercepted(name, original, impls[name])
        else:
            yield np.random, name, _refused(name, original)


# np.random's functions draw traced random numbers in tracing threads in this block
intercepting = Interception(_entries).active


# ---- generators a compiled function captures (jit.py checks them around a trace) -----
RNG_TYPES = (np.random.Generator, np.random.RandomState)


def captured_generators(fn) -> list:
    """(name, generator, state) of each Generator/RandomState fn reads from its globals or its
    closure: drawing from one while tracing would freeze its numbers into the trace."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    found = []
    globs = getattr(fn, "__globals__", {})
    for name in code.co_names:
        value = globs.get(name)
        if isinstance(value, RNG_TYPES):
            found.append((f"the global {name!r}", value, generator_state(value)))
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, RNG_TYPES):
            found.append((f"{name!r} (from the enclosing function)", value, generator_state(value)))
    return found


def generator_state(gen):
    return gen.bit_generator.state if isinstance(gen, np.random.Generator) else gen.get_state()


def same_state(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b
