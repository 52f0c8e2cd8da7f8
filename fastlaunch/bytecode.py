"""The program: int64 bytecode plus the tables it indexes.  Assembler, disassembler, verifier
and (de)serialiser.  Opcodes, roles and spaces come from `_launch.pxd` (via
fastlaunch._launch), never repeated.

Slots are 8-byte words: a buffer pointer or a scalar's bits.  Slots 0..nleaves-1 hold the
flattened call arguments in order; constants, outputs, temporaries and the status word follow.
Every slot lives in a memory space (host or device); kernels touch only their backend's
space, and values cross spaces through TO_DEVICE / TO_HOST.

The verifier is what makes a program safe to run: every index, count and element range the
interpreter or a kernel uses is checked against the tables (and, for a loaded program,
against the argument signature), so a program that passes cannot address memory outside its
buffers, whatever file it came from.
"""
from __future__ import annotations

import enum
import hashlib
import io
import json
import math
import struct
from dataclasses import asdict, dataclass, field

import numpy as np

from ._launch import Opcode, Routine, Space
from .leaves import element_range

# Operand names per opcode, for the disassembler; their count must match the width in the enum.
OPERANDS = {
    Opcode.ALLOC: ("slot", "nbytes"),
    Opcode.FREE: ("slot",),
    Opcode.BIND: ("args_at", "list_at", "count"),
    Opcode.LAUNCH: ("kernel", "n", "args_at"),
    Opcode.CHECK: ("slot",),
    Opcode.TO_DEVICE: ("dst", "src", "nbytes"),
    Opcode.TO_HOST: ("dst", "src", "nbytes"),
    Opcode.POLL: (),
    Opcode.LIBCALL: ("routine", "b1", "b2", "m", "n", "k") + tuple(
        f"{a}{f}" for a in "xyz" for f in ("", "_off", "_sb1", "_sb2", "_s0", "_s1")),
}
for _op, _names in OPERANDS.items():
    assert (_op & 0xFF) == 1 + len(_names), f"{_op.name}: width and operand names disagree"


VALID_OPCODES = {int(op) for op in OPERANDS}


@dataclass(frozen=True)
class RoutineInfo:
    """What a library routine (_launch.Routine) computes, for the recorder, the verifier and
    the disassembler: its name, dtype, and per array operand (x, y, z) its per-batch-item
    shape as a function of (m, n, k) and whether it writes it (None: unused).  `error`: the
    message of a positive status (LAPACK's info), raised as `np.linalg.LinAlgError`."""
    name: str
    dtype: str
    arrays: tuple
    error: str = ""


def _shapes(*arrays):
    return arrays + (None,) * (3 - len(arrays))


_SQUARE = lambda m, n, k: (m, m)       # noqa: E731
ROUTINES: dict = {}
for _dt in ("f32", "f64"):
    _np = "<f4" if _dt == "f32" else "<f8"
    _R = lambda name: Routine[f"LIB_{name.upper()}_{_dt.upper()}"]   # noqa: E731
    ROUTINES[_R("gemm")] = RoutineInfo("gemm", _np, _shapes(
        (lambda m, n, k: (m, k), False), (lambda m, n, k: (k, n), False),
        (lambda m, n, k: (m, n), True)))
    ROUTINES[_R("inv")] = RoutineInfo("inv", _np, _shapes((_SQUARE, False), (_SQUARE, True)),
                                      "Singular matrix")
    ROUTINES[_R("solve")] = RoutineInfo("solve", _np, _shapes(
        (_SQUARE, False), (lambda m, n, k: (m, n), False), (lambda m, n, k: (m, n), True)),
        "Singular matrix")
    ROUTINES[_R("det")] = RoutineInfo("det", _np, _shapes(
        (_SQUARE, False), (lambda m, n, k: (1, 1), True)))
    ROUTINES[_R("slogdet")] = RoutineInfo("slogdet", _np, _shapes(
        (_SQUARE, False), (lambda m, n, k: (1, 2), True)))
    ROUTINES[_R("cholesky")] = RoutineInfo("cholesky", _np, _shapes(
        (_SQUARE, False), (_SQUARE, True)), "Matrix is not positive definite")
    ROUTINES[_R("eigh")] = RoutineInfo("eigh", _np, _shapes(
        (_SQUARE, False), (lambda m, n, k: (m + 1, m), True)), "Eigenvalues did not converge")
assert len(ROUTINES) == Routine.LIB_COUNT
LIBCALL_ARRAYS = 3        # array operands per LIBCALL, 6 words each after the 5 sizes


def routine_of(name: str, dtype) -> int:
    """The Routine number of operation `name` on `dtype` (float32/float64)."""
    suffix = {"f": "F32", "d": "F64"}[np.dtype(dtype).char]
    return int(Routine[f"LIB_{name.upper()}_{suffix}"])


def libcall_extents(routine: int, ops: list) -> list:
    """Per used array operand of a LIBCALL (its words after the routine): (slot, lo, hi,
    writes), the element range [lo, hi] relative to the slot's pointer it may touch
    (hi < lo: nothing)."""
    info = ROUTINES[Routine(routine)]
    b1, b2, m, n, k = ops[:5]
    out = []
    for a, spec in enumerate(info.arrays):
        if spec is None:
            continue
        slot, off, sb1, sb2, s0, s1 = ops[5 + 6 * a:11 + 6 * a]
        rows, cols = spec[0](m, n, k)
        dims = ((b1, sb1), (b2, sb2), (rows, s0), (cols, s1))
        if any(d == 0 for d, _ in dims):
            out.append((slot, 0, -1, spec[1]))
            continue
        lo = off + sum(min(0, (d - 1) * st) for d, st in dims)
        hi = off + sum(max(0, (d - 1) * st) for d, st in dims)
        out.append((slot, lo, hi, spec[1]))
    return out

