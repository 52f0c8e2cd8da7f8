"""fastlaunch.compile's options are checked when the function is compiled, with errors that
name the option and what was expected; `dis` shows the plan and bytecode, the kernels' source
on request."""
import io

import numpy as np
import pytest

import fastlaunch as fl


def f3(a, b, c):
    return a + b * c


def test_compiling_something_not_callable_is_a_type_error():
    with pytest.raises(TypeError, match=r"fastlaunch.compile: expected a function .*got int"):
        fl.compile(3)
    with pytest.raises(TypeError, match="got str"):
        fl.compile("np.sin")
    with pytest.raises(TypeError, match="got int"):
        fl.compile(static_argnums=0)(3)            # the decorator form checks too


@pytest.mark.parametrize("nums, match", [
    (3, r"static_argnums=3 is out of range: f3 has 3 positional parameters \(a, b, c\)"),
    ((0, 7), "static_argnums=7 is out of range"),
    (-4, "static_argnums=-4 does not name a positional parameter"),
])
def test_out_of_range_static_argnums(nums, match):
    with pytest.raises(ValueError, match=match):
        fl.compile(f3, static_argnums=nums)


@pytest.mark.parametrize("nums", ["a", 1.0, True, [None]])
def test_static_argnums_must_be_integers(nums):
    with pytest.raises(TypeError, match="static_argnums"):
        fl.compile(f3, static_argnums=nums)


def test_static_argnames_must_name_parameters():
    with pytest.raises(ValueError, match="f3 has no positional parameter named 'd'"):
        fl.compile(f3, static_argnames="d")
    with pytest.raises(TypeError, match="static_argnames holds 1"):
        fl.compile(f3, static_argnames=[1])


def test_static_positions_past_the_named_ones_are_fine_with_varargs():
    def g(x, *rest):
        return x * rest[0] if rest[1] else x
    h = fl.compile(g, static_argnums=2)
    np.testing.assert_array_equal(h(np.ones(2), 3.0, True), np.full(2, 3.0))
    np.testing.assert_array_equal(h(np.ones(2), 3.0, False), np.ones(2))


@pytest.mark.parametrize("value", ["yes", 1, None, "False"])
def test_replay_must_be_a_bool(value):
    with pytest.raises(TypeError, match=r"replay must be True or False"):
        fl.compile(f3, replay=value)


def test_replay_accepts_numpy_bools():
    assert fl.compile(f3, replay=np.True_).replay is True


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown fastlaunch backend 'gpu'; known: .*cpu"):
        fl.compile(f3, backend="gpu")
    with pytest.raises(TypeError, match="backend must be a backend name"):
        fl.compile(f3, backend=1)


@pytest.mark.parametrize("value, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError),
                                          ("8", TypeError)])
def test_max_entries_is_checked(value, error):
    with pytest.raises(error, match="max_entries"):
        fl.compile(f3, max_entries=value)


def test_max_entries_drops_the_least_recently_used():
    g = fl.compile(lambda x: x + 1, max_entries=2)
    for n in (1, 2, 3):
        g(np.zeros(n))
    assert g.max_entries == 2 and g.stats["entries"] == 2


def test_pickle_programs_must_be_a_bool():
    with pytest.raises(TypeError, match="pickle_programs must be True or False"):
        fl.compile(f3, pickle_programs="yes")


def test_dis_shows_plan_and_bytecode_and_the_source_on_request():
    g = fl.compile(lambda x: np.exp(x) / np.exp(x).sum())
    x = np.ones(8)
    short, full = io.StringIO(), io.StringIO()
    g.dis(x, file=short)
    g.dis(x, file=full, source=True)
    low = g.lower(x)
    for part in ("== graph ==", "== kernel 0", "== bytecode ==", "LAUNCH", low.kernels[0][1]):
        assert part in short.getvalue()
    assert "-- source --" not in short.getvalue() and "define" not in short.getvalue()
    assert "-- source --" in full.getvalue() and low.kernels[0][2] in full.getvalue()
    assert len(short.getvalue()) < len(full.getvalue()) / 2
    g(x)
    cached = io.StringIO()
    g.dis(file=cached)
    assert "#### entry 0" in cached.getvalue() and "-- source --" not in cached.getvalue()
