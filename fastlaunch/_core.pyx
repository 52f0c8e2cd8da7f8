# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The replay path: match a call's signature, bind its arguments, run the executable.

`Dispatcher.__call__` encodes the arguments into signature words and slot words in one pass,
finds the entry with those words (the most recently used first, then a hash table), and
hands the slot words to that entry's `Executable`, which checks them, allocates the outputs
and runs the whole bytecode inside one `with nogil:` block.  Anything unusual (keyword
arguments, a first call, an argument type the encoder does not know) goes to the Python
`_miss` callback, which traces and compiles.  `Executable` is the interface every backend
implements (_core.pxd); `HostExecutable` is the host one, whose interpreter knows only
bytecode, slots and function pointers.

Size: over 1,000 lines: one extension module, because the encoder, the dispatcher and the
host interpreter share C-level state with no Python call between them.  The host's dispatch
loop is `_interp.pxi`'s, shared with every interpreter; this file has only its hooks.
"""
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_New
from libc.stdint cimport int64_t, uint64_t, intptr_t
from libc.stdlib cimport calloc, malloc, free, realloc
from libc.string cimport memcmp, memcpy, memmove, memset

cimport numpy as cnp
import numpy as np
import threading

from fastlaunch._launch cimport *
from fastlaunch import env as _env
# static_key (re-exported: `_core.static_key`) is pytree's, so that pytree needs nothing of
# this module: the two would import each other
from fastlaunch.frontend.pytree import object_parts as _object_parts, static_key

cnp.import_array()

# Process-wide set-up, once, at import: the fork handlers (a fork while another thread
# replays must leave the child a usable runtime, pool or not) and the runtime's settings from
# the environment, checked here because the runtime reads them without the GIL, where a bad
# value could not be raised.
if fl_runtime_init() != 0:
    raise OSError("fastlaunch: cannot register the runtime's fork handlers (pthread_atfork)")
if fl_configure(_env.num_threads(fl_max_threads()), _env.pool_limit_bytes()) != 0:
    raise AssertionError("fastlaunch: runtime settings out of the range env.py checks")

cdef extern from "Python.h":
    # reference-stealing forms, declared on raw pointers so Cython adds no refcounting
    void tuple_set_item "PyTuple_SET_ITEM" (object tup, Py_ssize_t i, PyObject *item)
    PyObject *tuple_get_item "PyTuple_GET_ITEM" (object tup, Py_ssize_t i)
    PyObject *Py_TYPE_of "(PyObject *)Py_TYPE" (PyObject *o)
    void Py_XDECREF(PyObject *o)
    void Py_INCREF_raw "Py_INCREF" (PyObject *o)
    PyObject *list_get_item "PyList_GET_ITEM" (object lst, Py_ssize_t i)
    bint PyDict_Next(object d, Py_ssize_t *pos, PyObject **key, PyObject **value)

cdef extern from "numpy/arrayobject.h":
    ctypedef struct PyArrayObject
    PyObject *array_return "PyArray_Return" (PyArrayObject *arr)   # steals arr, returns a new ref

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
    TAG_DEVARRAY = 13       # a DeviceArray: as TAG_ARRAY, plus its backend kind (bits 44-47)
    TAG_OBJECT = 14         # a registered object, dataclass or method's self (frontend/pytree.py)
    TAG_CONST = 15          # a str in the argument tree: compared with the keys, by value
    TAG_COMPLEX = 16        # a complex scalar: two leaves (real, imaginary part), its NumPy
                            # type number << 8 (0: a Python complex, weak)

# The layout of a tag word, defined here once (encoder, flat encoder, decoder, DeviceArray):
#   bits 0-7    the TAG_*
#   bits 8-23   an array's or scalar's NumPy type number; a container's length from bit 8 up
#   bits 24-39  an array's ndim (then ndim shape words, and ndim stride words unless
#               C-contiguous)
#   bit 40      C-contiguous
#   bits 44-47  a DeviceArray's backend kind (DEVICE_KINDS)
cdef enum:
    SIG_TAG_MASK = 0xFF
    SIG_TYPE_SHIFT = 8
    SIG_TYPE_MASK = 0xFFFF
    SIG_NDIM_SHIFT = 24
    SIG_NDIM_MASK = 0xFFFF
    SIG_CONTIG_BIT = 40
    SIG_DEVICE_SHIFT = 44
    SIG_DEVICE_MASK = 0xF
    SIG_ARRAY_BITS = 41         # an array word's bits above these are zero...
    SIG_DEVARRAY_BITS = 48      # ...and a device array word's above these


cdef inline int64_t sig_word(int64_t tag, int64_t value) noexcept nogil:
    """A tag word carrying a type number or a container's length."""
    return tag | (value << SIG_TYPE_SHIFT)


cdef inline int64_t sig_array_word(int64_t tag, int64_t typenum, int64_t nd,
                                   bint contiguous) noexcept nogil:
    return (tag | (typenum << SIG_TYPE_SHIFT) | (nd << SIG_NDIM_SHIFT)
            | ((<int64_t>contiguous) << SIG_CONTIG_BIT))


cdef inline int sig_tag(int64_t word) noexcept nogil:
    return word & SIG_TAG_MASK


cdef inline int sig_typenum(int64_t word) noexcept nogil:
    return (word >> SIG_TYPE_SHIFT) & SIG_TYPE_MASK


cdef inline Py_ssize_t sig_ndim(int64_t word) noexcept nogil:
    return (word >> SIG_NDIM_SHIFT) & SIG_NDIM_MASK


cdef inline bint sig_contiguous(int64_t word) noexcept nogil:
    return (word >> SIG_CONTIG_BIT) & 1


cdef inline int sig_device(int64_t word) noexcept nogil:
    return (word >> SIG_DEVICE_SHIFT) & SIG_DEVICE_MASK


cdef inline Py_ssize_t sig_array_size(int64_t word) noexcept nogil:
    """Words an array's signature takes: its tag word, shape and (strided) strides."""
    cdef Py_ssize_t nd = sig_ndim(word)
    return 1 + nd * (1 if sig_contiguous(word) else 2)


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

# Containers nested deeper than this go to the slow path, which names the argument (a list that
# holds itself would otherwise recurse until the C stack overflows).
DEF MAX_DEPTH = 100

