"""Builds the two extensions: the interpreter (_core) and the opcode enum module (_launch)."""
import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

COMPILE_ARGS = ["-O3", "-pthread", "-std=c11"]

extensions = [
    Extension(
        "fastlaunch._core",
        sources=["fastlaunch/_core.pyx", "fastlaunch/csrc/runtime.c"],
        include_dirs=[np.get_include(), "fastlaunch"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
        extra_compile_args=COMPILE_ARGS,
        extra_link_args=["-pthread"],
    ),
    Extension("fastlaunch._launch", sources=["fastlaunch/_launch.pyx"],
              extra_compile_args=["-O2"]),
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
