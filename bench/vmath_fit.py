"""Fit the polynomial coefficients of fastlaunch/codegen/vmath.py (run once; paste the output).

Each polynomial is a Chebyshev interpolant (near-minimax) of a smooth auxiliary function on the
interval its range reduction leaves, computed with mpmath at 60 digits and then rounded to the
target precision.  The auxiliary functions have their removable singularities divided out, so
the fit is of a function that is far from zero on the interval.

    python bench/vmath_fit.py
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 60


def fit(name, f, a, b, degree, dtype):
    coeffs, err = mp.chebyfit(f, [a, b], degree + 1, error=True)
    coeffs = coeffs[::-1]           # constant term first
    vals = [float(np.array(float(c), dtype)) for c in coeffs]
    print(f"{name} = ({', '.join(repr(v) for v in vals)},)   # fit error {mp.nstr(err, 3)}")


def safe(g, at0):
    return lambda t: at0 if t == 0 else g(t)


LN2H = mp.log(2) / 2
PIO4 = mp.pi / 4
S_MAX = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)          # |(m - 1) / (m + 1)| for m in [sqrt(.5), sqrt(2)]

expq = safe(lambda r: (mp.exp(r) - 1 - r) / r**2, mp.mpf(1) / 2)
exp2p = safe(lambda r: (mp.power(2, r) - 1) / r, mp.log(2))
sins = safe(lambda z: (mp.sin(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3, -mp.mpf(1) / 6)
cosc = safe(lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z**2, mp.mpf(1) / 24)
# log(1+f) = f - hfsq + s*(hfsq + z*P(z)), s = f/(2+f), z = s*s: z*P(z) = (2 atanh s - 2 s)/s
logp = safe(lambda z: (2 * mp.atanh(mp.sqrt(z)) - 2 * mp.sqrt(z)) / (mp.sqrt(z) * z), mp.mpf(2) / 3)

fit("EXPF_Q", expq, -LN2H * 1.01, LN2H * 1.01, 4, np.float32)
fit("EXP2F_P", exp2p, -0.505, 0.505, 5, np.float32)
fit("SINF_S", sins, 0, (PIO4 * 1.01) ** 2, 3, np.float32)
fit("COSF_C", cosc, 0, (PIO4 * 1.01) ** 2, 3, np.float32)
fit("LOGF_P", logp, 0, (S_MAX * 1.01) ** 2, 3, np.float32)
fit("EXP_Q", expq, -LN2H * 1.01, LN2H * 1.01, 10, np.float64)
fit("LOG_P", logp, 0, (S_MAX * 1.01) ** 2, 7, np.float64)