cdef int encode_value(object obj, Words *sig, Words *vals, list leaves, list keys,
                      int depth=0) except -1:
    cdef Bits bits
    cdef cnp.ndarray arr
    cdef DeviceArray dev
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
        words_push(sig, sig_array_word(TAG_ARRAY, cnp.PyArray_TYPE(arr), nd, contiguous))
        for i in range(nd):
            words_push(sig, cnp.PyArray_DIMS(arr)[i])
        if not contiguous:
            for i in range(nd):
                words_push(sig, cnp.PyArray_STRIDES(arr)[i])
        words_push(vals, <int64_t><intptr_t>cnp.PyArray_DATA(arr))
        leaves.append(obj)
    elif t is DeviceArray:
        dev = <DeviceArray>obj
        for i in range(dev.nsig):
            words_push(sig, dev.sig[i])
        words_push(vals, dev.ptr)
        leaves.append(obj)
    elif obj is None:
        words_push(sig, TAG_NONE)
    elif depth >= MAX_DEPTH and (t is tuple or t is list or t is dict or isinstance(obj, tuple)):
        return NOT_ENCODABLE
    elif t is tuple or t is list:
        words_push(sig, sig_word(TAG_TUPLE if t is tuple else TAG_LIST, len(obj)))
        for item in obj:
            if encode_value(item, sig, vals, leaves, keys, depth + 1) != ENCODED:
                return NOT_ENCODABLE
    elif t is dict:
        words_push(sig, sig_word(TAG_DICT, len(obj)))
        keys.append(tuple(obj))
        for item in obj.values():
            if encode_value(item, sig, vals, leaves, keys, depth + 1) != ENCODED:
                return NOT_ENCODABLE
    elif isinstance(obj, tuple):
        # a namedtuple: its class is part of the key
        words_push(sig, sig_word(TAG_NAMEDTUPLE, len(obj)))
        keys.append(t)
        for item in obj:
            if encode_value(item, sig, vals, leaves, keys, depth + 1) != ENCODED:
                return NOT_ENCODABLE
    elif t is complex or t is np.complex128 or t is np.complex64:
        # two leaves, the parts (frontend/pytree.py splits it the same way)
        words_push(sig, sig_word(TAG_COMPLEX, 0 if t is complex else np.dtype(t).num))
        part = float if t is complex else (np.float64 if t is np.complex128 else np.float32)
        re, im = part(obj.real), part(obj.imag)
        bits.f = float(re)
        words_push(vals, bits.i)
        bits.f = float(im)
        words_push(vals, bits.i)
        leaves.append(re)
        leaves.append(im)
    elif isinstance(obj, np.generic) and not isinstance(obj, (np.complexfloating, np.void,
                                                               np.flexible, np.object_)):
        words_push(sig, sig_word(TAG_NPSCALAR, np.dtype(type(obj)).num))
        if isinstance(obj, np.floating):
            bits.f = float(obj)
            words_push(vals, bits.i)
        elif isinstance(obj, np.unsignedinteger):
            words_push(vals, <int64_t><uint64_t>int(obj))
        else:
            words_push(vals, int(obj))
        leaves.append(obj)
    elif t is str and depth > 0:
        # config strings ({"mode": "train"}) are part of the tree's structure: keyed by value
        # (a str argument itself is refused by the slow path, naming the argument)
        words_push(sig, TAG_CONST)
        keys.append(obj)
    else:
        # objects taken apart by attributes or registered functions; their static part (class,
        # child names, other attributes' values) is a key compared by value
        parts = _object_parts(obj)
        if parts is None or depth >= MAX_DEPTH:
            return NOT_ENCODABLE
        key, children = parts
        words_push(sig, sig_word(TAG_OBJECT, len(children)))
        keys.append(key)
        for item in children:
            if encode_value(item, sig, vals, leaves, keys, depth + 1) != ENCODED:
                return NOT_ENCODABLE
    return ENCODED

cdef int encode_args(tuple args, tuple static_positions, Words *sig, Words *vals,
                     list leaves, list keys, list statics) except -1:
    cdef Py_ssize_t i
    for i in range(len(args)):
        if static_positions and i in static_positions:
            words_push(sig, TAG_STATIC)
            t = type(args[i])
            # pytree.static_key's own answer for these types, without the call
            statics.append((t, args[i]) if t is int or t is str or t is bool or args[i] is None
                           else static_key(args[i]))
            continue
        if encode_value(args[i], sig, vals, leaves, keys) != ENCODED:
            return NOT_ENCODABLE
    return ENCODED


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


cdef object _typenum_dtype(int num):
    """The number dtype of a NumPy type number (ValueError for anything else)."""
    if num < 0 or num > cnp.NPY_NTYPES_LEGACY:
        raise ValueError(f"signature: type number {num}")
    try:
        dt = cnp.PyArray_DescrFromType(num)
    except Exception:
        raise ValueError(f"signature: type number {num}") from None
    if dt.kind not in "biufc":
        raise ValueError(f"signature: {dt} is not a number type")
    return dt


def signature_leaves(bytes sig):
    """The argument leaves a signature admits, decoded from its words (what the dispatcher
    will compare calls against): per leaf ("array", dtype, shape, byte strides),
    ("device", dtype, shape, byte strides, backend name) or ("scalar", dtype, weak Python
    type or None).  Raises ValueError on malformed words, so a
    saved program's claimed signature can be checked against its program."""
    cdef const int64_t *w
    cdef Py_ssize_t i = 0, n, d, nd
    cdef int64_t word, tag
    if len(sig) % sizeof(int64_t):
        raise ValueError("signature: not a whole number of words")
    w = <const int64_t *><char *>sig
    n = len(sig) // sizeof(int64_t)
    out = []
    while i < n:
        word = w[i]
        tag = sig_tag(word)
        i += 1
        if tag == TAG_ARRAY or tag == TAG_DEVARRAY:
            nd = sig_ndim(word)
            if (word >> (SIG_ARRAY_BITS if tag == TAG_ARRAY else SIG_DEVARRAY_BITS)) or \
                    nd > 64 or i - 1 + sig_array_size(word) > n:
                raise ValueError("signature: malformed array word")
            dtype = _typenum_dtype(sig_typenum(word))
            shape = tuple(int(w[i + d]) for d in range(nd))
            i += nd
            if any(x < 0 for x in shape):
                raise ValueError("signature: negative dimension")
            if sig_contiguous(word):
                strides = None
            else:
                strides = tuple(int(w[i + d]) for d in range(nd))
                i += nd
            if tag == TAG_ARRAY:
                out.append(("array", dtype, shape, strides))
            else:
                out.append(("device", dtype, shape, strides, DEVICE_NAMES.get(sig_device(word))))
        elif tag == TAG_FLOAT:
            out.append(("scalar", np.dtype(np.float64), float))
        elif tag == TAG_INT:
            out.append(("scalar", np.dtype(np.int64), int))
        elif tag == TAG_BIGINT:
            out.append(("scalar", np.dtype(np.uint64), int))
        elif tag == TAG_BOOL:
            out.append(("scalar", np.dtype(np.bool_), bool))
        elif tag == TAG_NPSCALAR:
            out.append(("scalar", _typenum_dtype(sig_typenum(word)), None))
        elif tag == TAG_COMPLEX:
            if (word >> SIG_TYPE_SHIFT) == 0:
                out += [("scalar", np.dtype(np.float64), float)] * 2
            else:
                dtype = _typenum_dtype(sig_typenum(word))
                if dtype.kind != "c" or word >> SIG_NDIM_SHIFT:
                    raise ValueError("signature: malformed complex word")
                out += [("scalar", np.dtype(dtype.char.lower()), None)] * 2
        elif tag in (TAG_TUPLE, TAG_LIST, TAG_DICT, TAG_NAMEDTUPLE, TAG_NONE, TAG_STATIC,
                     TAG_OBJECT, TAG_CONST):
            pass
        else:
            raise ValueError(f"signature: unknown tag {tag}")
    return out


# The replay fast path: arguments that are all arrays and Python scalars, encoded into stack
# buffers with borrowed references (the argument tuple keeps every leaf alive).
DEF FLAT_MAX_ARGS = 32
DEF FLAT_SIG_WORDS = 128

cdef Py_ssize_t encode_flat(tuple args, int64_t *sig, int64_t *vals, PyObject **objs) noexcept:
    """Signature words of flat arguments (as encode_value writes them); -1 if not flat."""
    cdef Py_ssize_t i, d, n = len(args), nsig = 0
    cdef PyObject *o
    cdef cnp.ndarray arr
    cdef DeviceArray dev
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
            sig[nsig] = sig_array_word(TAG_ARRAY, cnp.PyArray_TYPE(arr), nd, contiguous)
            nsig += 1
            for d in range(nd):
                sig[nsig + d] = cnp.PyArray_DIMS(arr)[d]
            nsig += nd
            if not contiguous:
                for d in range(nd):
                    sig[nsig + d] = cnp.PyArray_STRIDES(arr)[d]
                nsig += nd
            vals[i] = <int64_t><intptr_t>cnp.PyArray_DATA(arr)
        elif t is DeviceArray:
            dev = <DeviceArray>o
            if nsig + dev.nsig > FLAT_SIG_WORDS:
                return -1
            memcpy(&sig[nsig], dev.sig, dev.nsig * sizeof(int64_t))
            nsig += dev.nsig
            vals[i] = dev.ptr
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


# Arguments with dicts, tuples and lists of arrays and Python scalars (an optimiser's config,
# a dict of parameters): encoded without Python objects, the words encode_value writes.  The
# leaves are borrowed here and taken (Py_INCREF) once an entry matches: a dict or list may be
# changed by another thread while the program runs without the GIL.  The dicts and strings met,
# in order, are compared with the entry's keys in place (tree_keys_match), by identity or as
# exact str, so no user code (a key's __eq__) runs while borrowed references are held.
DEF TREE_MAX_LEAVES = 64
DEF TREE_SIG_WORDS = 256
DEF TREE_MAX_NODES = 32
DEF TREE_MAX_DEPTH = 8