# Limits a program must respect (also what a hostile file could inflate).
MAX_SLOTS = 1 << 20
MAX_ARGWORDS = 1 << 22
MAX_ELEMENTS = 1 << 56      # elements a slot may address (byte offsets stay inside int64)
MAX_BYTES = 1 << 60         # bytes of one temporary, constant or result


class SlotRole(str, enum.Enum):
    """What a slot holds; the names of _launch.SlotRole (ROLE_INPUT...), lower-cased.  A str
    enum: it compares equal to its name, as written in saved programs."""
    INPUT = "input"
    PARAM = "param"
    CONST = "const"
    OUTPUT = "output"
    TEMP = "temp"
    STATUS = "status"
    RNG = "rng"


class ArgKind(str, enum.Enum):
    """How a kernel takes an argument word (_launch.ArgKind)."""
    BUFFER = "buffer"
    SCALAR = "scalar"
    STATUS = "status"


SPACE_NAMES = {Space.SPACE_HOST: "host", Space.SPACE_DEVICE: "device"}


def width(opcode: int) -> int:
    return int(opcode) & 0xFF


def decode(code, pc: int):
    """(opcode, operands) at pc, or (None, reason) when the code there is malformed."""
    raw = int(code[pc])
    if raw not in VALID_OPCODES:
        return None, f"unknown opcode {raw:#x}"
    op = Opcode(raw)
    if pc + width(op) > len(code):
        return None, f"{op.name} runs past the end of the code"
    return op, [int(x) for x in code[pc + 1:pc + width(op)]]


class VerifyError(ValueError):
    """A malformed program; the message ends with the disassembly."""


@dataclass
class SlotInfo:
    role: str                 # a SlotRole (input | param | const | output | temp | status)
    dtype: str                # dtype.str
    lo: int = 0               # addressable element range [lo, hi] relative to the pointer
    hi: int = -1
    nbytes: int = 0           # temporaries: bytes to allocate
    label: str = ""
    space: int = int(Space.SPACE_HOST)

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def span_bytes(self) -> int:
        """Bytes from the pointer to the end of the addressable range (lo must be 0)."""
        if self.role == SlotRole.TEMP:
            return self.nbytes
        return (self.hi + 1) * self.itemsize if self.hi >= 0 else 0


@dataclass
class KernelInfo:
    name: str
    label: str
    arg_kinds: tuple          # an ArgKind per argument
    arg_ranges: tuple         # (lo, hi) elements touched, per buffer argument ((0, -1) if none)
    arg_writes: tuple
    arg_dtypes: tuple
    params: tuple = ()        # the backend's per-kernel launch words (CPU: work per index)
    bytes_moved: int = 0
    launch_size: int = -1     # the n its ranges were computed for (-1: not recorded)


