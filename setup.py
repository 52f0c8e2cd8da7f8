"""Builds the extensions: the host interpreter and executable interface (_core), the opcode
enums (_launch), the benchmark floor (_bench), the test-only device-space backend's
executable (_devsim), the CPU backend's library routines (_library: BLAS/LAPACK through
scipy's function pointers), the buffer-protocol check of arrays made inside traced functions
(_bufferguard), and, where cuda.h is found, the CUDA backend's executable (_cuda),
which opens the driver with dlopen at run time (so it links no CUDA library).

cuda.h is looked for in FASTLAUNCH_CUDA_INCLUDE, CUDA_HOME/CUDA_PATH, the nvidia-cuda-runtime
wheel (`pip install 'fastlaunch[cuda]'` brings it into the build environment) and
/usr/local/cuda; without it the CUDA extension is skipped with a message, and backend="cuda"
can still lower programs but not run them.  FASTLAUNCH_NO_CUDA=1 skips it on purpose.

The build is parallel (Cython and the C compiler: one job per CPU), and each extension's
shared object is kept in build/ext-cache/ under a hash of everything that goes into it (its
C sources, every header and .pxd of the package, the compiler, flags, Python and NumPy): `pip
install -e .` builds in a fresh temporary folder every time, and an unchanged extension is
then copied instead of compiled again.  `rm -r build/` empties that cache.  The shared
objects carry no debug information unless FASTLAUNCH_DEBUG_BUILD=1."""
import glob
import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "build", "ext-cache")
CACHE_KEEP = 48                 # shared objects kept (the oldest go first)
JOBS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

