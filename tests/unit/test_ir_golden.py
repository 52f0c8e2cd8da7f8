"""Golden-text tests of the printed IR (`Compiled.lower(...).graph`).

The graph prints deterministically, with names given at print time (`%3:f32[1024] = mul %1, %2`),
so a change in tracing, dtype promotion, folding or CSE shows up as a text diff here.
"""
import textwrap

import numpy as np
import pytest

import fastlaunch as fl


def graph_text(fn, *args, **kwargs) -> str:
    return fl.compile(fn, backend="null").lower(*args, **kwargs).graph


def golden(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


# ---- golden texts ------------------------------------------------------------------------
def chain(x, y):
    # 2.0 and 3 are NEP 50 weak Python scalars: they become f32 literals, not f64 / i64
    return (x * y + 2.0) * 3


CHAIN = golden("""
    %0:f32[1024] = arg 0
    %1:f32[1024] = arg 1
    %2:f32[1024] = mul %0, %1
    %3:f32[] = literal 2.0
    %4:f32[1024] = add %2, %3
    %5:f32[] = literal 3.0
    %6:f32[1024] = mul %4, %5
    return %6
""")


def rowsum(x):
    return x.sum(axis=1, keepdims=True)


ROWSUM = golden("""
    %0:f32[4,16] = arg 0
    %1:f32[4] = sum %0 axes=(1,)
    %2:f32[4,1] = reshape %1
    return %2
""")

# at most ops.SMALL_REDUCE elements per result: marked for the fuser to unroll
SMALL_ROWSUM = golden("""
    %0:f32[4,8] = arg 0
    %1:f32[4] = sum %0 axes=(1,) unroll=True
    %2:f32[4,1] = reshape %1
    return %2
""")


def view(x):
    return x.T[::2]


VIEW = golden("""
    %0:f64[4,6] = arg 0
    %1:f64[4,3] = slice %0 start=(0,0) step=(1,2)
    %2:f64[3,4] = transpose %1 perm=(1,0)
    return %2
""")


def select(x, y):
    return np.where(x > 0, x, y)


SELECT = golden("""
    %0:f32[8] = arg 0
    %1:f32[8] = arg 1
    %2:f32[] = literal 0.0
    %3:bool[8] = gt %0, %2
    %4:f32[8] = where %3, %0, %1
    return %4
""")


def scaled(x, lr):
    # a Python float argument is a runtime parameter (f64), cast to the array's dtype
    return x - lr * x


SCALED = golden("""
    %0:f32[16] = arg 0
    %1:f64[] = param 1
    %2:f32[] = cast %1
    %3:f32[16] = mul %2, %0
    %4:f32[16] = sub %0, %3
    return %4
""")


def _f32(*shape):
    return np.ones(shape, np.float32)


GOLDEN_CASES = [
    pytest.param(chain, (_f32(1024), _f32(1024)), CHAIN, id="elementwise-weak-scalar"),
    pytest.param(rowsum, (_f32(4, 16),), ROWSUM, id="reduce-keepdims"),
    pytest.param(rowsum, (_f32(4, 8),), SMALL_ROWSUM, id="small-reduce-keepdims"),
    pytest.param(view, (np.ones((4, 6), np.float64),), VIEW, id="transpose-slice-view"),
    pytest.param(select, (_f32(8), _f32(8)), SELECT, id="where-comparison"),
    pytest.param(scaled, (_f32(16), 0.5), SCALED, id="python-float-parameter"),
]


@pytest.mark.parametrize("fn, args, expected", GOLDEN_CASES)
def test_golden_ir(fn, args, expected):
    assert graph_text(fn, *args) == expected


@pytest.mark.parametrize("fn, args, expected", GOLDEN_CASES)
def test_graph_lines_have_the_documented_format(fn, args, expected):
    import re
    text = graph_text(fn, *args)
    line = re.compile(r"^%\d+:(bool|[iuf]\d+)\[[\d,]*\] = \w+( .*)?$")
    body = text.splitlines()
    assert body[-1].startswith("return ")
    for ln in body[:-1]:
        assert line.match(ln), ln


# ---- determinism ---------------------------------------------------------------------------
@pytest.mark.parametrize("fn, args, expected", GOLDEN_CASES)
def test_printing_is_deterministic(fn, args, expected):
    """Two independent traces (fresh compiled objects, fresh arrays) print the same text."""
    first = graph_text(fn, *args)
    fresh = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    second = graph_text(fn, *fresh)
    assert first == second
    # printing the same graph twice is stable too
    lowered = fl.compile(fn, backend="null").lower(*args)
    assert str(lowered.graph) == str(lowered.graph)


def test_names_do_not_depend_on_dead_code():
    """Names come from the live graph at print time: unused work leaves no gaps in the numbering."""
    def with_dead(x):
        _ = np.sin(x) * 7          # traced but dead
        return x + 1.0

    def without(x):
        return x + 1.0

    x = _f32(32)
    text = graph_text(with_dead, x)
    assert text == graph_text(without, x)
    assert "sin" not in text


# ---- literal folding and CSE -----------------------------------------------------------------
def test_literals_fold():
    """2 * 3 on literals inside the trace becomes one literal 6: no mul of two constants."""
    def f(x):
        return x + np.full_like(x, 2) * 3

    text = graph_text(f, _f32(16))
    assert "literal 6.0" in text
    assert "literal 2" not in text and "literal 3" not in text
    assert "mul" not in text


def test_literal_chain_folds_through_casts():
    def f(x):
        return x * (np.ones_like(x) * 2 * 3 - 1)

    text = graph_text(f, np.ones(8, np.float64))
    assert "literal 5.0" in text
    assert text.count(" = mul ") == 1 and " = sub " not in text


def test_common_subexpressions_are_shared():
    """x*y written twice is one node."""
    def f(x, y):
        return x * y + x * y

    text = graph_text(f, _f32(64), _f32(64))
    assert text.count(" = mul ") == 1
    assert golden("""
        %0:f32[64] = arg 0
        %1:f32[64] = arg 1
        %2:f32[64] = mul %0, %1
        %3:f32[64] = add %2, %2
        return %3
    """) == text


def test_cse_across_separately_built_subtrees():
    def f(x):
        a = np.sin(x) + 1.0
        b = np.sin(x) + 1.0
        return a * b

    text = graph_text(f, np.ones(8, np.float64))
    assert text.count(" = sin ") == 1
    assert text.count(" = add ") == 1


def test_writeback_is_printed():
    def f(x, y):
        x += y

    text = graph_text(f, _f32(8), _f32(8))
    assert text.splitlines()[-1] == "writeback arg0 = %2"
    assert "%2:f32[8] = add %0, %1" in text