@dataclass
class Program:
    code: np.ndarray
    arg_lists: np.ndarray
    slots: list
    kernels: list
    nargwords: int
    nleaves: int
    consts: list = field(default_factory=list)        # (slot, ndarray)
    outputs: list = field(default_factory=list)       # (slot, dtype str, shape)
    mutated_leaves: list = field(default_factory=list)

    # ---- derived facts ---------------------------------------------------------------------
    def instructions(self):
        """(pc, opcode, operands) of each well-formed instruction, up to the first bad one."""
        pc, code = 0, self.code
        while pc < len(code):
            op, operands = decode(code, pc)
            if op is None:
                return
            yield pc, op, operands
            pc += width(op)

    def peak_temp_bytes(self) -> int:
        live = peak = 0
        sizes = {}
        for _, op, operands in self.instructions():
            if op is Opcode.ALLOC:
                sizes[operands[0]] = operands[1]
                live += operands[1]
                peak = max(peak, live)
            elif op is Opcode.FREE:
                live -= sizes.pop(operands[0], 0)
        return peak

    def library_routines(self) -> list:
        """The routines the program's LIBCALLs name, in order of first use."""
        return list(dict.fromkeys(ops[0] for _, op, ops in self.instructions()
                                  if op is Opcode.LIBCALL))

    def library_error(self, pc: int, code: int, where: str = "") -> Exception:
        """The exception of a LIBCALL at pc that returned `code` (library.h): a positive
        LAPACK info is NumPy's LinAlgError for the routine."""
        name = "library routine"
        op, ops = decode(self.code, pc) if 0 <= pc < len(self.code) else (None, None)
        info = ROUTINES.get(ops[0]) if op is Opcode.LIBCALL else None
        if info is not None:
            name = f"{info.name} ({np.dtype(info.dtype)})"
        if code > 0 and info is not None and info.error:
            return np.linalg.LinAlgError(f"{info.error}{where}")
        if code == -2:
            return MemoryError(f"fastlaunch: out of memory for {name}'s workspace{where}")
        return RuntimeError(f"fastlaunch: {name} failed with status {code}{where}")

    def launch_count(self) -> int:
        return sum(1 for _, op, _ in self.instructions() if op is Opcode.LAUNCH)

    @property
    def status_slot(self) -> int:
        """The slot kernels raise errors through (-1: the program has no checks)."""
        return next((i for i, s in enumerate(self.slots) if s.role == SlotRole.STATUS), -1)

    @property
    def rng_slot(self) -> int:
        """The slot holding the call's random key (-1: the program draws no random numbers)."""
        return next((i for i, s in enumerate(self.slots) if s.role == SlotRole.RNG), -1)

    # ---- disassembly -----------------------------------------------------------------------
    def disassemble(self) -> str:
        lines = [f"; {len(self.slots)} slots, {self.nargwords} argument words, "
                 f"{len(self.kernels)} kernels, peak temporaries {self.peak_temp_bytes()} bytes"]
        for i, s in enumerate(self.slots):
            extra = f" nbytes={s.nbytes}" if s.role == SlotRole.TEMP else ""
            if s.space != Space.SPACE_HOST:
                extra += f" @{SPACE_NAMES.get(s.space, s.space)}"
            lines.append(f";   slot {i}: {_text(s.role)} {_dtype_text(s.dtype)} {s.label}{extra}")
        pc = 0
        for pc, op, operands in self.instructions():
            lines.append(self._line(pc, op, operands))
            pc += width(op)
        if pc < len(self.code):
            _, reason = decode(self.code, pc)
            lines.append(f"{pc:04d}: ?? {reason}; raw words {[int(x) for x in self.code[pc:pc + 4]]}")
        return "\n".join(lines)

    def line_at(self, pc: int) -> str:
        """The disassembly line of the instruction at pc (for run-time error messages)."""
        if not 0 <= pc < len(self.code):
            return f"{pc:04d}: (outside the code)"
        op, operands = decode(self.code, pc)
        if op is None:
            return f"{pc:04d}: ?? {operands}"
        return self._line(pc, op, operands)

    def _line(self, pc, op, operands) -> str:
        return f"{pc:04d}: {op.name:<7}" + self._operand_text(op, operands)

    def _operand_text(self, op, operands) -> str:
        named = " ".join(f"{n}={v}" for n, v in zip(OPERANDS[op], operands))
        if op is Opcode.BIND and 0 <= operands[1] <= operands[1] + operands[2] <= len(self.arg_lists):
            listed = self.arg_lists[operands[1]:operands[1] + operands[2]]
            named += "  [" + ", ".join(self._slot_name(int(s)) for s in listed) + "]"
        elif op is Opcode.LAUNCH and 0 <= operands[0] < len(self.kernels):
            named += f"  ; {self.kernels[operands[0]].label} ({self.kernels[operands[0]].name})"
        elif op is Opcode.LIBCALL:
            named = self._libcall_text(operands)
        elif op in (Opcode.ALLOC, Opcode.FREE, Opcode.CHECK):
            named += f"  ; {self._slot_name(operands[0])}"
        elif op in (Opcode.TO_DEVICE, Opcode.TO_HOST):
            named += f"  ; {self._slot_name(operands[0])} <- {self._slot_name(operands[1])}"
        return " " + named if named else ""

    def _libcall_text(self, ops) -> str:
        """LIBCALL gemm_f32 b=(1,1) m=.. n=.. k=..  x=slot:label[off; sb1 sb2; s0 s1] ..."""
        info = ROUTINES.get(ops[0])
        if info is None:
            return " ".join(f"{n}={v}" for n, v in zip(OPERANDS[Opcode.LIBCALL], ops))
        text = (f"{info.name}_{np.dtype(info.dtype)} b=({ops[1]},{ops[2]}) m={ops[3]} "
                f"n={ops[4]} k={ops[5]}")
        for a, spec in enumerate(info.arrays):
            if spec is None:
                continue
            slot, off, sb1, sb2, s0, s1 = ops[6 + 6 * a:12 + 6 * a]
            text += (f"  {'xyz'[a]}{'<-' if spec[1] else '='}{self._slot_name(slot)}"
                     f"[{off}; {sb1} {sb2}; {s0} {s1}]")
        return text

    def _slot_name(self, s: int) -> str:
        if 0 <= s < len(self.slots):
            return f"{s}:{self.slots[s].label or _text(self.slots[s].role)}"
        return f"{s}:?"

    # ---- serialisation ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        meta = {
            "slots": [_slot_json(s) for s in self.slots],
            "kernels": [asdict(k) for k in self.kernels],
            "nargwords": self.nargwords, "nleaves": self.nleaves,
            "consts": [slot for slot, _ in self.consts],
            "outputs": [[slot, dt, list(shape)] for slot, dt, shape in self.outputs],
            "mutated_leaves": list(self.mutated_leaves),
        }
        out = io.BytesIO()
        _write_blob(out, json.dumps(meta, sort_keys=True).encode())
        _write_blob(out, np.ascontiguousarray(self.code, np.int64).tobytes())
        _write_blob(out, np.ascontiguousarray(self.arg_lists, np.int64).tobytes())
        for _, arr in self.consts:
            _write_blob(out, json.dumps([arr.dtype.str, list(arr.shape)]).encode())
            _write_blob(out, np.ascontiguousarray(arr).tobytes())
        return out.getvalue()

    @staticmethod
    def from_bytes(data: bytes) -> "Program":
        """Parse serialised bytes; anything malformed is a ValueError (never a crash).  The
        result still has to pass verify() before it may run."""
        try:
            return _from_bytes(data)
        except ValueError:
            raise
        except (TypeError, KeyError, IndexError, AttributeError, OverflowError,
                RecursionError, UnicodeDecodeError) as err:
            raise ValueError(f"malformed program data: {type(err).__name__}: {err}") from None

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()


def _text(v) -> str:
    return v.value if isinstance(v, enum.Enum) else str(v)


def _dtype_text(dt) -> str:
    try:
        return str(np.dtype(dt))
    except TypeError:
        return f"?{dt!r}"


def _slot_json(s: SlotInfo) -> dict:
    d = asdict(s)
    d["role"] = _text(s.role)
    return d


