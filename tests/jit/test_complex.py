"""Complex numbers through the whole pipeline: real-code patterns checked against NumPy,
complex scalar arguments (replayed with new values, not re-traced), static complex arguments,
in-place updates of complex arguments, saved programs, the devsim backend, the generated code
(parts loaded at stride 2, vectorised) and the clean refusals."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

RNG = np.random.default_rng(1234)


def crandn(*shape, dtype=np.complex128):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def close(got, want, rtol=1e-12, atol=1e-13):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


SIZES = [1, 2, 3, 7, 16, 33, 100, 257, 1000, 4099]


# ---- patterns from signal processing and physics code ------------------------------------------
@pytest.mark.parametrize("n", SIZES)
def test_normalise_by_magnitude(n):
    def unit(z):
        mag = np.abs(z)
        return np.where(mag > 0, z / np.where(mag > 0, mag, 1), 0)
    z = crandn(n)
    z[::5] = 0
    close(fl.compile(unit)(z), unit(z))


@pytest.mark.parametrize("n", [8, 100, 1000])
def test_phase_evolution(n):
    """psi(t + dt) = exp(-i dt E) psi(t), a few steps, then the norm and an expectation."""
    def evolve(psi, energies, dt):
        for _ in range(5):
            psi = np.exp(-1j * dt * energies) * psi
        norm = np.sqrt(np.sum((psi * psi.conj()).real))
        return psi / norm, np.vdot(psi, energies * psi).real
    psi, energies = crandn(n), RNG.uniform(-3, 3, n)
    f = fl.compile(evolve)
    for dt in (0.01, 0.3, -1.5):            # a Python float argument: one trace
        got = f(psi, energies, dt)
        want = evolve(psi, energies, dt)
        close(got[0], want[0], rtol=1e-11)
        close(got[1], want[1], rtol=1e-11)
    assert len(f.traces) == 1


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("shape", [(5, 3), (64, 64), (300, 17)])
def test_matrix_vector(dtype, shape):
    a, v = crandn(*shape, dtype=dtype), crandn(shape[1], dtype=dtype)
    tol = 1e-4 if dtype == np.complex64 else 1e-12
    f = fl.compile(lambda a, v: (a @ v, a.conj().T @ (a @ v), np.dot(v, v)))
    for g, w in zip(f(a, v), (a @ v, a.conj().T @ (a @ v), np.dot(v, v))):
        close(g, w, rtol=tol, atol=tol * shape[1])


def test_magnitude_squared_and_power_spectrum():
    def power(z):
        return (z * z.conj()).real, z.real ** 2 + z.imag ** 2, np.abs(z) ** 2
    z = crandn(4, 250)
    for g, w in zip(fl.compile(power)(z), power(z)):
        close(g, w, rtol=1e-12)


def test_mandelbrot_fixed_iterations():
    def mandelbrot(c):
        z = np.zeros_like(c)
        alive = np.ones(c.shape, bool)
        for _ in range(30):
            z = np.where(alive, z * z + c, z)
            alive = alive & (np.abs(z) < 2)
        return alive, z
    xs, ys = np.meshgrid(np.linspace(-2, 0.6, 61), np.linspace(-1.2, 1.2, 41))
    c = xs + 1j * ys
    got, want = fl.compile(mandelbrot)(c), mandelbrot(c)
    np.testing.assert_array_equal(got[0], want[0])
    close(got[1], want[1], rtol=1e-9, atol=1e-12)


def test_discrete_fourier_transform_by_matrix():
    """A DFT written out as a matrix product (np.fft itself is refused)."""
    def dft(x):
        n = x.shape[0]
        k = np.arange(n)
        w = np.exp(-2j * np.pi * np.outer(k, k) / n)
        return w @ x
    x = RNG.standard_normal(64)
    got = fl.compile(dft)(x)
    close(got, np.fft.fft(x), rtol=1e-10, atol=1e-10)


# ---- scalars -----------------------------------------------------------------------------------
def test_complex_scalar_arguments_replay_with_new_values():
    f = fl.compile(lambda z, s: z * s + s)
    z = crandn(10)
    for s in (2 - 3j, 1j, -0.5 + 0j, complex(np.inf, 1)):
        with np.errstate(all="ignore"):
            close(f(z, s), z * s + s)
    assert len(f.traces) == 1
    # NEP 50: a Python complex is weak, a NumPy complex128 scalar is not
    z64 = crandn(10, dtype=np.complex64)
    assert f(z64, 1j).dtype == np.complex64
    assert f(z64, np.complex128(1j)).dtype == np.complex128
    assert f(z64, np.complex64(1j)).dtype == np.complex64
    assert f(np.arange(3.0, dtype=np.float32), 2j).dtype == np.complex64


def test_complex_scalar_argument_in_containers_and_as_result():
    f = fl.compile(lambda d: (d["z"] * d["s"], d["s"].real, (d["z"] * d["s"]).sum()))
    z = crandn(6)
    got = f({"z": z, "s": 1 + 2j})
    close(got[0], z * (1 + 2j))
    assert got[1] == 1.0
    assert isinstance(got[2], np.complex128)
    close(got[2], (z * (1 + 2j)).sum())


def test_static_complex_argument():
    f = fl.compile(lambda z, s: z ** s, static_argnames=("s",))
    z = crandn(20)
    close(f(z, s=3 + 0j), z ** (3 + 0j))
    close(f(z, s=0.5j), z ** 0.5j, rtol=1e-12)
    assert len(f.traces) == 2


def test_literals_in_the_function():
    def body(x):
        return 1j * x, x + 0j, (2 + 1j) * x - 3j, np.exp(1j * x)
    x = RNG.standard_normal(50)
    for g, w in zip(fl.compile(body)(x), body(x)):
        close(g, w)


# ---- memory, layouts, in place -------------------------------------------------------------------
def test_odd_layouts():
    base = crandn(9, 12)
    for view in (base[::2, ::-3], base.T, base[:, 5], np.broadcast_to(base[:1], (4, 12)),
                 base[1:, 1:].T[::2]):
        close(fl.compile(lambda v: v * (1 - 2j) + v.conj())(view), view * (1 - 2j) + view.conj())


def test_misaligned_and_byteswapped_arguments():
    raw = np.zeros(16 * 10 + 8, np.uint8)
    mis = raw[8:].view(np.complex128)
    mis[:] = crandn(10)
    swapped = crandn(10).astype(">c16")
    f = fl.compile(lambda a: a * 2j)
    close(f(mis), mis * 2j)
    close(f(swapped), swapped.astype(np.complex128) * 2j)


def test_in_place_updates():
    def update(z, w, idx):
        z *= w
        z.imag = np.abs(w)
        np.add.at(z, idx, 1 + 1j)
        z[z.real < 0] = 0
    z, w = crandn(40), crandn(40)
    idx = np.array([1, 1, 5, 39, -1])
    z1, z2 = z.copy(), z.copy()
    update(z1, w, idx)
    f = fl.compile(update)
    f(z2, w, idx)
    close(z2, z1)
    z3 = z.copy()
    f(z3, w, idx)
    close(z3, z1)


def test_writing_into_a_part_view_is_refused():
    def body(z):
        z.real[0] = 1.0
        return z
    with pytest.raises(fl.TracingError, match="x.real of a complex array"):
        fl.compile(body)(crandn(3))


def test_complex_to_real_astype_warns_and_drops_the_imaginary_part():
    f = fl.compile(lambda z: z.astype(np.float32))
    z = crandn(5)
    with pytest.warns(np.exceptions.ComplexWarning):
        got = f(z)
    close(got, z.real.astype(np.float32))


# ---- programs, backends, code --------------------------------------------------------------------
def test_saved_program_with_complex_arguments(tmp_path):
    f = fl.compile(lambda z, s: (z * s).sum() + np.abs(z))
    z = crandn(7)
    path = tmp_path / "c.flp"
    f.save(path, z, 1 + 1j)
    for machine_code in (True, False):
        g = fl.load(path, machine_code=machine_code)
        close(g(z, 3 - 1j), (z * (3 - 1j)).sum() + np.abs(z))
        with pytest.raises(TypeError):
            g(z.astype(np.complex64), 1j)


def test_devsim_backend():
    f = fl.compile(lambda a, b: (a @ b, np.cumsum(a, axis=0), a.T * 1j), backend="devsim")
    a, b = crandn(5, 5), crandn(5)
    for g, w in zip(f(a, b), (a @ b, np.cumsum(a, axis=0), a.T * 1j)):
        close(g, w)


def test_generated_code_loads_parts_and_vectorises():
    """A complex kernel is real arithmetic on parts loaded at stride 2: the loop vectoriser
    de-interleaves them (vector registers and shuffles in the machine code)."""
    import re
    from fastlaunch.backends import get_backend
    f = fl.compile(lambda a, b: a * b + a / b)
    a = crandn(1000)
    lowered = f.lower(a, a)
    (kernel,) = lowered.plan.kernels
    text = get_backend("cpu").source(kernel)
    assert "load double" in text and "{ double, double }" in text
    asm = get_backend("cpu").assembly(kernel)
    assert re.search(r"%[xyz]mm", asm) and re.search(r"unpck|perm|shuf", asm)
    assert not re.search(r"call\s", asm)          # no helper calls for complex arithmetic


def test_refusals_name_the_function():
    z = crandn(4)
    for fn, name in ((np.prod, "np.prod"), (np.sort, "np.sort"), (np.max, "np.max"),
                     (np.tanh, "np.tanh"), (np.fft.fft, "np.fft.fft"),
                     (lambda x: np.maximum.at(x, [0], 1j), "scatter with mode")):
        with pytest.raises(fl.TracingError, match=name.replace(".", r"\.")):
            fl.compile(fn)(z.copy())


def test_parts_and_magnitude_of_a_python_complex_are_weak_floats():
    """abs(s), s.real, s.imag of a Python complex argument are Python floats (NEP 50 weak):
    a float32 array stays float32."""
    f = fl.compile(lambda x, s: (x * abs(s), x * s.real, x - s.imag))
    x = np.arange(4, dtype=np.float32)
    s = 3 - 4j
    for got, want in zip(f(x, s), (x * abs(s), x * s.real, x - s.imag)):
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_allclose(got, want)
