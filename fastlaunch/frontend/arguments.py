"""A call's arguments as the slow path takes them: the static positions a compiled function
is given, what each array or scalar leaf is (`describe_leaf`: a LeafSpec, with errors naming
the argument), the views and copies it normalises leaves to (`normalize_leaf`, `foreign_view`:
other libraries' CPU arrays as NumPy views, harmless ndarray subclasses as plain arrays,
byte-swapped or misaligned arrays as aligned native copies), and Generator leaves in the key.
"""
from __future__ import annotations

import numpy as np

from .. import _core
from ..ir import ops
from .._launch import Space
from ..ir.leaves import LeafSpec


def static_positions(name, has_signature, param_names, varargs, nums, names) -> tuple:
    """The sorted static positions, with errors naming what is wrong."""
    nums = (nums,) if isinstance(nums, (int, np.integer)) else nums
    names = (names,) if isinstance(names, str) else names
    try:
        nums, names = tuple(nums), tuple(names)
    except TypeError:
        raise TypeError(f"fastlaunch.compile: static_argnums must be an int or a sequence of "
                        f"ints and static_argnames a str or a sequence of str; got "
                        f"{nums!r:.60} and {names!r:.60}") from None
    positions = set()
    for n in nums:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"fastlaunch.compile: static_argnums holds {n!r:.60}; expected "
                            f"integer positions")
        n = int(n)
        where = (f"{name} has {len(param_names)} positional parameter"
                 f"{'' if len(param_names) == 1 else 's'} ({', '.join(param_names)})")
        if n < 0:
            if not param_names or -n > len(param_names):
                raise ValueError(f"static_argnums={n} does not name a positional parameter: "
                                 f"{where}")
            n += len(param_names)
        elif has_signature and not varargs and n >= len(param_names):
            raise ValueError(f"static_argnums={n} is out of range: {where}")
        positions.add(n)
    for arg in names:
        if not isinstance(arg, str):
            raise TypeError(f"fastlaunch.compile: static_argnames holds {arg!r:.60}; expected "
                            f"parameter names")
        if arg not in param_names:
            raise ValueError(f"static_argnames: {name} has no positional parameter named "
                             f"{arg!r}")
        positions.add(param_names.index(arg))
    return tuple(sorted(positions))


def foreign_device_array(leaf) -> bool:
    """Another library's CUDA array.  The instance decides: torch.Tensor has the attribute on
    its class, but a CPU tensor raises when asked for it."""
    if isinstance(leaf, (np.ndarray, _core.DeviceArray)) or \
            not hasattr(type(leaf), "__cuda_array_interface__"):
        return False
    try:
        leaf.__cuda_array_interface__  # noqa: B018  (asked for: a CPU tensor raises)
    except Exception:                 # noqa: BLE001  (AttributeError, RuntimeError, ...)
        return False
    return True


_STATIC_HINT = (". Other objects (a method's `self`, a config object) can be passed as static "
                "arguments: static_argnums= / static_argnames= (hashable; their value is part "
                "of the signature, and what fn reads from them is fixed when it is traced)")