def _from_bytes(data: bytes) -> Program:
    src = io.BytesIO(data)
    meta = json.loads(_read_blob(src))
    if not isinstance(meta, dict):
        raise ValueError("malformed program data: metadata is not an object")
    code = np.frombuffer(_read_blob(src), np.int64).copy()
    arg_lists = np.frombuffer(_read_blob(src), np.int64).copy()
    consts = []
    for slot in meta["consts"]:
        dt, shape = json.loads(_read_blob(src))
        dtype = np.dtype(_plain_dtype(dt))
        shape = tuple(_int(x) for x in shape)
        if any(s < 0 for s in shape) or len(shape) > 64:
            raise ValueError("malformed program data: bad constant shape")
        raw = _read_blob(src)
        count = math.prod(shape)
        if count * dtype.itemsize != len(raw):
            raise ValueError("malformed program data: constant size disagrees with its shape")
        arr = np.frombuffer(raw, dtype).reshape(shape).copy()
        arr.setflags(write=False)
        consts.append((_int(slot), arr))
    slots = []
    for s in meta["slots"]:
        slots.append(SlotInfo(role=str(s["role"]), dtype=_plain_dtype(s["dtype"]),
                              lo=_int(s["lo"]), hi=_int(s["hi"]), nbytes=_int(s["nbytes"]),
                              label=str(s.get("label", "")),
                              space=_int(s.get("space", int(Space.SPACE_HOST)))))
    kernels = []
    for k in meta["kernels"]:
        kernels.append(KernelInfo(
            name=str(k["name"]), label=str(k["label"]),
            arg_kinds=tuple(str(x) for x in k["arg_kinds"]),
            arg_ranges=tuple((_int(r[0]), _int(r[1])) for r in k["arg_ranges"]),
            arg_writes=tuple(bool(x) for x in k["arg_writes"]),
            arg_dtypes=tuple(_plain_dtype(x) for x in k["arg_dtypes"]),
            params=tuple(_int(x) for x in k.get("params", ())),
            bytes_moved=_int(k.get("bytes_moved", 0)),
            launch_size=_int(k.get("launch_size", -1))))
    return Program(
        code=code, arg_lists=arg_lists, slots=slots, kernels=kernels,
        nargwords=_int(meta["nargwords"]), nleaves=_int(meta["nleaves"]), consts=consts,
        outputs=[(_int(s), _plain_dtype(dt), tuple(_int(x) for x in shape))
                 for s, dt, shape in meta["outputs"]],
        mutated_leaves=[_int(x) for x in meta["mutated_leaves"]])


def _int(x) -> int:
    """An integer the interpreter can hold in an int64 word."""
    if type(x) is not int or not -(1 << 63) <= x < (1 << 63):
        raise ValueError(f"malformed program data: expected a 64-bit integer, got {str(x)[:40]}")
    return x


def _plain_dtype(dt) -> str:
    """A dtype string naming a plain number type (never an object or structured dtype)."""
    if not isinstance(dt, str):
        raise ValueError(f"malformed program data: dtype {dt!r}")
    try:
        d = np.dtype(dt)
    except TypeError:
        raise ValueError(f"malformed program data: dtype {dt!r}") from None
    if d.kind not in "biuf" or d.fields is not None or d.subdtype is not None:
        raise ValueError(f"malformed program data: dtype {dt!r} is not a number type")
    return d.str


def _write_blob(out, data: bytes):
    out.write(struct.pack("<Q", len(data)))
    out.write(data)


def _read_blob(src) -> bytes:
    head = src.read(8)
    if len(head) != 8:
        raise ValueError("truncated program data")
    (n,) = struct.unpack("<Q", head)
    data = src.read(n)
    if len(data) != n:
        raise ValueError("truncated program data")
    return data


# ---- assembler ---------------------------------------------------------------------------
class Assembler:
    def __init__(self):
        self.code: list[int] = []
        self.arg_lists: list[int] = []
        self.nargwords = 0

    def alloc(self, slot: int, nbytes: int):
        self.code += [Opcode.ALLOC, slot, nbytes]

    def free(self, slot: int):
        self.code += [Opcode.FREE, slot]

    def check(self, slot: int):
        self.code += [Opcode.CHECK, slot]

    def poll(self):
        self.code += [Opcode.POLL]

    def to_device(self, dst: int, src: int, nbytes: int):
        self.code += [Opcode.TO_DEVICE, dst, src, nbytes]

    def to_host(self, dst: int, src: int, nbytes: int):
        self.code += [Opcode.TO_HOST, dst, src, nbytes]

    def launch(self, kernel: int, n: int, slots: list[int]):
        """BIND the argument slots into fresh argument words, then LAUNCH."""
        args_at = self.nargwords
        self.nargwords += len(slots)
        list_at = len(self.arg_lists)
        self.arg_lists += list(slots)
        self.code += [Opcode.BIND, args_at, list_at, len(slots)]
        self.code += [Opcode.LAUNCH, kernel, n, args_at]

    def libcall(self, routine: int, sizes, arrays):
        """sizes: (b1, b2, m, n, k); arrays: up to 3 (slot, off, sb1, sb2, s0, s1)."""
        words = [int(routine)] + [int(x) for x in sizes]
        for a in range(LIBCALL_ARRAYS):
            words += [int(x) for x in arrays[a]] if a < len(arrays) else [-1, 0, 0, 0, 0, 0]
        self.code += [Opcode.LIBCALL] + words

    def arrays(self):
        return np.array(self.code, np.int64), np.array(self.arg_lists, np.int64)


# ---- verifier ----------------------------------------------------------------------------
_ROLES = {r.value for r in SlotRole}
_KINDS = {k.value for k in ArgKind}


