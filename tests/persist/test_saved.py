"""Saved programs: compiled.save(path, *args) in one process, fastlaunch.load(path) in another."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.program import saved

SAVE = textwrap.dedent("""
    import sys
    import numpy as np
    import fastlaunch as fl

    def step(p, m, v, target, lr):          # defined only in this process
        y = np.sin(p) + p * p
        r = y - target
        loss = np.mean(r * r)
        g = 2 * r * (np.cos(p) + 2 * p) / p.size
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        p = p - lr * m / (np.sqrt(v) + 1e-8)
        return {"p": p, "m": m, "v": v}, loss

    rng = np.random.default_rng(0)
    n = 777
    args = [rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
            rng.random(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)]
    fl.compile(step).save(sys.argv[1], *args, 1e-2)
    np.savez(sys.argv[2], *args)
    state, loss = step(*args, 0.05)
    np.savez(sys.argv[3], p=state["p"], m=state["m"], v=state["v"], loss=loss)
""")

LOAD = textwrap.dedent("""
    import sys
    import numpy as np
    import fastlaunch as fl
    from fastlaunch.backends import get_backend
    program = fl.load(sys.argv[1])
    a = np.load(sys.argv[2])
    args = [a[f"arr_{i}"] for i in range(4)]
    want = np.load(sys.argv[3])
    state, loss = program(*args, 0.05)
    for k in "pmv":
        np.testing.assert_allclose(state[k], want[k], rtol=2e-6, atol=1e-7)
    assert isinstance(loss, np.float32), type(loss)
    np.testing.assert_allclose(loss, want["loss"], rtol=1e-5)
    try:
        program(args[0].astype(np.float64), *args[1:], 0.05)
    except TypeError as err:
        print("TYPEERROR", err)
    print("COMPILED", get_backend("cpu").compile_count)
