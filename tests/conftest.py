"""Test session setup: kernels compile into a fresh disk cache, not the user's; the backend
the suite runs on (`pytest --backend devsim`, or FASTLAUNCH_BACKEND) is the default of every
fl.compile that names none."""
import os
import tempfile

# before any test imports the CPU backend, which reads the variable once
os.environ.setdefault("FASTLAUNCH_CACHE_DIR", tempfile.mkdtemp(prefix="fastlaunch-test-cache-"))


def pytest_addoption(parser):
    parser.addoption("--backend", default=None,
                     help="backend for fl.compile calls that name none (default: "
                          "FASTLAUNCH_BACKEND, else cpu)")


def pytest_configure(config):
    backend = config.getoption("--backend")
    if backend:
        os.environ["FASTLAUNCH_BACKEND"] = backend


def pytest_report_header(config):
    return f"fastlaunch backend: {os.environ.get('FASTLAUNCH_BACKEND') or 'cpu'}"
