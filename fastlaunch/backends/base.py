"""The backend interface: what every backend provides, and the records that cross it.

A backend receives the fused, unscheduled kernel descriptions of a trace (fuse.Plan) and owns
everything after that:

    name, target_key      what it is; the key kernels are cached under (compiler, target, ...)
    memory                its MemoryModel: where its kernels read and write
    schedule(plan)        the plan with its own launch decisions: splits, tiles, serial kernels,
                          launch sizes (kernel.launch); may add kernels and temporaries
    schedule_kernel(k, saved)
                          one kernel's launch decisions, without splitting it: what schedule()
                          gave it.  A saved program's kernels are scheduled again on load from
                          their descriptions and `saved`, what the file stores of each
                          schedule (`kernel.schedule.saved`: the decisions a description does
                          not show, such as a CUDA split; checked, never trusted for memory)
    compile(kernel)       a scheduled kernel -> CompiledKernel (object code, an entry point)
    load_object(text, obj, target_key)
                          a CompiledKernel from saved object code (or compiled again from its
                          source when the target differs)
    source(kernel)        the kernel's source text, for introspection
    kernel_text(ck)       the source a CompiledKernel was made from, as compile_source takes it
    link(layout, kernels) the ExecutableLayout program/link.py built of a verified bytecode program
                          (layout.program) + its compiled kernels -> an executable (a
                          _core.Executable subclass: the thing the dispatcher calls)
    release()             free the code of kernels no executable uses any more (Compiled.clear()
                          calls it); the number of kernels freed

A backend whose kernels use device memory may also have, each on its own (`DeviceBackend`
below; the pipeline asks for them with getattr and refuses what a backend lacks):

    to_device(arr)        a DeviceArray with a copy of a NumPy array (fastlaunch.to_device)
    from_cuda_array(obj)  a DeviceArray viewing another library's CUDA array, no copy (an
                          argument with __cuda_array_interface__)

Every schedule object (a scheduled kernel's `schedule`) has `launch_size`, `params` (the
executable's per-kernel words), `describe()` and `saved` (a dict of ints, what
`schedule_kernel` needs beside the kernel's description).

`null.py` implements all of it in a few lines; `cpu.py` is the LLVM host backend; `devsim.py`
is the CPU's kernels behind a simulated device boundary.  `Backend` below spells the interface
out as a Protocol; tests/unit/test_backend_boundary.py checks every registered backend against
it (and docs/architecture.md, "How to add a backend", walks through one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .._launch import Space

if TYPE_CHECKING:
    from ..program.bytecode import Program


@dataclass
class CompiledKernel:
    name: str
    address: int              # entry point (host backends); 0 where the executable looks up `name`
    source: str               # the kernel's source (LLVM IR text for the CPU)
    seconds: float = 0.0      # time spent compiling (0 on a cache hit)
    origin: str = "compiled"  # compiled | memory | disk | saved
    key: str = ""             # cache key: hash of the source and the target
    obj: bytes = b""          # machine code, for saved programs
    owner: object = None      # keeps the code alive (an engine); dropped with the last user


@dataclass(frozen=True)
class MemoryModel:
    """Where a backend's kernels read and write, and where call arguments arrive.

    kernel_space: the space of every buffer a kernel touches (temporaries, outputs written by
        kernels, constants, the status word);
    host_results: results are handed back as NumPy arrays (host space), copied out of the
        kernel space when that differs.
    """
    kernel_space: Space = Space.SPACE_HOST
    host_results: bool = True

    @property
    def crosses(self) -> bool:
        """Whether host arguments must be copied to reach the kernels."""
        return self.kernel_space != Space.SPACE_HOST


HOST_MEMORY = MemoryModel()


@dataclass
class CallLayout:
    """What link needs besides the program: how results are put together and checked."""
    results: list = field(default_factory=list)      # (ResultKind, index or value, as_scalar)
    out_tree: object = None                          # pytree.TreeDef of the result
    int_bounds: dict = field(default_factory=dict)   # leaf -> (lo, hi) for weak Python ints
    leaf_bytes: list = field(default_factory=list)   # per leaf (lo, hi) bytes it addresses
    rng_seed: int | None = None                      # random numbers' seed (None: fresh)


class LinkError(ValueError):
    """Tables that do not fit the program (a corrupted saved program, or a bug), or a program
    a backend cannot link (the CUDA backend's library calls)."""


@dataclass
class ExecutableLayout:
    """What program/link.py hands `Backend.link`: everything _core.Executable.__init__ reads besides
    the backend's own kernel tables, checked against the verified program
    (link.executable_layout).  A device backend replaces `const_ptrs` (its copies of the
    constants) and extends `keepalive` (dataclasses.replace) before building its executable."""
    program: Program
    const_slots: list
    const_ptrs: list
    temp_slots: list
    int_checks: list
    leaf_bytes: list
    results: list
    structure: int
    unflatten: object
    kernel_errors: list
    polls: bool
    keepalive: object
    rng_seed: int = 0        # the seed of the program's random numbers (if it draws any)
    # the program copies arguments back whole (TO_HOST of an argument's byte span, on a
    # crossing backend): two such spans that meet, x[::2] and x[1::2], would lose writes
    copies_back: bool = False


def derived_schedule(kernel, saved, backend: str) -> None:
    """For a backend whose schedule follows from a kernel's description alone (schedule
    objects whose `saved` is {}): refuse a saved schedule of another backend's kind (a CUDA
    split's partials would be read as whole reductions)."""
    if saved is not None and saved != {}:
        raise ValueError(f"kernel {kernel.label!r} was scheduled by another backend "
                         f"({saved!r}); the {backend} backend cannot run it as described")


@runtime_checkable
class Backend(Protocol):
    """What every backend provides (see the module docstring for what each member does)."""
    name: str
    target_key: str
    memory: MemoryModel

    def schedule(self, plan):
        """fuse.Plan (unscheduled) -> a new Plan whose kernels have a `schedule`: an object
        with `launch_size`, `params` (the executable's per-kernel words) and `describe()`.
        The plan it is given stays unscheduled."""

    def schedule_kernel(self, kernel, saved=None):
        """One unscheduled kernel.Kernel -> a scheduled copy, never split: the schedule the
        backend's schedule() gave that kernel, rebuilt from its description and `saved` (its
        schedule's `saved` dict, as a saved program stores it; None: {})."""

    def compile(self, kernel) -> CompiledKernel:
        """A scheduled kernel.Kernel -> CompiledKernel."""

    def load_object(self, text: str, obj: bytes, target_key: str) -> CompiledKernel:
        """Saved kernel_text and object code, compiled for `target_key` -> CompiledKernel."""

    def source(self, kernel) -> str:
        """The source text of a scheduled kernel (introspection: Compiled.lower/dis)."""

    def kernel_text(self, compiled: CompiledKernel) -> str:
        """What load_object takes back as `text` (saved programs store it)."""

    def link(self, layout: ExecutableLayout, kernels: list):
        """The ExecutableLayout of a verified bytecode.Program (`layout.program`, checked by
        program/link.py against its call layout) and its CompiledKernels (one per program kernel, in
        order) -> a _core.Executable."""

    def release(self) -> int:
        """Free the code of kernels no executable uses any more; how many were freed."""


class DeviceBackend(Protocol):
    """Optional members of a backend whose kernels use device memory, each on its own: the
    pipeline looks each up with getattr/hasattr and refuses what a backend lacks."""

    def to_device(self, arr):
        """A DeviceArray holding a copy of the NumPy array `arr` in this backend's memory."""

    def from_cuda_array(self, obj):
        """A DeviceArray viewing `obj`, another library's array with
        `__cuda_array_interface__`, without a copy (in-place updates reach it)."""
