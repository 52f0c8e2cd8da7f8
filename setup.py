"""Builds the extensions: the host interpreter and executable interface (_core), the opcode
enums (_launch), the benchmark floor (_bench), the test-only device-space backend's
executable (_devsim), the CPU backend's library routines (_library: BLAS/LAPACK through
scipy's function pointers), the buffer-protocol check of arrays made inside traced functions
(_bufferguard), and, where cuda.h is found, the CUDA backend's executable (_cuda),
which opens the driver with dlopen at run time (so it links no CUDA library).

cuda.h is looked for in FASTLAUNCH_CUDA_INCLUDE, CUDA_HOME/CUDA_PATH, the nvidia-cuda-runtime
wheel (`pip install 'fastlaunch[cuda]'` brings it into the build environment) and
/usr/local/cuda; without it the CUDA extension is skipped with a message, and backend="cuda"
can still lower programs but not run them.  FASTLAUNCH_NO_CUDA=1 skips it on purpose."""
import glob
import importlib.util
import os
import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

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

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