cdef int _NUM_F64 = np.dtype(np.float64).num
cdef int _NUM_F32 = np.dtype(np.float32).num
cdef int _NUM_I64 = np.dtype(np.int64).num
cdef int _NUM_I32 = np.dtype(np.int32).num

cdef struct Tree:
    Py_ssize_t nsig
    Py_ssize_t nleaves
    Py_ssize_t nnodes
    int64_t sig[TREE_SIG_WORDS]
    int64_t vals[TREE_MAX_LEAVES]
    PyObject *objs[TREE_MAX_LEAVES]
    PyObject *nodes[TREE_MAX_NODES]     # dicts and strs, in encode_value's order of keys

cdef bint tree_push(Tree *t, int64_t word) noexcept:
    if t.nsig == TREE_SIG_WORDS:
        return False
    t.sig[t.nsig] = word
    t.nsig += 1
    return True

cdef bint tree_leaf(Tree *t, PyObject *o, int64_t val) noexcept:
    if t.nleaves == TREE_MAX_LEAVES:
        return False
    t.objs[t.nleaves] = o
    t.vals[t.nleaves] = val
    t.nleaves += 1
    return True

cdef bint encode_tree(PyObject *o, Tree *t, int depth) noexcept:
    """Append one argument's words (as encode_value); False where the general path must
    encode it (another type, too large, too deep)."""
    cdef cnp.ndarray arr
    cdef int flags, nd, d
    cdef bint contiguous
    cdef Bits bits
    cdef Py_ssize_t pos = 0, i, n
    cdef PyObject *key
    cdef PyObject *value
    cdef int64_t iv
    t_ = <object>Py_TYPE_of(o)
    if t_ is float:
        bits.f = (<object>o)
        return tree_push(t, TAG_FLOAT) and tree_leaf(t, o, bits.i)
    if cnp.PyArray_CheckExact(<object>o):
        arr = <cnp.ndarray>o
        flags = cnp.PyArray_FLAGS(arr)
        if not (flags & cnp.NPY_ARRAY_ALIGNED) or not cnp.PyArray_ISNOTSWAPPED(arr):
            return False
        nd = cnp.PyArray_NDIM(arr)
        contiguous = (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) != 0
        if t.nsig + 1 + nd * (1 if contiguous else 2) > TREE_SIG_WORDS:
            return False
        tree_push(t, TAG_ARRAY | (<int64_t>cnp.PyArray_TYPE(arr) << 8)
                  | (<int64_t>nd << 24) | (<int64_t>contiguous << 40))
        for d in range(nd):
            tree_push(t, cnp.PyArray_DIMS(arr)[d])
        if not contiguous:
            for d in range(nd):
                tree_push(t, cnp.PyArray_STRIDES(arr)[d])
        return tree_leaf(t, o, <int64_t><intptr_t>cnp.PyArray_DATA(arr))
    if t_ is int:
        try:
            iv = <object>o
        except OverflowError:
            return False
        return tree_push(t, TAG_INT) and tree_leaf(t, o, iv)
    if t_ is bool:
        return tree_push(t, TAG_BOOL) and tree_leaf(t, o, 1 if (<object>o) is True else 0)
    if o == <PyObject *>None:
        return tree_push(t, TAG_NONE)
    if t_ is np.float64 or t_ is np.float32:
        # NumPy's float scalars, as encode_value's TAG_NPSCALAR: the value as a double's bits
        bits.f = float(<object>o)
        return tree_push(t, TAG_NPSCALAR | (<int64_t>(_NUM_F64 if t_ is np.float64 else _NUM_F32)
                                            << 8)) and tree_leaf(t, o, bits.i)
    if t_ is np.int64 or t_ is np.int32:
        return tree_push(t, TAG_NPSCALAR | (<int64_t>(_NUM_I64 if t_ is np.int64 else _NUM_I32)
                                            << 8)) and tree_leaf(t, o, int(<object>o))
    if depth >= TREE_MAX_DEPTH:
        return False
    if t_ is dict:
        n = len(<object>o)
        if t.nnodes == TREE_MAX_NODES or not tree_push(t, TAG_DICT | (<int64_t>n << 8)):
            return False
        t.nodes[t.nnodes] = o
        t.nnodes += 1
        while PyDict_Next(<object>o, &pos, &key, &value):
            if not encode_tree(value, t, depth + 1):
                return False
        return True
    if t_ is tuple or t_ is list:
        n = len(<object>o)
        if not tree_push(t, (TAG_TUPLE if t_ is tuple else TAG_LIST) | (<int64_t>n << 8)):
            return False
        for i in range(n):
            if not encode_tree(tuple_get_item(<object>o, i) if t_ is tuple
                               else list_get_item(<object>o, i), t, depth + 1):
                return False
        return True
    if t_ is str and depth > 0:
        if t.nnodes == TREE_MAX_NODES or not tree_push(t, TAG_CONST):
            return False
        t.nodes[t.nnodes] = o
        t.nnodes += 1
        return True
    return False

cdef inline bint same_key(PyObject *a, object b) noexcept:
    """A dict key or const as the fast path compares it: the same object, or equal exact strs
    (no user __eq__ runs)."""
    if a == <PyObject *>b:
        return True
    if <object>Py_TYPE_of(a) is str and type(b) is str:
        return (<str>a) == (<str>b)
    return False

cdef bint tree_keys_match(Tree *t, list keys) noexcept:
    """Whether the dicts' keys (in order) and the strs of the call are the entry's keys.  A
    False only sends the call to the general path, which compares by ==."""
    cdef Py_ssize_t j, pos, k
    cdef PyObject *node
    cdef PyObject *key
    cdef PyObject *value
    if len(keys) != t.nnodes:
        return False
    for j in range(t.nnodes):
        node = t.nodes[j]
        expected = keys[j]
        if <object>Py_TYPE_of(node) is dict:
            if type(expected) is not tuple or len(<tuple>expected) != len(<object>node):
                return False
            pos = 0
            k = 0
            while PyDict_Next(<object>node, &pos, &key, &value):
                if not same_key(key, (<tuple>expected)[k]):
                    return False
                k += 1
        elif not same_key(node, expected):
            return False
    return True


cdef bint _is_flat(bytes sig):
    """Whether a signature has only top-level array and scalar tags (what encode_flat makes)."""
    cdef const int64_t *w = <const int64_t *><char *>sig
    cdef Py_ssize_t i = 0, n = len(sig) // sizeof(int64_t), nd
    cdef int tag
    while i < n:
        tag = sig_tag(w[i])
        if tag == TAG_ARRAY or tag == TAG_DEVARRAY:
            i += sig_array_size(w[i])
        elif tag in (TAG_FLOAT, TAG_INT, TAG_BOOL):
            i += 1
        else:
            return False
    return True


cdef extern from *:
    """
    #include <stdint.h>
    #include "csrc/runtime.h"
    /* The key of one call's random numbers: splitmix64 of the seed and a call counter taken
       atomically (concurrent calls of one executable get distinct keys); the seed salted in
       a forked child, which inherits both (runtime.h: fl_rng_salt). */
    static inline uint64_t fl_rng_key(uint64_t seed, uint64_t *calls) {
        uint64_t z = (seed ^ fl_rng_salt())
                     + __atomic_fetch_add(calls, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }
    """
    uint64_t fl_rng_key(uint64_t seed, uint64_t *calls) nogil


cdef int interrupt_pending() noexcept nogil:
    return fl_interrupt_pending()


# ---- the host interpreter ----------------------------------------------------------------
# The dispatch loop is _interp.pxi's, shared with every interpreter; here are the host's
# hooks: kernels are function pointers with the CPU kernel ABI, memory is the host pool.
ctypedef struct Hooks:
    fl_kernel_fn *kernels
    const int64_t *work           # per kernel: work per launch index (runtime.h: fl_launch)
    const int64_t *threads        # per kernel: the threads its schedule gives it
    const fl_library_fn *libs     # the LIBCALL table


