"""Methods and objects (issue 11): a compiled method's `self`, dataclasses and registered
classes are taken apart into leaves; array attributes are read afresh on every call, other
attributes are keyed by value; attributes rebound inside the function are replayed onto the
caller's object."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import fastlaunch as fl


class Linear:
    def __init__(self, w, b, scale=1.0):
        self.w, self.b, self.scale = w, b, scale

    @fl.compile
    def __call__(self, x):
        return np.tanh(x @ self.w + self.b) * self.scale

    @fl.compile
    def step(self, grad, lr):
        self.w = self.w - lr * grad          # rebinding an attribute: replayed
        self.b -= lr                         # in place: written into the caller's array
        return (self.w * self.w).sum()

    def reference(self, x):
        return np.tanh(x @ self.w + self.b) * self.scale


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_method_reads_array_attributes_on_every_call(dtype):
    rng = np.random.default_rng(0)
    layer = Linear(rng.standard_normal((4, 3)).astype(dtype), np.zeros(3, dtype))
    x = rng.standard_normal((5, 4)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    base = len(Linear.__call__.traces)
    np.testing.assert_allclose(layer(x), layer.reference(x), rtol=tol, atol=tol)
    layer.w = rng.standard_normal((4, 3)).astype(dtype)      # a new array: read afresh
    layer.b += 1                                             # changed in place: read afresh
    np.testing.assert_allclose(layer(x), layer.reference(x), rtol=tol, atol=tol)
    assert len(Linear.__call__.traces) == base + 1                  # same signature: one trace
    layer.scale = 3.0                                        # a non-array attribute: a key
    np.testing.assert_allclose(layer(x), layer.reference(x), rtol=tol, atol=tol)
    assert len(Linear.__call__.traces) == base + 2
    other = Linear(layer.w.copy() * 2, layer.b.copy(), 3.0)  # another object, same key
    np.testing.assert_allclose(other(x), other.reference(x), rtol=tol, atol=tol)
    assert len(Linear.__call__.traces) == base + 2


def test_attribute_rebound_inside_the_method_is_replayed():
    def run(make):
        layer = make()
        out = []
        for k in range(3):
            out.append(float(layer.step(np.full((2, 2), 0.5 + k), 0.1)))
        return layer, out

    make = lambda: Linear(np.arange(4.0).reshape(2, 2), np.zeros(2))      # noqa: E731
    compiled, got = run(make)
    layer = make()
    want = []
    for k in range(3):
        want.append(float(Linear.step.__wrapped__(layer, np.full((2, 2), 0.5 + k), 0.1)))
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(compiled.w, layer.w)
    np.testing.assert_allclose(compiled.b, layer.b)
    assert len(Linear.step.traces) == 1


@dataclasses.dataclass
class Params:
    w: np.ndarray
    b: np.ndarray
    lr: float = 0.1
    name: str = "p"


def test_dataclass_arguments_and_results():
    f = fl.compile(lambda p, x: (Params(p.w - p.lr * x, p.b + 1, p.lr, p.name), (p.w * x).sum()))
    p = Params(np.ones(3), np.zeros(3))
    new, s = f(p, np.arange(3.0))
    assert isinstance(new, Params) and new.name == "p" and new.lr == 0.1
    np.testing.assert_allclose(new.w, 1 - 0.1 * np.arange(3.0))
    np.testing.assert_allclose(new.b, 1.0)
    assert float(s) == 3.0
    p.w[:] = 2.0                                  # read afresh
    _, s = f(p, np.arange(3.0))
    assert float(s) == 6.0
    f(Params(np.ones(3), np.zeros(3), lr=0.5), np.arange(3.0))   # a new static value
    assert len(f.traces) == 2


class Box:
    """A registered class with its own flatten/unflatten (JAX's convention)."""

    def __init__(self, lo, hi, label):
        self.lo, self.hi, self.label = lo, hi, label


fl.register_class(Box, lambda b: ((b.lo, b.hi), b.label),
                  lambda label, children: Box(*children, label))


def test_registered_class_with_flatten_functions():
    f = fl.compile(lambda box, x: np.clip(x, box.lo, box.hi))
    x = np.linspace(-2, 2, 9)
    np.testing.assert_array_equal(f(Box(np.float64(-1), np.float64(1), "a"), x), np.clip(x, -1, 1))
    np.testing.assert_array_equal(f(Box(np.float64(-0.5), np.float64(2), "a"), x),
                                  np.clip(x, -0.5, 2))
    assert len(f.traces) == 1
    f(Box(np.float64(-0.5), np.float64(2), "b"), x)                  # aux is static
    assert len(f.traces) == 2
    g = fl.compile(lambda box: Box(box.lo * 2, box.hi * 2, box.label))
    out = g(Box(np.ones(2), np.ones(2), "z"))
    assert isinstance(out, Box) and out.label == "z"
    np.testing.assert_array_equal(out.lo, 2.0)


def test_registration_errors_name_what_is_wrong():
    class Slotted:
        __slots__ = ("a",)
    with pytest.raises(TypeError, match="no __dict__"):
        fl.register_class(Slotted)
    with pytest.raises(TypeError, match="expected a class"):
        fl.register_class(3)
    with pytest.raises(TypeError, match="both flatten and unflatten"):
        fl.register_class(Box, flatten=lambda b: ((), None))


def test_unregistered_objects_are_refused_with_a_hint():
    class Plain:
        def __init__(self):
            self.w = np.ones(2)
    with pytest.raises(TypeError, match="static arguments"):
        fl.compile(lambda o, x: o.w * x)(Plain(), np.ones(2))


def test_static_self_holding_arrays_warns():
    class Frozen:
        def __init__(self):
            self.w = np.ones(2)

        @fl.compile(static_argnums=0)
        def apply(self, x):
            return self.w * x

    m = Frozen()
    with pytest.warns(fl.StaticArraysWarning, match=r"holds arrays \(w\)"):
        m.apply(np.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.apply(np.ones(2))                       # replay: no new warning


def test_deleting_an_attribute_is_refused():
    @fl.register_class
    class Holder:
        def __init__(self):
            self.w, self.v = np.ones(2), np.zeros(2)

    def drop(h, x):
        del h.v
        return h.w + x

    with pytest.raises(fl.TracingError, match="deleted attribute 'v'"):
        fl.compile(drop)(Holder(), np.ones(2))


def test_objects_inside_containers_and_nested_objects():
    @fl.register_class
    class Inner:
        def __init__(self, a):
            self.a = a

    @dataclasses.dataclass
    class Outer:
        inner: Inner
        items: list

    def f(o, cfg):
        o.inner.a = o.inner.a * 2                    # replayed onto the nested object
        cfg["o"].items.append(o.inner.a.sum())       # an object inside a dict argument
        return o.inner.a + o.items[0]

    o = Outer(Inner(np.ones(2)), [np.zeros(2)])
    cfg = {"o": Outer(Inner(np.ones(1)), [])}
    g = fl.compile(f)
    for _k in range(2):
        r = g(o, cfg)
    np.testing.assert_array_equal(o.inner.a, [4.0, 4.0])
    np.testing.assert_array_equal(r, [4.0, 4.0])
    assert [float(v) for v in cfg["o"].items] == [4.0, 8.0]