def verify(p: Program, kernel_space: int = int(Space.SPACE_HOST), leaves=None,
           strict: bool = False) -> None:
    """Raise VerifyError unless the program is well formed and memory-safe:

    * the tables: roles, dtypes, spaces, element ranges, constants' and outputs' sizes, the
      argument slots (against `leaves`, the call signature, when given: per leaf
      ("array", dtype, shape, element strides) or ("scalar", dtype));
    * every instruction: operands in range, every slot read is set, temporaries allocated
      before use and freed, copies within both slots and across spaces, every kernel argument
      within its slot and of its dtype, kernels touching only `kernel_space`;
    * every output written before the end (a device result copied out to its host slot);
    * every in-place update a kernel makes on a copy of an argument (a device shadow) copied
      back with TO_HOST before that copy is freed;
    * strict (programs from files): every kernel's recorded launch size, and LAUNCH n equal
      to it, so that the element ranges checked above are the ones the kernel touches.

    The kernel tables (element ranges, launch sizes) are the verifier's premises: it proves
    the bytecode keeps every kernel inside the ranges the tables give, not that a kernel's
    code keeps to its table.  A loaded program's tables are therefore derived from kernel
    descriptions (saved.py), never read from the file.
    """
    errors: list[str] = []
    try:
        if _verify_tables(p, kernel_space, leaves, strict, errors):
            _verify_code(p, kernel_space, strict, errors)
    except (TypeError, ValueError, OverflowError, IndexError) as err:
        errors.append(f"malformed tables: {type(err).__name__}: {err}")
    if errors:
        try:
            text = p.disassemble()
        except Exception as err:       # a program too broken to print
            text = f"(no disassembly: {type(err).__name__})"
        raise VerifyError("invalid program:\n  " + "\n  ".join(errors[:50]) + "\n\n" + text)


def _verify_tables(p: Program, kernel_space, leaves, strict, errors) -> bool:
    """Check the tables; False where they are too broken for the code to be checked."""
    nslots = len(p.slots)
    if not 0 <= nslots <= MAX_SLOTS:
        errors.append(f"{nslots} slots")
        return False
    if not 0 <= p.nargwords <= MAX_ARGWORDS:
        errors.append(f"{p.nargwords} argument words out of range")
        return False
    if not 0 <= p.nleaves <= nslots:
        errors.append(f"{p.nleaves} leaves but {nslots} slots")
        return False
    for i, s in enumerate(p.slots):
        where = f"slot {i}"
        if s.role not in _ROLES:
            errors.append(f"{where}: unknown role {s.role!r}")
            continue
        try:
            dt = np.dtype(s.dtype)
        except TypeError:
            errors.append(f"{where}: bad dtype {s.dtype!r}")
            continue
        if dt.kind not in "biuf":
            errors.append(f"{where}: dtype {dt} is not a number type")
        if s.space not in SPACE_NAMES:
            errors.append(f"{where}: unknown memory space {s.space}")
        is_leaf = i < p.nleaves
        if is_leaf != (s.role in (SlotRole.INPUT, SlotRole.PARAM)):
            errors.append(f"{where}: {_text(s.role)} slot where the "
                          f"{'arguments' if is_leaf else 'program' + chr(39) + 's own slots'} are")
        if s.role in (SlotRole.CONST, SlotRole.OUTPUT, SlotRole.TEMP) and s.lo != 0:
            errors.append(f"{where}: {_text(s.role)} range must start at element 0")
        if s.role == SlotRole.TEMP and not 0 <= s.nbytes <= MAX_BYTES:
            errors.append(f"{where}: temporary size {s.nbytes} out of range")
        if not (-MAX_ELEMENTS <= s.lo <= MAX_ELEMENTS and -MAX_ELEMENTS <= s.hi <= MAX_ELEMENTS):
            errors.append(f"{where}: element range [{s.lo}, {s.hi}] out of range")
        if s.role in (SlotRole.INPUT, SlotRole.CONST, SlotRole.OUTPUT) and s.hi < s.lo - 1:
            errors.append(f"{where}: empty range [{s.lo}, {s.hi}]")
        if s.space == Space.SPACE_DEVICE and kernel_space == Space.SPACE_HOST:
            errors.append(f"{where}: device space on a host-only backend")
        if s.role in (SlotRole.CONST, SlotRole.STATUS) and s.space != kernel_space:
            errors.append(f"{where}: {_text(s.role)} slot outside the kernels' space")
    rngs = [i for i, s in enumerate(p.slots) if s.role == SlotRole.RNG]
    if len(rngs) > 1 or any(np.dtype(p.slots[i].dtype) != np.uint64 for i in rngs):
        errors.append(f"random key slots {rngs}: at most one, of uint64")
    statuses = [i for i, s in enumerate(p.slots) if s.role == SlotRole.STATUS]
    if len(statuses) > 1:
        errors.append(f"several status slots {statuses}")
    if leaves is not None:
        _verify_leaves(p, leaves, errors)
    seen_consts = set()
    for slot, arr in p.consts:
        if not 0 <= slot < nslots or p.slots[slot].role != SlotRole.CONST or slot in seen_consts:
            errors.append(f"consts: slot {slot} is not a constant slot")
            continue
        seen_consts.add(slot)
        s = p.slots[slot]
        if not isinstance(arr, np.ndarray) or arr.dtype != np.dtype(s.dtype) or \
                not arr.flags.c_contiguous or s.hi >= arr.size:
            errors.append(f"consts: the array for slot {slot} does not cover [{s.lo}, {s.hi}] "
                          f"of {np.dtype(s.dtype)}")
    for i, s in enumerate(p.slots):
        if s.role == SlotRole.CONST and i not in seen_consts:
            errors.append(f"slot {i}: constant slot without a constant")
    seen_outputs = set()
    for slot, dt, shape in p.outputs:
        if not 0 <= slot < nslots or p.slots[slot].role != SlotRole.OUTPUT or slot in seen_outputs:
            errors.append(f"outputs: slot {slot} is not an output slot")
            continue
        seen_outputs.add(slot)
        s = p.slots[slot]
        if len(shape) > 64 or any(int(d) < 0 for d in shape) or \
                np.dtype(dt) != np.dtype(s.dtype):
            errors.append(f"outputs: slot {slot} holds {np.dtype(s.dtype)}, result is {dt}{shape}")
            continue
        count = math.prod(int(d) for d in shape)
        if count * np.dtype(dt).itemsize > MAX_BYTES:
            errors.append(f"outputs: slot {slot}: a {tuple(shape)} result is too large")
        elif s.hi != count - 1:
            # the slot addresses the whole result array, and nothing beyond it
            errors.append(f"outputs: slot {slot} range [0, {s.hi}] is not the {tuple(shape)} "
                          f"result's [0, {count - 1}]")
        if s.space not in (Space.SPACE_HOST, kernel_space):
            errors.append(f"outputs: slot {slot} is neither in host space (NumPy results) nor "
                          f"in the kernels' (device results)")
    for i, s in enumerate(p.slots):
        if s.role == SlotRole.OUTPUT and i not in seen_outputs:
            errors.append(f"slot {i}: output slot that is not a result")
    if len(set(p.mutated_leaves)) != len(p.mutated_leaves):
        errors.append("mutated leaves repeat")
    for m in p.mutated_leaves:
        if not 0 <= m < p.nleaves or p.slots[m].role != SlotRole.INPUT:
            errors.append(f"mutated leaf {m} is not an array argument")
    code_checkable = True
    for k in p.kernels:
        n = len(k.arg_kinds)
        if not (len(k.arg_ranges) == len(k.arg_writes) == len(k.arg_dtypes) == n):
            errors.append(f"kernel {k.name}: argument tables of different lengths")
            code_checkable = False
        elif any(kind not in _KINDS for kind in k.arg_kinds):
            errors.append(f"kernel {k.name}: unknown argument kind")
            code_checkable = False
        if strict and k.launch_size < 0:
            errors.append(f"kernel {k.name}: no recorded launch size")
    for x in np.asarray(p.arg_lists).tolist():
        if not 0 <= x < nslots:
            errors.append(f"argument lists: slot {x} out of range")
            return False
    return code_checkable


