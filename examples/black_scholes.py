"""Black-Scholes call and put prices in plain NumPy (normal CDF by Abramowitz-Stegun 26.2.17)."""
import numpy as np


def normal_cdf(x):
    t = 1.0 / (1.0 + 0.2316419 * np.abs(x))
    poly = t * (0.319381530 + t * (-0.356563782 + t * (1.781477937 + t * (-1.821255978
                                                                          + t * 1.330274429))))
    tail = 0.3989422804014327 * np.exp(-0.5 * x * x) * poly
    return np.where(x >= 0, 1.0 - tail, tail)


def black_scholes(spot, strike, years, rate, vol):
    sqrt_t = np.sqrt(years)
    d1 = (np.log(spot / strike) + (rate + 0.5 * vol * vol) * years) / (vol * sqrt_t)
    d2 = d1 - vol * sqrt_t
    discount = np.exp(-rate * years)
    call = spot * normal_cdf(d1) - strike * discount * normal_cdf(d2)
    put = strike * discount * normal_cdf(-d2) - spot * normal_cdf(-d1)
    return call, put


def example_inputs(n=1_000_000, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    spot = rng.uniform(10, 100, n).astype(dtype)
    strike = rng.uniform(10, 100, n).astype(dtype)
    years = rng.uniform(0.1, 2.0, n).astype(dtype)
    return spot, strike, years, 0.02, 0.3


if __name__ == "__main__":
    from _run import compare
    compare(black_scholes, example_inputs())
