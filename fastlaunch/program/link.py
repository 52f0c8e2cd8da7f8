"""Linking: an artifact (its verified program, compiled kernels and call layout) -> a
dispatcher entry.

Below jit.py (which traces), iterate.py (which loops) and program/saved.py (which loads): each makes
an artifact (program/artifact.py), and `link` checks the tables the executable will index (results,
int checks, leaf byte ranges), builds the executable's layout and hands it to the backend's
`link`.  What a kernel error bit means to the caller is defined here, once.
"""
from __future__ import annotations

import os

from .. import _core
from .._launch import Opcode, ResultKind, ResultStructure
from ..backends.base import CallLayout, ExecutableLayout, LinkError
from .bytecode import Program, SlotRole, check_exception
from ..ir.kernel import KernelError

# What each KernelError bit raises, lowest bit first (the first set bit wins).
KERNEL_ERRORS = [
    (int(KernelError.INDEX), IndexError,
     "fastlaunch: an index array holds a value out of bounds for the axis it indexes "
     "(no argument was modified)"),
    (int(KernelError.OVERFLOW), OverflowError,
     "fastlaunch: arithmetic on Python int arguments left the 64-bit range (or raised one to "
     "a negative power); Python and NumPy keep such results exact, fastlaunch's kernels "
     "compute them in int64. No argument was modified"),
    (int(KernelError.RANGE), ValueError,
     "fastlaunch: a value is outside the range [0, n) the function was compiled for: "
     "np.bincount(x, minlength=n) needs 0 <= x < n (NumPy would return a longer array for "
     "larger values; fastlaunch compiles for the static minlength), np.choose(a, choices) "
     "needs 0 <= a < len(choices) (no argument was modified)"),
]


# Result arrays one call may return (_core.pyx's MAX_OUTPUTS: a stack array of references).
MAX_OUTPUTS = 64


def executable_layout(program: Program, call: CallLayout, keepalive=None,
                      const_ptrs=None) -> ExecutableLayout:
    """Check the call layout against the verified program.  const_ptrs: the address of each
    constant as the kernels see it (host backends: the arrays' own data).

    Every index the executable uses besides the bytecode's is checked here: result indices
    (outputs, argument leaves), integer-check leaves, constant pointers; the verifier has
    checked the program's own tables (slots, outputs, mutated leaves, the status slot)."""
    nleaves, nouts = program.nleaves, len(program.outputs)
    if nouts > MAX_OUTPUTS:
        raise LinkError(f"fastlaunch: more than {MAX_OUTPUTS} result arrays are not supported")
    results = []
    for kind, index, as_scalar in call.results:
        if type(as_scalar) is not bool:
            raise LinkError(f"result flag {as_scalar!r} is not a bool")
        if kind == ResultKind.RESULT_NEW:
            if type(index) is not int or not 0 <= index < nouts:
                raise LinkError(f"result refers to output {index} of {nouts}")
        elif kind == ResultKind.RESULT_INPUT:
            # an argument handed back as is: an array updated in place, or a scalar
            if type(index) is not int or not 0 <= index < nleaves:
                raise LinkError(f"result refers to argument leaf {index} of {nleaves}")
        elif kind != ResultKind.RESULT_VALUE:
            raise LinkError(f"unknown result kind {kind}")
        results.append((int(kind), index, bool(as_scalar)))
    out_tree = call.out_tree
    if out_tree.num_leaves != len(results):
        raise LinkError(f"the result tree has {out_tree.num_leaves} leaves, {len(results)} "
                        f"results are described")
    if out_tree.kind == "leaf":
        structure, unflatten = ResultStructure.STRUCT_LEAF, None
    elif out_tree.kind == "tuple" and all(c.kind == "leaf" for c in out_tree.children):
        structure, unflatten = ResultStructure.STRUCT_TUPLE, None
    else:
        structure, unflatten = ResultStructure.STRUCT_TREE, out_tree.builder()
    int_checks = []
    for leaf, (lo, hi) in sorted(call.int_bounds.items()):
        if type(leaf) is not int or not 0 <= leaf < nleaves or \
                program.slots[leaf].role != SlotRole.PARAM:
            raise LinkError(f"integer bound for leaf {leaf}, which is not a scalar argument")
        int_checks.append((int(leaf), int(lo), int(hi)))
    leaf_bytes = []
    for i in range(nleaves):
        s = program.slots[i]
        if s.role == SlotRole.INPUT and s.hi >= s.lo:
            leaf_bytes.append((s.lo * s.itemsize, (s.hi + 1) * s.itemsize))
        else:
            leaf_bytes.append((0, 0))
    if const_ptrs is None:
        const_ptrs = [arr.ctypes.data for _, arr in program.consts]
    if len(const_ptrs) != len(program.consts):
        raise LinkError(f"{len(const_ptrs)} constant addresses for {len(program.consts)} "
                        f"constants")
    return ExecutableLayout(
        program=program,
        const_slots=[slot for slot, _ in program.consts], const_ptrs=list(const_ptrs),
        temp_slots=[i for i, s in enumerate(program.slots) if s.role == SlotRole.TEMP],
        int_checks=int_checks, leaf_bytes=leaf_bytes, results=results,
        structure=int(structure), unflatten=unflatten,
        kernel_errors=KERNEL_ERRORS + [(bit, check_exception(name), message)
                                       for bit, name, message in program.checks],
        polls=any(op is Opcode.POLL for _, op, _ in program.instructions()),
        copies_back=any(op is Opcode.TO_HOST and program.slots[ops[0]].role == SlotRole.INPUT
                        for _, op, ops in program.instructions()),
        keepalive=(program.consts, keepalive),
        rng_seed=call.rng_seed if call.rng_seed is not None else
        int.from_bytes(os.urandom(8), "little"))


def link(art, backend) -> _core.Entry:
    """The one link step: an artifact (program/artifact.py) -> a dispatcher entry.  The executable's
    layout is built and checked here and handed to `backend.link`, which never calls back
    into this module; the entry's `info` is the artifact."""
    program, kernels = art.program, list(art.kernels)
    _check_kernel_count(program, kernels)
    executable = backend.link(executable_layout(program, art.call_layout(), keepalive=kernels),
                              kernels)
    return _core.Entry(art.signature, list(art.keys), list(art.statics), executable, art,
                       list(art.specialized))


def _check_kernel_count(program: Program, kernels: list):
    """LAUNCH k indexes the executable's kernel table: one entry per program kernel."""
    if len(kernels) != len(program.kernels):
        raise LinkError(f"the program has {len(program.kernels)} kernels, {len(kernels)} are "
                        f"compiled")
