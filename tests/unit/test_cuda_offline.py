"""The CUDA backend without a GPU: lowering (graph, PTX, bytecode with copies and launches, the
verifier), PTX assembled by ptxas for sm_80 and sm_90, the GPU schedule's decisions, errors
instead of LLVM aborts (in subprocesses), the clear error of a call without a driver, and
that the CPU path never loads libcuda.  (tests/cuda/ has the tests that need a GPU.)"""
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.program import bytecode
from fastlaunch._launch import Space
from fastlaunch.backends import get_backend
from fastlaunch.backends.cuda import CUDABackend, find_libdevice, find_ptxas
from fastlaunch.errors import BackendUnavailableError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (CUDA toolkit or the "
                                 "nvidia-cuda-nvcc wheel)")
needs_libdevice = pytest.mark.skipif(find_libdevice() is None, reason="no libdevice.10.bc")


def _gpu_usable() -> bool:
    try:
        from fastlaunch import _cuda
    except ImportError:
        return False
    return _cuda.driver_error() is None


def step(p, g, m, v, lr):
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, np.sum((p - 1.0) ** 2)


def step_args(n=1000, dtype=np.float32):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(n).astype(dtype) for _ in range(4)] + [0.01]


# Functions whose kernels cover the schedule's kinds and the code generator's paths.
CASES = {
    "step": (step, step_args()),
    "exp_sin_fmod": (lambda a: np.exp(a) + np.sin(a) % 3.0, [np.linspace(-3, 3, 50)]),
    "f32_math": (lambda a: np.log1p(np.abs(a)) * np.tanh(a) ** 2.5,
                 [np.linspace(-3, 3, 50, dtype=np.float32)]),
    "sum_large": (lambda a: np.sum(a), [np.ones(1 << 20, np.float32)]),
    "row_sums": (lambda a: a.sum(axis=1), [np.ones((64, 5000))]),
    "col_max": (lambda a: a.max(axis=0), [np.ones((5000, 64), np.int16)]),
    "argmax": (lambda a: np.argmax(a), [np.arange(10000.0)]),
    "cumsum": (lambda a: np.cumsum(a, axis=1), [np.ones((8, 300), np.int32)]),
    "any_all": (lambda a: (np.any(a > 0.5), np.all(a < 2)), [np.ones(100000)]),
    "gather": (lambda a, i: a[i] * 2, [np.arange(100.0), np.array([1, 5, -3])]),
    "scatter_add": (lambda a, i, v: np.add.at(a, i, v), [np.zeros(10), np.array([1, 1, 2]),
                                                          np.ones(3)]),
    "matmul": (lambda a, b: a @ b, [np.ones((30, 40), np.float32), np.ones((40, 50), np.float32)]),
    "float16": (lambda a: (np.exp(a) * a + np.float16(1)) % np.float16(3),
                [np.linspace(0, 1, 30).astype(np.float16)]),
    "ints": (lambda a, b: (a // b, a % b, a ** 2, a << 3, np.maximum(a, b)),
             [np.arange(100, dtype=np.int8), np.arange(1, 101, dtype=np.int8)]),
    "python_ints": (lambda a, n: a * n + n ** 3, [np.arange(10), 7]),
    "bools": (lambda a, b: np.logical_xor(a, b) | ~a, [np.ones(9, bool), np.zeros(9, bool)]),
    "views": (lambda a: a.T[::2, 1:] + a[::-1, ::3].sum(), [np.ones((12, 9))]),
    # row fusion's prelude phases (fuse), unfolded by the CUDA schedule
    "row_softmax": (lambda a: np.exp(a - a.max(axis=1, keepdims=True)) / np.exp(
        a - a.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True),
        [np.linspace(-3, 3, 40 * 600, dtype=np.float32).reshape(40, 600)]),
    "row_var": (lambda a: ((a - a.mean(axis=1, keepdims=True)) ** 2).sum(axis=1),
                [np.linspace(-3, 3, 300).reshape(10, 30)]),
    # a thread per row: insertion sort (short rows), radix sort with positions (long ones)
    "sort_short": (lambda a: np.sort(a, axis=0), [np.linspace(3, -3, 60).reshape(6, 10)]),
    "argsort_long": (lambda a: np.argsort(a * 2, axis=-1, kind="stable"),
                     [np.linspace(5, -5, 600, dtype=np.float32).reshape(3, 200)]),
}


@pytest.fixture(scope="module")
def cuda():
    return get_backend("cuda")


def test_lowering_works_without_a_gpu(cuda):
    lowered = fl.compile(step, backend="cuda").lower(*step_args())
    text = str(lowered)
    assert "== graph ==" in text and "== bytecode ==" in text
    ops = {op.name for _, op, _ in lowered.program.instructions()}
    assert {"ALLOC", "TO_DEVICE", "BIND", "LAUNCH", "TO_HOST", "FREE"} <= ops
    for label, desc, source in lowered.kernels:
        assert ".entry fl_" in source and f".target {cuda.arch}" in source, label
        assert "schedule:" in desc
    # the program is proved safe for device kernels (also strictly, as a loaded one would be)
    bytecode.verify(lowered.program, Space.SPACE_DEVICE)
    with pytest.raises(bytecode.VerifyError):
        bytecode.verify(lowered.program, Space.SPACE_HOST)
    for s in lowered.program.slots:
        if s.role in ("temp", "const", "status"):
            assert s.space == Space.SPACE_DEVICE


def test_iterate_lowers_a_loop_for_the_gpu(cuda):
    """fl.iterate on the CUDA backend: a host-side loop of launches, everything the body
    touches in device memory, proved safe for device kernels."""
    it = fl.iterated(fl.compile(step, backend="cuda"), 50, carry=("p", "m", "v"),
                     until=lambda loss: loss < 1e-6)
    prog = it.lower(*step_args()).program
    (head, end, _, count), = prog.loops()
    assert count == 50
    body = {op.name for pc, op, _ in prog.instructions() if head <= pc <= end}
    assert {"LAUNCH", "NEXT", "ROW", "BREAK_IF"} <= body and not {"ALLOC", "FREE"} & body
    # unrolled by two, the carried arrays in fixed buffers: no pointer moves per iteration
    assert not {"ROTATE", "MOVE"} & body
    bytecode.verify(prog, Space.SPACE_DEVICE)
    for _pc, op, ops in prog.instructions():
        if op.name == "COPY":
            assert prog.slots[ops[0]].space == prog.slots[ops[1]].space == Space.SPACE_DEVICE


@pytest.mark.skipif(_gpu_usable(), reason="a GPU is usable here: tests/cuda runs the calls")
def test_a_call_without_a_gpu_raises_a_clear_error():
    f = fl.compile(step, backend="cuda")
    args = step_args(16)
    with pytest.raises(BackendUnavailableError, match="backend 'cuda' cannot run here"):
        f(*args)
    with pytest.raises(BackendUnavailableError):   # and again, from the replay path
        f(*args)
    assert f.lower(*args).program is not None


@pytest.mark.parametrize("env", [{"CUDA_VISIBLE_DEVICES": ""},
                                 {"FASTLAUNCH_LIBCUDA": "/nonexistent/libcuda.so.1"}],
                         ids=["no-visible-devices", "no-driver"])
def test_no_device_or_driver_in_a_subprocess(env):
    code = textwrap.dedent("""
        import numpy as np, fastlaunch as fl
        from fastlaunch.errors import BackendUnavailableError
        f = fl.compile(lambda x: x * 2 + 1, backend="cuda")
        x = np.arange(8.0)
        assert "TO_DEVICE" in f.lower(x).bytecode
        try:
            f(x)
        except BackendUnavailableError as err:
            print("RAISED", err)
        else:
            print("RAN")
    """)
    out = _run(code, env)
    assert out.returncode == 0, out.stderr
    assert "RAISED fastlaunch: backend 'cuda' cannot run here:" in out.stdout
    assert "no NVIDIA driver" in out.stdout or "no CUDA device" in out.stdout, out.stdout


def test_import_and_the_cpu_backend_never_load_libcuda():
    code = textwrap.dedent("""
        import numpy as np, fastlaunch as fl
        x = np.arange(1000.0)
        assert float(fl.compile(lambda a: (a * 2).sum())(x)) == float((x * 2).sum())
        maps = open("/proc/self/maps").read()
        print("LIBCUDA" if "libcuda" in maps else "CLEAN")
    """)
    out = _run(code, {})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "CLEAN"


@needs_ptxas
@needs_libdevice
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", list(CASES))
def test_kernels_assemble_with_ptxas(name, arch, tmp_path):
    fn, args = CASES[name]
    backend = _arch_backend(arch)
    plan = fl.compile(fn, backend="cuda").lower(*args).plan
    for k in plan.kernels:
        ck = backend.compile(k)
        assert f".target {arch}" in ck.source
        assert ck.obj[:4] == b"\x7fELF", "ptxas made no cubin"


_BACKENDS: dict = {}


def _arch_backend(arch):
    if arch not in _BACKENDS:
        _BACKENDS[arch] = CUDABackend(arch=arch)
    return _BACKENDS[arch]


def test_schedule_decisions():
    def kinds(fn, *args):
        plan = fl.compile(fn, backend="cuda").lower(*args).plan
        return [k.schedule.describe() for k in plan.kernels]

    assert kinds(lambda a: a + 1, np.ones(10_000)) == ["map n=10000 grid=40 block=256"]
    assert kinds(lambda a: a + 1, np.ones(1 << 24)) == [f"map n={1 << 24} grid=8192 block=256"]
    # a long full reduction: partials per (output, split), then one block combines them
    assert kinds(lambda a: a.sum(), np.ones(1 << 22, np.float32)) == [
        "block_reduce n=1024 grid=1024 block=256 splits=1024", "block_reduce n=1 grid=1 block=256"]
    # many outputs: one thread each; short reductions too; scans and arg-reductions always
    assert kinds(lambda a: a.sum(axis=1), np.ones((10_000, 600))) == [
        "thread_reduce n=10000 grid=40 block=256"]
    assert kinds(lambda a: a.sum(axis=1), np.ones((10, 100))) == [
        "thread_reduce n=10 grid=1 block=256"]
    assert kinds(lambda a: np.argmax(a), np.ones(1 << 20)) == ["thread_reduce n=1 grid=1 block=256"]
    # stores at data-dependent indices apply in loop order: one thread
    assert kinds(lambda a, i: np.add.at(a, i, 1.0), np.zeros(10), np.array([1, 1, 2]))[-1] == \
        "serial n=3 grid=1 block=1"


def test_block_reduction_code_has_a_fixed_tree(cuda):
    plan = fl.compile(lambda a: a.sum(), backend="cuda").lower(np.ones(1 << 20, np.float32)).plan
    ir = cuda.source(plan.kernels[0])
    assert "addrspace(3) global [256 x double]" in ir      # f32 sums accumulate in f64
    assert ir.count("call void @llvm.nvvm.barrier0()") == 1 + 8 + 1   # store, 8 levels, reuse
    assert "atomicrmw" not in ir                          # no float atomics, no race


def test_fmod_is_libdevice_not_frem(cuda):
    plan = fl.compile(lambda a, b: np.fmod(a, b), backend="cuda").lower(np.ones(4), np.ones(4)).plan
    ir = cuda.source(plan.kernels[0])
    assert "@__nv_fmod(" in ir and "frem" not in ir


# ---- errors, never LLVM aborts ---------------------------------------------------------------
def test_without_libdevice_math_raises_a_python_error_in_a_subprocess():
    code = textwrap.dedent("""
        import numpy as np, fastlaunch as fl
        from fastlaunch.codegen.llvm_nvptx import NVPTXLoweringError
        f = fl.compile(lambda a: np.exp(a.astype(np.float32)) + np.log(a), backend="cuda")
        try:
            f.lower(np.arange(1.0, 5.0))
        except NVPTXLoweringError as err:
            print("RAISED", err)
        g = fl.compile(lambda a: a * 2 + 1, backend="cuda")     # no math: still lowers
        print("LOWERED", "LAUNCH" in g.lower(np.arange(4.0)).bytecode)
    """)
    out = _run(code, {"FASTLAUNCH_LIBDEVICE": ""})
    assert out.returncode == 0, out.stderr
    assert "RAISED" in out.stdout and "__nv_expf" in out.stdout and "libdevice" in out.stdout
    assert "LOWERED True" in out.stdout


def test_an_unlowerable_intrinsic_raises_instead_of_aborting_in_a_subprocess():
    """llvm.exp.f32 makes LLVM's NVPTX backend abort the process ("no libcall available for
    fexp"); the backend's check raises first."""
    code = textwrap.dedent("""
        from fastlaunch.backends.cuda import CUDABackend
        from fastlaunch.codegen.llvm_nvptx import NVPTXLoweringError
        ir = '''
        define ptx_kernel void @k(ptr %p) {
        entry:
          %v = load float, ptr %p
          %e = call float @llvm.exp.f32(float %v)
          store float %e, ptr %p
          ret void
        }
        declare float @llvm.exp.f32(float)
        '''
        for text, what in [(ir, "llvm.exp.f32"), (ir.replace("llvm.exp.f32", "expf"), "expf")]:
            try:
                CUDABackend(arch="sm_80", cache_dir=None).ptx(text, "k")
            except NVPTXLoweringError as err:
                print("RAISED", what, "|", err)
    """)
    out = _run(code, {})
    assert out.returncode == 0, out.stderr
    assert "RAISED llvm.exp.f32 |" in out.stdout and "RAISED expf |" in out.stdout
    assert "LLVM ERROR" not in out.stderr


def test_unknown_arch_is_refused():
    with pytest.raises(ValueError, match="unknown CUDA arch 'sm_1'"):
        CUDABackend(arch="sm_1", cache_dir=None)


@needs_ptxas
def test_ptx_and_cubins_are_cached_on_disk(tmp_path):
    fn, args = CASES["exp_sin_fmod"]
    plan = fl.compile(fn, backend="cuda").lower(*args).plan
    first = CUDABackend(arch="sm_80", cache_dir=str(tmp_path))
    a = [first.compile(k) for k in plan.kernels]
    assert first.compile_count == len(plan.kernels) and first.assemble_count == len(plan.kernels)
    again = CUDABackend(arch="sm_80", cache_dir=str(tmp_path))
    b = [again.compile(k) for k in plan.kernels]
    assert again.compile_count == 0 and again.assemble_count == 0
    assert [k.origin for k in b] == ["disk"] * len(b)
    assert [k.obj for k in a] == [k.obj for k in b]


def test_saved_ptx_loads_back():
    fn, args = CASES["gather"]
    plan = fl.compile(fn, backend="cuda").lower(*args).plan
    old = _arch_backend("sm_80")
    ck = old.compile(plan.kernels[0])
    text = old.kernel_text(ck)
    again = old.load_object(text, ck.obj, old.target_key)
    assert again.name == ck.name and again.obj == ck.obj
    if find_ptxas():
        # PTX runs on newer archs: assembled again for sm_90; not on older ones
        moved = _arch_backend("sm_90").load_object(text, ck.obj, old.target_key)
        assert moved.name == ck.name and moved.obj[:4] == b"\x7fELF" and moved.obj != ck.obj
        newer = _arch_backend("sm_90").compile(plan.kernels[0])
        with pytest.raises(ValueError, match="saved CUDA kernel for sm_90 cannot run on sm_80"):
            old.load_object(newer.source, newer.obj, _arch_backend("sm_90").target_key)


@needs_ptxas
def test_the_ptx_check_names_a_module_ptxas_refuses(monkeypatch):
    import cuda_ptx
    monkeypatch.setattr(cuda_ptx, "FAILURES", [])
    good = _arch_backend("sm_80").compile(
        fl.compile(lambda a: a + 1, backend="cuda").lower(np.ones(3)).plan.kernels[0])
    bad = good.source.replace("ret;", "bogus.instruction %r1;")
    cuda_ptx._pending["sm_80"] = [("goodkey", good.source, "test::good"),
                                  ("badkey0123456789", bad, "test::bad")]
    cuda_ptx.flush("sm_80")
    assert len(cuda_ptx.FAILURES) == 1
    assert cuda_ptx.FAILURES[0].startswith("test::bad: kernel badkey0123456789 for sm_80: ")


def _run(code, env):
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=full, cwd=ROOT)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _dltensor(capsule) -> _DLTensor:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return _DLTensor.from_address(get(capsule, b"dltensor"))     # dl_tensor comes first


