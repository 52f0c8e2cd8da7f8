"""In-place updates of inputs replay into the caller's array on every call, exactly as NumPy."""
import numpy as np
import pytest

import fastlaunch as fl


def iadd(x, y):
    x += y
    return x


def imul_scalar(x, a):
    x *= a


def set_all(x, y):
    x[...] = y


def set_range(x, v):
    x[1:3] = v
    return x * 2


def out_add(x, y):
    np.add(x, y, out=x)


def out_mul_then_read(x, y):
    np.multiply(x, y, out=x)
    return x.sum()


def set_column(x, y):
    x[:, 1] += y


def set_strided(x, v):
    x[::2] = v


def set_then_read(x, y):
    x[:2] = y[:2]
    return x + y


def two_updates(x, y):
    x += 1
    y *= 2
    x[0] = y[0]


def shift_right(x):
    x[1:] = x[:-1]


def shift_left(x):
    x[:-1] = x[1:]


def reverse(x):
    x[:] = x[::-1]


def transpose_in_place(x):
    x[...] = x.T


def stencil(x):
    x[1:-1] = (x[:-2] + x[2:]) * 0.5


def rng_input(shape, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def check_replays(fn, make_args, calls=3):
    """Each call gets fresh arguments: the compiled function must update them exactly as fn."""
    cf = fl.compile(fn)
    for i in range(calls):
        args = make_args(i)
        expected_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        want = fn(*expected_args)
        got = cf(*args)
        for a, e in zip(args, expected_args):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, e)
        if want is None:
            assert got is None
        elif isinstance(want, np.ndarray) and any(want is e for e in expected_args):
            pos = next(k for k, e in enumerate(expected_args) if want is e)
            assert got is args[pos]
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12)
    assert cf.stats["traces"] == 1
    return cf


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_iadd(dtype):
    check_replays(iadd, lambda i: (rng_input(16, dtype, i), rng_input(16, dtype, 100 + i)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_imul_python_scalar_parameter(dtype):
    check_replays(imul_scalar, lambda i: (rng_input(10, dtype, i), 0.5 + i))


def test_setitem_ellipsis():
    check_replays(set_all, lambda i: (rng_input(8, seed=i), rng_input(8, seed=50 + i)))


def test_setitem_ellipsis_broadcast():
    check_replays(set_all, lambda i: (rng_input((3, 4), seed=i), rng_input(4, seed=50 + i)))


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_setitem_range_with_scalar_parameter(dtype):
    check_replays(set_range, lambda i: (rng_input(8, dtype, i), 5 + i))


def test_setitem_range_with_array():
    check_replays(set_range, lambda i: (rng_input(8, seed=i), rng_input(2, seed=9 + i)))


def test_out_argument():
    check_replays(out_add, lambda i: (rng_input(12, seed=i), rng_input(12, seed=30 + i)))


def test_out_argument_then_read():
    check_replays(out_mul_then_read, lambda i: (rng_input(12, seed=i), rng_input(12, seed=3 + i)))


def test_column_update():
    check_replays(set_column, lambda i: (rng_input((4, 5), seed=i), rng_input(4, seed=7 + i)))


def test_strided_update():
    check_replays(set_strided, lambda i: (rng_input(9, seed=i), float(i)))


def test_update_then_read_sees_new_values():
    check_replays(set_then_read, lambda i: (rng_input(6, seed=i), rng_input(6, seed=20 + i)))


def test_two_arguments_updated():
    check_replays(two_updates, lambda i: (rng_input(5, seed=i), rng_input(5, seed=40 + i)))


@pytest.mark.parametrize("layout", ["fortran", "strided", "transposed", "negative"])
def test_update_of_noncontiguous_input(layout):
    def make(i):
        b = rng_input((8, 10), seed=i)
        x = {"fortran": np.asfortranarray(b[:4, :5]), "strided": b[::2, ::2],
             "transposed": b[:5, :4].T, "negative": b[::-2, ::-2]}[layout]
        return x, rng_input(4, seed=60 + i)

    check_replays(set_column, make)


def test_update_through_a_view_leaves_the_rest_of_the_base():
    """Only the view of the caller's base is passed; elements outside it must not change."""
    cf = fl.compile(iadd)
    base = np.arange(20.0)
    expected = base.copy()
    view = base[5:15:2]
    expected[5:15:2] += 1.0
    assert cf(view, np.ones(5)) is view
    np.testing.assert_array_equal(base, expected)


def test_returning_updated_input_returns_the_same_object():
    cf = fl.compile(iadd)
    for _ in range(3):
        x = np.zeros(4)
        out = cf(x, np.ones(4))
        assert out is x
        np.testing.assert_array_equal(x, np.ones(4))


def test_update_accumulates_across_calls_on_the_same_array():
    cf = fl.compile(iadd)
    x, y = np.zeros(6), np.arange(6.0)
    for _ in range(5):
        cf(x, y)
    np.testing.assert_array_equal(x, 5 * y)


@pytest.mark.parametrize("fn", [shift_right, shift_left, reverse, stencil],
                         ids=["x[1:]=x[:-1]", "x[:-1]=x[1:]", "reverse", "stencil"])
@pytest.mark.parametrize("n", [8, 1000])
def test_aliasing_hazards_match_numpy(fn, n):
    check_replays(fn, lambda i: (rng_input(n, seed=i),))


def test_transpose_into_itself():
    check_replays(transpose_in_place, lambda i: (rng_input((5, 5), seed=i),))


def test_in_place_without_return_returns_none():
    cf = fl.compile(set_all)
    x = np.zeros(3)
    assert cf(x, np.ones(3)) is None
    np.testing.assert_array_equal(x, 1.0)


# ---- refused updates -----------------------------------------------------------------------------
def test_overlapping_arguments_give_numpys_result():
    # overlapping views, one updated in place: NumPy's result (more in tests/jit/test_aliasing.py)
    cf = fl.compile(iadd)
    base, ref = np.arange(8.0), np.arange(8.0)
    cf(base[:6], base[2:])
    iadd(ref[:6], ref[2:])
    np.testing.assert_array_equal(base, ref)


def test_overlapping_arguments_on_the_replay_path():
    cf = fl.compile(iadd)
    cf(np.zeros(6), np.ones(6))                  # traced and installed
    base, ref = np.arange(8.0), np.arange(8.0)
    cf(base[:6], base[2:])
    iadd(ref[:6], ref[2:])
    np.testing.assert_array_equal(base, ref)
    # an overlap that is no view of one storage (mixed dtypes) is refused, nothing written
    with pytest.raises(ValueError, match="overlap"):
        cf(base[:6], base[2:].view(np.int64))
    np.testing.assert_array_equal(base, ref)
    # the very same array twice is not refused: NumPy's result (tests/jit/test_aliasing.py)
    x, ref = np.arange(6.0), np.arange(6.0)
    cf(x, x)
    iadd(ref, ref)
    np.testing.assert_array_equal(x, ref)


def test_disjoint_views_of_one_base_are_fine():
    cf = fl.compile(iadd)
    base = np.arange(8.0)
    cf(base[:4], base[4:])
    np.testing.assert_array_equal(base, [4, 6, 8, 10, 4, 5, 6, 7])


def test_read_only_argument_updated_in_place_raises_value_error():
    cf = fl.compile(iadd)
    x = np.arange(4.0)
    x.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        cf(x, np.ones(4))
    np.testing.assert_array_equal(x, np.arange(4.0))
    cf(np.zeros(4), np.ones(4))                  # and on the replay path too
    with pytest.raises(ValueError, match="read-only"):
        cf(x, np.ones(4))


def test_read_only_argument_that_is_only_read_is_fine():
    cf = fl.compile(iadd)
    y = np.ones(4)
    y.setflags(write=False)
    x = np.zeros(4)
    cf(x, y)
    np.testing.assert_array_equal(x, 1.0)


def test_broadcast_input_updated_in_place_raises():
    """np.broadcast_to gives a read-only view: NumPy itself refuses to write it."""
    cf = fl.compile(iadd)
    x = np.broadcast_to(np.zeros(1), (4,))
    with pytest.raises(ValueError):
        cf(x, np.ones(4))


def test_cast_on_in_place_update_follows_numpy():
    def f(x, y):
        x += y

    x = np.zeros(4, np.int32)
    with pytest.raises(TypeError):        # NumPy: float64 cannot be cast to int32 with same_kind
        f(x.copy(), np.ones(4))
    with pytest.raises(TypeError):
        fl.compile(f)(x, np.ones(4))
    check_replays(f, lambda i: (np.zeros(4, np.float64), np.arange(4, dtype=np.int32) + i))
