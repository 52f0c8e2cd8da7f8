"""Non-temporal ("streaming") stores of large kernels (CPUSchedule.stream): which kernels
stream, the marking of the optimised IR, the machine code, and that results are NumPy's
bit for bit whether or not a buffer allows them (misaligned caller arrays, tails, dtypes)."""
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.backends import get_backend
from fastlaunch.backends.cpu_schedule import STREAM_BYTES
from fastlaunch.codegen.llvm_cpu import STREAM_MARK, mark_nontemporal

HOST = get_backend("cpu")
# float32 elements of one input and one output over the streaming threshold
BIG = STREAM_BYTES // 8 + 4096 + 5          # + 5: a tail that is no whole vector


def _kernels(fn, *args):
    return [k for k in fl.compile(fn).lower(*args).plan.kernels if hasattr(k, "stores")]


def _chain(x, y):
    a = np.sqrt(np.abs(x * 1.5 + y) + 1.0) * y - x
    return a / (a + 1.0)


# ---- which kernels stream ------------------------------------------------------------------
def test_large_map_streams_and_small_one_does_not():
    x = np.ones(BIG, np.float32)
    (big,) = _kernels(lambda a: a * 2.0 + 1.0, x)
    assert big.schedule.stream and big.schedule.describe().endswith(" stream")
    (small,) = _kernels(lambda a: a * 2.0 + 1.0, x[:65536])
    assert not small.schedule.stream and "stream" not in small.schedule.describe()


def test_threshold_counts_every_buffer_read_and_written():
    # one input and one output of n float32 elements move 8n bytes
    n = STREAM_BYTES // 8
    (at,) = _kernels(lambda a: a + 1.0, np.ones(n, np.float32))
    (above,) = _kernels(lambda a: a + 1.0, np.ones(n + 16, np.float32))
    assert not at.schedule.stream and above.schedule.stream


def test_tiled_and_serial_kernels_do_not_stream():
    a = np.ones((4096, 2048), np.float32)          # column sums: a tiled reduction
    (cols,) = _kernels(lambda m: m.sum(axis=0), a)
    assert cols.schedule.tile is not None and not cols.schedule.stream
    idx = np.zeros(BIG, np.int64)

    def scatter(v, i):
        out = np.zeros(16, np.float32)
        np.add.at(out, i, v)
        return out
    ks = _kernels(scatter, np.ones(BIG, np.float32), idx)
    assert not any(k.schedule.stream for k in ks if k.schedule.work_per_item < 0)


# ---- the marking of the optimised IR --------------------------------------------------------
_IR = """define void @k(ptr %out2, ptr %w0) {
entry:
  %buf = alloca [64 x float], align 64
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %n, %loop ]
  %p = getelementptr inbounds float, ptr %out2, i64 %i
  %q = getelementptr inbounds float, ptr %p, i64 16
  %s = getelementptr inbounds float, ptr %buf, i64 %i
  %r = getelementptr inbounds float, ptr %w0, i64 %i
  store <16 x float> zeroinitializer, ptr %p, align 64
  store <16 x float> zeroinitializer, ptr %q, align 64, !noalias !0
  store <16 x float> zeroinitializer, ptr %s, align 64
  store <16 x float> zeroinitializer, ptr %r, align 64
  store <16 x float> zeroinitializer, ptr %p, align 4
  store <8 x float> zeroinitializer, ptr %p, align 32
  store float 0.0, ptr %p, align 64
  %n = add i64 %i, 32
  br label %loop
}
!0 = !{}
"""


def test_mark_nontemporal_marks_aligned_vector_stores_into_stored_buffers_only():
    out = mark_nontemporal(_IR + STREAM_MARK + "\n")
    lines = [ln.strip() for ln in out.split("\n") if ln.strip().startswith("store")]
    marked = [ln for ln in lines if "!nontemporal" in ln]
    # %p and %q derive from the stored word %out2, with their full alignment; not the stack
    # buffer %s, not %r (an input word), not an under-aligned or a scalar store
    assert [ln.split("ptr ")[1].split(",")[0] for ln in marked] == ["%p", "%q", "%p"]
    assert "align 32, !nontemporal" in marked[2]
    assert "!noalias !0, !nontemporal !1" in marked[1] and out.rstrip().endswith("!1 = !{i32 1}")