# DLPack's type codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLComplex 5, kDLBool 6
DL_TYPES = {np.bool_: 6, np.int8: 0, np.int64: 0, np.uint16: 1, np.float16: 2, np.float32: 2,
            np.float64: 2, np.complex64: 5, np.complex128: 5}


@pytest.mark.parametrize("dtype", list(DL_TYPES), ids=lambda t: np.dtype(t).name)
def test_dlpack_export_of_every_dtype(dtype):
    """A CUDA DeviceArray's DLPack capsule (built without a driver: a view of another
    library's memory, exported with stream=-1, no synchronisation): type code, bits, device
    (the memory's own), shape and element strides.  Before: complex dtypes raised KeyError
    and the device id was always 0."""
    _cuda = pytest.importorskip("fastlaunch._cuda")
    dt = np.dtype(dtype)
    arr = _core.DeviceArray(0x10000, (2, 3), dt, "cuda", _cuda.ForeignMemory(None, 3),
                            (3 * dt.itemsize * 2, dt.itemsize * 2))
    assert arr.__dlpack_device__() == (2, 3)          # kDLCUDA, the pointer's device
    capsule = arr.__dlpack__(stream=-1)       # (owns the tensor read below)
    t = _dltensor(capsule)
    assert (t.device.device_type, t.device.device_id) == (2, 3)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (DL_TYPES[dtype], 8 * dt.itemsize, 1)
    assert t.data == 0x10000 and t.ndim == 2 and t.byte_offset == 0
    assert [t.shape[0], t.shape[1]] == [2, 3] and [t.strides[0], t.strides[1]] == [6, 2]