cdef inline int hook_launch(const Hooks *h, const int64_t *ins, int64_t *argwords,
                            RunState *state) noexcept nogil:
    # a launch small enough to run serially calls its kernel directly
    cdef Py_ssize_t k = ins[1]
    fl_launch_inline(h.kernels[k], ins[2], h.work[k], h.threads[k], &argwords[ins[3]])
    return STATUS_OK


cdef inline int hook_alloc(const Hooks *h, const int64_t *ins, int64_t *slots,
                           RunState *state) noexcept nogil:
    cdef void *p = fl_mem_alloc(ins[2])
    if p == NULL:
        return STATUS_NO_MEMORY
    slots[ins[1]] = <int64_t><intptr_t>p
    return STATUS_OK


cdef inline int hook_free(const Hooks *h, const int64_t *ins, int64_t *slots,
                          RunState *state) noexcept nogil:
    fl_mem_free(<void *><intptr_t>slots[ins[1]])
    slots[ins[1]] = 0
    return STATUS_OK


cdef inline int hook_to_device(const Hooks *h, const int64_t *ins, int64_t *slots,
                               RunState *state) noexcept nogil:
    # host programs have one space: a copy between two host slots (the recorder emits none)
    memcpy(<void *><intptr_t>slots[ins[1]], <const void *><intptr_t>slots[ins[2]], ins[3])
    return STATUS_OK


cdef inline int hook_to_host(const Hooks *h, const int64_t *ins, int64_t *slots,
                             RunState *state) noexcept nogil:
    memcpy(<void *><intptr_t>slots[ins[1]], <const void *><intptr_t>slots[ins[2]], ins[3])
    return STATUS_OK


cdef inline int hook_copy(const Hooks *h, const int64_t *ins, int64_t *slots,
                          RunState *state) noexcept nogil:
    memmove(<void *><intptr_t>slots[ins[1]], <const void *><intptr_t>slots[ins[2]], ins[3])
    return STATUS_OK


cdef inline int hook_check(const Hooks *h, const int64_t *ins, int64_t *slots,
                           RunState *state) noexcept nogil:
    if (<int64_t *><intptr_t>slots[ins[1]])[0] != 0:
        return STATUS_KERNEL_ERROR
    return STATUS_OK


cdef inline int hook_flag(const Hooks *h, const int64_t *ins, int64_t *slots, char *flag,
                          RunState *state) noexcept nogil:
    flag[0] = (<const char *><intptr_t>slots[ins[1]])[0]
    return STATUS_OK


cdef inline int hook_libcall(const Hooks *h, const int64_t *ins, int64_t *slots,
                             RunState *state) noexcept nogil:
    # the routine runs here, on the interpreter's thread; BLAS has its own threads, so the
    # pool's workers stop spinning for it
    cdef int rc
    fl_pool_park()
    rc = h.libs[ins[1]](&ins[2], slots)
    if rc != 0:
        state.backend_code = rc
        return STATUS_LIBRARY_ERROR
    return STATUS_OK


cdef inline int hook_poll() noexcept nogil:
    return fl_interrupt_pending()


include "_interp.pxi"


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


# ---- device arrays -------------------------------------------------------------------------
# The backends whose memory a DeviceArray can be in, as numbered in its signature words: an
# array of one backend never matches a program of another.  Each device backend registers its
# number (backends/__init__.py, where the numbers are fixed: signatures hold them); this
# module names no backend.
DEVICE_KINDS = {}
DEVICE_NAMES = {}
_CUDA_INTERFACE = set()     # the kinds whose arrays are CUDA memory (__cuda_array_interface__)


def register_device_kind(str name, int kind, bint cuda_array_interface=False):
    """Number `name`'s device memory `kind` (1..15) in signature words, for good."""
    if not 1 <= kind <= SIG_DEVICE_MASK:
        raise ValueError(f"device kind {kind} of {name!r} not in 1..{SIG_DEVICE_MASK}")
    if DEVICE_KINDS.get(name, kind) != kind or DEVICE_NAMES.get(kind, name) != name:
        raise ValueError(f"device kind {kind} of {name!r} conflicts with the registered "
                         f"{DEVICE_KINDS}")
    DEVICE_KINDS[name] = kind
    DEVICE_NAMES[kind] = name
    if cuda_array_interface:
        _CUDA_INTERFACE.add(kind)
DEF MAX_DEVICE_DIMS = 32


cdef class DeviceArray:
    """An array in a device backend's memory: shape, dtype, byte strides and the address of
    element 0.  A compiled function of that backend binds it without a copy (an argument
    updated in place is updated on the device), and the results of a call with device
    arrays among its arguments are DeviceArrays.  `.numpy()` copies it to the host.

    Made by the backends (`fastlaunch.to_device`, results); `memory` keeps the allocation
    alive and reads it back."""

    def __cinit__(self, *args, **kwargs):
        self.sig = NULL

    def __init__(self, int64_t ptr, shape, dtype, str device, memory, strides=None,
                 bint writeable=True):
        cdef Py_ssize_t d, nd
        dt = np.dtype(dtype)
        if dt.kind not in "biufc" or not dt.isnative or (dt.kind == "c" and dt.itemsize > 16):
            raise TypeError(f"DeviceArray: dtype {dt} is not a native number type")
        if device not in DEVICE_KINDS:
            raise ValueError(f"DeviceArray: unknown device {device!r}")
        shape = tuple(int(x) for x in shape)
        nd = len(shape)
        if nd > MAX_DEVICE_DIMS or any(x < 0 for x in shape):
            raise ValueError(f"DeviceArray: bad shape {shape}")
        c_strides, acc = [], dt.itemsize
        for x in reversed(shape):
            c_strides.append(acc)
            acc *= max(x, 1)
        c_strides = tuple(reversed(c_strides))
        strides = c_strides if strides is None else tuple(int(x) for x in strides)
        if len(strides) != nd:
            raise ValueError(f"DeviceArray: {len(strides)} strides for {nd} dimensions")
        contiguous = strides == c_strides
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dt
        self.device = device
        self.memory = memory
        self.writeable = writeable
        self.nsig = 1 + nd * (1 if contiguous else 2)
        self.sig = <int64_t *>malloc(self.nsig * sizeof(int64_t))
        if self.sig == NULL:
            raise MemoryError()
        self.sig[0] = (sig_array_word(TAG_DEVARRAY, dt.num, nd, contiguous)
                       | (<int64_t>DEVICE_KINDS[device] << SIG_DEVICE_SHIFT))
        for d in range(nd):
            self.sig[1 + d] = shape[d]
            if not contiguous:
                self.sig[1 + nd + d] = strides[d]

    def __dealloc__(self):
        free(self.sig)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def byte_range(self):
        """(lo, hi): the bytes [ptr + lo, ptr + hi) the array addresses."""
        if self.size == 0:
            return 0, 0
        lo = sum(min(0, (n - 1) * st) for n, st in zip(self.shape, self.strides))
        hi = sum(max(0, (n - 1) * st) for n, st in zip(self.shape, self.strides))
        return lo, hi + self.dtype.itemsize

    def numpy(self):
        """A host copy (a new NumPy array of the same shape and dtype)."""
        lo, hi = self.byte_range()
        if hi <= lo:
            return np.empty(self.shape, self.dtype)
        raw = self.memory.read(self.ptr + lo, hi - lo)
        view = np.ndarray(self.shape, self.dtype, buffer=raw, offset=-lo, strides=self.strides)
        return np.array(view, order="C")

    @property
    def __cuda_array_interface__(self):
        if sig_device(self.sig[0]) not in _CUDA_INTERFACE:
            raise AttributeError(f"a {self.device} DeviceArray is not CUDA memory")
        contiguous = sig_contiguous(self.sig[0])
        # every call of a compiled function synchronises its stream before it returns
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self.ptr, not self.writeable),
                "strides": None if contiguous else self.strides, "stream": None}

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        export = getattr(self.memory, "dlpack", None)
        if export is None:
            raise BufferError(f"a {self.device} DeviceArray cannot be exported with DLPack")
        return export(self, stream)

    def __dlpack_device__(self):
        device = getattr(self.memory, "dlpack_device", None)
        if device is None:
            raise BufferError(f"a {self.device} DeviceArray cannot be exported with DLPack")
        return device()

    def __repr__(self):
        return f"DeviceArray({self.device}, {self.dtype}{list(self.shape)})"