COMPILE_ARGS = ["-O3", "-pthread", "-std=c11"]
NUMPY = dict(include_dirs=[np.get_include(), "fastlaunch"],
             define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")])


def cuda_include():
    """The directory holding cuda.h, or None."""
    candidates = [os.environ.get("FASTLAUNCH_CUDA_INCLUDE")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(glob.glob(os.path.join(root, "*", "include")), reverse=True)
    candidates += ["/usr/local/cuda/include"] + sorted(glob.glob("/usr/local/cuda-*/include"),
                                                       reverse=True)
    for d in candidates:
        if d and os.path.isfile(os.path.join(d, "cuda.h")):
            return d
    return None


extensions = [
    Extension("fastlaunch._core",
              sources=["fastlaunch/_core.pyx", "fastlaunch/csrc/runtime.c",
                       "fastlaunch/csrc/interrupt.c", "fastlaunch/csrc/half.c"],
              extra_compile_args=COMPILE_ARGS, extra_link_args=["-pthread"], **NUMPY),
    Extension("fastlaunch._launch", sources=["fastlaunch/_launch.pyx"],
              extra_compile_args=["-O2"]),
    Extension("fastlaunch._bench", sources=["fastlaunch/_bench.pyx"],
              extra_compile_args=["-O2"], **NUMPY),
    Extension("fastlaunch._library",
              sources=["fastlaunch/_library.pyx", "fastlaunch/csrc/library.c"],
              extra_compile_args=COMPILE_ARGS, libraries=["m"], include_dirs=["fastlaunch"]),
    Extension("fastlaunch._devsim", sources=["fastlaunch/_devsim.pyx"],
              extra_compile_args=COMPILE_ARGS, **NUMPY),
    Extension("fastlaunch._bufferguard", sources=["fastlaunch/_bufferguard.pyx"],
              extra_compile_args=["-O2"]),
]

include = None if os.environ.get("FASTLAUNCH_NO_CUDA") else cuda_include()
if include:
    extensions.append(Extension(
        "fastlaunch._cuda", sources=["fastlaunch/_cuda.pyx", "fastlaunch/csrc/cuda_driver.c"],
        include_dirs=[np.get_include(), "fastlaunch", include],
        define_macros=NUMPY["define_macros"], extra_compile_args=COMPILE_ARGS,
        extra_link_args=["-pthread", "-ldl"]))
else:
    print("fastlaunch: cuda.h not found: building without the CUDA extension "
          "(backend='cuda' will lower programs but not run them)", file=sys.stderr)

class CachedParallelBuild(build_ext):
    """build_ext with one compile job per CPU (unless -j says otherwise) and the shared
    objects of unchanged extensions taken from build/ext-cache/."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = JOBS

    def build_extensions(self):
        # no debug information (Python's own CFLAGS have -g): a fifth of the compile time and
        # seven eighths of the shared objects' size; FASTLAUNCH_DEBUG_BUILD=1 keeps it
        if not os.environ.get("FASTLAUNCH_DEBUG_BUILD"):
            for attr in ("compiler_so", "linker_so"):
                cmd = getattr(self.compiler, attr, None)
                if cmd:
                    setattr(self.compiler, attr, [a for a in cmd if a != "-g"])
        super().build_extensions()

    def build_extension(self, ext):
        cached = getattr(ext, "cached", None)
        if cached is None:           # not from this file's list
            return super().build_extension(ext)
        target = self.get_ext_fullpath(ext.name)
        if os.path.isfile(cached) and not self.force:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            shutil.copyfile(cached, target)
            os.utime(cached)                 # recently used: kept longest
            print(f"fastlaunch: {ext.name} unchanged, taken from {os.path.relpath(cached)}")
            return
        if any(src.endswith(".pyx") for src in ext.sources):       # --force on a cached one
            (ext,) = cythonize([ext], compiler_directives={"language_level": "3"})
        super().build_extension(ext)
        try:
            os.makedirs(CACHE, exist_ok=True)
            partial = f"{cached}.{os.getpid()}.tmp"
            shutil.copyfile(target, partial)
            os.replace(partial, cached)
            kept = sorted(glob.glob(os.path.join(CACHE, "*")), key=os.path.getmtime)
            for old in kept[:-CACHE_KEEP]:
                os.remove(old)
        except OSError as err:       # a read-only checkout: no cache, the build stands
            print(f"fastlaunch: extension cache not written: {err}", file=sys.stderr)


def _key(ext) -> str:
    """A hash of what the extension's shared object is made of, from its inputs (its .pyx and
    C sources, every header and .pxd of the package, Cython's and NumPy's versions and
    headers, cuda.h, the compiler and flags): known before Cython runs, so that a cached
    extension is not even translated again."""
    import Cython
    h = hashlib.sha256()
    # not the include folders' paths: pip's isolated build environment is a new temporary
    # folder every time (NumPy's and cuda.h's headers are hashed by contents below)
    config = [sysconfig.get_config_var(v) for v in ("CC", "CFLAGS", "CCSHARED", "LDSHARED",
                                                     "EXT_SUFFIX")]
    env = [os.environ.get(v) for v in ("CC", "CFLAGS", "LDFLAGS", "LDSHARED",
                                       "FASTLAUNCH_DEBUG_BUILD")]
    for part in (ext.name, sys.version, config, env, Cython.__version__, np.__version__,
                 ext.define_macros, ext.undef_macros, ext.extra_compile_args,
                 ext.extra_link_args, ext.libraries, ext.library_dirs):
        h.update(repr(part).encode() + b"\0")
    package = os.path.join(HERE, "fastlaunch")
    headers = sorted(glob.glob(os.path.join(package, "**", "*.h"), recursive=True) +
                     glob.glob(os.path.join(package, "*.pxd")) +
                     glob.glob(os.path.join(package, "*.pxi")))
    for path in list(ext.sources) + list(ext.depends) + headers:
        with open(os.path.join(HERE, path), "rb") as fh:
            h.update(os.path.basename(path).encode() + b"\0" + fh.read())
    for d in ext.include_dirs:               # cuda.h and NumPy's headers: by their contents
        for name in ("cuda.h", "numpy/_numpyconfig.h", "numpy/__init__.pxd",
                     "numpy/__init__.cython-30.pxd"):
            path = os.path.join(d, name)
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()[:24]


def _prepare(exts) -> list:
    """Each extension with its cache entry (ext.cached); Cython runs on the others only."""
    fresh = []
    for ext in exts:
        ext.cached = os.path.join(CACHE, f"{ext.name}-{_key(ext)}"
                                  f"{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}")
        if not os.path.isfile(ext.cached):
            fresh.append(ext)
    if fresh:
        cached = {ext.name: ext.cached for ext in fresh}
        fresh = cythonize(fresh, nthreads=JOBS, compiler_directives={"language_level": "3"})
        for ext in fresh:
            ext.cached = cached[ext.name]
    by_name = {ext.name: ext for ext in fresh}
    return [by_name.get(ext.name, ext) for ext in exts]


def _license() -> dict:
    """The license metadata: an SPDX expression and its file (PEP 639) where setuptools reads
    them (77 on: the older forms print deprecation banners there), else the text form."""
    import setuptools
    if int(setuptools.__version__.split(".")[0]) >= 77:
        return {"license_expression": "BSD-3-Clause", "license_files": ["LICENSE"]}
    return {"license": "BSD-3-Clause"}


setup(ext_modules=_prepare(extensions), cmdclass={"build_ext": CachedParallelBuild},
      **_license())
