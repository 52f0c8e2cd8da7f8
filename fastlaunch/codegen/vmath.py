"""Inlined math functions in LLVM IR: range reduction plus polynomial, written as scalar,
branch-free code that LLVM's loop vectoriser widens like any other arithmetic.

Why: a call of glibc's libmvec (`_ZGVeN16v_sinf`) is opaque to LLVM: it cannot be inlined,
scheduled with the code around it, or shared (sin(x) and cos(x) reduce x twice), and every
live vector register is spilled around it.  Here each function is a handful of FMAs that the
optimiser sees.  `sin` and `cos` of one argument emit the very same range-reduction and
polynomial instructions, so LLVM's CSE computes them once (tests/unit/test_vmath.py checks
the optimised module).

The code uses `llvm.fma` and so is only chosen for targets with FMA (CPUBackend decides; see
`MathTarget.inline`).  No fast-math flags: the evaluation order written here is what runs.

What is inline, and how (the measured errors are in docs/math-accuracy.md):
  float32 exp, exp2   2^k * p(r), r = x - k ln2 (Cody-Waite with FMA), 2^k in two factors so
                      that denormal results are rounded once
  float32 log         fdlibm's structure: x = 2^k m, m in [sqrt(1/2), sqrt(2)), s = f/(2+f),
                      log(1+f) = f - (hfsq - s (hfsq + R(s^2)))
  float32 sin, cos    x = j pi/2 + rh + rl (three-part Cody-Waite, FMA products and 2Sum) in
                      float32 for |x| <= SINCOS_LIMIT_F32, the polynomials compensated for rl;
                      lanes beyond it (and inf, NaN) take libm's sinf/cosf (`big_call` hook)
  float32 tanh, expm1, log1p, log2, log10
                      computed in float64 with the float64 exp/log below, then rounded once:
                      nearly correctly rounded and still branch-free
  float64 exp, log    as the float32 ones, with longer polynomials
Everything else (float64 sin/cos/tanh/expm1/log1p/exp2/log2/log10, and all other functions)
stays a libm/libmvec call.

Coefficients: bench/vmath_fit.py (Chebyshev fits with mpmath, rounded to the type).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# ---- coefficients (python bench/vmath_fit.py) ---------------------------------------------
# exp(r) = 1 + r + r^2 Q(r), |r| <= ln2/2
EXPF_Q = (0.5, 0.16666573286056519, 0.04166654869914055, 0.008363774046301842,
          0.0013926926767453551)
EXP_Q = (0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333325544,
         0.0013888888888883327, 0.00019841269876864356, 2.4801587327007187e-05,
         2.755725283351691e-06, 2.75572718102198e-07, 2.5106274733573296e-08,
         2.0915442297780116e-09)
# 2^r = 1 + r P(r), |r| <= 1/2
EXP2F_P = (0.6931471824645996, 0.24022650718688965, 0.05550355091691017, 0.009618080221116543,
           0.0013392016990110278, 0.0001545416162116453)
# sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4
SINF_S = (-0.1666666716337204, 0.008333331905305386, -0.00019840039021801203,
          2.724378191487631e-06)
COSF_C = (0.0416666679084301, -0.00138888880610466, 2.48005599132739e-05,
          -2.7295831728224584e-07)
# 2 atanh(s) = 2 s + s z P(z), z = s^2 <= 0.0295
LOGF_P = (0.6666666865348816, 0.40000128746032715, 0.285499632358551, 0.23353542387485504)
LOG_P = (0.6666666666666666, 0.4000000000000101, 0.2857142857072283, 0.2222222240984404,
         0.18181793722272505, 0.15386342974308154, 0.1326603503726105, 0.13114976096717038)

# ln 2 and pi/2 to ~160 bits, as sums of three doubles (mpmath): the split constants of the
# reductions are cut from these exactly (Python's math.log(2) has only 53 bits)
LN2 = sum(Fraction(float.fromhex(h)) for h in
          ("0x1.62e42fefa39efp-1", "0x1.abc9e3b39803fp-56", "0x1.7b57a079a1934p-111"))
PIO2 = sum(Fraction(float.fromhex(h)) for h in
           ("0x1.921fb54442d18p+0", "0x1.1a62633145c07p-54", "-0x1.f1976b7ed8fbcp-110"))

# |x| beyond which float32 sin/cos lanes are libm's.  Below it the float32 reduction
# (three-part pi/2, the first two products exact) leaves r = rh + rl good to far more than
# float32's precision (every float32 checked by bench/vmath_accuracy.py)
SINCOS_LIMIT_F32 = float(2 ** 17)

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

# the functions inlined for each float type
INLINE = {
    F32: frozenset({"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos",
                    "tanh"}),
    F64: frozenset({"exp", "log"}),
}


# Inline, but slower than libmvec in bench/vmath.py: only in "inline" mode, libmvec calls in the
# default "auto" mode.  As accurate as NumPy costs more instructions than libmvec's sinf, cosf
# and tanhf spend (~30 per 16 lanes, 2.0-2.1 ULP for sin/cos): tanh is computed in float64, and
# sin/cos in compensated float32 (~70 per 16 lanes, 0.76 ULP) still measured ~1.3x slower.
SLOWER_INLINE = frozenset({"sin", "cos", "tanh"})


def supported(cname: str, dt: np.dtype) -> bool:
    return cname in INLINE.get(np.dtype(dt), ())


def _hex(value: float, dt: np.dtype) -> str:
    """LLVM's text of a float or double constant (hex bits of the double value)."""
    import struct
    v = float(np.array(value, dt))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