def _verify_leaves(p: Program, leaves, errors):
    """Argument slots against the call signature the program will be bound to."""
    if len(leaves) != p.nleaves:
        errors.append(f"the signature has {len(leaves)} leaves, the program {p.nleaves}")
        return
    for i, leaf in enumerate(leaves):
        s = p.slots[i]
        if leaf.kind == "array":
            lo, hi = element_range(leaf.shape, leaf.strides)
            if s.role != SlotRole.INPUT or np.dtype(s.dtype) != leaf.dtype or \
                    (s.lo, s.hi) != (lo, hi) or s.space != leaf.space:
                errors.append(f"slot {i}: {_text(s.role)} {np.dtype(s.dtype)}[{s.lo}, {s.hi}] "
                              f"but the argument is {leaf.dtype}{tuple(leaf.shape)} addressing "
                              f"[{lo}, {hi}] in {SPACE_NAMES.get(leaf.space)} space")
        elif s.role != SlotRole.PARAM or np.dtype(s.dtype) != leaf.dtype:
            errors.append(f"slot {i}: {_text(s.role)} {np.dtype(s.dtype)} but the argument is "
                          f"a {leaf.dtype} scalar")


def _verify_code(p: Program, kernel_space, strict, errors):
    nslots = len(p.slots)
    # set at entry: arguments, constants, outputs (allocated before the run), the status word
    always_set = {i for i, s in enumerate(p.slots) if s.role != SlotRole.TEMP}
    live: dict[int, int] = {}     # temporary slot -> the ALLOC that set it (its pc)
    written: set = set()
    bound: dict[int, list] = {}   # args_at -> (slot, the ALLOC its word came from) bound there
    arguments_written = False     # an argument array has been written in place
    # an argument updated in place through a copy in the kernels' space: the copy's slot ->
    # the argument's, and the arguments whose copy a kernel wrote and no TO_HOST brought back
    copy_of: dict[int, int] = {}
    unsaved: dict[int, str] = {}
    pc, code = 0, p.code
    while pc < len(code):
        op, ops = decode(code, pc)
        if op is None:
            errors.append(f"{pc:04d}: {ops}")
            break
        where = f"{pc:04d}: {op.name}"
        if op is Opcode.ALLOC:
            slot, nbytes = ops
            if not 0 <= slot < nslots or p.slots[slot].role != SlotRole.TEMP:
                errors.append(f"{where}: slot {slot} is not a temporary")
            elif slot in live:
                errors.append(f"{where}: slot {slot} is already allocated")
            elif nbytes < 0 or nbytes < p.slots[slot].nbytes:
                errors.append(f"{where}: {nbytes} bytes is less than slot {slot} needs")
            elif nbytes > MAX_BYTES:
                errors.append(f"{where}: {nbytes} bytes is more than a temporary may have")
            else:
                live[slot] = pc
        elif op is Opcode.FREE:
            (slot,) = ops
            if slot not in live:
                errors.append(f"{where}: slot {slot} is not allocated")
            else:
                del live[slot]
                arg = copy_of.pop(slot, None)
                if arg in unsaved:
                    errors.append(f"{where}: frees slot {slot}, the copy of argument slot {arg} "
                                  f"written at {unsaved.pop(arg)}, before a TO_HOST brings the "
                                  f"in-place update back")
        elif op is Opcode.BIND:
            args_at, list_at, count = ops
            if count < 0 or not 0 <= list_at <= list_at + count <= len(p.arg_lists):
                errors.append(f"{where}: argument list [{list_at}, +{count}) out of range")
            elif not 0 <= args_at <= args_at + count <= p.nargwords:
                errors.append(f"{where}: argument words [{args_at}, +{count}) out of range")
            else:
                slots = [int(s) for s in p.arg_lists[list_at:list_at + count]]
                for s in slots:
                    if not 0 <= s < nslots:
                        errors.append(f"{where}: slot {s} out of range")
                    elif s not in always_set and s not in live:
                        errors.append(f"{where}: slot {s} is read before it is allocated")
                # words bound earlier that this BIND overlaps no longer hold their slots
                for at in [a for a in bound if a < args_at + count and args_at < a + len(bound[a])]:
                    del bound[at]
                bound[args_at] = [(s, live.get(s)) for s in slots]
        elif op is Opcode.CHECK:
            (slot,) = ops
            if not 0 <= slot < nslots or p.slots[slot].role != SlotRole.STATUS:
                errors.append(f"{where}: slot {slot} is not a status slot")
        elif op is Opcode.POLL:
            if arguments_written:
                # an interrupted run that goes on starts again from the top
                errors.append(f"{where}: after an argument was written in place")
        elif op in (Opcode.TO_DEVICE, Opcode.TO_HOST):
            errors += _check_copy(p, where, op, ops, live, always_set, written)
            if 0 <= ops[0] < nslots and p.slots[ops[0]].role == SlotRole.INPUT:
                arguments_written = True
            dst, src = ops[0], ops[1]
            if op is Opcode.TO_DEVICE and src in p.mutated_leaves:
                copy_of[dst] = src
            elif op is Opcode.TO_HOST and copy_of.get(src) == dst:
                unsaved.pop(dst, None)
        elif op is Opcode.LIBCALL:
            errors += _check_libcall(p, where, ops, kernel_space, live, always_set, written)
        elif op is Opcode.LAUNCH:
            kernel, n, args_at = ops
            if not 0 <= kernel < len(p.kernels):
                errors.append(f"{where}: kernel {kernel} out of range")
            elif n < 0:
                errors.append(f"{where}: negative launch size {n}")
            elif args_at not in bound:
                errors.append(f"{where}: no arguments bound at {args_at}")
            else:
                k = p.kernels[kernel]
                if (k.launch_size >= 0 or strict) and n != k.launch_size:
                    errors.append(f"{where}: launch size {n}, but kernel {k.name}'s element "
                                  f"ranges are for {k.launch_size}")
                for s, alloc in bound[args_at]:
                    # a word bound from a temporary holds that allocation's pointer: it must
                    # still be the live one (not freed, nor freed and allocated again)
                    if 0 <= s < nslots and p.slots[s].role == SlotRole.TEMP and \
                            (alloc is None or live.get(s) != alloc):
                        errors.append(f"{where}: slot {s} was freed after it was bound")
                slots = [s for s, _ in bound[args_at]]
                errors += _check_arguments(p, where, k, slots, kernel_space, written)
                for s, writes in zip(slots, k.arg_writes):
                    if writes and s in copy_of:
                        unsaved[copy_of[s]] = where
                arguments_written |= any(
                    w and 0 <= s < nslots and p.slots[s].role == SlotRole.INPUT
                    for s, w in zip(slots, k.arg_writes))
        pc += width(op)
    for slot in live:
        errors.append(f"end: temporary slot {slot} is never freed")
    for arg, at in unsaved.items():
        errors.append(f"end: argument slot {arg} is updated in place through a copy written at "
                      f"{at}, which is never copied back with TO_HOST")
    for slot, _, _ in p.outputs:
        if 0 <= slot < nslots and slot not in written and p.slots[slot].hi >= 0:
            errors.append(f"end: output slot {slot} is never written"
                          + (" (a device result must be copied out with TO_HOST)"
                             if kernel_space != Space.SPACE_HOST else ""))


