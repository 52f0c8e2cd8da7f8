# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The replay path: match a call's signature, bind its arguments, run the bytecode.

`Dispatcher.__call__` encodes the arguments into signature words and slot words in one pass,
compares the words with each cached entry (a memcmp), and hands the slot words to that
entry's `Program`, which allocates the outputs and runs the whole bytecode inside one
`with nogil:` block.  Anything unusual (keyword arguments, a first call, an argument type
the encoder does not know) goes to the Python `miss` callback, which traces and compiles.
The interpreter knows only bytecode, slots and function pointers.
"""
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_New
from libc.stdint cimport int64_t, uint64_t, intptr_t
from libc.stdlib cimport malloc, free, realloc
from libc.string cimport memcmp, memcpy, memset

cimport numpy as cnp
import numpy as np
import struct

from fastlaunch._launch cimport *

cnp.import_array()

cdef extern from "Python.h":
    # reference-stealing forms, declared on raw pointers so Cython adds no refcounting
    void tuple_set_item "PyTuple_SET_ITEM" (object tup, Py_ssize_t i, PyObject *item)
    PyObject *tuple_get_item "PyTuple_GET_ITEM" (object tup, Py_ssize_t i)
    PyObject *Py_TYPE_of "(PyObject *)Py_TYPE" (PyObject *o)
    void Py_XDECREF(PyObject *o)

cdef extern from "numpy/arrayobject.h":
    PyObject *array_return "PyArray_Return" (PyObject *arr)    # steals arr, returns a new ref

# ---- signature encoding ------------------------------------------------------------------
# One tag word per node of the argument tree; arrays add their shape (and strides, unless
# C-contiguous).  The tags are private to this file: the Python side only stores and compares
# the encoded bytes.
cdef enum:
    TAG_ARRAY = 1
    TAG_FLOAT = 2
    TAG_INT = 3
    TAG_BOOL = 4
    TAG_NPSCALAR = 5
    TAG_STATIC = 6
    TAG_TUPLE = 7
    TAG_LIST = 8
    TAG_DICT = 9
    TAG_NONE = 10
    TAG_NAMEDTUPLE = 11
    TAG_BIGINT = 12         # a Python int in [2**63, 2**64): NumPy takes it as uint64

# encode() results
cdef enum:
    ENCODED = 0
    NOT_ENCODABLE = 1      # the slow path must look at this argument

cdef struct Words:
    int64_t *data
    Py_ssize_t n
    Py_ssize_t cap
    int64_t local[64]

cdef inline void words_init(Words *w) noexcept:
    w.data = w.local
    w.n = 0
    w.cap = 64

cdef inline void words_release(Words *w) noexcept:
    if w.data != w.local:
        free(w.data)

cdef inline int words_push(Words *w, int64_t v) except -1:
    cdef int64_t *grown
    if w.n == w.cap:
        if w.data == w.local:
            grown = <int64_t *>malloc(w.cap * 2 * sizeof(int64_t))
            if grown != NULL:
                memcpy(grown, w.local, w.n * sizeof(int64_t))
        else:
            grown = <int64_t *>realloc(w.data, w.cap * 2 * sizeof(int64_t))
        if grown == NULL:
            raise MemoryError()
        w.data = grown
        w.cap *= 2
    w.data[w.n] = v
    w.n += 1
    return 0

cdef union Bits:
    double f
    int64_t i

cdef class _Encoding:
    """Leaves, dict keys and static values seen while encoding one call (slow path only)."""
    cdef public list leaves
    cdef public list keys
    cdef public list statics

# Containers nested deeper than this go to the slow path, which names the argument (a list that
# holds itself would otherwise recurse until the C stack overflows).
DEF MAX_DEPTH = 100

cdef int encode_value(object obj, Words *sig, Words *vals, list leaves, list keys,
                      int depth=0) except -1:
    cdef Bits bits
    cdef cnp.ndarray arr
    cdef int nd, flags, i
    cdef int overflow = 0
    cdef long long iv
    cdef type t = type(obj)
    if t is float:
        bits.f = <double>obj
        words_push(sig, TAG_FLOAT)
        words_push(vals, bits.i)
        leaves.append(obj)
    elif t is bool:
        words_push(sig, TAG_BOOL)
        words_push(vals, 1 if obj is True else 0)
        leaves.append(obj)
    elif t is int:
        try:
            iv = obj
            words_push(sig, TAG_INT)
        except OverflowError:
            if not 0 <= obj < 2**64:
                return NOT_ENCODABLE
            iv = <int64_t><uint64_t>obj
            words_push(sig, TAG_BIGINT)
        words_push(vals, iv)
        leaves.append(obj)
    elif cnp.PyArray_CheckExact(obj):     # subclasses: the slow path checks their semantics
        arr = <cnp.ndarray>obj
        flags = cnp.PyArray_FLAGS(arr)
        if not (flags & cnp.NPY_ARRAY_ALIGNED) or not cnp.PyArray_ISNOTSWAPPED(arr):
            return NOT_ENCODABLE
        nd = cnp.PyArray_NDIM(arr)
        contiguous = (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) != 0
        words_push(sig, TAG_ARRAY | (<int64_t>cnp.PyArray_TYPE(arr) << 8)
                   | (<int64_t>nd << 24) | (<int64_t>contiguous << 40))
        for i in range(nd):
            words_push(sig, cnp.PyArray_DIMS(arr)[i])
        if not contiguous:
            for i in range(nd):
                words_push(sig, cnp.PyArray_STRIDES(arr)[i])
        words_push(vals, <int64_t><intptr_t>cnp.PyArray_DATA(arr))
        leaves.append(obj)
    elif obj is None:
        words_push(sig, TAG_NONE)
    elif depth >= MAX_DEPTH and (t is tuple or t is list or t is dict or isinstance(obj, tuple)):
        return NOT_ENCODABLE
    elif t is tuple or t is list:
        words_push(sig, (TAG_TUPLE if t is tuple else TAG_LIST) | (<int64_t>len(obj) << 8))
        for item in obj:
            if encode_value(item, sig, vals, leaves, keys, depth + 1) != ENCODED:
                return NOT_ENCODABLE
    elif t is dict:
        words_push(sig, TAG_DICT | (<int64_t>len(obj) << 8))
        keys.append(tuple(obj))
        for item in obj.values():
            if encode_value(item, sig, vals, leaves, keys, depth + 1) != ENCODED:
                return NOT_ENCODABLE
    elif isinstance(obj, tuple):
        # a namedtuple: its class is part of the key
        words_push(sig, TAG_NAMEDTUPLE | (<int64_t>len(obj) << 8))
        keys.append(t)
        for item in obj:
            if encode_value(item, sig, vals, leaves, keys, depth + 1) != ENCODED:
                return NOT_ENCODABLE
    elif isinstance(obj, np.generic) and not isinstance(obj, (np.complexfloating, np.void,
                                                               np.flexible, np.object_)):
        words_push(sig, TAG_NPSCALAR | (<int64_t>np.dtype(type(obj)).num << 8))
        if isinstance(obj, np.floating):
            bits.f = float(obj)
            words_push(vals, bits.i)
        elif isinstance(obj, np.unsignedinteger):
            words_push(vals, <int64_t><uint64_t>int(obj))
        else:
            words_push(vals, int(obj))
        leaves.append(obj)
    else:
        return NOT_ENCODABLE
    return ENCODED

cdef int encode_args(tuple args, tuple static_positions, Words *sig, Words *vals,
                     list leaves, list keys, list statics) except -1:
    cdef Py_ssize_t i
    for i in range(len(args)):
        if static_positions and i in static_positions:
            words_push(sig, TAG_STATIC)
            statics.append(static_key(args[i]))
            continue
        if encode_value(args[i], sig, vals, leaves, keys) != ENCODED:
            return NOT_ENCODABLE
    return ENCODED


def static_key(value):
    """What a static argument's value is keyed by: its type as well as its value (1 and 1.0,
    np.float64(2) and 2.0 trace differently), floats by their bits (0.0 and -0.0 differ; every
    NaN of one sign is one key, so a static NaN does not re-trace on every call)."""
    t = type(value)
    if t is float or isinstance(value, np.floating):
        f = float(value)
        if f != f:
            return (t, "nan", bool(np.signbit(f)))
        return (t, struct.pack("<d", f))
    if t is tuple:
        return (t,) + tuple(static_key(v) for v in value)
    if t is frozenset:
        return (t, frozenset(static_key(v) for v in value))
    return (t, value)


def encode(tuple args, tuple static_positions=()):
    """(signature bytes, leaf objects, dict keys, static values), or None where the fast path
    cannot take these arguments (unknown type, byte-swapped or misaligned array, huge int)."""
    cdef Words sig, vals
    cdef list leaves = [], keys = [], statics = []
    words_init(&sig)
    words_init(&vals)
    try:
        if encode_args(args, static_positions, &sig, &vals, leaves, keys, statics) != ENCODED:
            return None
        return (bytes((<char *>sig.data)[:sig.n * sizeof(int64_t)]), leaves, keys, statics)
    finally:
        words_release(&sig)
        words_release(&vals)


# The replay fast path: arguments that are all arrays and Python scalars, encoded into stack
# buffers with borrowed references (the argument tuple keeps every leaf alive).
DEF FLAT_MAX_ARGS = 32
DEF FLAT_SIG_WORDS = 128

cdef Py_ssize_t encode_flat(tuple args, int64_t *sig, int64_t *vals, PyObject **objs) noexcept:
    """Signature words of flat arguments (as encode_value writes them); -1 if not flat."""
    cdef Py_ssize_t i, d, n = len(args), nsig = 0
    cdef PyObject *o
    cdef cnp.ndarray arr
    cdef int flags, nd
    cdef Bits bits
    cdef bint contiguous
    if n > FLAT_MAX_ARGS:
        return -1
    for i in range(n):
        o = tuple_get_item(args, i)
        objs[i] = o
        t = <object>Py_TYPE_of(o)
        if t is float:
            bits.f = (<object>o)
            sig[nsig] = TAG_FLOAT
            nsig += 1
            vals[i] = bits.i
        elif cnp.PyArray_CheckExact(<object>o):
            arr = <cnp.ndarray>o
            flags = cnp.PyArray_FLAGS(arr)
            if not (flags & cnp.NPY_ARRAY_ALIGNED) or not cnp.PyArray_ISNOTSWAPPED(arr):
                return -1
            nd = cnp.PyArray_NDIM(arr)
            contiguous = (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) != 0
            if nsig + 1 + nd * (1 if contiguous else 2) > FLAT_SIG_WORDS:
                return -1
            sig[nsig] = (TAG_ARRAY | (<int64_t>cnp.PyArray_TYPE(arr) << 8)
                         | (<int64_t>nd << 24) | (<int64_t>contiguous << 40))
            nsig += 1
            for d in range(nd):
                sig[nsig + d] = cnp.PyArray_DIMS(arr)[d]
            nsig += nd
            if not contiguous:
                for d in range(nd):
                    sig[nsig + d] = cnp.PyArray_STRIDES(arr)[d]
                nsig += nd
            vals[i] = <int64_t><intptr_t>cnp.PyArray_DATA(arr)
        elif t is int:
            try:
                vals[i] = <object>o
            except OverflowError:
                return -1
            sig[nsig] = TAG_INT
            nsig += 1
        elif t is bool:
            sig[nsig] = TAG_BOOL
            nsig += 1
            vals[i] = 1 if (<object>o) is True else 0
        else:
            return -1
        if nsig >= FLAT_SIG_WORDS - 1:
            return -1
    return nsig


cdef bint _is_flat(bytes sig):
    """Whether a signature has only top-level array and scalar tags (what encode_flat makes)."""
    cdef const int64_t *w = <const int64_t *><char *>sig
    cdef Py_ssize_t i = 0, n = len(sig) // sizeof(int64_t), nd
    cdef int tag
    while i < n:
        tag = w[i] & 0xFF
        if tag == TAG_ARRAY:
            nd = (w[i] >> 24) & 0xFFFF
            i += 1 + nd * (1 if (w[i] >> 40) & 1 else 2)
        elif tag in (TAG_FLOAT, TAG_INT, TAG_BOOL):
            i += 1
        else:
            return False
    return True


# ---- the interpreter ---------------------------------------------------------------------
cdef int run_code(const int64_t *code, Py_ssize_t ncode, const int64_t *lists, int64_t *slots,
                  int64_t *argwords, fl_kernel_fn *kernels, const int64_t *work) except -1 nogil:
    """Execute the bytecode.  Returns a Status; never touches Python objects."""
    cdef Py_ssize_t pc = 0, k
    cdef int64_t op
    cdef void *p
    while pc < ncode:
        op = code[pc]
        if op == LAUNCH:
            k = code[pc + 1]
            fl_launch(kernels[k], code[pc + 2], work[k], &argwords[code[pc + 3]])
        elif op == BIND:
            for k in range(code[pc + 3]):
                argwords[code[pc + 1] + k] = slots[lists[code[pc + 2] + k]]
        elif op == ALLOC:
            p = fl_mem_alloc(code[pc + 2])
            if p == NULL:
                return STATUS_NO_MEMORY
            slots[code[pc + 1]] = <int64_t><intptr_t>p
        elif op == FREE:
            fl_mem_free(<void *><intptr_t>slots[code[pc + 1]])
            slots[code[pc + 1]] = 0
        elif op == CHECK:
            if (<int64_t *><intptr_t>slots[code[pc + 1]])[0] != 0:
                return STATUS_INDEX_ERROR
        else:
            return STATUS_BAD_OPCODE
        pc += op & 0xFF
    return STATUS_OK


# Outputs of at least this many bytes take their memory from the caching pool: a fresh large
# NumPy array is a fresh mmap whose every page faults on first touch, which can cost as much
# as the kernel writing it.  The array's base object hands the block back to the pool when
# the caller drops the array (and every view of it): fresh to the caller, never recycled
# under it.
DEF POOLED_OUTPUT_BYTES = 131072


cdef class PoolBlock:
    """The base object of a pooled output array: returns its memory block to the pool."""
    cdef void *ptr
    cdef readonly Py_ssize_t nbytes

    def __dealloc__(self):
        if self.ptr != NULL:
            fl_mem_free(self.ptr)


cdef class OutputLayout:
    """Dtypes and shapes of a call's fresh output arrays; allocates them."""
    cdef Py_ssize_t n
    cdef int *types
    cdef int *ndims
    cdef Py_ssize_t *nbytes
    cdef cnp.npy_intp *dims           # ndim entries per output, concatenated

    def __cinit__(self, specs):
        """specs: [(dtype, shape)]"""
        cdef Py_ssize_t i, j, pos = 0
        self.n = len(specs)
        self.types = <int *>malloc(max(1, self.n) * sizeof(int))
        self.ndims = <int *>malloc(max(1, self.n) * sizeof(int))
        self.nbytes = <Py_ssize_t *>malloc(max(1, self.n) * sizeof(Py_ssize_t))
        total = sum(len(shape) for _, shape in specs)
        self.dims = <cnp.npy_intp *>malloc(max(1, total) * sizeof(cnp.npy_intp))
        if self.types == NULL or self.ndims == NULL or self.dims == NULL or self.nbytes == NULL:
            raise MemoryError()
        for i, (dtype, shape) in enumerate(specs):
            self.types[i] = np.dtype(dtype).num
            self.ndims[i] = len(shape)
            self.nbytes[i] = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            for j in range(len(shape)):
                self.dims[pos] = shape[j]
                pos += 1

    def __dealloc__(self):
        free(self.types)
        free(self.ndims)
        free(self.nbytes)
        free(self.dims)

    cdef int allocate(self, PyObject **outs, int64_t *slots, const int64_t *out_slots) except -1:
        """Fresh C-ordered arrays as new references in outs[i] (NULL until made); their data
        pointers go to slots[out_slots[i]] when slots is given."""
        cdef Py_ssize_t i, dim_at = 0
        cdef cnp.ndarray arr
        cdef PoolBlock block
        for i in range(self.n):
            if self.nbytes[i] >= POOLED_OUTPUT_BYTES:
                block = PoolBlock.__new__(PoolBlock)
                block.ptr = fl_mem_alloc(self.nbytes[i])
                if block.ptr == NULL:
                    raise MemoryError("fastlaunch: out of memory for a result array")
                block.nbytes = self.nbytes[i]
                arr = cnp.PyArray_SimpleNewFromData(self.ndims[i], &self.dims[dim_at],
                                                    self.types[i], block.ptr)
                cnp.set_array_base(arr, block)
            else:
                arr = cnp.PyArray_EMPTY(self.ndims[i], &self.dims[dim_at], self.types[i], 0)
            dim_at += self.ndims[i]
            if slots != NULL:
                slots[out_slots[i]] = <int64_t><intptr_t>cnp.PyArray_DATA(arr)
            Py_INCREF(arr)
            outs[i] = <PyObject *>arr
        return 0