def _round(value: Fraction, dt: np.dtype, drop: int = 0) -> float:
    """value rounded to dt's precision less `drop` bits (a normal-range value)."""
    bits = np.finfo(dt).nmant + 1 - drop
    e = math.floor(math.log2(abs(value)))
    q = value / Fraction(2) ** (e - bits + 1)
    return math.ldexp(round(q), e - bits + 1)


def _split(value: Fraction, dt: np.dtype, drop: int, parts: int = 2):
    """value as a sum of `parts` dt constants, the first with its last `drop` mantissa bits
    zero (so k * first is exact for |k| < 2^drop)."""
    out = [_round(value, dt, drop)]
    for _ in range(parts - 1):
        out.append(_round(value - sum(Fraction(v) for v in out), dt))
    return out


class _Builder:
    """Scalar IR of one float type: the few operations the algorithms need."""

    def __init__(self, fw, mod, dt: np.dtype):
        self.fw, self.mod, self.dt = fw, mod, np.dtype(dt)
        self.t = "float" if self.dt == F32 else "double"
        self.it = "i32" if self.dt == F32 else "i64"
        self.sfx = "f32" if self.dt == F32 else "f64"
        self.nmant = np.finfo(self.dt).nmant
        self.bias = np.finfo(self.dt).maxexp - 1

    def c(self, v) -> str:
        return _hex(v, self.dt)

    def op(self, text: str) -> str:
        return self.fw.op(text)

    def bin(self, word: str, a: str, b: str) -> str:
        return self.op(f"{word} {self.t} {a}, {b}")

    def add(self, a, b):
        return self.bin("fadd", a, b)

    def sub(self, a, b):
        return self.bin("fsub", a, b)

    def mul(self, a, b):
        return self.bin("fmul", a, b)

    def div(self, a, b):
        return self.bin("fdiv", a, b)

    def intr(self, name: str, *vals) -> str:
        return self.mod.intrinsic(self.fw, f"llvm.{name}.{self.sfx}", self.t,
                                  [(self.t, v) for v in vals])

    def fma(self, a, b, c):
        return self.intr("fma", a, b, c)

    def poly(self, x, coeffs):
        """Horner's rule with FMAs, constant term first."""
        acc = self.c(coeffs[-1])
        for cf in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(cf))
        return acc

    def cmp(self, pred, a, b) -> str:
        return self.op(f"fcmp {pred} {self.t} {a}, {b}")

    def sel(self, cond, a, b, t=None) -> str:
        t = t or self.t
        return self.op(f"select i1 {cond}, {t} {a}, {t} {b}")

    def isnan(self, a) -> str:
        return self.cmp("uno", a, a)

    def ibin(self, word, a, b) -> str:
        return self.op(f"{word} {self.it} {a}, {b}")

    def bits(self, a) -> str:
        return self.op(f"bitcast {self.t} {a} to {self.it}")

    def from_bits(self, i) -> str:
        return self.op(f"bitcast {self.it} {i} to {self.t}")

    def to_int(self, a) -> str:
        return self.op(f"fptosi {self.t} {a} to {self.it}")

    def to_float(self, i) -> str:
        return self.op(f"sitofp {self.it} {i} to {self.t}")

    def pow2(self, e) -> str:
        """2^e for an integer e in the normal exponent range."""
        biased = self.ibin("add", e, str(self.bias))
        return self.from_bits(self.ibin("shl", biased, str(self.nmant)))


