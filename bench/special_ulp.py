"""Accuracy of fastlaunch's special functions in ULP against SciPy (and NumPy), on dense
samples; writes the table of docs/special-functions.md.

    python bench/special_ulp.py                  # print the table (Markdown)
    python bench/special_ulp.py --write          # also rewrite docs/special-functions.md
    python bench/special_ulp.py --coefficients   # recompute the I0 Chebyshev coefficients
                                                 # (mpmath) that fastlaunch/frontend/special.py holds

For each function and dtype: the ULP distance between fastlaunch's compiled result and the
reference (SciPy's ufunc on the same dtype; NumPy for np.sinc, np.i0, np.logaddexp*), over
`--n` points spread over the domain given below (uniform plus log-spaced magnitudes).  ULP
distance counts the representable values between the two results; results that are both NaN,
or the same infinity, count 0; a NaN against a number, or different infinities, is counted in
the "mismatched specials" column.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import fastlaunch as fl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "special-functions.md")


def ordered(a: np.ndarray) -> np.ndarray:
    """Floats mapped to integers in the order of their values (adjacent floats differ by 1)."""
    it = np.int64 if a.dtype == np.float64 else np.int32
    i = a.view(it).astype(np.int64)
    lo = -2 ** 63 if it is np.int64 else -2 ** 31
    return np.where(i < 0, lo - i, i)


def ulp_distance(got: np.ndarray, want: np.ndarray):
    """(ULP distances where both are finite or equal, number of mismatched specials)."""
    both_nan = np.isnan(got) & np.isnan(want)
    same = (got == want) | both_nan
    finite = np.isfinite(got) & np.isfinite(want)
    d = np.zeros(got.shape, np.float64)
    a, b = ordered(got[finite]), ordered(want[finite])
    # the difference of two int64s, exact in uint64 arithmetic (float64 would round it)
    lo, hi = np.minimum(a, b).view(np.uint64), np.maximum(a, b).view(np.uint64)
    d[finite] = (hi - lo).astype(np.float64)
    bad = ~(same | finite)
    return d[~bad], int(bad.sum())


def samples(lo, hi, n, rng, positive=False):
    u = rng.uniform(lo, hi, n // 2)
    mags = np.exp(rng.uniform(np.log(1e-300), np.log(max(abs(lo), abs(hi))), n - n // 2))
    if not positive:
        mags *= rng.choice([-1.0, 1.0], mags.shape)
    m = mags[(mags >= lo) & (mags <= hi)]
    return np.concatenate([u, m, [lo, hi]])


def functions():
    import scipy.special as sp
    one = {
        # name: (traced body, reference, domain (lo, hi), positive-only log samples)
        "scipy.special.erf": (sp.erf, sp.erf, (-7, 7)),
        "scipy.special.erfc": (sp.erfc, sp.erfc, (-7, 26.5)),
        "scipy.special.gammaln": (sp.gammaln, sp.gammaln, (-60, 1e4)),
        "scipy.special.expit": (sp.expit, sp.expit, (-760, 760)),
        "scipy.special.logit": (sp.logit, sp.logit, (0, 1)),
        "scipy.special.log_expit": (sp.log_expit, sp.log_expit, (-760, 760)),
        "scipy.special.ndtr": (sp.ndtr, sp.ndtr, (-37.5, 10)),
        "scipy.special.i0": (sp.i0, sp.i0, (-720, 720)),
        "scipy.special.i0e": (sp.i0e, sp.i0e, (-1e4, 1e4)),
        "np.i0": (np.i0, np.i0, (-720, 720)),
        "np.sinc": (np.sinc, np.sinc, (-100, 100)),
    }
    two = {
        "scipy.special.xlogy": (sp.xlogy, sp.xlogy, (-10, 10), (0, 1e3)),
        "scipy.special.xlog1py": (sp.xlog1py, sp.xlog1py, (-10, 10), (-1, 1e3)),
        "np.logaddexp": (np.logaddexp, np.logaddexp, (-800, 800), (-800, 800)),
        "np.logaddexp2": (np.logaddexp2, np.logaddexp2, (-1100, 1100), (-1100, 1100)),
    }
    return one, two


def measure(n: int, seed: int = 0):
    one, two = functions()
    rng = np.random.default_rng(seed)
    rows = []
    for dt in (np.float32, np.float64):
        for name, (fn, ref, (lo, hi)) in one.items():
            x = samples(lo, hi, n, rng, positive=lo >= 0).astype(dt)
            got = fl.compile(lambda x, fn=fn: fn(x))(x)
            with np.errstate(all="ignore"):
                want = ref(x)
            rows.append(_row(name, dt, got, want, (x,)))
        for name, (fn, ref, (lo1, hi1), (lo2, hi2)) in two.items():
            x = samples(lo1, hi1, n, rng).astype(dt)
            y = samples(lo2, hi2, 3 * len(x), rng, positive=lo2 >= 0)[:len(x)].astype(dt)
            x[:len(x) // 50] = 0                  # the x == 0 rule of xlogy / xlog1py
            got = fl.compile(lambda x, y, fn=fn: fn(x, y))(x, y)
            with np.errstate(all="ignore"):
                want = ref(x, y)
            rows.append(_row(name, dt, got, want, (x, y)))
    return rows


def _truth(name: str):
    """The function in mpmath (50 digits), for the points where we and the reference differ."""
    import mpmath as mp

    def lae(x, y, base):      # max + log_b(1 + b^-|x - y|): no cancellation near 0
        return max(x, y) + mp.log1p(mp.power(base, -abs(x - y))) / mp.log(base)
    one = {
        "erf": mp.erf, "erfc": mp.erfc, "gammaln": lambda x: mp.log(abs(mp.gamma(x))),
        "expit": lambda x: 1 / (1 + mp.exp(-x)), "logit": lambda x: mp.log(x / (1 - x)),
        "log_expit": lambda x: -mp.log1p(mp.exp(-x)), "ndtr": mp.ncdf,
        "i0": lambda x: mp.besseli(0, x), "i0e": lambda x: mp.exp(-abs(x)) * mp.besseli(0, x),
        "sinc": lambda x: mp.sinc(mp.pi * x) if x else mp.mpf(1),
    }
    two = {"xlogy": lambda x, y: 0 if x == 0 else x * mp.log(y),
           "xlog1py": lambda x, y: 0 if x == 0 else x * mp.log1p(y),
           "logaddexp": lambda x, y: lae(x, y, mp.e), "logaddexp2": lambda x, y: lae(x, y, 2)}
    short = name.rsplit(".", 1)[1]
    return one.get(short), two.get(short)


def _truth_ulps(name, dt, args, got, want, d_all, k=200):
    """Max ULP of ours and of the reference against the correctly rounded value, at the k
    points where the two differ most."""
    import mpmath as mp
    mp.mp.dps = 50
    f1, f2 = _truth(name)
    worst = np.argsort(d_all)[-k:]
    worst = worst[d_all[worst] > 0]
    ours, theirs = [0.0], [0.0]
    for i in worst:
        try:
            with mp.workdps(50):
                v = f1(mp.mpf(float(args[0][i]))) if f1 else \
                    f2(mp.mpf(float(args[0][i])), mp.mpf(float(args[1][i])))
            t = np.array(float(v), np.float64).astype(dt)
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
        if not np.isfinite(t):
            continue
        for res, out in ((got, ours), (want, theirs)):
            dd, bad = ulp_distance(np.array([res[i]]), np.array([t]))
            if not bad:
                out.append(float(dd.max(initial=0)))
    return max(ours), max(theirs)


def _row(name, dt, got, want, args=()):
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    d, bad = ulp_distance(got, want)
    d_all = np.zeros(got.shape)
    both = np.isfinite(got) & np.isfinite(want)
    d_all[both] = ulp_distance(got[both], want[both])[0]
    ours, theirs = _truth_ulps(name, np.dtype(dt), args, got, want, d_all) if args else (0, 0)
    return {"function": name, "dtype": np.dtype(dt).name, "points": int(got.size),
            "max": float(d.max(initial=0)), "p999": float(np.percentile(d, 99.9)) if d.size else 0,
            "mean": float(d.mean()) if d.size else 0.0, "exact": float((d == 0).mean()),
            "specials": bad, "ours": ours, "theirs": theirs}


def table(rows) -> str:
    out = ["| function | dtype | points | max ULP | 99.9% ULP | mean ULP | equal | mismatched "
           "specials | worst 200: ours / reference vs exact |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['function']}` | {r['dtype']} | {r['points']} | {r['max']:.0f} | "
                   f"{r['p999']:.0f} | {r['mean']:.3f} | {100 * r['exact']:.1f}% | "
                   f"{r['specials']} | {r['ours']:.0f} / {r['theirs']:.0f} |")
    return "\n".join(out)


def coefficients():
    import mpmath as mp
    mp.mp.dps = 50

    def cheb(f, nodes=90):
        th = [mp.pi * (j + mp.mpf(1) / 2) / nodes for j in range(nodes)]
        vals = [f(mp.cos(t)) for t in th]
        c = [2 * mp.fsum(v * mp.cos(k * t) for v, t in zip(vals, th)) / nodes
             for k in range(nodes)]
        c[0] /= 2
        last = max(k for k in range(nodes) if abs(c[k]) > 1e-19)
        return [mp.nstr(x, 20) for x in c[:last + 1]]

    small = cheb(lambda t: mp.exp(-(4 * (t + 1))) * mp.besseli(0, 4 * (t + 1)))
    large = cheb(lambda u: mp.sqrt(16 / (u + 1)) * mp.exp(-16 / (u + 1))
                 * mp.besseli(0, 16 / (u + 1)))
    print("I0_SMALL =", ", ".join(small))
    print("I0_LARGE =", ", ".join(large))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--coefficients", action="store_true")
    args = ap.parse_args(argv)
    if args.coefficients:
        coefficients()
        return 0
    text = table(measure(args.n))
    print(text)
    if args.write:
        with open(DOC) as f:
            doc = f.read()
        start, end = "<!-- ulp-table -->", "<!-- /ulp-table -->"
        i, j = doc.index(start) + len(start), doc.index(end)
        with open(DOC, "w") as f:
            f.write(doc[:i] + "\n" + text + "\n" + doc[j:])
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
