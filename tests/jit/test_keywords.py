"""Keyword-argument calls take the dispatcher's fast path (issue 11): keywords that fill the
next positional parameters make the same argument tuple the slow path binds."""
import numpy as np
import pytest

import fastlaunch as fl


def step(p, m, lr, beta=0.9):
    m = beta * m + (1 - beta) * p
    return p - lr * m, m


def test_keywords_replay_without_the_slow_path(monkeypatch):
    f = fl.compile(step)
    p, m = np.ones(4), np.zeros(4)
    want = step(p, m, 0.1)
    got = f(p, m, lr=0.1)                     # traces
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)
    calls = []
    original = type(f)._miss
    monkeypatch.setattr(type(f), "_miss", lambda self, a, k: calls.append(1) or original(self, a, k))
    for kwargs in ({"lr": 0.1}, {"m": m, "lr": 0.1}):
        args = (p,) if "m" in kwargs else (p, m)
        for g, w in zip(f(*args, **kwargs), want):
            np.testing.assert_allclose(g, w)
    f(p=p, m=m, lr=0.1)
    assert calls == []                        # all took the fast path
    assert f.stats["traces"] == 1


def test_keywords_with_gaps_or_keyword_only_use_the_slow_path():
    def g(x, y=2.0, *, scale=1.0):
        return x * y * scale

    f = fl.compile(g)
    x = np.arange(3.0)
    np.testing.assert_allclose(f(x, scale=3.0), g(x, scale=3.0))     # y defaulted
    np.testing.assert_allclose(f(x, y=4.0), g(x, y=4.0))
    np.testing.assert_allclose(f(x, 4.0, scale=2.0), g(x, 4.0, scale=2.0))
    with pytest.raises(TypeError):
        f(x, z=1.0)                           # Python's own error for an unknown keyword
    with pytest.raises(TypeError):
        f(x, 2.0, y=3.0)                      # repeated


def test_positional_only_parameters_are_not_filled_by_keywords():
    def g(x, /, y):
        return x + y

    f = fl.compile(g)
    np.testing.assert_allclose(f(np.ones(2), y=1.0), [2.0, 2.0])
    with pytest.raises(TypeError):
        f(x=np.ones(2), y=1.0)