cdef DeviceArray device_array_like(DeviceArray like, int64_t ptr, object memory):
    cdef DeviceArray arr = DeviceArray.__new__(DeviceArray)
    arr.sig = <int64_t *>malloc(like.nsig * sizeof(int64_t))
    if arr.sig == NULL:
        raise MemoryError()
    memcpy(arr.sig, like.sig, like.nsig * sizeof(int64_t))
    arr.nsig = like.nsig
    arr.ptr = ptr
    arr.shape = like.shape
    arr.strides = like.strides
    arr.dtype = like.dtype
    arr.device = like.device
    arr.writeable = like.writeable
    arr.memory = memory
    return arr


DEF MAX_OUTPUTS = 64
DEF LOCAL_SLOTS = 64
DEF LOCAL_ARGWORDS = 128


cdef struct CallTables:
    # _core.pxd: the dispatcher's own tables, read by invoke; no backend sees them
    Py_ssize_t nslots, nargwords, nleaves
    int64_t *const_slots
    int64_t *const_ptrs
    Py_ssize_t nconsts
    int64_t *int_checks                # (leaf, lo, hi) triples: weak Python ints cast narrower
    Py_ssize_t nint_checks
    int64_t *mutated                   # leaves written in place
    Py_ssize_t nmutated
    int64_t *leaf_lo                   # per leaf: byte range [lo, hi) it addresses relative
    int64_t *leaf_hi                   # to its pointer (hi <= lo: not an array)
    Py_ssize_t rng_slot                # slot of the call's random key, or -1
    uint64_t rng_seed                  # the executable's random seed...
    uint64_t rng_calls                 # ...and the calls made: each call's key hashes both
    Py_ssize_t nresults
    int *res_kind                      # ResultKind per result leaf
    int64_t *res_index                 # output index, argument leaf, or index in res_values
    bint *res_scalar                   # hand a 0-d output back as a NumPy scalar
    int structure                      # ResultStructure
    bint polls                         # the code has POLL instructions
    bint copies_back                   # arguments updated in place are copied back whole
    # owned references (Executable.__dealloc__ drops them)
    PyObject *outputs                  # OutputLayout: the host result arrays
    PyObject *res_values               # list
    PyObject *unflatten
    PyObject *kernel_errors            # [(KernelError bit, exception class, message)]
    PyObject *keepalive


cdef inline PyObject *_owned(object obj):
    Py_INCREF(obj)
    return <PyObject *>obj


cdef class Executable:
    """See _core.pxd.  `layout` (link.ExecutableLayout) carries the verified tables."""

    def __cinit__(self, *args, **kwargs):
        self.call = <CallTables *>calloc(1, sizeof(CallTables))
        if self.call == NULL:
            raise MemoryError()

    def __init__(self, layout):
        cdef Py_ssize_t i
        cdef CallTables *t = self.call
        if t.outputs != NULL:
            raise RuntimeError("Executable.__init__ called twice")
        program = layout.program
        self.program = program
        self.bytecode.ncode = len(program.code)
        self.bytecode.code = _copy_words(program.code)
        self.bytecode.lists = _copy_words(program.arg_lists)
        t.nslots, t.nargwords, t.nleaves = len(program.slots), program.nargwords, \
            program.nleaves
        t.nconsts = len(layout.const_slots)
        t.const_slots = _copy_words(layout.const_slots)
        t.const_ptrs = _copy_words(layout.const_ptrs)
        self.owned.status = program.status_slot
        self.owned.ntemps = len(layout.temp_slots)
        self.owned.temps = _copy_words(layout.temp_slots)
        self.owned.noutputs = len(program.outputs)
        self.owned.outputs = _copy_words([slot for slot, _, _ in program.outputs])
        t.outputs = _owned(OutputLayout([(dtype, shape) for _, dtype, shape in program.outputs]))
        t.nint_checks = len(layout.int_checks)
        t.int_checks = _copy_words([x for c in layout.int_checks for x in c])
        t.nmutated = len(program.mutated_leaves)
        t.mutated = _copy_words(program.mutated_leaves)
        t.leaf_lo = _copy_words([lo for lo, _ in layout.leaf_bytes])
        t.leaf_hi = _copy_words([hi for _, hi in layout.leaf_bytes])
        t.nresults = len(layout.results)
        t.res_kind = <int *>malloc(max(1, t.nresults) * sizeof(int))
        t.res_index = <int64_t *>malloc(max(1, t.nresults) * sizeof(int64_t))
        t.res_scalar = <bint *>malloc(max(1, t.nresults) * sizeof(bint))
        if t.res_kind == NULL or t.res_index == NULL or t.res_scalar == NULL:
            raise MemoryError()
        res_values = []
        for i, (kind, index, as_scalar) in enumerate(layout.results):
            t.res_kind[i] = kind
            t.res_scalar[i] = as_scalar
            if kind == RESULT_VALUE:
                t.res_index[i] = len(res_values)
                res_values.append(index)
            else:
                t.res_index[i] = index
        t.res_values = _owned(res_values)
        if self.owned.noutputs > MAX_OUTPUTS:
            raise ValueError(f"fastlaunch: more than {MAX_OUTPUTS} result arrays are not "
                             f"supported")
        t.rng_slot = program.rng_slot
        t.rng_seed = <uint64_t>(int(layout.rng_seed) & 0xFFFFFFFFFFFFFFFF)
        t.rng_calls = 0
        t.structure = layout.structure
        t.unflatten = _owned(layout.unflatten)
        t.kernel_errors = _owned(list(layout.kernel_errors))
        t.polls = layout.polls
        t.copies_back = layout.copies_back
        t.keepalive = _owned(layout.keepalive)

    def __dealloc__(self):
        cdef CallTables *t = self.call
        free(<void *>self.bytecode.code); free(<void *>self.bytecode.lists)
        free(<void *>self.owned.temps); free(<void *>self.owned.outputs)
        if t != NULL:
            free(t.const_slots); free(t.const_ptrs)
            free(t.int_checks); free(t.mutated)
            free(t.leaf_lo); free(t.leaf_hi)
            free(t.res_kind); free(t.res_index); free(t.res_scalar)
            Py_XDECREF(t.outputs); Py_XDECREF(t.res_values); Py_XDECREF(t.unflatten)
            Py_XDECREF(t.kernel_errors); Py_XDECREF(t.keepalive)
            free(t)

    # ---- what a backend implements -------------------------------------------------------
    cdef int execute(self, int64_t *slots, int64_t *argwords, RunState *state) except -1 nogil:
        return STATUS_BAD_OPCODE

    cdef int release(self, int64_t *slots) except -1:
        return 0

    cdef int64_t read_status(self, int64_t *slots) except? -1:
        return (<int64_t *><intptr_t>slots[self.owned.status])[0]

    cdef int bind_outputs(self, PyObject **outs, int64_t *slots) except -1:
        return (<OutputLayout>self.call.outputs).allocate(outs, slots, self.owned.outputs)

    cdef object error(self, int status, RunState *state, int64_t *slots):
        """The exception of a failed run, naming the instruction it stopped at."""
        where = ""
        if state.pc >= 0:
            where = f" (at {self.program.line_at(state.pc)})"
        if status == STATUS_NO_MEMORY:
            return MemoryError(f"fastlaunch: out of memory for a temporary buffer{where}")
        if status == STATUS_KERNEL_ERROR:
            return self.kernel_error(self.read_status(slots), where)
        if status == STATUS_BACKEND_ERROR:
            return RuntimeError(f"fastlaunch: backend error {state.backend_code}{where}")
        if status == STATUS_LIBRARY_ERROR:
            return self.program.library_error(state.pc, state.backend_code, where)
        return RuntimeError(f"fastlaunch: program failed with status {status}{where}")

    cdef object kernel_error(self, int64_t word, str where):
        """The exception of a status word's KernelError bits (the lowest defined bit wins)."""
        for bit, exc, message in <list>self.call.kernel_errors:
            if word & bit:
                return exc(f"{message}{where}")
        return RuntimeError(f"fastlaunch: a kernel reported error bits {word:#x}{where}")