def test_mark_nontemporal_leaves_other_modules_alone():
    assert mark_nontemporal(_IR) is _IR


@pytest.mark.skipif("+avx" not in HOST.features.split(",") or not HOST.math.streaming_stores,
                    reason="host has no AVX non-temporal vector stores")
def test_streaming_kernel_machine_code_has_nontemporal_stores_and_a_fence():
    x = np.ones(BIG, np.float32)
    (k,) = _kernels(_chain, x, x)
    asm = HOST.assembly(k)
    assert "vmovntp" in asm and "sfence" in asm
    (small,) = _kernels(_chain, x[:4096], x[:4096])
    assert "vmovnt" not in HOST.assembly(small) and "sfence" not in HOST.assembly(small)


# ---- results --------------------------------------------------------------------------------
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_streamed_results_match_numpy_for_any_alignment_and_tail(offset):
    rng = np.random.default_rng(offset)
    n = BIG - offset
    x = rng.standard_normal(n + 8).astype(np.float32)[offset:offset + n]
    y = rng.standard_normal(n + 8).astype(np.float32)[offset:offset + n]
    f = fl.compile(_chain)
    got = f(x, y)
    assert got.ctypes.data % 64 == 0           # a pool block: the streaming copy runs
    np.testing.assert_array_equal(got, _chain(x, y))
    np.testing.assert_array_equal(f(x, y), _chain(x, y))    # replayed


@pytest.mark.parametrize("misalign", [0, 4, 8, 60])
def test_in_place_update_of_a_caller_array_at_any_alignment(misalign):
    """The output is the caller's array: streamed where it is 64-byte aligned (misalign 0),
    else stored as usual; either way every element is written, and only those."""
    def update(a, b):
        a[...] = a * 0.5 + b
    rng = np.random.default_rng(7)
    n = BIG
    base = rng.standard_normal(n + 64).astype(np.float32)
    offset = ((64 - base.ctypes.data % 64) % 64 + misalign) // 4
    assert (base.ctypes.data + 4 * offset) % 64 == misalign
    b = rng.standard_normal(n).astype(np.float32)
    want = base.copy()
    want[offset:offset + n] = want[offset:offset + n] * 0.5 + b
    a = base[offset:offset + n]
    (k,) = _kernels(update, a.copy(), b)
    assert k.schedule.stream
    fl.compile(update)(a, b)
    np.testing.assert_array_equal(base, want)


def test_mixed_dtype_outputs_stream_and_match_numpy():
    def several(x):
        return x.astype(np.float64) * 3.0, (x > 0).astype(np.int8), x * 2.0
    x = np.random.default_rng(3).standard_normal(BIG - 7).astype(np.float32)
    got = fl.compile(several)(x)
    for g, w in zip(got, several(x)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_large_pool_blocks_are_cache_line_aligned_and_reused():
    f = fl.compile(lambda a: a + 1.0)
    x = np.ones(BIG, np.float32)
    first = f(x)
    addr = first.ctypes.data
    # cache-line aligned, and placed within its 4 KiB page so that stores into it do not
    # 4K-alias the loads of NumPy's page-aligned arrays (csrc/runtime.c, HUGE_DATA)
    assert addr % 64 == 0 and addr % 4096 == 3072 + 64
    del first
    again = f(x)
    assert again.ctypes.data == addr            # the freed block came back from the pool
    np.testing.assert_array_equal(again, x + 1.0)


def test_stream_threshold_follows_the_last_level_cache(tmp_path):
    from fastlaunch.backends.cpu_schedule import last_level_cache_bytes
    for name, level, kind, size in (("index0", 1, "Data", "48K"), ("index1", 1, "Instruction",
                                                                     "32K"),
                                    ("index2", 2, "Unified", "1024K"),
                                    ("index3", 3, "Unified", "96M")):
        d = tmp_path / name
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(root=str(tmp_path)) == 96 << 20
    assert last_level_cache_bytes(root=str(tmp_path / "missing")) == 32 << 20
    (tmp_path / "index3" / "size").write_text("garbage\n")
    assert last_level_cache_bytes(root=str(tmp_path)) == 1 << 20
    assert STREAM_BYTES == last_level_cache_bytes() * 5 // 4