class InlineMath:
    """Emits the inlined functions into an emitter's current function.

    `big_call(cname, dt, x, limit)` is the target's hook for lanes a fast reduction cannot
    handle: the value of libm's cname(x) where not |x| <= limit (anything there elsewhere).
    `scalef`: the target scales by powers of two in one instruction (AVX-512's vscalefps,
    which LLVM selects for `llvm.ldexp`; elsewhere ldexp is a libm call per lane)."""

    def __init__(self, fw, mod, big_call, scalef: bool = False):
        self.fw, self.mod, self.big_call, self.scalef = fw, mod, big_call, scalef

    def emit(self, cname: str, dt: np.dtype, x: str) -> str:
        dt = np.dtype(dt)
        b = _Builder(self.fw, self.mod, dt)
        if dt == F32 and cname in ("tanh", "expm1", "log1p", "log2", "log10"):
            return self._via_double(cname, x)
        return getattr(self, "_" + cname)(b, x)

    # ---- exp family ----------------------------------------------------------------------
    def _scale(self, b: _Builder, p: str, k: str) -> str:
        """p * 2^k for k (a float integer) within the clamps below: two normal factors, so a
        denormal result is rounded once and an overflowing one becomes inf; with `scalef`,
        ldexp, which rounds once too (the same results in 3 instructions instead of 9: the
        textbook Black-Scholes has three exps per element)."""
        ki = b.to_int(k)
        if self.scalef:
            if b.it != "i32":
                ki = b.op(f"trunc {b.it} {ki} to i32")
            return self.mod.intrinsic(self.fw, f"llvm.ldexp.{b.sfx}.i32", b.t,
                                      [(b.t, p), ("i32", ki)])
        e1 = b.ibin("ashr", ki, "1")
        e2 = b.ibin("sub", ki, e1)
        return b.mul(b.mul(p, b.pow2(e1)), b.pow2(e2))

    def _clamp(self, b: _Builder, x: str, lo: float, hi: float) -> str:
        # minnum/maxnum of NaN give the bound: NaN lanes are fixed by the caller's select
        return b.intr("maxnum", b.intr("minnum", x, b.c(hi)), b.c(lo))

    def _exp(self, b: _Builder, x: str) -> str:
        # beyond the clamps exp over/underflows anyway; they keep 2^k's factors normal
        lo, hi = (-104.0, 89.0) if b.dt == F32 else (-746.0, 710.0)
        xc = self._clamp(b, x, lo, hi)
        ln2_hi, ln2_lo = _split(LN2, b.dt, 0)
        k = b.intr("rint", b.mul(xc, b.c(1 / math.log(2))))
        nk = b.op(f"fneg {b.t} {k}")
        r = b.fma(nk, b.c(ln2_hi), xc)
        r = b.fma(nk, b.c(ln2_lo), r)
        if b.dt == F32:
            # 1 + r (1 + r Q(r)): one rounding at the end, the inner one scaled down by r
            q = b.poly(r, EXPF_Q[1:])                # Q(r) = 1/2 + r (...)
            inner = b.fma(r, b.fma(r, q, b.c(EXPF_Q[0])), b.c(1.0))
            p = b.fma(r, inner, b.c(1.0))
        else:
            p = b.add(b.c(1.0), b.fma(b.mul(r, r), b.poly(r, EXP_Q), r))
        return b.sel(b.isnan(x), x, self._scale(b, p, k))

    def _exp2(self, b: _Builder, x: str) -> str:
        assert b.dt == F32
        xc = self._clamp(b, x, -151.0, 129.0)
        k = b.intr("rint", xc)
        r = b.sub(xc, k)                      # exact
        p = b.fma(r, b.poly(r, EXP2F_P), b.c(1.0))
        return b.sel(b.isnan(x), x, self._scale(b, p, k))

    # ---- log -----------------------------------------------------------------------------
    def _log(self, b: _Builder, x: str) -> str:
        finfo = np.finfo(b.dt)
        pre = 25 if b.dt == F32 else 54              # scales denormals into the normal range
        tiny = b.cmp("olt", x, b.c(float(finfo.smallest_normal)))
        xs = b.sel(tiny, b.mul(x, b.c(2.0 ** pre)), x)
        kadj = b.sel(tiny, str(-pre), "0", t=b.it)
        # m = x / 2^k in [sqrt(1/2), sqrt(2)): subtract sqrt(1/2)'s bits, so the exponent
        # field of the difference is k
        root = int(np.array(math.sqrt(0.5), b.dt).view(np.int32 if b.dt == F32 else np.int64))
        ix = b.ibin("sub", b.bits(xs), str(root))
        ki = b.ibin("add", b.ibin("ashr", ix, str(b.nmant)), kadj)
        mask = (1 << b.nmant) - 1
        m = b.from_bits(b.ibin("add", b.ibin("and", ix, str(mask)), str(root)))
        f = b.sub(m, b.c(1.0))
        s = b.div(f, b.add(b.c(2.0), f))
        z = b.mul(s, s)
        big_r = b.mul(z, b.poly(z, LOGF_P if b.dt == F32 else LOG_P))
        hfsq = b.mul(b.c(0.5), b.mul(f, f))
        k = b.to_float(ki)
        # k ln2 split so that k * hi is exact (|k| < 2^8 for float, 2^11 for double)
        ln2_hi, ln2_lo = _split(LN2, b.dt, 8 if b.dt == F32 else 11)
        inner = b.fma(s, b.add(hfsq, big_r), b.mul(k, b.c(ln2_lo)))
        r = b.fma(k, b.c(ln2_hi), b.sub(f, b.sub(hfsq, inner)))
        r = b.sel(b.cmp("oeq", x, b.c(np.inf)), b.c(np.inf), r)
        r = b.sel(b.cmp("oeq", x, b.c(0.0)), b.c(-np.inf), r)
        # a negative x: the default NaN of x86-64 (sign set), as NumPy's log returns it; a
        # NaN x: itself in NumPy's double loop, the positive quiet NaN in its float32 one
        r = b.sel(b.cmp("olt", x, b.c(0.0)), b.c(-np.nan), r)
        return b.sel(b.isnan(x), b.c(np.nan) if b.dt == F32 else x, r)

    # ---- sin, cos ------------------------------------------------------------------------
    def _sincos_f32(self, b: _Builder, x: str, cos: bool) -> str:
        """sin or cos of float32 x in float32 arithmetic (full-width vectors), for
        |x| <= SINCOS_LIMIT_F32; other lanes (and inf, NaN) take libm's sinf/cosf.

        Why this much care: a plain three-part Cody-Waite reduction rounds r twice and the
        polynomials round again, which costs ~1.4 ULP (NumPy's own SIMD sinf).  Here the
        reduced argument is kept as rh + rl (error-free transformations: FMA products and
        2Sum), and both polynomials add rl's first-order effect and the rounding error of their
        leading terms, so only the final addition rounds visibly (bench/vmath_accuracy.py).
        sin(x) and cos(x) of one x emit the same reduction and polynomial instructions (CSE
        shares them); only the final choice differs."""
        c1, c2, c3 = _split(PIO2, F32, 0, parts=3)
        ax = b.intr("fabs", x)
        fast = b.cmp("ole", ax, b.c(SINCOS_LIMIT_F32))          # false for NaN, inf
        xf = b.sel(fast, x, b.c(0.0))                           # keeps fptosi defined
        j = b.intr("rint", b.mul(xf, b.c(float(1 / PIO2))))
        nj = b.op(f"fneg float {j}")
        # x - j c1 is exact: a multiple of ulp(c1) (or x itself) below pi/2 in magnitude
        r1 = b.fma(nj, b.c(c1), xf)
        ph = b.mul(nj, b.c(c2))
        pl = b.fma(nj, b.c(c2), b.op(f"fneg float {ph}"))      # -j c2 = ph + pl exactly
        s = b.add(r1, ph)                                       # 2Sum: s + e = r1 + ph
        bb = b.sub(s, r1)
        e = b.add(b.sub(r1, b.sub(s, bb)), b.sub(ph, bb))
        t = b.add(b.fma(nj, b.c(c3), pl), e)
        rh = b.add(s, t)                                        # Fast2Sum: |t| << |s|
        rl = b.add(b.sub(s, rh), t)
        z = b.mul(rh, rh)
        # sin(rh + rl) = rh + rh^3 S(z) + rl (1 - z/2)
        u = b.fma(b.mul(rh, z), b.poly(z, SINF_S), b.mul(rl, b.fma(z, b.c(-0.5), b.c(1.0))))
        sin_r = b.add(rh, u)
        # cos(rh + rl) = 1 - (z + zl)/2 - rh rl + z^2 C(z), with 1 - z/2 = w + tail exactly
        zl = b.fma(rh, rh, b.op(f"fneg float {z}"))
        hz = b.mul(z, b.c(0.5))
        w = b.sub(b.c(1.0), hz)
        tail = b.sub(b.sub(b.c(1.0), w), hz)
        small = b.fma(rh, rl, b.mul(zl, b.c(0.5)))
        cos_r = b.add(w, b.fma(b.mul(z, z), b.poly(z, COSF_C), b.sub(tail, small)))
        q = b.to_int(j)
        if cos:
            q = b.ibin("add", q, "1")
        odd = b.op(f"icmp ne i32 {b.ibin('and', q, '1')}, 0")
        v = b.sel(odd, cos_r, sin_r)
        sign = b.ibin("shl", b.ibin("and", q, "2"), "30")      # quadrants 2, 3: negate
        v = b.from_bits(b.ibin("xor", b.bits(v), sign))
        if not cos:
            v = b.sel(b.cmp("oeq", x, b.c(0.0)), x, v)          # sin(-0) = -0
        slow = self.big_call("cos" if cos else "sin", F32, x, SINCOS_LIMIT_F32)
        return b.sel(fast, v, slow)

    def _sin(self, b: _Builder, x: str) -> str:
        if b.dt != F32:
            raise NotImplementedError("float64 sin is not inlined")
        return self._sincos_f32(b, x, cos=False)

    def _cos(self, b: _Builder, x: str) -> str:
        if b.dt != F32:
            raise NotImplementedError("float64 cos is not inlined")
        return self._sincos_f32(b, x, cos=True)

    # ---- float32 functions computed in float64 --------------------------------------------
    def _via_double(self, cname: str, x: str) -> str:
        fw = self.fw
        d = _Builder(fw, self.mod, F64)
        xd = fw.op(f"fpext float {x} to double")
        ad = d.intr("fabs", xd)
        if cname == "log2" or cname == "log10":
            scale = 1 / math.log(2) if cname == "log2" else 1 / math.log(10)
            y = d.mul(self._log(d, xd), d.c(scale))
        elif cname == "log1p":
            # 1 + x is exact in double for |x| >= 2^-29; below 2^-20 the series is exact enough
            small = d.cmp("olt", ad, d.c(2.0 ** -20))
            series = d.mul(xd, d.fma(xd, d.fma(xd, d.c(1 / 3), d.c(-0.5)), d.c(1.0)))
            y = d.sel(small, series, self._log(d, d.add(d.c(1.0), xd)))
        elif cname == "expm1":
            # exp(x) - 1 loses ~2^-52 absolutely: fine for |x| >= 2^-10; below, the series
            small = d.cmp("olt", ad, d.c(2.0 ** -10))
            series = d.fma(d.mul(xd, xd), d.fma(xd, d.c(1 / 6), d.c(0.5)), xd)
            y = d.sel(small, series, d.sub(self._exp(d, xd), d.c(1.0)))
            y = d.sel(d.cmp("oeq", xd, d.c(0.0)), xd, y)          # expm1(-0) = -0
        elif cname == "tanh":
            # |x| < 1/16: odd series (next term < 2^-36 relative); else (1 - t)/(1 + t),
            # t = exp(-2|x|), whose cancellation costs < 3 bits of double precision
            small = d.cmp("olt", ad, d.c(1 / 16))
            z = d.mul(xd, xd)
            series = d.fma(d.mul(xd, z), d.poly(z, (-1 / 3, 2 / 15, -17 / 315, 62 / 2835)), xd)
            t = self._exp(d, d.mul(d.intr("minnum", ad, d.c(20.0)), d.c(-2.0)))
            big = d.intr("copysign", d.div(d.sub(d.c(1.0), t), d.add(d.c(1.0), t)), xd)
            y = d.sel(small, series, big)
            y = d.sel(d.cmp("ueq", xd, d.c(0.0)), xd, y)          # NaN, and tanh(-0) = -0
        else:
            raise NotImplementedError(cname)
        return fw.op(f"fptrunc double {y} to float")
