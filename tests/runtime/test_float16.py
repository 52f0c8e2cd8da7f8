"""float16: the kernels' conversions to and from half, and their results against NumPy.

LLVM lowers half <-> float/double conversions (where the CPU has no instruction for them) to
compiler-rt calls the JIT could not resolve: the first such kernel jumped to address 0, the
next aborted LLVM.  The process now provides them (csrc/half.c).  Everything that runs a
kernel runs in a child process, so that a regression is a failed test, not a dead test run.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_child(code: str, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "OK" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


# ---- the crashes -----------------------------------------------------------------------------
@pytest.mark.parametrize("case", [
    "f = fl.compile(lambda a, s: a * s); r = f(h, 2.5); e = h * 2.5",
    "f = fl.compile(lambda a, s: a + s); r = f(h, np.float16(0.1)); e = h + np.float16(0.1)",
    "f = fl.compile(lambda a: a.astype(np.float64).astype(np.float16)); r = f(h); e = h",
    "f = fl.compile(lambda d: d.astype(np.float16)); r = f(d); e = d.astype(np.float16)",
    "f = fl.compile(lambda a: a.sum()); r = f(big); e = big.sum()",
    "f = fl.compile(lambda a: a.mean()); r = f(big); e = big.mean()",
    "f = fl.compile(lambda a, b: np.maximum(a, b) / 3.0); r = f(h, h[::-1]); "
    "e = np.maximum(h, h[::-1]) / 3.0",
], ids=["times-python-float", "numpy-half-scalar", "astype-f64-f16", "f64-to-f16",
        "large-sum", "large-mean", "chain"])
def test_float16_kernels_run(case):
    run_child(f"""
        import numpy as np
        import fastlaunch as fl
        rng = np.random.default_rng(0)
        h = (rng.standard_normal(1001) * 100).astype(np.float16)
        d = rng.standard_normal(1001) * 1e3
        big = rng.random(50_000).astype(np.float16)
        with np.errstate(all="ignore"):
            {case}
        assert np.asarray(r).dtype == np.asarray(e).dtype, (np.asarray(r).dtype, np.asarray(e).dtype)
        rel = 2e-3 if "sum" in {case!r} or "mean" in {case!r} else 0.0
        np.testing.assert_allclose(np.asarray(r, np.float64), np.asarray(e, np.float64), rtol=rel)
        print("OK")
    """)


# ---- the conversion routines, exhaustively, through the JIT ------------------------------------
CONVERSIONS = r'''
import numpy as np
import llvmlite.binding as llvm
from fastlaunch.backends import elf, get_backend

LOOP = """
define void @NAME(ptr %src, ptr %dst, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %p = getelementptr SRC, ptr %src, i64 %i
  %q = getelementptr DST, ptr %dst, i64 %i
  %v = load SRC, ptr %p
  %w = OP SRC %v to DST
  store DST %w, ptr %q
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""
FUNCS = {"h2f": ("half", "float", "fpext"), "h2d": ("half", "double", "fpext"),
         "f2h": ("float", "half", "fptrunc"), "d2h": ("double", "half", "fptrunc")}
NP = {"half": np.float16, "float": np.float32, "double": np.float64}
BITS = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}

def converters(cpu, features):
    """name -> f(array) running the conversion as machine code for this CPU, in the JIT."""
    import ctypes
    be = get_backend("cpu")
    ir = "".join(LOOP.replace("NAME", k).replace("SRC", s).replace("DST", d).replace("OP", o)
                 for k, (s, d, o) in FUNCS.items())
    mod = llvm.parse_assembly(ir)
    mod.triple = llvm.get_process_triple()
    tm = llvm.Target.from_triple(mod.triple).create_target_machine(
        cpu=cpu, features=features, opt=2, jit=True)
    obj = tm.emit_object(mod)
    needed = {s.name for s in elf.undefined_symbols(obj)}
    code = be._load(obj, "float16-test", "h2f", "")
    out = {}
    for name, (s, d, _) in FUNCS.items():
        addr = code.engine.get_function_address(name)
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(addr)
        def run(x, fn=fn, d=NP[d], keep=code):
            x = np.ascontiguousarray(x)
            y = np.empty(x.shape, d)
            fn(x.ctypes.data, y.ctypes.data, x.size)
            return y
        out[name] = run
    return out, needed

def same(got, want):
    """Bit for bit, except NaN payloads: a NaN must be a NaN of the same sign."""
    gb, wb = got.view(BITS[got.dtype.type]), want.view(BITS[want.dtype.type])
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    bad = np.flatnonzero((gb != wb) & ~nan)
    assert bad.size == 0, [(got.flat[i], want.flat[i]) for i in bad[:5]]

def half_boundaries(wide):
    """Every rounding boundary of half, as `wide` values: each midpoint between neighbouring
    halves (and past the largest: the overflow threshold), with its neighbours in `wide`."""
    h = np.arange(0, 0x7c00, dtype=np.uint16).view(np.float16).astype(np.float64)
    nxt = np.append(h[1:], 65536.0)
    mid = (h + nxt) / 2                          # exact in float32 and float64
    pts = np.concatenate([mid, h]).astype(wide)
    up, down = np.nextafter(pts, wide(np.inf)), np.nextafter(pts, wide(-np.inf))
    pts = np.concatenate([pts, up, down, pts * 2, pts / 2])
    return np.concatenate([pts, -pts])

