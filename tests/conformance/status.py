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

NOT_IMPLEMENTED: dict = {
    "np.fft": "np.fft.* (complex arithmetic is traced, but there is no FFT: a TracingError "
              "naming the function, e.g. np.fft.fft)",
}

_INTCMP = ("a Python int argument outside the 64-bit range (from 2**64 up or below -2**63) "
           "raises OverflowError naming the argument; NumPy 2 compares it with an integer "
           "array exactly (written in the function, such an int is compared exactly). Repro: "
           "fl.compile(lambda a, s: a < s)(np.array([1], np.uint64), 2**64) -> OverflowError, "
           "NumPy [True]")
BUGS: dict = {}

for _d in ("uint64",):
    BUGS[("Python scalar operands (NEP 50)", f"{_d} vs out-of-range int")] = _INTCMP

_NANTIES = ("of tied +0.0 and -0.0, np.nanmax/np.nanmin give what np.max/np.min give (NumPy's "
            "are fmax/fmin reductions: the first of the tied zeros). Repro: "
            "fl.compile(lambda r: np.nanmax(r, axis=0))(np.array([[-0.0], [0.0]])) -> [0.0], "
            "NumPy [-0.0]")
for _n in ("np.nanmax", "np.nanmin"):
    BUGS[(_n, "signed-zero ties")] = _NANTIES

_WRONG = AssertionError                     # conformance.harness.Mismatch
BUG_RAISES: dict = {
    _INTCMP: OverflowError,
    _NANTIES: _WRONG,
}