cdef class FloorCall:
    """The overhead floor of a compiled call: takes any arguments and returns fresh arrays
    of the given layout, doing nothing else (see fastlaunch.benchtools.floor_call)."""
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
            tuple_set_item(result, i, array_return(outs[i]) if self.as_scalar[i] else outs[i])
        return result


cdef class Program:
    """A verified program made executable: bytecode, kernel pointers, output layout."""
    cdef int64_t *code
    cdef Py_ssize_t ncode
    cdef int64_t *lists
    cdef fl_kernel_fn *kernels
    cdef int64_t *work
    cdef Py_ssize_t nslots, nargwords, nleaves
    cdef int64_t *const_slots
    cdef int64_t *const_ptrs
    cdef Py_ssize_t nconsts
    cdef int64_t *temp_slots
    cdef Py_ssize_t ntemps
    cdef int64_t *out_slots
    cdef OutputLayout outputs
    cdef int64_t *int_checks           # (leaf, lo, hi) triples: weak Python ints cast narrower
    cdef Py_ssize_t nint_checks
    cdef int64_t *mutated              # leaves written in place
    cdef Py_ssize_t nmutated
    cdef Py_ssize_t status_slot        # slot pointing at the call's error flag, or -1
    cdef Py_ssize_t nresults           # result leaves: kind 0 a new output, 1 an argument
    cdef int *res_kind                 # leaf returned as is, 2 a constant Python value
    cdef int64_t *res_index            # output index, argument leaf, or index in res_values
    cdef bint *res_scalar              # hand a 0-d output back as a NumPy scalar
    cdef list res_values
    cdef int structure                 # 0: one leaf, 1: flat tuple, 2: call unflatten
    cdef object unflatten
    cdef object keepalive

    def __cinit__(self):
        self.code = NULL

    def __init__(self, code, lists, Py_ssize_t nslots, Py_ssize_t nargwords, Py_ssize_t nleaves,
                 kernel_addresses, kernel_work, consts, temp_slots, outputs, int_checks, mutated,
                 results, int structure, unflatten, keepalive, Py_ssize_t status_slot=-1):
        cdef Py_ssize_t i
        code = np.ascontiguousarray(code, np.int64)
        lists = np.ascontiguousarray(lists, np.int64)
        self.ncode = len(code)
        self.code = _copy_words(code)
        self.lists = _copy_words(lists)
        self.nslots, self.nargwords, self.nleaves = nslots, nargwords, nleaves
        self.kernels = <fl_kernel_fn *>malloc(max(1, len(kernel_addresses)) * sizeof(fl_kernel_fn))
        for i, addr in enumerate(kernel_addresses):
            self.kernels[i] = <fl_kernel_fn><intptr_t>addr
        self.work = _copy_words(np.asarray(kernel_work, np.int64))
        self.nconsts = len(consts)
        self.const_slots = _copy_words(np.asarray([s for s, _ in consts], np.int64))
        self.const_ptrs = _copy_words(np.asarray([a.ctypes.data for _, a in consts], np.int64))
        self.ntemps = len(temp_slots)
        self.temp_slots = _copy_words(np.asarray(temp_slots, np.int64))
        self.out_slots = _copy_words(np.asarray([o[0] for o in outputs], np.int64))
        self.outputs = OutputLayout([(dtype, shape) for _, dtype, shape in outputs])
        self.nint_checks = len(int_checks)
        self.int_checks = _copy_words(np.asarray([x for t in int_checks for x in t], np.int64))
        self.nmutated = len(mutated)
        self.mutated = _copy_words(np.asarray(mutated, np.int64))
        self.nresults = len(results)
        self.res_kind = <int *>malloc(max(1, self.nresults) * sizeof(int))
        self.res_index = <int64_t *>malloc(max(1, self.nresults) * sizeof(int64_t))
        self.res_scalar = <bint *>malloc(max(1, self.nresults) * sizeof(bint))
        self.res_values = []
        for i, (kind, index, as_scalar) in enumerate(results):
            self.res_kind[i] = kind
            self.res_scalar[i] = as_scalar
            if kind == 2:
                self.res_index[i] = len(self.res_values)
                self.res_values.append(index)
            else:
                self.res_index[i] = index
        if self.outputs.n > 64:
            raise ValueError("fastlaunch: more than 64 result arrays are not supported")
        self.status_slot = status_slot
        self.structure = structure
        self.unflatten = unflatten
        self.keepalive = (consts, keepalive)

    def __dealloc__(self):
        if self.code != NULL:
            free(self.code); free(self.lists); free(self.kernels); free(self.work)
            free(self.const_slots); free(self.const_ptrs); free(self.temp_slots)
            free(self.out_slots)
            free(self.int_checks); free(self.mutated)
            free(self.res_kind); free(self.res_index); free(self.res_scalar)

    cdef object invoke(self, int64_t *leaf_words, PyObject **leaf_objs):
        cdef int64_t local_slots[64]
        cdef int64_t local_args[128]
        cdef PyObject *outs[64]
        cdef int64_t *slots = local_slots
        cdef int64_t *argwords = local_args
        cdef int64_t error_flag = 0
        cdef Py_ssize_t i
        cdef int status
        if self.nint_checks:
            self._check_ints(leaf_words)
        if self.nmutated:
            self._check_mutated(leaf_obj_list(leaf_objs, self.nleaves))
        if self.nslots > 64:
            slots = <int64_t *>malloc(self.nslots * sizeof(int64_t))
        if self.nargwords > 128:
            argwords = <int64_t *>malloc(self.nargwords * sizeof(int64_t))
        if slots == NULL or argwords == NULL:
            _release(slots, local_slots, argwords, local_args)
            raise MemoryError()
        memset(outs, 0, self.outputs.n * sizeof(PyObject *))
        try:
            memcpy(slots, leaf_words, self.nleaves * sizeof(int64_t))
            for i in range(self.nconsts):
                slots[self.const_slots[i]] = self.const_ptrs[i]
            for i in range(self.ntemps):
                slots[self.temp_slots[i]] = 0
            if self.status_slot >= 0:
                slots[self.status_slot] = <int64_t><intptr_t>&error_flag
            self.outputs.allocate(outs, slots, self.out_slots)
            with nogil:
                status = run_code(self.code, self.ncode, self.lists, slots, argwords,
                                  self.kernels, self.work)
            if status != STATUS_OK:
                self._fail(status, slots)
            return self._pack(outs, leaf_objs)
        finally:
            for i in range(self.outputs.n):
                Py_XDECREF(outs[i])
            _release(slots, local_slots, argwords, local_args)

    cdef int _fail(self, int status, int64_t *slots) except -1:
        cdef Py_ssize_t i
        for i in range(self.ntemps):
            if slots[self.temp_slots[i]] != 0:
                fl_mem_free(<void *><intptr_t>slots[self.temp_slots[i]])
        if status == STATUS_NO_MEMORY:
            raise MemoryError("fastlaunch: out of memory for a temporary buffer")
        if status == STATUS_INDEX_ERROR:
            word = (<int64_t *><intptr_t>slots[self.status_slot])[0]
            if word & 1:      # kernel.KernelError.INDEX
                raise IndexError("fastlaunch: an index array holds a value out of bounds "
                                 "for the axis it indexes (no argument was modified)")
            if word & 2:      # kernel.KernelError.OVERFLOW
                raise OverflowError(
                    "fastlaunch: arithmetic on Python int arguments left the 64-bit range (or "
                    "raised one to a negative power); Python and NumPy keep such results "
                    "exact, fastlaunch's kernels compute them in int64. No argument was "
                    "modified")
            raise RuntimeError(f"fastlaunch: a kernel reported error flags {word:#x}")
        raise RuntimeError(f"fastlaunch: program failed with status {status}")

    cdef object _pack(self, PyObject **outs, PyObject **leaf_objs):
        """The call's result (outs keep their references; the caller drops them)."""
        cdef Py_ssize_t i
        cdef tuple result
        cdef list values
        if self.structure == 0:
            return self._take(0, outs, leaf_objs)
        if self.structure == 1:
            result = PyTuple_New(self.nresults)
            for i in range(self.nresults):
                item = self._take(i, outs, leaf_objs)
                Py_INCREF(item)
                tuple_set_item(result, i, <PyObject *>item)
            return result
        values = [self._take(i, outs, leaf_objs) for i in range(self.nresults)]
        return self.unflatten(values)

    cdef inline object _take(self, Py_ssize_t i, PyObject **outs, PyObject **leaf_objs):
        cdef PyObject *ref
        cdef Py_ssize_t k = self.res_index[i]
        if self.res_kind[i] == 0:
            if not self.res_scalar[i]:
                return <object>outs[k]
            Py_INCREF(<object>outs[k])         # PyArray_Return steals one reference...
            ref = array_return(outs[k])        # ...and returns a new one to the scalar
            result = <object>ref
            Py_XDECREF(ref)
            return result
        if self.res_kind[i] == 1:
            return <object>leaf_objs[k]
        return self.res_values[k]

    cdef int _check_ints(self, int64_t *leaf_words) except -1:
        cdef Py_ssize_t i
        cdef int64_t v
        for i in range(self.nint_checks):
            v = leaf_words[self.int_checks[3 * i]]
            if v < self.int_checks[3 * i + 1] or v > self.int_checks[3 * i + 2]:
                raise OverflowError(
                    f"Python integer {v} (argument leaf {self.int_checks[3 * i]}) out of bounds "
                    f"[{self.int_checks[3 * i + 1]}, {self.int_checks[3 * i + 2]}] for the "
                    f"dtype it is combined with")
        return 0

    cdef int _check_mutated(self, list leaves) except -1:
        check_in_place_arguments(leaves, [self.mutated[i] for i in range(self.nmutated)])
        return 0


