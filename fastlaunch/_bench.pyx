# cython: language_level=3
"""Benchmark-only helpers: the overhead floor of a compiled call (fastlaunch.benchtools)."""
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_New

from fastlaunch._core cimport OutputLayout

cdef extern from "Python.h":
    void tuple_set_item "PyTuple_SET_ITEM" (object tup, Py_ssize_t i, PyObject *item)

cdef extern from "numpy/arrayobject.h":
    ctypedef struct PyArrayObject
    PyObject *array_return "PyArray_Return" (PyArrayObject *arr)   # steals arr, returns a new ref

cimport numpy as cnp
cnp.import_array()


cdef class FloorCall:
    """Takes any arguments and returns fresh arrays of the given layout, doing nothing else:
    what a compiled call costs besides its program."""
    cdef OutputLayout layout
    cdef list as_scalar

    def __init__(self, specs):
        """specs: [(dtype, shape, as_scalar)]"""
        self.layout = OutputLayout([(d, s) for d, s, _ in specs])
        self.as_scalar = [bool(x) for _, _, x in specs]

    def __call__(self, *args):
        cdef PyObject *outs[64]
        cdef Py_ssize_t i, n = self.layout.n
        cdef tuple result = PyTuple_New(n)
        self.layout.allocate(outs, NULL, NULL)
        for i in range(n):
            tuple_set_item(result, i, array_return(<PyArrayObject *>outs[i]) if self.as_scalar[i]
                           else outs[i])
        return result