""")


def run(code, *argv, **env):
    done = subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_save_then_load_in_a_fresh_process(tmp_path):
    files = [tmp_path / "step.flp", tmp_path / "args.npz", tmp_path / "want.npz"]
    run(SAVE, *files, FASTLAUNCH_CACHE_DIR=str(tmp_path / "cache1"))
    # a fresh process with an empty kernel cache: the machine code comes from the file
    out = run(LOAD, *files, FASTLAUNCH_CACHE_DIR="")
    assert "COMPILED 0" in out
    assert "TYPEERROR" in out and "'p'" in out and "float64" in out


def test_other_target_recompiles_from_descriptions(tmp_path, monkeypatch):
    f = fl.compile(lambda x, y: (np.exp(x) * y).sum(axis=0))
    x, y = np.random.rand(30, 40), np.random.rand(30, 40)
    path = tmp_path / "p.flp"
    f.save(path, x, y)
    meta, program, objects = saved._read(path)
    from fastlaunch.backends import get_backend
    be = get_backend("cpu")
    before = be.compile_count
    monkeypatch.setattr(be, "target_key", be.target_key + "|another-cpu")
    monkeypatch.setattr(be, "_loaded", {})
    loaded = fl.load(path)
    np.testing.assert_allclose(loaded(x, y), (np.exp(x) * y).sum(axis=0))
    assert be.compile_count > before


def test_format_version_and_corruption_are_clear_errors(tmp_path):
    f = fl.compile(lambda x: x + 1)
    path = tmp_path / "p.flp"
    f.save(path, np.zeros(3))
    data = bytearray(path.read_bytes())
    future = bytearray(data)
    future[8:12] = (saved.FORMAT_VERSION + 1).to_bytes(4, "little")
    (tmp_path / "future.flp").write_bytes(bytes(future))
    with pytest.raises(fl.SavedProgramError, match="format version"):
        fl.load(tmp_path / "future.flp")
    data[-5] ^= 0xFF
    (tmp_path / "bad.flp").write_bytes(bytes(data))
    with pytest.raises(fl.SavedProgramError, match="corrupted"):
        fl.load(tmp_path / "bad.flp")
    (tmp_path / "short.flp").write_bytes(path.read_bytes()[:40])
    with pytest.raises(fl.SavedProgramError):
        fl.load(tmp_path / "short.flp")
    (tmp_path / "junk.flp").write_bytes(b"hello")
    with pytest.raises(fl.SavedProgramError, match="not a fastlaunch"):
        fl.load(tmp_path / "junk.flp")


def test_loaded_program_checks_its_signature(tmp_path):
    f = fl.compile(lambda x, s: x * s)
    path = tmp_path / "p.flp"
    f.save(path, np.ones((2, 3), np.float32), 2.0)
    g = fl.load(path)
    np.testing.assert_array_equal(g(np.ones((2, 3), np.float32), 3.0), np.full((2, 3), 3.0))
    with pytest.raises(TypeError, match=r"float32\[2, 3\]"):
        g(np.ones((3, 3), np.float32), 3.0)
    with pytest.raises(TypeError, match="float"):
        g(np.ones((2, 3), np.float32), 3)
    with pytest.raises(TypeError, match="int32"):
        g(np.ones((2, 3), np.int32), 3.0)


def test_a_python_list_argument_is_named_not_counted_as_leaves(tmp_path):
    """A list where the saved program takes an array: the message names that argument (it
    said "takes 2 array/scalar arguments, got 9", counting the list's items as leaves)."""
    def pair(x, y, ys):
        return x + y * ys[0] - ys[1]

    path = tmp_path / "p.flp"
    x = np.ones(4)
    fl.compile(pair).save(path, x, x, [x, x])
    g = fl.load(path)
    np.testing.assert_array_equal(g(x, x, [x, x]), pair(x, x, [x, x]))

    def message(*args):
        with pytest.raises(TypeError) as info:
            g(*args)
        return str(info.value)

    assert message([1.0] * 8, x, [x, x]) == ("argument 'x': expected an array float64[4], got "
                                             "a Python list (pass np.asarray(...))")
    assert message(x, (1.0, 2.0, 3.0, 4.0), [x, x]) == (
        "argument 'y': expected an array float64[4], got a Python tuple (pass np.asarray(...))")
    assert message(x, x, [x, [1.0] * 4]) == (
        "argument 'ys'[1]: expected an array float64[4], got a Python list (pass "
        "np.asarray(...))")
    assert message(x, x, [x, x, x]) == ("argument 'ys': expected a container of 2 "
                                        "arrays/scalars, got a Python list of 3 items")
    assert message(x, [x, x]) == ("this saved program takes 3 non-static arguments (argument "
                                  "'x', argument 'y', argument 'ys'), got 2")


def test_constants_and_in_place_updates_survive(tmp_path):
    table = np.arange(5.0)

    def fn(x, i):
        x += fl.asarray(table)[i]    # table[i] would index a NumPy array by a tracer
        return x.sum()

    f = fl.compile(fn)
    path = tmp_path / "p.flp"
    f.save(path, np.zeros(4), np.array([0, 1, 2, 4]))
    g = fl.load(path)
    x = np.ones(4)
    total = g(x, np.array([4, 3, 2, 1]))
    np.testing.assert_array_equal(x, 1 + np.array([4.0, 3, 2, 1]))
    assert total == x.sum()


def test_bincount_range_check_survives_save_and_load(tmp_path):
    f = fl.compile(lambda x, w: (np.bincount(x, minlength=5), np.bincount(x, w, 5)))
    x, w = np.array([0, 4, 2, 2]), np.arange(4.0)
    path = tmp_path / "b.flp"
    f.save(path, x, w)
    loaded = fl.load(path)
    got = loaded(x, w)
    np.testing.assert_array_equal(got[0], np.bincount(x, minlength=5))
    np.testing.assert_array_equal(got[1], np.bincount(x, w, 5))
    with pytest.raises(ValueError, match="minlength"):
        loaded(np.array([0, 5, 1, 1]), w)
    with pytest.raises(ValueError, match="minlength"):
        loaded(np.array([0, -1, 1, 1]), w)


def test_svd_and_lstsq_survive_save_and_load(tmp_path):
    """LIBCALLs of gesdd and gelsd (rcond as an operand) are verified on load and run as
    before; a NaN is still NumPy's LinAlgError."""
    def f(a, b):
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        x, _, rank, sv = np.linalg.lstsq(a, b, rcond=None)
        return u, s, vh, x, rank, sv, np.linalg.pinv(a)

    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((7, 4)), rng.standard_normal((7, 2))
    path = tmp_path / "svd.flp"
    fl.compile(f).save(path, a, b)
    loaded = fl.load(path)
    for got, want in zip(loaded(a, b), fl.compile(f)(a, b)):
        np.testing.assert_array_equal(got, want)
    bad = a.copy()
    bad[0, 0] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
        loaded(bad, b)
