"""What the conformance suite expects to fail, in one place.

NOT_IMPLEMENTED: NumPy functions fastlaunch does not trace yet.  Their tests are marked
    xfail(strict=True, raises=fastlaunch.TracingError): once implemented they XPASS, which
    fails the run, so that the entry is removed here.
BUGS: supported functions that give a wrong answer (or the wrong error).  Keyed by
    (registry name, dtype short name or another qualifier, or "*" for every test of the
    name); the value is the reason shown by pytest, with a minimal reproducer.  Their tests
    are marked xfail(strict=True, reason="bug: ...").

BUG_RAISES: the exception each bug's tests fail with (AssertionError: a wrong value, dtype or
    type; the harness's Mismatch is one).  The xfail is restricted to it, so that a bug that
    changes its nature shows up as a failure instead of hiding behind the old mark.

docs/numpy-coverage.md (tests/conformance/gen_coverage.py) is generated from these tables and
the registry in harness.py.
"""
import pytest

NOT_IMPLEMENTED: dict = {
    "np.round(decimals!=0)": "np.round(x, decimals) with decimals != 0",
    "x[mask] = v (boolean-mask assignment)": "x[x > 0] = 0 (same shape: could lower to "
                                             "np.where)",
}

_BOOLTILE = ("wrong answers from np.any / np.all over a leading axis when the operand is a "
             "fused expression: the tiled reduction keeps its accumulator tile as [64 x i1] in "
             "memory, and vectorised i1 loads/stores are bit-packed. Repro: fl.compile(lambda x: "
             "np.any(x / x, axis=0))(np.ones((7, 12))) -> last column False, NumPy all True")
_PYBOOL = ("a Python bool passed as an argument is read as False on every replayed call (the "
           "first, tracing call is right): silent wrong answers. Repro: f = fl.compile(lambda a, "
           "s: a + s); z = np.zeros(3, np.float32); f(z, True) -> [1. 1. 1.]; f(z, True) -> "
           "[0. 0. 0.]")
_INTCMP = ("comparing an integer array with an out-of-range Python int passed as an argument "
           "raises OverflowError at call time (a literal works); NumPy 2 compares exactly. Repro: "
           "fl.compile(lambda a, s: a < s)(np.array([1], np.int8), 300) -> OverflowError, NumPy "
           "[True]")
BUGS: dict = {
    ("empty slice of an inserted axis (x[None][:0])", "*"): (
        "slicing an inserted size-1 axis down to size 0 raises ValueError 'cannot reshape array "
        "of size 3 into shape (0, 3)' while tracing. Repro: fl.compile(lambda x: x[None][:0])"
        "(np.ones(3)); also np.expand_dims(x, 0)[1:], x.reshape(1, 3)[:0], x[:, None][:, 1:]"),
    ("np.any / np.all over a leading axis (fused operand)", "(7, 12)"): _BOOLTILE,
    ("np.any / np.all over a leading axis (fused operand)", "(7, 14)"): _BOOLTILE,
    ("np.any / np.all over a leading axis (fused operand)", "(7, 32)"): _BOOLTILE,
    ("Python scalar operands (NEP 50)", "bool"): _PYBOOL,
    ("np.where", "out-of-range Python int (argument)"): (
        "np.where(c, uint8_array, s) with s = -7 passed as an argument raises OverflowError at "
        "call time; NumPy casts the Python int to the array's dtype (249). Repro: "
        "fl.compile(lambda c, a, s: np.where(c, a, s))(np.array([True, False]), "
        "np.array([1, 2], np.uint8), -7)"),
    ("views of 0-d values (x.T, x[()], reshape(x, ()))", "*"): (
        "x[()] of a 0-d array returns a 0-d array (NumPy: a scalar), and s[...] of a scalar "
        "result returns a scalar (NumPy: a 0-d array). Repro: fl.compile(lambda x: x[()])"
        "(np.array(2.0)) -> array(2.), NumPy np.float64(2.0)"),
    ("np.power (x ** scalar fast paths)", "bool"): (
        "np.power(bool_array, 2) is int8 (the fast path of the ** operator); NumPy's np.power "
        "gives int64 (only bool_array ** 2 goes through np.square). Repro: fl.compile(lambda "
        "a: np.power(a, 2))(np.array([True])).dtype -> int8"),
    ("np.subtract.at", "bool"): (
        "np.subtract.at(bool_array, idx, values) is accepted; NumPy raises TypeError (no "
        "boolean subtract). Repro: fl.compile(lambda x, i: np.subtract.at(x, i, x[:1]))"
        "(np.zeros(3, bool), np.array([0]))"),
}

for _d in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
    BUGS[("Python scalar operands (NEP 50)", f"{_d} vs out-of-range int")] = _INTCMP

_WRONG = AssertionError                     # conformance.harness.Mismatch
BUG_RAISES: dict = {
    _BOOLTILE: _WRONG,
    _PYBOOL: _WRONG,
    _INTCMP: OverflowError,
    BUGS[("np.where", "out-of-range Python int (argument)")]: OverflowError,
    BUGS[("views of 0-d values (x.T, x[()], reshape(x, ()))", "*")]: _WRONG,
    BUGS[("np.power (x ** scalar fast paths)", "bool")]: _WRONG,
    BUGS[("np.subtract.at", "bool")]: pytest.fail.Exception,     # "DID NOT RAISE TypeError"
    BUGS[("empty slice of an inserted axis (x[None][:0])", "*")]: ValueError,
}