def _check_libcall(p: Program, where, ops, kernel_space, live, always_set, written) -> list:
    """A library call: a known routine, sizes within bounds, every used array operand a
    memory slot of the routine's dtype in the kernels' space, set (a live temporary), its
    element range inside the slot; writes only to outputs and temporaries; unused operands
    all -1/0 (so the words mean one thing)."""
    routine = ops[0]
    if routine not in {int(r) for r in ROUTINES}:
        return [f"{where}: unknown library routine {routine}"]
    info = ROUTINES[Routine(routine)]
    sizes = ops[1:6]
    if any(not 0 <= x <= MAX_ELEMENTS for x in sizes) or \
            math.prod(sizes) > MAX_ELEMENTS or any(x >= (1 << 31) for x in sizes[2:]):
        return [f"{where}: sizes {sizes} out of range"]
    errors = []
    for a, spec in enumerate(info.arrays):
        words = ops[6 + 6 * a:12 + 6 * a]
        if spec is None:
            if words != [-1, 0, 0, 0, 0, 0]:
                errors.append(f"{where}: unused operand {'xyz'[a]} is not -1 0 0 0 0 0")
            continue
        if any(abs(x) > MAX_ELEMENTS for x in words[1:]):
            errors.append(f"{where}: operand {'xyz'[a]}: offset or stride out of range")
    if errors:
        return errors
    for a, (slot, lo, hi, writes) in enumerate(libcall_extents(routine, ops[1:])):
        name = f"operand {'xyz'[a]} of {info.name}"
        if not 0 <= slot < len(p.slots):
            errors.append(f"{where}: {name}: slot {slot} out of range")
            continue
        s = p.slots[slot]
        if s.role in (SlotRole.PARAM, SlotRole.STATUS, SlotRole.RNG):
            errors.append(f"{where}: {name}: slot {slot} is a {_text(s.role)} slot, not memory")
            continue
        if slot not in always_set and slot not in live:
            errors.append(f"{where}: {name}: slot {slot} is used before it is allocated")
        if s.space != kernel_space:
            errors.append(f"{where}: {name} reads slot {slot} in {SPACE_NAMES.get(s.space)} "
                          f"space; library calls run in {SPACE_NAMES.get(kernel_space)} space")
        if np.dtype(s.dtype) != np.dtype(info.dtype):
            errors.append(f"{where}: {name} is {np.dtype(info.dtype)}, slot {slot} holds "
                          f"{np.dtype(s.dtype)}")
        if hi >= lo:
            top = s.hi if s.role != SlotRole.TEMP else s.nbytes // np.dtype(s.dtype).itemsize - 1
            if lo < s.lo or hi > top:
                errors.append(f"{where}: {name} touches elements [{lo}, {hi}] outside slot "
                              f"{slot}'s [{s.lo}, {top}]")
        if writes:
            if s.role not in (SlotRole.OUTPUT, SlotRole.TEMP):
                errors.append(f"{where}: {name} writes slot {slot}, a {_text(s.role)} slot "
                              f"(library calls write only results and temporaries)")
            written.add(slot)
    return errors