def test_dlpack_stream_argument_is_checked():
    _cuda = pytest.importorskip("fastlaunch._cuda")
    arr = _core.DeviceArray(0x10000, (4,), np.float32, "cuda", _cuda.ForeignMemory(None, 0))
    with pytest.raises(ValueError, match="stream 0 is not a CUDA stream"):
        arr.__dlpack__(stream=0)
    with pytest.raises(ValueError, match="stream -2"):
        arr.__dlpack__(stream=-2)
    with pytest.raises(TypeError, match="stream must be an int or None"):
        arr.__dlpack__(stream=1.0)


# ---- saved programs for CUDA (issue 26) -------------------------------------------------------
def split_sum(x, y):
    # a long reduction into few outputs: the GPU schedule splits it into partials and a combine
    return x * 2.0 + y.sum(), (x * x).sum(axis=1)


def test_a_program_saved_for_cuda_loads_for_cuda(tmp_path):
    """Before: fl.load blamed the file ("invalid saved program: AttributeError ...
    schedule_kernel"): the CUDA backend could not schedule a saved kernel again.  A split
    reduction's partials come back with their split (the description alone reads as a whole
    reduction per point), so the kernels regenerated from the descriptions are the ones saved."""
    from fastlaunch.program import saved
    x, y = np.linspace(0.0, 1.0, 3 * 20000).reshape(3, 20000), np.ones(100000)
    f = fl.compile(split_sum, backend="cuda")
    lowered = f.lower(x, y)
    assert any("splits=" in k.schedule.describe() for k in lowered.plan.kernels)
    path = tmp_path / "split.flp"
    f.save(path, x, y)
    want = lowered.program.kernels
    for machine_code in (True, False):
        _, art = saved.loads_artifact(path.read_bytes(), "cuda", machine_code=machine_code)
        program, kernels, plan = art.program, art.kernels, art.plan
        assert [(k.params, k.launch_size, k.arg_ranges) for k in program.kernels] == \
            [(k.params, k.launch_size, k.arg_ranges) for k in want]
        assert [k.source for k in kernels] == [src for _, _, src in lowered.kernels]
        assert [k.describe() for k in plan.kernels] == [k.describe() for k in lowered.plan.kernels]
        loaded = fl.load(path, backend="cuda", machine_code=machine_code)
        if _gpu_usable():
            got, want_values = loaded(x, y), split_sum(x, y)
            for a, b in zip(got, want_values):
                np.testing.assert_allclose(a, b, rtol=1e-12)


