"""A built wheel installs into a fresh virtual environment and its demo runs from another folder.

Needs what building from source needs (a C compiler, Cython, setuptools, numpy) but no
network: the wheel is built without build isolation from this checkout, and the fresh virtual
environment sees the running environment's site-packages (numpy, llvmlite, scipy, pip) through
a .pth file: the running Python may itself be a venv (the README's way), whose packages
`--system-site-packages` would miss (it exposes the base interpreter's).  Deselect with
`-m 'not packaging'`."""
import os
import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A full build of every extension into a fresh venv: the longest test of the default run
# (1-2 minutes on an idle 2-core machine), kept there because CI must show the wheel installs.
pytestmark = pytest.mark.packaging


def _prerequisites():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return "not a git checkout"
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC")
                    else "cc") is None:
        return "no C compiler"
    for module in ("Cython", "setuptools", "numpy"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed"
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools 70.1 on)
    except ImportError:
        try:
            import wheel  # noqa: F401
        except ImportError:
            return "setuptools older than 70.1 without the wheel package: no bdist_wheel"
    return None


def run(cmd, cwd, env, timeout):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_wheel_installs_into_a_fresh_venv_and_the_demo_runs(tmp_path):
    missing = _prerequisites()
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must run the wheel test: {missing} (the [test] extra installs the "
                    f"build tools)")
    if missing:
        pytest.skip(missing)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["FASTLAUNCH_CACHE_DIR"] = str(tmp_path / "cache")
    # the sources as a clean clone has them (tracked and new files; no build outputs)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    src = tmp_path / "src"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         "--no-cache-dir", "-w", str(tmp_path / "dist"), str(src)], tmp_path, env, 600)
    (wheel,) = (tmp_path / "dist").glob("fastlaunch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fastlaunch/py.typed" in names and "fastlaunch/_core.pxd" in names
    assert any(n.startswith("fastlaunch/_core.") and n.endswith(".so") for n in names)
    assert not [n for n in names if n.endswith((".pyx", ".c", ".cpp"))], names
    assert any(n.endswith("dist-info/LICENSE") or "licenses/LICENSE" in n for n in names)

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env, 120)
    python = str(venv / "bin" / "python")
    # the running environment's packages (numpy, llvmlite, scipy; pip to install with), after
    # the venv's own: this checkout's fastlaunch is not among them (PYTHONPATH is dropped; an
    # editable install's finder would be, so the wheel's is checked to win below)
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  tmp_path, env, 60).stdout.strip()
    outer = [p for p in site.getsitepackages() + [site.getusersitepackages()]
             if os.path.isdir(p)]
    pathlib.Path(purelib, "outer-environment.pth").write_text("\n".join(outer) + "\n")
    # no index: numpy, llvmlite and scipy must be satisfied from the running environment
    run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", str(wheel)], tmp_path,
        env, 300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([python, "-c", "import fastlaunch; print(fastlaunch.__file__)"], elsewhere, env,
                60).stdout.strip()
    assert pathlib.Path(where).is_relative_to(venv), where
    plot = elsewhere / "demo.png"
    done = run([python, "-m", "fastlaunch", "--quick", "--plot", str(plot)], elsewhere, env, 300)
    assert "numpy/replay" in done.stdout and "replay vs bound" in done.stdout
    assert "[1/3] n=16" in done.stderr                          # progress while it runs
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in done.stdout
    else:
        assert f"plot: {plot}" in done.stdout
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