def check_in_place_arguments(list leaves, list mutated):
    """Arguments written in place must be writeable and share no memory with other arguments."""
    for m in mutated:
        arr = leaves[m]
        if not arr.flags.writeable:
            raise ValueError(f"argument leaf {m} is updated in place but is read-only")
        for j, other in enumerate(leaves):
            if j != m and isinstance(other, np.ndarray) and np.shares_memory(arr, other):
                raise ValueError(
                    f"argument leaf {m} is updated in place and overlaps argument leaf {j}; "
                    f"fastlaunch treats arguments as distinct arrays: pass a copy")


cdef list leaf_obj_list(PyObject **objs, Py_ssize_t n):
    return [<object>objs[i] for i in range(n)]


cdef inline void _release(int64_t *slots, int64_t *local_slots, int64_t *argwords,
                          int64_t *local_args) noexcept:
    if slots != local_slots and slots != NULL:
        free(slots)
    if argwords != local_args and argwords != NULL:
        free(argwords)


cdef int64_t *_copy_words(arr) except NULL:
    cdef cnp.ndarray[cnp.int64_t, ndim=1] a = np.ascontiguousarray(arr, np.int64).reshape(-1)
    cdef int64_t *out = <int64_t *>malloc(max(1, a.shape[0]) * sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    if a.shape[0]:
        memcpy(out, &a[0], a.shape[0] * sizeof(int64_t))
    return out


# ---- the dispatcher ----------------------------------------------------------------------
cdef class Entry:
    """One traced signature: its encoded words and the program that replays it."""
    cdef bytes sig
    cdef Py_ssize_t nsig
    cdef bint flat              # only arrays and Python scalars, directly in the arguments
    cdef list keys
    cdef list statics
    cdef readonly Program program
    cdef public object info

    def __init__(self, bytes sig, list keys, list statics, Program program, info=None):
        self.sig = sig
        self.nsig = len(sig) // sizeof(int64_t)
        self.keys = keys
        self.statics = statics
        self.flat = not keys and not statics and _is_flat(sig)
        self.program = program
        self.info = info

    @property
    def signature(self):
        return self.sig


cdef class Dispatcher:
    """The compiled callable's fast path.  Subclassed in Python (fastlaunch.jit.Compiled)."""
    cdef list _entries
    cdef tuple _static_positions
    cdef bint _replay

    def __init__(self, static_positions=(), replay=True):
        self._entries = []
        self._static_positions = tuple(static_positions)
        self._replay = replay

    def _install(self, Entry entry):
        self._entries.append(entry)

    def _entries_list(self):
        return list(self._entries)

    def _forget(self):
        self._entries = []

    def _miss(self, args, kwargs):
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        cdef int64_t sig[FLAT_SIG_WORDS]
        cdef int64_t vals[FLAT_MAX_ARGS]
        cdef PyObject *objs[FLAT_MAX_ARGS]
        cdef Py_ssize_t nsig
        cdef Entry entry
        if kwargs or not self._replay or not self._entries:
            return self._miss(args, kwargs)
        if not self._static_positions:
            nsig = encode_flat(args, sig, vals, objs)
            if nsig >= 0:
                for entry in self._entries:
                    if entry.flat and entry.nsig == nsig and \
                            memcmp(<char *>entry.sig, sig, nsig * sizeof(int64_t)) == 0:
                        return entry.program.invoke(vals, objs)
                return self._miss(args, kwargs)
        return self._general_call(args, kwargs)

    cdef object _general_call(self, tuple args, dict kwargs):
        """Arguments with containers, static values or many leaves: encoded with strong
        references to every leaf."""
        cdef Words sig, vals
        cdef list leaves, keys = [], statics = []
        cdef Entry entry
        cdef Py_ssize_t n
        words_init(&sig)
        words_init(&vals)
        leaves = []
        try:
            if encode_args(args, self._static_positions, &sig, &vals, leaves, keys,
                           statics) != ENCODED:
                return self._miss(args, kwargs)
            n = sig.n * sizeof(int64_t)
            for entry in self._entries:
                if len(entry.sig) != n or memcmp(<char *>entry.sig, sig.data, n) != 0:
                    continue
                if keys != entry.keys or statics != entry.statics:
                    continue
                return invoke_with_leaves(entry.program, vals.data, leaves)
            return self._miss(args, kwargs)
        finally:
            words_release(&sig)
            words_release(&vals)


cdef object invoke_with_leaves(Program program, int64_t *vals, list leaves):
    """Run program on encoded slot words, with the leaf objects held by `leaves`."""
    cdef PyObject *objs_local[64]
    cdef PyObject **objs = objs_local
    cdef Py_ssize_t i, n = len(leaves)
    if n > 64:
        objs = <PyObject **>malloc(n * sizeof(PyObject *))
        if objs == NULL:
            raise MemoryError()
    try:
        for i in range(n):
            objs[i] = <PyObject *>leaves[i]
        return program.invoke(vals, objs)
    finally:
        if objs != objs_local:
            free(objs)


def run_entry(Entry entry, tuple args, tuple static_positions=()):
    """Run `entry` on args that are known to match it (the slow path, after tracing)."""
    cdef Words sig, vals
    cdef list leaves = [], keys = [], statics = []
    words_init(&sig)
    words_init(&vals)
    try:
        if encode_args(args, static_positions, &sig, &vals, leaves, keys, statics) != ENCODED:
            raise TypeError("arguments cannot be bound to a compiled program")
        return invoke_with_leaves(entry.program, vals.data, leaves)
    finally:
        words_release(&sig)
        words_release(&vals)


# ---- runtime controls --------------------------------------------------------------------
def null_kernel_address():
    return <intptr_t>fl_null_kernel

def start_threads(int n=0):
    """Start the worker pool (n threads including the caller; 0: all available CPUs)."""
    return fl_pool_start(n)

def stop_threads():
    with nogil:
        fl_pool_stop()

def thread_count():
    return fl_pool_threads()

def set_parallel_threshold(int64_t work):
    fl_set_parallel_threshold(work)

def get_parallel_threshold():
    return fl_get_parallel_threshold()

def set_spin_us(int64_t us):
    fl_set_spin_us(us)

def memory_stats():
    return {"cached_bytes": fl_mem_cached_bytes(), "live_bytes": fl_mem_live_bytes()}

def trim_memory():
    fl_mem_trim()