def describe_leaf(name: str, leaf, backend=None) -> LeafSpec:
    if type(leaf) is _core.DeviceArray:
        ops.check_dtype(leaf.dtype, name)
        if backend is not None and leaf.device != backend.name:
            raise TypeError(f"{name}: a DeviceArray in {leaf.device} memory cannot be passed to "
                            f"a function compiled for backend {backend.name!r}")
        if any(st % leaf.itemsize for st in leaf.strides):
            raise TypeError(f"{name}: DeviceArray strides {leaf.strides} are not multiples of "
                            f"its itemsize")
        return LeafSpec.array(leaf.dtype, leaf.shape,
                              tuple(st // leaf.itemsize for st in leaf.strides),
                              Space.SPACE_DEVICE)
    if isinstance(leaf, np.ndarray):
        ops.check_dtype(leaf.dtype, name)
        return LeafSpec.array(leaf.dtype, leaf.shape, element_strides(leaf))
    if type(leaf) is bool:
        return LeafSpec.scalar(np.bool_, bool)
    if type(leaf) is int:
        return LeafSpec.scalar(np.int64 if leaf < 2**63 else np.uint64, int)
    if type(leaf) is float:
        return LeafSpec.scalar(np.float64, float)
    if isinstance(leaf, np.generic):
        ops.check_dtype(leaf.dtype, name)
        return LeafSpec.scalar(leaf.dtype)
    raise TypeError(f"{name}: expected a NumPy array, a Python or NumPy scalar, or a "
                    f"tuple/list/dict of them; got {type(leaf).__name__}{_STATIC_HINT}")


# ndarray attributes that a subclass may redefine without changing what operations compute
_HARMLESS = {"__init__", "__new__", "__repr__", "__str__", "__format__", "__array_finalize__",
             "__reduce__", "__reduce_ex__", "__setstate__", "__class_getitem__", "__dir__",
             "__init_subclass__", "__subclasshook__", "__sizeof__", "__doc__", "__module__",
             "__dict__", "__weakref__", "__copy__", "__deepcopy__", "__getstate__", "dump",
             "dumps", "tofile", "tolist", "tobytes", "tostring", "__dlpack__",
             "__dlpack_device__", "__array_interface__", "__array_struct__", "__hash__",
             "__slots__", "__annotations__", "__qualname__", "__array_priority__"}
_SUBCLASS_VERDICT: dict = {}


def subclass_overrides(cls) -> list:
    """The ndarray methods and operators a subclass redefines (np.matrix's `*`, a masked
    array's reductions and ufunc hooks): computing them as plain arrays would be wrong."""
    found = _SUBCLASS_VERDICT.get(cls)
    if found is None:
        found = [name for name in dir(np.ndarray) if name not in _HARMLESS
                 and getattr(cls, name, None) is not getattr(np.ndarray, name)]
        _SUBCLASS_VERDICT[cls] = found
    return found


_DLPACK_CPU = 1            # DLDeviceType kDLCPU
_NOT_FOREIGN = (np.ndarray, np.generic, _core.DeviceArray, np.random.Generator, bool, int, float,
                complex, str, bytes, type(None))


def foreign_view(name: str, leaf):
    """A CPU array of another library as a NumPy view of its memory (never a copy), through
    DLPack (PyTorch, JAX, CuPy-style host arrays), the array interface, or the buffer protocol
    (memoryview, array.array, bytearray); anything else unchanged.  bytes and str stay what
    NumPy makes of them, scalars, and are refused later."""
    if isinstance(leaf, _NOT_FOREIGN):
        return leaf
    cls = type(leaf)
    if hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__"):
        try:
            device = leaf.__dlpack_device__()
        except Exception as err:                          # noqa: BLE001  (the producer's own)
            raise TypeError(f"{name}: {cls.__name__}.__dlpack_device__() failed: {err}") from None
        if int(device[0]) != _DLPACK_CPU:
            raise TypeError(f"{name}: a {cls.__name__} on device {tuple(device)}; fastlaunch "
                            f"computes on the CPU: pass a CPU array (for PyTorch, x.cpu())")
        try:
            return np.from_dlpack(leaf)
        except (BufferError, TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name}: {cls.__name__} cannot be shared with NumPy through "
                            f"DLPack without a copy ({err}); pass np.asarray(x) for a copy") \
                from None
    if hasattr(leaf, "__array_interface__") or hasattr(leaf, "__array_struct__"):
        view = np.asarray(leaf)
        if isinstance(view, np.ndarray) and view.dtype != object:
            return view
        return leaf
    try:
        memoryview(leaf).release()
    except TypeError:
        return leaf
    return np.asarray(memoryview(leaf))


def normalize_leaf(name: str, leaf):
    if type(leaf) is _core.DeviceArray:
        return leaf
    if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray:
        overrides = subclass_overrides(type(leaf))
        if overrides:
            raise TypeError(
                f"{name}: {type(leaf).__module__}.{type(leaf).__name__} is an ndarray subclass "
                f"that redefines {', '.join(overrides[:4])}{', ...' if len(overrides) > 4 else ''}"
                f"; fastlaunch computes with plain NumPy semantics, which would differ. Pass "
                f"np.asarray(x) if plain array semantics are what you want")
        leaf = leaf.view(np.ndarray)          # same memory: in-place updates reach the caller
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.kind in "OSUVMm":
            ops.check_dtype(leaf.dtype, name)
        if not leaf.dtype.isnative or not leaf.flags.aligned or any(
                s % leaf.dtype.itemsize for s in leaf.strides):
            return np.array(leaf, dtype=leaf.dtype.newbyteorder("="), order="C", copy=True)
        return leaf
    if type(leaf) is int and not -2**63 <= leaf < 2**64:
        raise OverflowError(f"{name}: Python integer {leaf} does not fit in int64 or uint64")
    if isinstance(leaf, (bool, int, float, np.generic)) and not isinstance(leaf, complex):
        if isinstance(leaf, np.generic):
            ops.check_dtype(leaf.dtype, name)
        return leaf
    if isinstance(leaf, complex):
        raise TypeError(f"{name}: complex numbers are not supported")
    raise TypeError(f"{name}: expected a NumPy array, a Python or NumPy scalar, or a "
                    f"tuple/list/dict of them; got {type(leaf).__name__}{_STATIC_HINT}")


def element_strides(arr: np.ndarray) -> tuple:
    return tuple(s // arr.dtype.itemsize for s in arr.strides)


def with_generators(enc, gens):
    """The encoding of a call whose Generator leaves became uint64 keys: the keys list says
    which, so that such an entry never matches a call passing plain integers there."""
    if enc is None or not gens:
        return enc
    sig, leaves, keys, statics = enc
    return sig, leaves, keys + [("numpy.random.Generator", tuple(sorted(gens)))], statics


def array_attributes(value) -> list:
    """Names of the NumPy-array attributes of an object (a static argument's), if any."""
    try:
        attrs = vars(value)
    except TypeError:
        return []
    return [k for k, v in attrs.items() if isinstance(v, np.ndarray)][:5]


def generator_leaves(keys) -> set:
    for k in keys:
        if type(k) is tuple and k and k[0] == "numpy.random.Generator":
            return set(k[1])
    return set()