def test_a_cuda_split_is_refused_where_it_would_be_misread(tmp_path):
    """The CPU reads a CUDA split's partials as whole reductions (each partial the whole sum):
    loading such a program for the CPU is refused; a forged split count is refused too."""
    import json
    from fastlaunch.program import saved
    x, y = np.ones((3, 20000)), np.ones(100000)
    f = fl.compile(split_sum, backend="cuda")
    path = tmp_path / "split.flp"
    f.save(path, x, y)
    with pytest.raises(saved.SavedProgramError, match="scheduled by another backend"):
        fl.load(path, backend="cpu")
    meta, program, objects = saved._read(str(path))
    at = next(i for i, k in enumerate(meta["kernels"]) if k["schedule"])
    for forged in ({"splits": 3}, {"splits": "25"}, {"grid": 1}, [1]):
        meta["kernels"][at]["schedule"] = forged
        blobs = [json.dumps(meta).encode(), program.to_bytes()] + list(objects)
        with pytest.raises(saved.SavedProgramError, match="kernel"):
            saved.loads_artifact(_saved_bytes(blobs), "cuda", machine_code=False)


def _saved_bytes(blobs) -> bytes:
    import hashlib
    import struct
    from fastlaunch.program import saved
    payload = b"".join(struct.pack("<Q", len(b)) + b for b in blobs)
    return saved._HEADER.pack(saved.MAGIC, saved.FORMAT_VERSION, 0, len(payload),
                              hashlib.sha256(payload).digest()) + payload


def test_interleaved_arguments_updated_in_place_get_one_span_on_cuda():
    """CUDA copies each argument updated in place back as its whole byte span, as devsim does
    (tests/jit/test_aliasing.py checks the values there): x[::2] and x[1::2] are aliased, one
    span copied back once, instead of two copies of which the second undoes the first."""
    def bump(a, b):
        a += 1
        b *= 2
    f = fl.compile(bump, backend="cuda")
    x, ref = np.arange(10.0), np.arange(10.0)
    if _gpu_usable():
        f(x[::2], x[1::2])
        bump(ref[::2], ref[1::2])
        np.testing.assert_array_equal(x, ref)
    else:
        with pytest.raises(BackendUnavailableError):
            f(x[::2], x[1::2])
    assert [t.reason.split(":")[0] for t in f.traces] == ["first call", "aliased arguments"]