# ---- the call ------------------------------------------------------------------------------
cdef object invoke(Executable self, int64_t *leaf_words, PyObject **leaf_objs):
    cdef int64_t local_slots[LOCAL_SLOTS]
    cdef int64_t local_args[LOCAL_ARGWORDS]
    cdef PyObject *outs[MAX_OUTPUTS]
    cdef int64_t *slots = local_slots
    cdef int64_t *argwords = local_args
    cdef int64_t error_word = 0
    cdef CallTables *t = self.call
    cdef RunState state
    cdef Py_ssize_t i
    cdef int status
    if t.nint_checks:
        _check_ints(t, leaf_words)
    if t.nmutated:
        _check_mutated(t, leaf_words, leaf_objs)
    if t.nslots > LOCAL_SLOTS:
        slots = <int64_t *>malloc(t.nslots * sizeof(int64_t))
    if t.nargwords > LOCAL_ARGWORDS:
        argwords = <int64_t *>malloc(t.nargwords * sizeof(int64_t))
    if slots == NULL or argwords == NULL:
        _release(slots, local_slots, argwords, local_args)
        raise MemoryError()
    memset(outs, 0, self.owned.noutputs * sizeof(PyObject *))
    try:
        memcpy(slots, leaf_words, t.nleaves * sizeof(int64_t))
        for i in range(t.nconsts):
            slots[t.const_slots[i]] = t.const_ptrs[i]
        if self.owned.status >= 0:
            slots[self.owned.status] = <int64_t><intptr_t>&error_word
        if t.rng_slot >= 0:
            slots[t.rng_slot] = <int64_t>fl_rng_key(t.rng_seed, &t.rng_calls)
        self.bind_outputs(outs, slots)
        for i in range(self.owned.ntemps):
            slots[self.owned.temps[i]] = 0
        state.start = 0
        if t.polls and fl_interrupt_arm(_handles_signals()) == 0:
            cpython_check_signals()     # a Ctrl-C from just before the arm: raise it now
        while True:
            state.pc = -1
            state.backend_code = 0
            with nogil:
                status = self.execute(slots, argwords, &state)
            if status == STATUS_OK:
                break
            if status == STATUS_INTERRUPTED:
                # Python's own handler was chained: it raises (KeyboardInterrupt) here,
                # before any argument was written (POLLs come before the first in-place
                # write).  A handler that returns means the signal is survived: resume
                # after the POLL, with the slots as the run left them.
                fl_interrupt_clear()
                try:
                    cpython_check_signals()
                except BaseException:
                    self.release(slots)
                    raise
                state.start = state.pc + (POLL & 0xFF)
                continue
            err = self.error(status, &state, slots)    # reads the status word first
            self.release(slots)
            raise err
        return _pack(t, outs, leaf_objs)
    finally:
        for i in range(self.owned.noutputs):
            Py_XDECREF(outs[i])
        _release(slots, local_slots, argwords, local_args)


cdef object _pack(CallTables *t, PyObject **outs, PyObject **leaf_objs):
    """The call's result (outs keep their references; the caller drops them)."""
    cdef Py_ssize_t i
    cdef tuple result
    if t.structure == STRUCT_LEAF:
        return _take(t, 0, outs, leaf_objs)
    if t.structure == STRUCT_TUPLE:
        result = PyTuple_New(t.nresults)
        for i in range(t.nresults):
            item = _take(t, i, outs, leaf_objs)
            Py_INCREF(item)
            tuple_set_item(result, i, <PyObject *>item)
        return result
    return (<object>t.unflatten)([_take(t, i, outs, leaf_objs) for i in range(t.nresults)])


cdef object _take(CallTables *t, Py_ssize_t i, PyObject **outs, PyObject **leaf_objs):
    cdef PyObject *ref
    cdef Py_ssize_t k = t.res_index[i]
    if t.res_kind[i] == RESULT_NEW:
        if not t.res_scalar[i]:
            return <object>outs[k]
        Py_INCREF(<object>outs[k])         # PyArray_Return steals one reference...
        ref = array_return(<PyArrayObject *>outs[k])   # ...and returns a new one to the scalar
        result = <object>ref
        Py_XDECREF(ref)
        return result
    if t.res_kind[i] == RESULT_INPUT:
        return <object>leaf_objs[k]
    return (<list>t.res_values)[k]


cdef int _check_ints(CallTables *t, int64_t *leaf_words) except -1:
    cdef Py_ssize_t i
    cdef int64_t v
    for i in range(t.nint_checks):
        v = leaf_words[t.int_checks[3 * i]]
        if v < t.int_checks[3 * i + 1] or v > t.int_checks[3 * i + 2]:
            raise OverflowError(
                f"Python integer {v} (argument leaf {t.int_checks[3 * i]}) out of bounds "
                f"[{t.int_checks[3 * i + 1]}, {t.int_checks[3 * i + 2]}] for the "
                f"dtype it is combined with")
    return 0


cdef int _check_mutated(CallTables *t, int64_t *leaf_words, PyObject **leaf_objs) except -1:
    """Arguments written in place must be writeable and distinct from the others: the
    byte ranges the recorder knows are compared here; only where two ranges meet does
    np.shares_memory decide (x[::2] and x[1::2] interleave without sharing), except
    between two arguments that the program copies back whole (copies_back: a crossing
    backend's TO_HOST of each one's byte span), where the second copy would undo the
    first one's writes: those are aliased, and get a program of their own (one span)."""
    cdef Py_ssize_t i, j, k, m
    cdef int64_t a0, a1, b0, b1
    cdef bint both_copied
    for i in range(t.nmutated):
        m = t.mutated[i]
        leaf = <object>leaf_objs[m]
        if (not leaf.writeable if type(leaf) is DeviceArray else
                not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>leaf)):
            raise ValueError(f"argument leaf {m} is updated in place but is read-only")
        a0 = leaf_words[m] + t.leaf_lo[m]
        a1 = leaf_words[m] + t.leaf_hi[m]
        for j in range(t.nleaves):
            if j == m or t.leaf_hi[j] <= t.leaf_lo[j]:
                continue
            b0 = leaf_words[j] + t.leaf_lo[j]
            b1 = leaf_words[j] + t.leaf_hi[j]
            if not (a0 < b1 and b0 < a1):
                continue
            both_copied = False
            if t.copies_back and type(leaf) is not DeviceArray and \
                    type(<object>leaf_objs[j]) is not DeviceArray:
                for k in range(t.nmutated):
                    if t.mutated[k] == j:
                        both_copied = True
            # device arrays: their byte ranges decide (NumPy cannot look at them)
            if (both_copied or type(leaf) is DeviceArray or
                    type(<object>leaf_objs[j]) is DeviceArray or
                    np.shares_memory(leaf, <object>leaf_objs[j])):
                raise AliasedArgumentsError(
                    f"argument leaf {m} is updated in place and overlaps argument leaf "
                    f"{j}; fastlaunch treats arguments as distinct arrays: pass a copy",
                    m, j)
    return 0


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


cdef inline int cpython_check_signals() except -1:
    return PyErr_CheckSignals()


cdef fl_library_fn *library_table(object program, object library_addresses) except NULL:
    """library_addresses: one address per _launch.Routine, 0 for a routine the program never
    calls (empty: it calls none).  Unused entries get fl_library_null rather than NULL: the
    verifier already keeps LIBCALL to the program's own routines, and a no-op is the safer
    miss."""
    cdef Py_ssize_t i
    addresses = list(library_addresses) or [0] * LIB_COUNT
    if len(addresses) != LIB_COUNT:
        raise ValueError(f"{len(addresses)} library routines, expected {LIB_COUNT}")
    used = set(program.library_routines())
    for i in range(LIB_COUNT):
        if i in used and not addresses[i]:
            raise ValueError(f"library routine {i} has no address")
    cdef fl_library_fn *table = <fl_library_fn *>malloc(LIB_COUNT * sizeof(fl_library_fn))
    if table == NULL:
        raise MemoryError()
    for i in range(LIB_COUNT):
        table[i] = <fl_library_fn><intptr_t>addresses[i] if addresses[i] else fl_library_null
    return table


