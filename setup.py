"""Builds the extensions: the host interpreter and executable interface (_core), the opcode
enums (_launch), the benchmark floor (_bench) and the test-only device-space backend's
executable (_devsim), which cimports _core's executable interface as a device backend does."""
import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

COMPILE_ARGS = ["-O3", "-pthread", "-std=c11"]
NUMPY = dict(include_dirs=[np.get_include(), "fastlaunch"],
             define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")])

extensions = [
    Extension("fastlaunch._core",
              sources=["fastlaunch/_core.pyx", "fastlaunch/csrc/runtime.c",
                       "fastlaunch/csrc/interrupt.c", "fastlaunch/csrc/half.c"],
              extra_compile_args=COMPILE_ARGS, extra_link_args=["-pthread"], **NUMPY),
    Extension("fastlaunch._launch", sources=["fastlaunch/_launch.pyx"],
              extra_compile_args=["-O2"]),
    Extension("fastlaunch._bench", sources=["fastlaunch/_bench.pyx"],
              extra_compile_args=["-O2"], **NUMPY),
    Extension("fastlaunch._devsim", sources=["fastlaunch/_devsim.pyx"],
              extra_compile_args=COMPILE_ARGS, **NUMPY),
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
