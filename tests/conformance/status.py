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
    "np.fft": "np.fft.* return complex arrays, and complex dtypes are not traced (a "
              "TracingError naming the function)",
}

_INTCMP = ("a Python int outside the 64-bit range (below -2**63 or from 2**64 up, as a literal "
           "or an argument) raises OverflowError; NumPy 2 compares it with an int64/uint64 "
           "array exactly. Repro: fl.compile(lambda a: a >= -2**63 - 1)(np.array([1], "
           "np.int64)) -> OverflowError, NumPy [True]")
BUGS: dict = {}

for _d in ("int64", "uint64"):
    BUGS[("Python scalar operands (NEP 50)", f"{_d} vs out-of-range int")] = _INTCMP

_WRONG = AssertionError                     # conformance.harness.Mismatch
BUG_RAISES: dict = {
    _INTCMP: OverflowError,
}
