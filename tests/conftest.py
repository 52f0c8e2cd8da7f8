"""Test session setup: kernels compile into a fresh disk cache, not the user's; the backend
the suite runs on (`pytest --backend devsim`, or FASTLAUNCH_BACKEND) is the default of every
fl.compile that names none; `--cuda-ptx` also lowers every traced function for CUDA and
assembles its kernels with ptxas for sm_90 and sm_80 (tests/cuda_ptx.py; in CI, a sample of
them without the option); tests marked
`cuda` skip, with the reason, where no GPU is usable.

The suite leaves nothing behind: the process that starts it (the xdist controller, or a
single-process run) makes one folder for the session and removes it at the end; inside it
are the kernel cache, the temporary folder of every test process and their subprocesses
(TMPDIR: pytest's tmp_path, Dask's scratch space, ptxas's files), and matplotlib's and
other tools' caches (MPLCONFIGDIR, XDG_CACHE_HOME), none of them in the system temp folder
or the user's ~/.cache."""
import atexit
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # tests/cuda_ptx.py

# Set at import, before any test imports the CPU backend (which reads FASTLAUNCH_CACHE_DIR
# once), Dask (its temporary-directory) or matplotlib; workers and subprocesses inherit it.
_ROOT_VAR = "FASTLAUNCH_TEST_ROOT"
_OWN_ROOT = _ROOT_VAR not in os.environ or not os.path.isdir(os.environ[_ROOT_VAR])
if _OWN_ROOT:
    os.environ[_ROOT_VAR] = tempfile.mkdtemp(prefix="fastlaunch-tests-")
    # removed when this process ends, after the session (and any xdist workers) are done
    atexit.register(shutil.rmtree, os.environ[_ROOT_VAR], True)
_ROOT = os.environ[_ROOT_VAR]
for _var, _sub in (("TMPDIR", "tmp"), ("MPLCONFIGDIR", "matplotlib"),
                   ("XDG_CACHE_HOME", "cache"), ("FASTLAUNCH_CACHE_DIR", "kernel-cache")):
    if _var != "FASTLAUNCH_CACHE_DIR" or _var not in os.environ:   # a cache the user chose
        os.environ[_var] = os.path.join(_ROOT, _sub)
        os.makedirs(os.environ[_var], mode=0o700, exist_ok=True)
tempfile.tempdir = None              # read TMPDIR again (pytest's tmp_path base, Dask, ...)


def pytest_addoption(parser):
    parser.addoption("--backend", default=None,
                     help="backend for fl.compile calls that name none (default: "
                          "FASTLAUNCH_BACKEND, else cpu)")
    parser.addoption("--cuda-ptx", action="store_true", default=False,
                     help="also lower every traced function for CUDA (PTX for sm_90 and "
                          "sm_80, assembled by ptxas); needs ptxas and libdevice, no GPU")
    parser.addoption("--cuda-ptx-every", type=int, default=1,
                     help="with --cuda-ptx: check one traced function in N")


def pytest_configure(config):
    backend = config.getoption("--backend")
    if backend:
        os.environ["FASTLAUNCH_BACKEND"] = backend
    every = _cuda_ptx_every(config)
    if every:
        import cuda_ptx
        cuda_ptx.install(every, None if config.getoption("--cuda-ptx") else "tests/conformance/")


# In CI (CI=true) on a machine with ptxas and libdevice, a sample of the conformance suite's
# traced functions is also checked for CUDA without --cuda-ptx: one in CI_CUDA_PTX_EVERY (all
# of them, in a run of its own, with --cuda-ptx: too slow for every CI run).
CI_CUDA_PTX_EVERY = 40


def _cuda_ptx_every(config) -> int:
    if config.getoption("--cuda-ptx"):
        return max(1, config.getoption("--cuda-ptx-every"))
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return 0
    try:
        from fastlaunch.backends.cuda import find_libdevice, find_ptxas
    except ImportError:
        return 0
    return CI_CUDA_PTX_EVERY if find_ptxas() and find_libdevice() else 0


def pytest_collection_modifyitems(config, items):
    cuda = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not cuda:
        return
    why = _cuda_unusable()
    if why:
        skip = pytest.mark.skip(reason=f"needs a usable NVIDIA GPU: {why}")
        for item in cuda:
            item.add_marker(skip)


def _cuda_unusable():
    """None where the CUDA backend can run, else why not."""
    try:
        from fastlaunch import _cuda
    except ImportError:
        return "fastlaunch was built without its CUDA extension (no cuda.h)"
    return _cuda.driver_error()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if _cuda_ptx_every(config) and not _is_xdist_controller(config):
        import cuda_ptx
        text = cuda_ptx.summary()               # assembles what is queued
        if hasattr(config, "workeroutput"):     # an xdist worker: the controller reports it
            config.workeroutput["cuda_ptx"] = (text, len(cuda_ptx.FAILURES))
        else:
            _add_cuda_ptx_summary(config, text, len(cuda_ptx.FAILURES))
    if getattr(config, "_cuda_ptx_failures", 0) and session.exitstatus == 0:
        session.exitstatus = 1                  # a kernel ptxas refused fails the run


# Under pytest-xdist (the default: `-n auto` in pyproject.toml) each worker lowers its own
# share of the traced functions; the controller collects their summaries and failures.
def _is_xdist_controller(config) -> bool:
    return getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")


def _add_cuda_ptx_summary(config, text: str, failures: int):
    config._cuda_ptx_summary = "\n".join(filter(None, [getattr(config, "_cuda_ptx_summary", ""),
                                                       text]))
    config._cuda_ptx_failures = getattr(config, "_cuda_ptx_failures", 0) + failures


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    got = getattr(node, "workeroutput", {}).get("cuda_ptx")
    if got:
        _add_cuda_ptx_summary(node.config, *got)


def pytest_terminal_summary(terminalreporter, config):
    text = getattr(config, "_cuda_ptx_summary", None)
    if text:
        for line in text.splitlines():
            terminalreporter.write_line(line)


def pytest_report_header(config):
    return f"fastlaunch backend: {os.environ.get('FASTLAUNCH_BACKEND') or 'cpu'}"