def _check_copy(p: Program, where, op, ops, live, always_set, written) -> list:
    dst, src, nbytes = ops
    errors = []
    nslots = len(p.slots)
    if not (0 <= dst < nslots and 0 <= src < nslots):
        return [f"{where}: slot out of range"]
    want_dst, want_src = ((Space.SPACE_DEVICE, Space.SPACE_HOST) if op is Opcode.TO_DEVICE
                          else (Space.SPACE_HOST, Space.SPACE_DEVICE))
    d, s = p.slots[dst], p.slots[src]
    if d.space != want_dst or s.space != want_src:
        errors.append(f"{where}: copies {SPACE_NAMES.get(s.space)} slot {src} to "
                      f"{SPACE_NAMES.get(d.space)} slot {dst}")
    for slot in (dst, src):
        if slot not in always_set and slot not in live:
            errors.append(f"{where}: slot {slot} is used before it is allocated")
        if p.slots[slot].role in (SlotRole.PARAM, SlotRole.STATUS, SlotRole.RNG):
            errors.append(f"{where}: slot {slot} is a {_text(p.slots[slot].role)} slot, not memory")
    if d.role in (SlotRole.CONST,) or (d.role == SlotRole.INPUT and dst not in p.mutated_leaves):
        errors.append(f"{where}: writes read-only slot {dst}")
    if d.lo != 0 or s.lo != 0:
        errors.append(f"{where}: copies need slots addressed from element 0")
    if nbytes < 0 or nbytes > d.span_bytes or nbytes > s.span_bytes:
        errors.append(f"{where}: {nbytes} bytes do not fit slots {dst} ({d.span_bytes}) and "
                      f"{src} ({s.span_bytes})")
    written.add(dst)
    return errors


def _check_arguments(p: Program, where: str, k: KernelInfo, slots: list, kernel_space,
                     written: set) -> list:
    errors = []
    if len(slots) != len(k.arg_kinds):
        return [f"{where}: kernel {k.name} takes {len(k.arg_kinds)} arguments, "
                f"{len(slots)} are bound"]
    for i, (s, kind) in enumerate(zip(slots, k.arg_kinds)):
        if not 0 <= s < len(p.slots):
            continue
        info = p.slots[s]
        if (kind == ArgKind.SCALAR) != (info.role in (SlotRole.PARAM, SlotRole.RNG)) or \
                (kind == ArgKind.STATUS) != (info.role == SlotRole.STATUS):
            errors.append(f"{where}: argument {i} of {k.name} wants a {_text(kind)}, slot {s} is "
                          f"{_text(info.role)}")
            continue
        if kind == ArgKind.SCALAR:
            continue
        if info.space != kernel_space:
            errors.append(f"{where}: argument {i} of {k.name} reads slot {s} in "
                          f"{SPACE_NAMES.get(info.space)} space; the kernels run in "
                          f"{SPACE_NAMES.get(kernel_space)} space")
            continue
        if kind == ArgKind.STATUS:
            continue
        if np.dtype(info.dtype) != np.dtype(k.arg_dtypes[i]):
            errors.append(f"{where}: argument {i} of {k.name} is {np.dtype(k.arg_dtypes[i])}, "
                          f"slot {s} holds {np.dtype(info.dtype)}")
        lo, hi = k.arg_ranges[i]
        if hi >= lo:
            top = info.hi if info.role != SlotRole.TEMP else \
                info.nbytes // np.dtype(info.dtype).itemsize - 1
            if lo < info.lo or hi > top:
                errors.append(f"{where}: argument {i} of {k.name} touches elements [{lo}, {hi}] "
                              f"outside slot {s}'s [{info.lo}, {top}]")
        if k.arg_writes[i]:
            written.add(s)
            if info.role in (SlotRole.CONST, SlotRole.PARAM, SlotRole.RNG):
                errors.append(f"{where}: argument {i} of {k.name} writes read-only slot {s}")
            if info.role == SlotRole.INPUT and s not in p.mutated_leaves:
                errors.append(f"{where}: argument {i} of {k.name} writes input slot {s}, "
                              f"which the program does not declare as updated in place")
    return errors