def check(conv):
    with np.errstate(all="ignore"):
        every_half = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
        same(conv["h2f"](every_half), every_half.astype(np.float32))
        same(conv["h2d"](every_half), every_half.astype(np.float64))
        rng = np.random.default_rng(7)
        for wide, ubits in ((np.float32, np.uint32), (np.float64, np.uint64)):
            name = "f2h" if wide is np.float32 else "d2h"
            pts = half_boundaries(wide)
            same(conv[name](pts), pts.astype(np.float16))
            dense = rng.integers(0, np.iinfo(ubits).max, 2_000_000, dtype=ubits, endpoint=True)
            x = dense.view(wide)
            same(conv[name](x), x.astype(np.float16))
            # the half range, densely: exponents -30..17
            r = (rng.random(1_000_000) * 2 - 1) * np.exp2(rng.integers(-30, 18, 1_000_000))
            x = r.astype(wide)
            same(conv[name](x), x.astype(np.float16))
            specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99,
                                 65520, 65536, 1e30, 2.0**-24, 2.0**-25, 2.0**-26,
                                 3 * 2.0**-26, 2.0**-14, 2.0**-14 - 2.0**-25], wide)
            same(conv[name](specials), specials.astype(np.float16))
        # from double straight to half: no double rounding through float.  Just above a
        # midpoint by less than float32 resolves, so rounding via float lands on the
        # midpoint, then on the even neighbour: down.  Correct rounding goes up.
        mid = np.float64(1.0) + 2.0**-11
        x = np.array([mid + 2.0**-40, -(mid + 2.0**-40)])
        assert conv["d2h"](x).tolist() == [1.0009765625, -1.0009765625]

def check_nan_payloads(conv):
    """Our routines keep NaN payloads as NumPy's own conversions do.  Compared on the generic
    target only: an F16C instruction quiets a signalling NaN instead, and so does the float
    -> double step through which LLVM widens half to double."""
    with np.errstate(all="ignore"):
        nan_bits = np.array([0x7c01, 0xfe00, 0x7d55, 0xffff], np.uint16)
        f = conv["h2f"](nan_bits.view(np.float16)).view(np.uint32)
        assert f.tolist() == [0x7f800000 | ((b & 0x3ff) << 13) | ((b & 0x8000) << 16)
                              for b in nan_bits.tolist()]
        f_nans = np.array([0x7f800001, 0xffa00000, 0x7fc00000], np.uint32).view(np.float32)
        assert conv["f2h"](f_nans).view(np.uint16).tolist() == [0x7c01, 0xfd00, 0x7e00]
        d_nans = np.array([0x7ff0000000000001, 0xfff4000000000000], np.uint64).view(np.float64)
        assert conv["d2h"](d_nans).view(np.uint16).tolist() == [0x7c01, 0xfd00]
'''


def test_conversion_routines_exhaustively():
    """On a generic x86-64 (no F16C): every conversion is one of our routines, called by the
    machine code LLVM emits, so this checks the registration, the calling convention and the
    rounding at once."""
    run_child(CONVERSIONS + """
conv, needed = converters("x86-64", "")
assert {"__extendhfsf2", "__truncsfhf2", "__truncdfhf2"} <= needed, needed
check(conv)
check_nan_payloads(conv)
print("OK")
""")


def test_conversions_on_this_cpu_exhaustively():
    """With the host's own instructions (F16C / AVX512-FP16 where present), and our routines
    for the rest (double -> half has no instruction short of AVX512-FP16)."""
    run_child(CONVERSIONS + """
conv, needed = converters(llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
print(sorted(needed))
check(conv)
print("OK")
""")


def test_compiled_casts_match_numpy_for_every_half():
    """Through fl.compile: every half bit pattern to float32/float64 and back, and half
    arithmetic with a Python float (the weak scalar is rounded to half first, as NumPy)."""
    run_child("""
        import numpy as np
        import fastlaunch as fl
        every = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
        f = fl.compile(lambda h: (h.astype(np.float32), h.astype(np.float64),
                                  h.astype(np.float64).astype(np.float16), h * 0.1, h / 3.0))
        with np.errstate(all="ignore"):
            got = f(every)
            want = (every.astype(np.float32), every.astype(np.float64), every, every * 0.1,
                    every / 3.0)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            assert np.array_equal(np.isnan(g), np.isnan(w))
            ok = ~np.isnan(w)
            assert np.array_equal(g[ok].view(f"u{g.itemsize}"), w[ok].view(f"u{w.itemsize}"))
        print("OK")
    """)


def test_half_libcall_addresses_are_exposed():
    from fastlaunch import _core
    calls = _core.half_libcalls()
    assert set(calls) == {"__truncsfhf2", "__truncdfhf2", "__extendhfsf2", "__extendhfdf2"}
    assert all(isinstance(a, int) and a for a in calls.values())