cdef bint _handles_signals():
    """Whether this thread is the one Python runs signal handlers in (the main thread; after a
    fork, the forking one).  Only there can a POLL's stop turn into a KeyboardInterrupt."""
    return threading.get_ident() == threading.main_thread().ident


cdef class HostExecutable(Executable):
    """The host backends' executable: kernels are function pointers with the CPU kernel
    ABI, memory comes from the host pool."""
    cdef fl_kernel_fn *kernels
    cdef int64_t *work
    cdef int64_t *threads
    cdef fl_library_fn *libs
    cdef Hooks hooks                  # the four above, as the dispatch loop reads them

    def __init__(self, layout, kernel_addresses, kernel_work, kernel_threads,
                 library_addresses=()):
        """kernel_work, kernel_threads: per kernel, its work per launch index and the threads
        its schedule gives it (runtime.h: fl_launch).  library_addresses: one routine address
        per _launch.Routine (the LIBCALL table; 0 where the program calls none), resolved by
        the backend at link time."""
        cdef Py_ssize_t i
        Executable.__init__(self, layout)
        self.kernels = <fl_kernel_fn *>malloc(max(1, len(kernel_addresses)) * sizeof(fl_kernel_fn))
        if self.kernels == NULL:
            raise MemoryError()
        for i, addr in enumerate(kernel_addresses):
            if not addr:
                raise ValueError(f"kernel {i} has no address")
            self.kernels[i] = <fl_kernel_fn><intptr_t>addr
        self.work = _copy_words(kernel_work)
        self.threads = _copy_words(kernel_threads)
        self.libs = library_table(layout.program, library_addresses)
        self.hooks.kernels = self.kernels
        self.hooks.work = self.work
        self.hooks.threads = self.threads
        self.hooks.libs = self.libs

    def __dealloc__(self):
        free(self.kernels)
        free(self.work)
        free(self.threads)
        free(self.libs)

    cdef int execute(self, int64_t *slots, int64_t *argwords, RunState *state) except -1 nogil:
        return run_loop(&self.bytecode, slots, argwords, &self.hooks, state)

    cdef int release(self, int64_t *slots) except -1:
        cdef Py_ssize_t i
        for i in range(self.owned.ntemps):
            if slots[self.owned.temps[i]] != 0:
                fl_mem_free(<void *><intptr_t>slots[self.owned.temps[i]])
                slots[self.owned.temps[i]] = 0
        return 0


class AliasedArgumentsError(ValueError):
    """An argument updated in place overlaps another argument in memory: the program traced
    for distinct arrays cannot run on them (the dispatcher hands such calls to _on_aliased)."""

    def __init__(self, message, leaf, other):
        super().__init__(message)
        self.leaf, self.other = leaf, other


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


cdef inline void _release(int64_t *slots, int64_t *local_slots, int64_t *argwords,
                          int64_t *local_args) noexcept:
    if slots != local_slots and slots != NULL:
        free(slots)
    if argwords != local_args and argwords != NULL:
        free(argwords)


cdef int64_t *_copy_words(arr) except NULL:
    cdef cnp.ndarray[cnp.int64_t, ndim=1] a = np.ascontiguousarray(
        np.asarray(arr, np.int64).reshape(-1))
    cdef int64_t *out = <int64_t *>malloc(max(1, a.shape[0]) * sizeof(int64_t))
    if out == NULL:
        raise MemoryError()
    if a.shape[0]:
        memcpy(out, &a[0], a.shape[0] * sizeof(int64_t))
    return out


# ---- the dispatcher ----------------------------------------------------------------------
cdef inline uint64_t hash_words(const int64_t *w, Py_ssize_t n) noexcept:
    """FNV-1a over the signature words: the dispatcher's table key."""
    cdef uint64_t h = 1469598103934665603ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ <uint64_t>w[i]) * 1099511628211ULL
    return h >> 1          # fits a non-negative Py_ssize_t-sized int key


cdef class Entry:
    """One traced signature: its encoded words and the executable that replays it.
    `specialized`: (leaf, word) pairs of Python scalars whose value is part of the signature
    (the trace needed their value); they must match as well."""
    cdef bytes sig
    cdef Py_ssize_t nsig
    cdef bint flat              # only arrays and Python scalars, directly in the arguments
    cdef list keys
    cdef list statics
    cdef int64_t *spec_leaf
    cdef int64_t *spec_word
    cdef Py_ssize_t nspec
    cdef readonly Executable executable
    cdef readonly uint64_t key
    cdef uint64_t last_used
    cdef public object info
    # None, or a callable (call args, program result) -> result that applies the trace's side
    # effects on argument containers (only calls with containers have it), or the finishing
    # of an fl.iterate loop's results (flat calls too)
    cdef public object post

    def __cinit__(self, *args, **kwargs):
        self.spec_leaf = NULL
        self.spec_word = NULL

    def __init__(self, bytes sig, list keys, list statics, Executable executable, info=None,
                 specialized=()):
        self.sig = sig
        self.nsig = len(sig) // sizeof(int64_t)
        self.keys = keys
        self.statics = statics
        self.flat = not keys and not statics and _is_flat(sig)
        self.executable = executable
        self.info = info
        self.key = hash_words(<const int64_t *><char *>sig, self.nsig)
        specialized = list(specialized)
        for leaf, _ in specialized:
            # values_match indexes the call's leaf words with these
            if not 0 <= leaf < executable.call.nleaves:
                raise ValueError(f"specialised leaf {leaf} of {executable.call.nleaves}")
        self.nspec = len(specialized)
        self.spec_leaf = _copy_words([leaf for leaf, _ in specialized])
        self.spec_word = _copy_words([word for _, word in specialized])

    def __dealloc__(self):
        free(self.spec_leaf)
        free(self.spec_word)

    @property
    def signature(self):
        return self.sig

    @property
    def specialized(self):
        return [(self.spec_leaf[i], self.spec_word[i]) for i in range(self.nspec)]

    cdef inline bint values_match(self, const int64_t *vals) noexcept:
        cdef Py_ssize_t i
        for i in range(self.nspec):
            if vals[self.spec_leaf[i]] != self.spec_word[i]:
                return False
        return True


DEF DEFAULT_MAX_ENTRIES = 512


