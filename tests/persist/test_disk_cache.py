"""The kernel disk cache: reuse across processes, and robustness against bad files."""
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.backends import cache
from fastlaunch.backends.cpu import CPUBackend

STEP_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import fastlaunch as fl
    from fastlaunch.__main__ import step
    from fastlaunch.backends import get_backend
    rng = np.random.default_rng(0)
    n = 40000       # the loss's sum split: partials and a combine (two kernels at least)
    args = [rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
            rng.random(n).astype(np.float32), rng.standard_normal(n).astype(np.float32), 1e-2]
    out = fl.compile(step)(*args)
    be = get_backend("cpu")
    print(json.dumps({"compiled": be.compile_count, "disk": be.disk_loads,
                      "sum": [float(np.sum(o)) for o in out]}))
""")


def run_step(cache_dir):
    env = {**os.environ, "FASTLAUNCH_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", STEP_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    import json
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path):
    first = run_step(tmp_path)
    second = run_step(tmp_path)
    assert first["compiled"] >= 2
    assert second["compiled"] == 0
    assert second["disk"] == first["compiled"]
    assert second["sum"] == first["sum"]


def test_disabled_with_empty_variable(monkeypatch):
    monkeypatch.setenv("FASTLAUNCH_CACHE_DIR", "")
    assert cache.default_cache_dir() is None


def _one_kernel_backend(tmp_path):
    from fastlaunch.ir import fuse
    from fastlaunch.ir.graph import Graph, Op
    g = Graph()
    x = g.add(Op.ARG, np.float32, (64,), position=0)
    g.outputs.append(g.add(Op.SQRT, np.float32, (64,), (x,)))
    plan = fuse.plan(g, {0: (1,)})
    return CPUBackend(cache_dir=str(tmp_path)), plan.kernels[0]


def _cache_file(tmp_path):
    files = cache.DiskCache(str(tmp_path)).entries()
    assert len(files) == 1
    return files[0]


def _recompiles_after(tmp_path, damage):
    be, kernel = _one_kernel_backend(tmp_path)
    be.compile(kernel)
    damage(_cache_file(tmp_path))
    fresh, _ = _one_kernel_backend(tmp_path)
    compiled = fresh.compile(kernel)
    assert fresh.compile_count == 1 and fresh.disk_loads == 0
    # the bad file was replaced by a good one
    again, _ = _one_kernel_backend(tmp_path)
    again.compile(kernel)
    assert again.disk_loads == 1 and again.compile_count == 0
    return compiled


def test_truncated_file_is_a_miss(tmp_path):
    def truncate(path):
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
    _recompiles_after(tmp_path, truncate)


def test_flipped_bytes_are_a_miss(tmp_path):
    def flip(path):
        data = bytearray(open(path, "rb").read())
        data[-100] ^= 0xFF
        data[len(data) // 2] ^= 0x55
        open(path, "wb").write(bytes(data))
    _recompiles_after(tmp_path, flip)


def test_future_format_version_is_a_miss(tmp_path):
    def bump(path):
        data = bytearray(open(path, "rb").read())
        data[8:12] = (cache.FORMAT_VERSION + 1).to_bytes(4, "little")
        open(path, "wb").write(bytes(data))
    _recompiles_after(tmp_path, bump)


def test_foreign_file_is_a_miss(tmp_path):
    _recompiles_after(tmp_path, lambda path: open(path, "wb").write(b"not a kernel" * 100))


def test_read_only_directory_warns_once(tmp_path):
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        ro = "/proc/fastlaunch-cache"      # read-only even for root, who ignores chmod
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    be, kernel = _one_kernel_backend(ro)
    with pytest.warns(RuntimeWarning, match="not writable") as caught:
        be.compile(kernel)
        be.compile_source(be.source(kernel).replace("kernel:", "kernel (again):"))
    assert len([w for w in caught if "not writable" in str(w.message)]) == 1
    assert be.compile_count == 2


def test_unwritable_directory_warns_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    be, kernel = _one_kernel_backend(blocker / "cache")
    with pytest.warns(RuntimeWarning, match="not writable"):
        be.compile(kernel)
    assert not be.disk.enabled
    assert be.compile_count == 1


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import fastlaunch as fl
    fns = [lambda x, k=k: np.sin(x) * k + x ** 2 - k for k in range(12)]
    x = np.linspace(0, 1, 100)
    for f in fns:
        fl.compile(f)(x)
    print("ok")
""")


def test_concurrent_writers_leave_a_consistent_cache(tmp_path):
    env = {**os.environ, "FASTLAUNCH_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    files = cache.DiskCache(str(tmp_path)).entries()
    assert files, "nothing was cached"
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]
    mac_key = (tmp_path / cache.KEY_FILE).read_bytes()
    for path in files:
        key = os.path.basename(path)[: -len(cache.SUFFIX)]
        with open(path, "rb") as f:
            assert cache.decode(f.read(), key, mac_key) is not None, path
    # and a later process only reads
    done = subprocess.run([sys.executable, "-c", WRITER + textwrap.dedent("""
        from fastlaunch.backends import get_backend
        print(get_backend("cpu").compile_count)
    """)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "0"


def test_cache_command(tmp_path):
    run_step(tmp_path)
    env = {**os.environ, "FASTLAUNCH_CACHE_DIR": str(tmp_path)}
    shown = subprocess.run([sys.executable, "-m", "fastlaunch", "cache"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert str(tmp_path) in shown.stdout and "kernels" in shown.stdout
    cleared = subprocess.run([sys.executable, "-m", "fastlaunch", "cache", "--clear"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert "removed" in cleared.stdout
    assert cache.DiskCache(str(tmp_path)).entries() == []


def test_an_empty_folder_name_disables_the_cache(tmp_path, monkeypatch):
    """cache_dir="" means no disk cache, as FASTLAUNCH_CACHE_DIR="" does.  Before: the
    current folder became the cache (key files and hmac-key written wherever one ran)."""
    from fastlaunch.backends.cpu import CPUBackend
    monkeypatch.chdir(tmp_path)
    be = CPUBackend(cache_dir="")
    assert not be.disk.enabled
    be.compile(fl.compile(lambda a: a + 1.0).lower(np.ones(3)).plan.kernels[0])
    assert list(tmp_path.iterdir()) == []