cdef class Dispatcher:
    """The compiled callable's fast path.  Subclassed in Python (fastlaunch.jit.Compiled).

    Lookup: the most recently used entry is tried first (one memcmp: a loop calling with one
    signature pays nothing for the others), then a table keyed by a hash of the signature
    words.  Past `max_entries` the least recently used entry is dropped, and with it (once
    nothing else holds them) its kernels."""
    cdef list _entries
    cdef dict _table            # hash of the signature words -> [Entry]
    cdef Entry _mru
    cdef uint64_t _tick
    cdef tuple _static_positions
    cdef bint _replay
    cdef public Py_ssize_t max_entries
    cdef tuple _keyword_names

    def __init__(self, static_positions=(), replay=True, max_entries=DEFAULT_MAX_ENTRIES):
        self._entries = []
        self._table = {}
        self._mru = None
        self._tick = 0
        self._static_positions = tuple(static_positions)
        self._replay = replay
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries

    def _install(self, Entry entry):
        """Add an entry (dropping the least recently used one past max_entries); returns the
        entries dropped."""
        cdef Entry e, victim
        dropped = []
        while len(self._entries) >= self.max_entries:
            victim = self._entries[0]
            for e in self._entries:
                if e.last_used < victim.last_used:
                    victim = e
            self._remove(victim)
            dropped.append(victim)
        self._tick += 1
        entry.last_used = self._tick
        self._entries.append(entry)
        self._table.setdefault(entry.key, []).append(entry)
        self._mru = entry
        return dropped

    cdef _remove(self, Entry entry):
        self._entries.remove(entry)
        bucket = self._table.get(entry.key)
        if bucket is not None:
            bucket.remove(entry)
            if not bucket:
                del self._table[entry.key]
        if self._mru is entry:
            self._mru = None

    def _entries_list(self):
        return list(self._entries)

    def _forget(self):
        self._entries = []
        self._table = {}
        self._mru = None

    def _miss(self, args, kwargs):
        raise NotImplementedError

    def _set_keyword_names(self, names):
        """Names of the parameters keywords may fill in order (None: positional-only)."""
        self._keyword_names = tuple(names)

    cdef object _positional(self, tuple args, dict kwargs):
        """args + the keyword arguments as positionals, or None when they do not fill the
        next parameters exactly (a gap, an unknown or repeated name: the slow path binds)."""
        cdef Py_ssize_t i, n = len(args), total = len(args) + len(kwargs)
        cdef tuple names = self._keyword_names
        if names is None or total > len(names):
            return None
        out = list(args)
        for i in range(n, total):
            name = names[i]
            if name is None or name not in kwargs:
                return None
            out.append(kwargs[name])
        return tuple(out)

    cdef inline object _hit(self, Entry entry, int64_t *vals, PyObject **objs, tuple args):
        self._tick += 1
        entry.last_used = self._tick
        self._mru = entry
        if entry.executable.call.nmutated or entry.post is not None:
            return self._hit_mutating(entry, vals, objs, args)
        return invoke(entry.executable, vals, objs)

    cdef object _hit_mutating(self, Entry entry, int64_t *vals, PyObject **objs, tuple args):
        # arguments updated in place may alias others: such a call has programs of its own;
        # an entry with a post (fl.iterate's loops that put their results together) runs it
        try:
            result = invoke(entry.executable, vals, objs)
        except AliasedArgumentsError as err:
            return self._on_aliased(args, {}, err)
        if entry.post is not None:
            return entry.post(args, result)
        return result

    def _on_aliased(self, args, kwargs, err):
        """A call whose in-place argument overlaps another (err: AliasedArgumentsError)."""
        raise err

    def __call__(self, *args, **kwargs):
        cdef int64_t sig[FLAT_SIG_WORDS]
        cdef int64_t vals[FLAT_MAX_ARGS]
        cdef PyObject *objs[FLAT_MAX_ARGS]
        cdef Py_ssize_t nsig
        cdef Entry entry = self._mru
        if kwargs:
            # keywords naming positional parameters, right after the positional arguments,
            # make the same argument tuple the slow path's binding does (a second call, so
            # that the positional path below keeps `args` borrowed)
            merged = self._positional(args, kwargs)
            if merged is None:
                return self._miss(args, kwargs)
            return self(*merged)
        if not self._replay or not self._entries:
            return self._miss(args, kwargs)
        if not self._static_positions:
            nsig = encode_flat(args, sig, vals, objs)
            if nsig >= 0:
                if entry is not None and entry.flat and entry.nsig == nsig and \
                        memcmp(<char *>entry.sig, sig, nsig * sizeof(int64_t)) == 0 and \
                        entry.values_match(vals):
                    return self._hit(entry, vals, objs, args)
                bucket = self._table.get(hash_words(sig, nsig))
                if bucket is not None:
                    for entry in bucket:
                        if entry.flat and entry.nsig == nsig and \
                                memcmp(<char *>entry.sig, sig, nsig * sizeof(int64_t)) == 0 \
                                and entry.values_match(vals):
                            return self._hit(entry, vals, objs, args)
                return self._miss(args, kwargs)
            return self._tree_call(args)
        return self._general_call(args, kwargs)

    cdef object _tree_call(self, tuple args):
        """Arguments with dicts, tuples and lists of arrays and Python scalars (encode_tree);
        anything else, and a call no entry matches here, goes to _general_call."""
        cdef Tree tree
        cdef Entry entry = self._mru
        cdef Py_ssize_t i, n
        tree.nsig = tree.nleaves = tree.nnodes = 0
        for i in range(len(args)):
            if not encode_tree(tuple_get_item(args, i), &tree, 0):
                return self._general_call(args, {})
        n = tree.nsig * sizeof(int64_t)
        if entry is None or entry.nsig != tree.nsig or \
                memcmp(<char *>entry.sig, tree.sig, n) != 0 or entry.statics or \
                not tree_keys_match(&tree, entry.keys) or not entry.values_match(tree.vals):
            entry = None
            bucket = self._table.get(hash_words(tree.sig, tree.nsig))
            if bucket is None:
                return self._general_call(args, {})
            for candidate in bucket:
                e = <Entry>candidate
                if e.nsig == tree.nsig and not e.statics and \
                        memcmp(<char *>e.sig, tree.sig, n) == 0 and \
                        tree_keys_match(&tree, e.keys) and e.values_match(tree.vals):
                    entry = e
                    break
            if entry is None:
                return self._general_call(args, {})
        # the leaves are held while the program runs (their containers may change meanwhile)
        for i in range(tree.nleaves):
            Py_INCREF_raw(tree.objs[i])
        try:
            return self._hit(entry, tree.vals, tree.objs, args)
        finally:
            for i in range(tree.nleaves):
                Py_XDECREF(tree.objs[i])

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
            bucket = self._table.get(hash_words(sig.data, sig.n))
            if bucket is not None:
                for entry in bucket:
                    if len(entry.sig) != n or memcmp(<char *>entry.sig, sig.data, n) != 0:
                        continue
                    if keys != entry.keys or statics != entry.statics:
                        continue
                    if not entry.values_match(vals.data):
                        continue
                    self._tick += 1
                    entry.last_used = self._tick
                    self._mru = entry
                    try:
                        result = invoke_with_leaves(entry.executable, vals.data, leaves)
                    except AliasedArgumentsError as err:
                        return self._on_aliased(args, kwargs, err)
                    if entry.post is not None:
                        return entry.post(args, result)
                    return result
            return self._miss(args, kwargs)
        finally:
            words_release(&sig)
            words_release(&vals)


cdef object invoke_with_leaves(Executable executable, int64_t *vals, list leaves):
    """Run on encoded slot words, with the leaf objects held by `leaves`."""
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
        return invoke(executable, vals, objs)
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
        return invoke_with_leaves(entry.executable, vals.data, leaves)
    finally:
        words_release(&sig)
        words_release(&vals)


def leaf_words(tuple args, tuple static_positions=()):
    """The slot words the encoder makes for these arguments (specialisation keys)."""
    cdef Words sig, vals
    cdef list leaves = [], keys = [], statics = []
    words_init(&sig)
    words_init(&vals)
    try:
        if encode_args(args, static_positions, &sig, &vals, leaves, keys, statics) != ENCODED:
            return None
        return [vals.data[i] for i in range(vals.n)]
    finally:
        words_release(&sig)
        words_release(&vals)


# ---- runtime controls --------------------------------------------------------------------
cdef extern from "csrc/half.h":
    ctypedef struct fl_symbol:
        const char *name
        void *address
    const fl_symbol *fl_half_libcalls

def half_libcalls():
    """{libcall name: address} of the float16 conversions LLVM's half lowering calls (the
    JIT-loaded kernels have no compiler-rt; the CPU backend registers these)."""
    cdef Py_ssize_t i = 0
    out = {}
    while fl_half_libcalls[i].name != NULL:
        out[fl_half_libcalls[i].name.decode()] = <intptr_t>fl_half_libcalls[i].address
        i += 1
    return out

def null_kernel_address():
    return <intptr_t>fl_null_kernel


def null_library_address():
    """A library routine that does nothing (fl_library_null)."""
    return <intptr_t>fl_library_null

def start_threads(int n=0):
    """Start the worker pool (n threads including the caller; 0: FASTLAUNCH_NUM_THREADS, else
    all available CPUs)."""
    if not 0 <= n <= fl_max_threads():
        raise ValueError(f"start_threads: n must be from 0 to {fl_max_threads()} threads, "
                         f"got {n}")
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
