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

Size: over 1,000 lines: the verifier (about half of it) must read exactly the tables the
assembler and the serialiser write, so the program and its checks are kept together; the
verifier is the part to move out if the opcode table grows.
"""
from __future__ import annotations

import enum
import hashlib
import heapq
import io
import json
import math
import struct
from dataclasses import asdict, dataclass, field

import numpy as np

from .._launch import Opcode, Routine, Space
from ..ir.kernel import ArgKind  # noqa: F401  (re-exported: how a kernel takes an argument word)
from ..ir.leaves import element_range

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
    # loops (fl.iterate)
    Opcode.MOVE: ("dst", "src"),
    Opcode.ROTATE: ("read", "write", "spare"),
    Opcode.ROW: ("dst", "src", "ctr", "every", "stride"),
    Opcode.COPY: ("dst", "src", "nbytes"),
    Opcode.SET: ("slot", "value"),
    Opcode.LOOP: ("ctr", "count", "target"),
    Opcode.BREAK_IF: ("flag", "target"),
    Opcode.NEXT: ("ctr", "count", "target"),
    Opcode.JUMP: ("target",),
    Opcode.LIBCALL: ("routine", "b1", "b2", "m", "n", "k") + tuple(
        f"{a}{f}" for a in "xyz" for f in ("", "_off", "_sb1", "_sb2", "_s0", "_s1")),
}
for _op, _names in OPERANDS.items():
    assert (_op & 0xFF) == 1 + len(_names), f"{_op.name}: width and operand names disagree"


VALID_OPCODES = {int(op) for op in OPERANDS}
# Opcodes that jump, and the operand holding their target pc.
JUMP_OPERAND = {Opcode.LOOP: 2, Opcode.BREAK_IF: 1, Opcode.NEXT: 2, Opcode.JUMP: 0}


@dataclass(frozen=True)
class RoutineInfo:
    """What a library routine (_launch.Routine) computes, for the recorder, the verifier and
    the disassembler: its name, dtype, and per array operand (x, y, z) its per-batch-item
    shape as a function of (m, n, k) and whether it writes it (None: unused).  `error`: the
    message of a positive status (LAPACK's info), raised as `np.linalg.LinAlgError`.
    `words`: what else the routine requires of its words (sizes, each operand's row and
    column strides) -> why not, or None; the verifier refuses what the routine would refuse
    at run time."""
    name: str
    dtype: str
    arrays: tuple
    error: str = ""
    words: object = None


_INT32_MAX = (1 << 31) - 1


def blas_layout(rows, cols, s0, s1):
    """Whether BLAS can take a row-major rows x cols matrix with element strides (s0, s1)
    without a copy: "N" (rows contiguous), "T" (columns contiguous), else None; the other
    stride at least the matrix's extent (csrc/library.c's blas_layout, the same rule)."""
    if cols <= 1:
        s1 = 1
    if rows <= 1:
        s0 = max(cols, 1) if s1 == 1 else 1
    if s1 == 1 and max(cols, 1) <= s0 <= _INT32_MAX:
        return "N"
    if s0 == 1 and max(rows, 1) <= s1 <= _INT32_MAX:
        return "T"
    return None


def _gemm_words(b1, b2, m, n, k, strides):
    if 0 in (b1, b2, m, n):              # nothing to compute: the routine returns at once
        return None
    (a0, a1), (x0, x1), (c0, c1) = strides
    if blas_layout(m, k, a0, a1) is None or blas_layout(k, n, x0, x1) is None or \
            blas_layout(m, n, c0, c1) != "N":
        return "operand strides BLAS cannot take (rows or columns contiguous; the result's rows)"
    return None


def _svd_words(b1, b2, m, n, k, strides):
    return None if k in (0, 1, 2) else f"job k={k} is not 0, 1 or 2"


def _shapes(*arrays):
    return arrays + (None,) * (3 - len(arrays))


_SQUARE = lambda m, n, k: (m, m)       # noqa: E731


def _svd_packed(m, n, k):
    """svd's packed result per matrix for job k (0: singular values only, 1: reduced U/Vh,
    2: full; the routine refuses any other k, sized here as 2): row 0 the singular values,
    then U (m x ucols), then Vh (vrows x n)."""
    r = min(m, n)
    if k == 0:
        return (1, r)
    ucols, vrows = (m, n) if k >= 2 else (r, r)
    return (1 + m + vrows, max(ucols, n))


ROUTINES: dict = {}
for _dt in ("f32", "f64"):
    _np = "<f4" if _dt == "f32" else "<f8"
    _R = lambda name: Routine[f"LIB_{name.upper()}_{_dt.upper()}"]   # noqa: E731
    ROUTINES[_R("gemm")] = RoutineInfo("gemm", _np, _shapes(
        (lambda m, n, k: (m, k), False), (lambda m, n, k: (k, n), False),
        (lambda m, n, k: (m, n), True)), words=_gemm_words)
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
    ROUTINES[_R("svd")] = RoutineInfo("svd", _np, _shapes(
        (lambda m, n, k: (m, n), False), (_svd_packed, True)), "SVD did not converge",
        _svd_words)
    ROUTINES[_R("lstsq")] = RoutineInfo("lstsq", _np, _shapes(
        (lambda m, n, k: (m, n + k), False), (lambda m, n, k: (1, 1), False),
        (lambda m, n, k: (n + 2, max(k, min(m, n), 1)), True)),
        "SVD did not converge in Linear Least Squares")
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
MAX_COUNT = 1 << 62         # loop counts and counter values (a counter never overflows)
MAX_PASSES = 64             # the verifier's passes over one loop before it gives up


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
    ALIAS = "alias"
    COUNTER = "counter"


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
    role: str                 # a SlotRole (input | param | const | output | temp | status |
                              # rng | alias | counter)
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
    # runtime checks (ir.Op.CHECK): (status bit, exception name, message), the exception a
    # call raises when a kernel set that bit (names from CHECK_EXCEPTIONS)
    checks: list = field(default_factory=list)

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

    def loops(self) -> list:
        """(head, pc of the LOOP, counter slot, count) of each loop, innermost first."""
        return [(ops[2], pc, ops[0], ops[1]) for pc, op, ops in self.instructions()
                if op is Opcode.LOOP]

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
        heads: dict = {}
        for head, end, ctr, count in self.loops():
            heads.setdefault(head, []).append(
                f"; ---- loop {head:04d}..{end:04d}: again while {self._slot_name(ctr)} < {count}")
        pc = 0
        for pc, op, operands in self.instructions():
            lines += heads.get(pc, [])
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
        elif op in (Opcode.TO_DEVICE, Opcode.TO_HOST, Opcode.MOVE, Opcode.COPY):
            named += f"  ; {self._slot_name(operands[0])} <- {self._slot_name(operands[1])}"
        elif op is Opcode.ROTATE:
            named += (f"  ; {self._slot_name(operands[0])} <- {self._slot_name(operands[1])} "
                      f"<-> {self._slot_name(operands[2])}")
        elif op is Opcode.ROW:
            named += (f"  ; {self._slot_name(operands[0])} <- {self._slot_name(operands[1])} + "
                      f"{self._slot_name(operands[2])} / {operands[3]} * {operands[4]}")
        elif op is Opcode.SET:
            named += f"  ; {self._slot_name(operands[0])}"
        elif op is Opcode.LOOP:
            named += (f"  ; {self._slot_name(operands[0])} += 1, back to {operands[2]:04d} while "
                      f"< {operands[1]}")
        elif op is Opcode.BREAK_IF:
            named += f"  ; out to {operands[1]:04d} if {self._slot_name(operands[0])}"
        elif op is Opcode.NEXT:
            named += (f"  ; {self._slot_name(operands[0])} += 1, out to {operands[2]:04d} "
                      f"once >= {operands[1]}")
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
        if self.checks:
            meta["checks"] = [[bit, name, message] for bit, name, message in self.checks]
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
        mutated_leaves=[_int(x) for x in meta["mutated_leaves"]],
        checks=[(_int(bit), str(name), str(message))
                for bit, name, message in meta.get("checks", [])])


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
    if d.kind not in "biufc" or d.fields is not None or d.subdtype is not None:
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

    def here(self) -> int:
        """The pc of the next instruction (a jump target)."""
        return len(self.code)

    def move(self, dst: int, src: int):
        self.code += [Opcode.MOVE, dst, src]

    def rotate(self, read: int, write: int, spare: int):
        self.code += [Opcode.ROTATE, read, write, spare]

    def row(self, dst: int, src: int, ctr: int, every: int, stride: int):
        self.code += [Opcode.ROW, dst, src, ctr, every, stride]

    def copy(self, dst: int, src: int, nbytes: int):
        self.code += [Opcode.COPY, dst, src, nbytes]

    def set(self, slot: int, value: int):
        self.code += [Opcode.SET, slot, value]

    def loop(self, ctr: int, count: int, head: int):
        self.code += [Opcode.LOOP, ctr, count, head]

    def break_if(self, flag: int) -> int:
        """BREAK_IF with its target left open: returns the word to patch() later."""
        self.code += [Opcode.BREAK_IF, flag, -1]
        return len(self.code) - 1

    def next(self, ctr: int, count: int) -> int:
        """NEXT with its target left open: returns the word to patch() later."""
        self.code += [Opcode.NEXT, ctr, count, -1]
        return len(self.code) - 1

    def jump(self) -> int:
        """JUMP with its target left open: returns the word to patch() later."""
        self.code += [Opcode.JUMP, -1]
        return len(self.code) - 1

    def patch(self, at: int, value: int):
        self.code[at] = value

    def launch(self, kernel: int, n: int, slots: list[int]):
        """BIND the argument slots into fresh argument words, then LAUNCH."""
        args_at = self.words(len(slots))
        self.bind(args_at, slots)
        self.launch_bound(kernel, n, args_at)

    def words(self, count: int) -> int:
        """Fresh argument words: the first one's index."""
        self.nargwords += count
        return self.nargwords - count

    def bind(self, args_at: int, slots: list[int]):
        list_at = len(self.arg_lists)
        self.arg_lists += list(slots)
        self.code += [Opcode.BIND, args_at, list_at, len(slots)]

    def launch_bound(self, kernel: int, n: int, args_at: int):
        """LAUNCH with arguments bound earlier (by one or several BINDs)."""
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


# The exceptions a runtime check may raise (Program.checks names them; a loaded program can
# name nothing else).
CHECK_EXCEPTIONS = {"AssertionError": AssertionError, "ValueError": ValueError,
                    "ZeroDivisionError": ZeroDivisionError, "RuntimeError": RuntimeError,
                    "TypeError": TypeError, "IndexError": IndexError,
                    "OverflowError": OverflowError,
                    "LinAlgError": np.linalg.LinAlgError}
FIRST_CHECK_BIT, LAST_CHECK_BIT = 8, 1 << 62     # ir.FIRST_CHECK_BIT, ir.LAST_CHECK_BIT


def check_exception(name: str) -> type:
    return CHECK_EXCEPTIONS[name]


def _verify_checks(p: Program, errors) -> None:
    seen = set()
    for entry in p.checks:
        if not (isinstance(entry, tuple) and len(entry) == 3):
            errors.append(f"malformed check entry {entry!r}")
            continue
        bit, name, message = entry
        if type(bit) is not int or not FIRST_CHECK_BIT <= bit <= LAST_CHECK_BIT or \
                bit & (bit - 1) or bit in seen:
            errors.append(f"check bit {bit!r} is not a distinct single bit in "
                          f"[{FIRST_CHECK_BIT:#x}, {LAST_CHECK_BIT:#x}]")
        seen.add(bit)
        if name not in CHECK_EXCEPTIONS:
            errors.append(f"check exception {name!r} is not one of {sorted(CHECK_EXCEPTIONS)}")
        if not isinstance(message, str) or len(message) > 10000:
            errors.append("check message is not a string of at most 10000 characters")
    if p.checks and p.status_slot < 0:
        errors.append("runtime checks but no status slot")


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
    * loops: jumps land on instructions inside the code, LOOP only backwards and BREAK_IF,
      NEXT and JUMP only forwards, loops nest, no jump enters a loop's body but at its head,
      no ALLOC or FREE in a body, a loop's counter set before it and never inside it (only
      LOOP and NEXT step it); the checks above hold in every iteration (a body is checked
      until the state at its head settles): every slot read in iteration i+1 was set, and
      every buffer read was written, in iteration i or before the loop; aliases (MOVE,
      ROTATE, ROW) point only into live buffers of their dtype and space, within range for
      every counter value, and are written through only where every buffer they may point at
      is writeable; a POLL after an argument was written in place only at an iteration
      boundary (a loop's head, or just after a NEXT);
    * strict (programs from files): every kernel's recorded launch size, and LAUNCH n equal
      to it, so that the element ranges checked above are the ones the kernel touches.

    The kernel tables (element ranges, launch sizes) are the verifier's premises: it proves
    the bytecode keeps every kernel inside the ranges the tables give, not that a kernel's
    code keeps to its table.  A loaded program's tables are therefore derived from kernel
    descriptions (program/saved.py), never read from the file.
    """
    errors: list[str] = []
    try:
        if _verify_tables(p, kernel_space, leaves, strict, errors):
            _verify_code(p, kernel_space, strict, errors)
        _verify_checks(p, errors)
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
        if dt.kind not in "biufc":
            errors.append(f"{where}: dtype {dt} is not a number type")
        if s.space not in SPACE_NAMES:
            errors.append(f"{where}: unknown memory space {s.space}")
        is_leaf = i < p.nleaves
        if is_leaf != (s.role in (SlotRole.INPUT, SlotRole.PARAM)):
            errors.append(f"{where}: {_text(s.role)} slot where the "
                          f"{'arguments' if is_leaf else 'program' + chr(39) + 's own slots'} are")
        if s.role in (SlotRole.CONST, SlotRole.OUTPUT, SlotRole.TEMP, SlotRole.ALIAS) and \
                s.lo != 0:
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
        if s.role == SlotRole.COUNTER and (dt != np.int64 or s.space != Space.SPACE_HOST):
            errors.append(f"{where}: a counter is an int64 word of the interpreter (host)")
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


# ---- the code: an abstract interpretation ---------------------------------------------------
# Straight-line code is checked in one pass.  Jumps (LOOP, BREAK_IF) make a control-flow graph:
# the state reaching a jump target is the join of the states of every path to it (what holds
# on all of them), and a loop's body is checked again until the state at its head stops
# changing.  What is proved at a loop's head then holds for every iteration: every slot read
# in iteration i+1 was set (and every buffer read was written) in iteration i or before the
# loop, and every pointer a kernel gets stays inside its buffer for every counter value.

_MEMORY = (SlotRole.INPUT, SlotRole.CONST, SlotRole.OUTPUT, SlotRole.TEMP, SlotRole.ALIAS)


class _State:
    """What the verifier knows at one point of the code (on every path reaching it)."""
    __slots__ = ("live", "written", "bound", "args_written", "copy_of", "unsaved", "vals")

    def __init__(self):
        self.live = {}              # temporary slot -> pc of the ALLOC that set it
        self.written = set()        # slots some kernel or copy has written
        self.bound = {}             # argument word -> (slot, its ALLOC, its alias value)
        self.args_written = False   # an argument array may have been written in place
        # an argument updated in place through a copy in the kernels' space: the copy's slot
        # -> the argument's, and the arguments whose copy a kernel wrote and no TO_HOST
        # brought back -> where
        self.copy_of = {}
        self.unsaved = {}
        # alias slot -> ("ptr", frozenset((target slot, its ALLOC, first, last element
        # offset)), written through since set, tag: ("set", pc) of the instruction that set
        # it, or ("join", pc) where paths with different setters meet); see below
        # offset)), written through since set); counter slot -> ("ctr", lowest, highest)
        self.vals = {}

    def copy(self) -> "_State":
        c = _State.__new__(_State)
        c.live, c.written, c.bound = dict(self.live), set(self.written), dict(self.bound)
        c.args_written, c.copy_of = self.args_written, dict(self.copy_of)
        c.unsaved, c.vals = dict(self.unsaved), dict(self.vals)
        return c

    def __eq__(self, other):
        return all(getattr(self, f) == getattr(other, f) for f in _State.__slots__)

    def join(self, other: "_State", at: int) -> "_State":
        j = _State()
        j.live = {s: a for s, a in self.live.items() if other.live.get(s) == a}
        j.written = self.written & other.written
        j.bound = {a: v for a, v in self.bound.items() if other.bound.get(a) == v}
        j.args_written = self.args_written or other.args_written
        j.copy_of = {**other.copy_of, **self.copy_of}
        j.unsaved = {**other.unsaved, **self.unsaved}
        for s, v in self.vals.items():
            w = other.vals.get(s)
            if w is not None and w[0] == v[0]:
                j.vals[s] = _join_value(v, w, at)
        return j


def _join_value(v, w, at: int):
    if v[0] == "ctr":
        return ("ctr", min(v[1], w[1]), max(v[2], w[2]))
    spans: dict = {}
    for target, alloc, lo, hi in list(v[1]) + list(w[1]):
        old = spans.get((target, alloc))
        spans[(target, alloc)] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
    return ("ptr", frozenset((t, a, lo, hi) for (t, a), (lo, hi) in spans.items()),
            v[2] and w[2], v[3] if v[3] == w[3] else ("join", at))


def _verify_code(p: Program, kernel_space, strict, errors):
    v = _CodeVerifier(p, kernel_space, strict)
    v.run()
    errors += list(v.errors)


class _CodeVerifier:
    def __init__(self, p: Program, kernel_space, strict):
        self.p, self.kspace, self.strict = p, kernel_space, strict
        self.slots = p.slots
        self.nslots = len(p.slots)
        self.mutated = set(p.mutated_leaves)
        self.errors: dict = {}      # an ordered set: a loop's body is checked several times
        self.heads: set = set()     # loop heads
        self.boundaries: set = set()  # iteration boundaries: heads, and just after a NEXT

    def err(self, msg: str):
        self.errors[msg] = None

    def counter_step(self, st, ctr: int, count: int, where: str):
        """LOOP's and NEXT's shared checks: (lo, hi), the range the counter has after its
        increment, or None (an error is recorded) for a slot that is no set counter or a count
        out of range."""
        v = st.vals.get(ctr)
        if self.role(ctr) != SlotRole.COUNTER:
            self.err(f"{where}: slot {ctr} is not a counter")
            return None
        if v is None or v[0] != "ctr":
            self.err(f"{where}: counter slot {ctr} is read before it is set")
            return None
        if not -MAX_COUNT <= count <= MAX_COUNT:
            self.err(f"{where}: count {count} out of range")
            return None
        return v[1] + 1, v[2] + 1

    def role(self, s: int):
        return self.slots[s].role if 0 <= s < self.nslots else None

    # ---- control flow ---------------------------------------------------------------------
    def structure(self):
        """(instruction starts, jump targets), after checking the shape of every jump and
        loop; None when the code cannot be followed."""
        code = self.p.code
        starts, jumps, pc = [], [], 0
        while pc < len(code):
            op, ops = decode(code, pc)
            if op is None:
                self.err(f"{pc:04d}: {ops}")
                return None
            starts.append(pc)
            if op in JUMP_OPERAND:
                jumps.append((pc, op, ops))
            pc += width(op)
        end = len(code)
        boundaries = set(starts) | {end}
        loops, ok = [], True
        for pc, op, ops in jumps:
            target, where = ops[JUMP_OPERAND[op]], f"{pc:04d}: {op.name}"
            if target not in boundaries:
                self.err(f"{where}: target {target} is not the start of an instruction")
                ok = False
            elif op is Opcode.LOOP and target > pc:
                self.err(f"{where}: jumps forward to {target}; a loop jumps back to its head")
                ok = False
            elif op is not Opcode.LOOP and target <= pc:
                self.err(f"{where}: jumps back to {target}; only LOOP jumps back")
                ok = False
            elif op is Opcode.LOOP:
                loops.append((target, pc, ops[0]))
        for a in loops:
            for b in loops:
                if a[0] < b[0] <= a[1] < b[1]:
                    self.err(f"{a[1]:04d}: LOOP: its body {a[0]:04d}..{a[1]:04d} and that of "
                             f"the loop at {b[1]:04d} overlap without one holding the other")
                    ok = False
                elif a != b and a[0] <= b[0] and b[1] <= a[1] and a[2] == b[2]:
                    self.err(f"{b[1]:04d}: LOOP: nested in the loop at {a[1]:04d} with the same "
                             f"counter, slot {a[2]}")
                    ok = False
        for head, last, ctr in loops:
            for pc in starts:
                if not head <= pc < last:
                    continue
                op, ops = decode(code, pc)
                if op in (Opcode.ALLOC, Opcode.FREE):
                    self.err(f"{pc:04d}: {op.name} inside the loop {head:04d}..{last:04d}: "
                             f"temporaries are allocated before a loop and freed after it")
                    ok = False
                elif op is Opcode.SET and ops[0] == ctr:
                    self.err(f"{pc:04d}: SET of slot {ctr}, the counter of the loop "
                             f"{head:04d}..{last:04d} it is in (the loop might never end)")
                    ok = False
        for pc, op, ops in jumps:
            target = ops[JUMP_OPERAND[op]]
            for head, last, _ in loops:
                if not head <= pc <= last and head < target <= last:
                    self.err(f"{pc:04d}: {op.name}: jumps into the middle of the loop "
                             f"{head:04d}..{last:04d}")
                    ok = False
        if not ok:
            return None
        self.heads = {head for head, _, _ in loops}
        # where one iteration ends and the next begins: a loop's head, and just after a NEXT
        self.boundaries = self.heads | {pc + width(op) for pc, op, _ in jumps
                                        if op is Opcode.NEXT}
        return starts, {ops[JUMP_OPERAND[op]] for _, op, ops in jumps}

    def run(self):
        shape = self.structure()
        if shape is None:
            return
        _, targets = shape
        code, end = self.p.code, len(self.p.code)
        self.ins: dict = {0: _State()}
        heap, queued, passes = [0], {0}, {}
        while heap:
            start = heapq.heappop(heap)
            queued.discard(start)
            if start == end:
                continue
            passes[start] = passes.get(start, 0) + 1
            if passes[start] > MAX_PASSES:
                self.err(f"{start:04d}: the loop analysis does not settle")
                return
            st, pc = self.ins[start].copy(), start
            while pc < end:
                op, ops = decode(code, pc)
                jumps, falls = self.step(pc, op, ops, st)
                for target, state in jumps:
                    self.flow(target, state, heap, queued)
                if not falls:
                    break
                pc += width(op)
                if pc in targets or pc == end:
                    self.flow(pc, st, heap, queued)
                    break
        final = self.ins.get(end)
        if final is None:
            self.err("end: never reached")
            return
        self.finish(final)

    def flow(self, target: int, st: _State, heap, queued):
        old = self.ins.get(target)
        if old is None:
            new = st.copy()
        else:
            if old.live != st.live:
                self.err(f"{target:04d}: the paths meeting here hold different temporaries "
                         f"({sorted(old.live)} and {sorted(st.live)})")
            new = old.join(st, target)
            if new == old:
                return
        self.ins[target] = new
        if target not in queued:
            queued.add(target)
            heapq.heappush(heap, target)

    def finish(self, st: _State):
        p = self.p
        for slot in st.live:
            self.err(f"end: temporary slot {slot} is never freed")
        for arg, at in st.unsaved.items():
            self.err(f"end: argument slot {arg} is updated in place through a copy written at "
                     f"{at}, which is never copied back with TO_HOST")
        for slot, _, _ in p.outputs:
            if 0 <= slot < self.nslots and slot not in st.written and p.slots[slot].hi >= 0:
                self.err(f"end: output slot {slot} is never written"
                         + (" (a device result must be copied out with TO_HOST)"
                            if self.kspace != Space.SPACE_HOST else ""))

    # ---- what slots hold -------------------------------------------------------------------
    def targets(self, st: _State, s: int):
        """What the word of memory slot s may point at: a frozenset of (slot owning the
        buffer, its ALLOC, first and last element offset); None while s is not set."""
        role = self.role(s)
        if role == SlotRole.ALIAS:
            v = st.vals.get(s)
            return v[1] if v is not None and v[0] == "ptr" else None
        if role == SlotRole.TEMP:
            return frozenset({(s, st.live[s], 0, 0)}) if s in st.live else None
        if role in (SlotRole.INPUT, SlotRole.CONST, SlotRole.OUTPUT):
            return frozenset({(s, None, 0, 0)})
        return None

    def initialized(self, st: _State, s: int, value=None) -> bool:
        role = self.role(s)
        if role == SlotRole.ALIAS:
            v = st.vals.get(s) if value is None else value
            return v is not None and v[0] == "ptr" and v[2]
        if role in (SlotRole.INPUT, SlotRole.CONST):
            return True
        return s in st.written

    def extent(self, s: int):
        """The element range [lo, top] memory slot s may address from its pointer."""
        info = self.slots[s]
        if info.role == SlotRole.TEMP:
            return 0, info.nbytes // info.itemsize - 1
        return info.lo, info.hi

    def same_pointer(self, st: _State, s: int, value) -> bool:
        """Alias s still holds the pointer it held when its value was `value`: the same
        setter (an instruction, or a join point) and no other setting since.  The target set
        alone would not do: ping-pong aliases may point at either of two buffers in turn."""
        cur = st.vals.get(s)
        return cur is not None and cur[0] == "ptr" and value is not None and \
            value[0] == "ptr" and cur[1] == value[1] and cur[3] == value[3]

    def writable(self, target: int) -> bool:
        role = self.role(target)
        return role in (SlotRole.OUTPUT, SlotRole.TEMP) or \
            (role == SlotRole.INPUT and target in self.mutated)

    def wrote(self, st: _State, s: int, where: str, value=None):
        """Slot s (through its word, whose value `value` for an alias) was written."""
        if self.role(s) == SlotRole.ALIAS:
            v = st.vals.get(s) if value is None else value
            if v is None or v[0] != "ptr":
                return
            if self.same_pointer(st, s, v):
                st.vals[s] = ("ptr", v[1], True, v[3])
            owners = {t for t, _, _, _ in v[1]}
        else:
            owners = {s}
        for t in owners:
            if len(owners) == 1:
                st.written.add(t)
            if self.role(t) == SlotRole.INPUT:
                st.args_written = True
            if t in st.copy_of:
                st.unsaved[st.copy_of[t]] = where

    # ---- one instruction -------------------------------------------------------------------
    def step(self, pc: int, op, ops, st: _State):
        """Check the instruction at pc against st and apply it to st; returns ([(jump
        target, state there)], whether it falls through)."""
        where = f"{pc:04d}: {op.name}"
        p, nslots = self.p, self.nslots
        if op is Opcode.ALLOC:
            slot, nbytes = ops
            if not 0 <= slot < nslots or p.slots[slot].role != SlotRole.TEMP:
                self.err(f"{where}: slot {slot} is not a temporary")
            elif slot in st.live:
                self.err(f"{where}: slot {slot} is already allocated")
            elif nbytes < 0 or nbytes < p.slots[slot].nbytes:
                self.err(f"{where}: {nbytes} bytes is less than slot {slot} needs")
            elif nbytes > MAX_BYTES:
                self.err(f"{where}: {nbytes} bytes is more than a temporary may have")
            else:
                st.live[slot] = pc
                st.written.discard(slot)
        elif op is Opcode.FREE:
            (slot,) = ops
            if slot not in st.live:
                self.err(f"{where}: slot {slot} is not allocated")
            else:
                del st.live[slot]
                st.written.discard(slot)
                for a, v in list(st.vals.items()):
                    if v[0] == "ptr" and any(t == slot for t, _, _, _ in v[1]):
                        del st.vals[a]          # an alias of a freed buffer is unset
                arg = st.copy_of.pop(slot, None)
                if arg in st.unsaved:
                    self.err(f"{where}: frees slot {slot}, the copy of argument slot {arg} "
                             f"written at {st.unsaved.pop(arg)}, before a TO_HOST brings the "
                             f"in-place update back")
        elif op is Opcode.BIND:
            self.bind(where, ops, st)
        elif op is Opcode.CHECK:
            (slot,) = ops
            if not 0 <= slot < nslots or p.slots[slot].role != SlotRole.STATUS:
                self.err(f"{where}: slot {slot} is not a status slot")
        elif op is Opcode.POLL:
            if st.args_written and pc not in self.boundaries:
                # a KeyboardInterrupt must leave the arguments as they were, or, at an
                # iteration boundary, as a completed iteration left them
                self.err(f"{where}: after an argument was written in place")
        elif op in (Opcode.TO_DEVICE, Opcode.TO_HOST, Opcode.COPY):
            self.copy(where, op, ops, st)
        elif op is Opcode.LIBCALL:
            self.libcall(where, ops, st)
        elif op is Opcode.LAUNCH:
            self.launch(where, ops, st)
        elif op is Opcode.MOVE:
            dst, src = ops
            if self.alias(where, dst) and self.memory(where, src, st):
                if self.fits(where, dst, src):
                    st.vals[dst] = ("ptr", self.targets(st, src), self.initialized(st, src),
                                    ("set", pc))
                else:
                    st.vals.pop(dst, None)
        elif op is Opcode.ROTATE:
            read, write, spare = ops
            if len({read, write, spare}) != 3:
                self.err(f"{where}: needs three different slots")
            elif all(self.alias(where, s) for s in ops):
                a, b, c = (p.slots[s] for s in ops)
                if not ((a.dtype, a.lo, a.hi, a.space) == (b.dtype, b.lo, b.hi, b.space) ==
                        (c.dtype, c.lo, c.hi, c.space)):
                    self.err(f"{where}: slots {read}, {write} and {spare} differ in dtype, range "
                             f"or space")
                elif any(st.vals.get(s, ("",))[0] != "ptr" for s in ops):
                    self.err(f"{where}: reads an alias before it is set")
                else:
                    # every word changes: each takes a fresh tag
                    w, sp = st.vals[write], st.vals[spare]
                    tag = ("set", pc)
                    st.vals[read] = st.vals[spare] = ("ptr", w[1], w[2], tag)
                    st.vals[write] = ("ptr", sp[1], sp[2], tag)
        elif op is Opcode.ROW:
            self.row(where, ops, st, pc)
        elif op is Opcode.SET:
            slot, value = ops
            if self.role(slot) != SlotRole.COUNTER:
                self.err(f"{where}: slot {slot} is not a counter")
            elif not 0 <= value <= MAX_COUNT:
                # from 0 up: a loop runs at most `count` times (a file cannot make it endless)
                self.err(f"{where}: value {value} out of range [0, {MAX_COUNT}]")
            else:
                st.vals[slot] = ("ctr", value, value)
        elif op is Opcode.LOOP:
            ctr, count, target = ops
            stepped = self.counter_step(st, ctr, count, where)
            if stepped is None:
                return [], False
            lo, hi = stepped
            jumps = []
            if lo < count:
                # every value the counter has when it jumps back is below the count: the
                # head sees [first value, count - 1] (a widening: no pass per iteration)
                back = st.copy()
                back.vals[ctr] = ("ctr", lo, count - 1)
                jumps.append((target, back))
            if hi < count:
                return jumps, False
            st.vals[ctr] = ("ctr", max(lo, count), hi)
            return jumps, True
        elif op is Opcode.NEXT:
            ctr, count, target = ops
            stepped = self.counter_step(st, ctr, count, where)
            if stepped is None:
                return [], False
            lo, hi = stepped
            jumps = []
            if hi >= count:
                out = st.copy()
                out.vals[ctr] = ("ctr", max(lo, count), hi)
                jumps.append((target, out))
            if lo >= count:
                return jumps, False
            # going on: the counter stays below the count (a body's ROWs see its range)
            st.vals[ctr] = ("ctr", lo, min(hi, count - 1))
            return jumps, True
        elif op is Opcode.JUMP:
            return [(ops[0], st.copy())], False
        elif op is Opcode.BREAK_IF:
            flag, target = ops
            if self.memory(where, flag, st):
                info = p.slots[flag]
                lo, top = self.extent(flag)
                if np.dtype(info.dtype) != np.bool_:
                    self.err(f"{where}: flag slot {flag} holds {np.dtype(info.dtype)}, not bool")
                elif info.space != self.kspace:
                    self.err(f"{where}: flag slot {flag} is outside the kernels' space")
                elif not lo <= 0 <= top:
                    self.err(f"{where}: flag slot {flag} does not address its element 0")
                elif not self.initialized(st, flag):
                    self.err(f"{where}: reads flag slot {flag} before anything is written to it")
            return [(target, st.copy())], True
        return [], True

    def alias(self, where, s) -> bool:
        if self.role(s) != SlotRole.ALIAS:
            self.err(f"{where}: slot {s} is not an alias")
            return False
        return True

    def memory(self, where, s, st) -> bool:
        """s is a memory slot whose word is set."""
        if self.role(s) not in _MEMORY:
            self.err(f"{where}: slot {s} is not memory")
            return False
        if self.targets(st, s) is None:
            self.err(f"{where}: slot {s} is read before it is set")
            return False
        return True

    def libcall(self, where, ops, st: _State):
        """A library call: a known routine, sizes within bounds, every used array operand a
        memory slot of the routine's dtype in the kernels' space, set, its element range inside
        the slot; writes only to results and temporaries; unused operands all -1/0 (so the
        words mean one thing)."""
        p = self.p
        routine = ops[0]
        if routine not in {int(r) for r in ROUTINES}:
            self.err(f"{where}: unknown library routine {routine}")
            return
        info = ROUTINES[Routine(routine)]
        sizes = ops[1:6]
        if any(not 0 <= x <= MAX_ELEMENTS for x in sizes) or \
                math.prod(sizes) > MAX_ELEMENTS or any(x >= (1 << 31) for x in sizes[2:]):
            self.err(f"{where}: sizes {list(sizes)} out of range")
            return
        bad = False
        for a, spec in enumerate(info.arrays):
            words = list(ops[6 + 6 * a:12 + 6 * a])
            if spec is None:
                if words != [-1, 0, 0, 0, 0, 0]:
                    self.err(f"{where}: unused operand {'xyz'[a]} is not -1 0 0 0 0 0")
                    bad = True
                continue
            if any(abs(x) > MAX_ELEMENTS for x in words[1:]):
                self.err(f"{where}: operand {'xyz'[a]}: offset or stride out of range")
                bad = True
        if bad:
            return
        writes = []
        for a, (slot, lo, hi, w) in enumerate(libcall_extents(routine, list(ops[1:]))):
            name = f"operand {'xyz'[a]} of {info.name}"
            if not 0 <= slot < self.nslots:
                self.err(f"{where}: {name}: slot {slot} out of range")
                continue
            s = p.slots[slot]
            if s.role not in _MEMORY:
                self.err(f"{where}: {name}: slot {slot} is a {_text(s.role)} slot, not memory")
                continue
            if self.targets(st, slot) is None:
                self.err(f"{where}: {name}: slot {slot} is used before it is allocated")
                continue
            if s.space != self.kspace:
                self.err(f"{where}: {name} reads slot {slot} in {SPACE_NAMES.get(s.space)} "
                         f"space; library calls run in {SPACE_NAMES.get(self.kspace)} space")
            if np.dtype(s.dtype) != np.dtype(info.dtype):
                self.err(f"{where}: {name} is {np.dtype(info.dtype)}, slot {slot} holds "
                         f"{np.dtype(s.dtype)}")
            if hi >= lo:
                blo, top = self.extent(slot)
                if lo < blo or hi > top:
                    self.err(f"{where}: {name} touches elements [{lo}, {hi}] outside slot "
                             f"{slot}'s [{blo}, {top}]")
            owners = ([t for t, _, _, _ in self.targets(st, slot)]
                      if s.role == SlotRole.ALIAS else [slot])
            if w:
                for t in owners:
                    if self.role(t) not in (SlotRole.OUTPUT, SlotRole.TEMP):
                        self.err(f"{where}: {name} writes slot {t}, a {_text(self.role(t))} "
                                 f"slot (library calls write only results and temporaries)")
                writes.append(slot)
            elif hi >= lo and not self.initialized(st, slot):
                self.err(f"{where}: {name} reads slot {slot} before anything is written to it")
        for slot in writes:
            self.wrote(st, slot, where)
        # CPU time in proportion to memory, as for kernels: at most one matrix per element of
        # the result (a recorded call writes each matrix's own result; zero batch strides
        # could otherwise repeat one small call 2^56 times)
        items = sizes[0] * sizes[1]
        for _, lo, hi, w in libcall_extents(routine, list(ops[1:])):
            if w and hi >= lo and items > hi - lo + 1:
                self.err(f"{where}: a batch of {items} {info.name} calls for a result of "
                         f"{hi - lo + 1} elements (at most one per element)")
        if info.words is not None:
            why = info.words(*sizes, [tuple(ops[10 + 6 * a:12 + 6 * a]) for a in range(3)])
            if why is not None:
                self.err(f"{where}: {info.name}: {why}")

    def fits(self, where, dst, src, offsets=(0, 0)) -> bool:
        """Alias dst may take a pointer into src's buffer at these element offsets: same
        dtype and space, and dst's range stays inside src's for every offset."""
        d, s = self.slots[dst], self.slots[src]
        lo, top = self.extent(src)
        if np.dtype(d.dtype) != np.dtype(s.dtype) or d.space != s.space:
            self.err(f"{where}: slot {dst} ({np.dtype(d.dtype)}, "
                     f"{SPACE_NAMES.get(d.space)}) cannot point into slot {src} "
                     f"({np.dtype(s.dtype)}, {SPACE_NAMES.get(s.space)})")
            return False
        if d.hi >= d.lo and (offsets[0] + d.lo < lo or offsets[1] + d.hi > top):
            self.err(f"{where}: slot {dst} addresses elements [{offsets[0] + d.lo}, "
                     f"{offsets[1] + d.hi}] of slot {src}'s [{lo}, {top}]")
            return False
        return True

    def row(self, where, ops, st: _State, pc: int):
        dst, src, ctr, every, stride = ops
        if not (self.alias(where, dst) and self.memory(where, src, st)):
            return
        if self.role(src) == SlotRole.ALIAS:
            self.err(f"{where}: slot {src} is an alias; a row points into a buffer")
            return
        v = st.vals.get(ctr)
        if self.role(ctr) != SlotRole.COUNTER or v is None or v[0] != "ctr":
            self.err(f"{where}: slot {ctr} is not a counter that is set")
            return
        size = self.slots[src].itemsize
        if not 1 <= every <= MAX_COUNT or not 0 <= stride <= MAX_BYTES or stride % size:
            self.err(f"{where}: every={every} stride={stride} (bytes, a multiple of {size})")
            return
        if v[1] < 0:
            self.err(f"{where}: counter slot {ctr} may be negative ({v[1]})")
            return
        step = stride // size
        offsets = (v[1] // every * step, v[2] // every * step)
        if self.fits(where, dst, src, offsets):
            (target, alloc, _, _), = self.targets(st, src)
            init = self.role(src) in (SlotRole.INPUT, SlotRole.CONST)
            st.vals[dst] = ("ptr", frozenset({(target, alloc) + offsets}), init, ("set", pc))
        else:
            st.vals.pop(dst, None)

    def bind(self, where, ops, st: _State):
        p = self.p
        args_at, list_at, count = ops
        if count < 0 or not 0 <= list_at <= list_at + count <= len(p.arg_lists):
            self.err(f"{where}: argument list [{list_at}, +{count}) out of range")
            return
        if not 0 <= args_at <= args_at + count <= p.nargwords:
            self.err(f"{where}: argument words [{args_at}, +{count}) out of range")
            return
        slots = [int(s) for s in p.arg_lists[list_at:list_at + count]]
        for s in slots:
            role = self.role(s)
            if role is None:
                self.err(f"{where}: slot {s} out of range")
            elif role == SlotRole.TEMP and s not in st.live:
                self.err(f"{where}: slot {s} is read before it is allocated")
            elif role in (SlotRole.ALIAS, SlotRole.COUNTER) and s not in st.vals:
                self.err(f"{where}: slot {s} is read before it is set")
        # per word: a BIND of some of a launch's words leaves the others as bound before
        for k, s in enumerate(slots):
            st.bound[args_at + k] = (s, st.live.get(s), st.vals.get(s))

    def launch(self, where, ops, st: _State):
        p, nslots = self.p, self.nslots
        kernel, n, args_at = ops
        if not 0 <= kernel < len(p.kernels):
            self.err(f"{where}: kernel {kernel} out of range")
            return
        if n < 0:
            self.err(f"{where}: negative launch size {n}")
            return
        if args_at not in st.bound:
            self.err(f"{where}: no arguments bound at {args_at}")
            return
        k = p.kernels[kernel]
        if (k.launch_size >= 0 or self.strict) and n != k.launch_size:
            self.err(f"{where}: launch size {n}, but kernel {k.name}'s element ranges are for "
                     f"{k.launch_size}")
        bound = []
        while args_at + len(bound) in st.bound and len(bound) < len(k.arg_kinds):
            bound.append(st.bound[args_at + len(bound)])
        for s, alloc, value in bound:
            # a word bound from a temporary holds that allocation's pointer: it must still be
            # the live one (not freed, nor freed and allocated again); the same for the
            # temporaries an alias pointed into when it was bound
            role = self.role(s)
            if role == SlotRole.TEMP and (alloc is None or st.live.get(s) != alloc):
                self.err(f"{where}: slot {s} was freed after it was bound")
            elif role == SlotRole.ALIAS and value is not None and value[0] == "ptr":
                for t, talloc, _, _ in value[1]:
                    if self.role(t) == SlotRole.TEMP and st.live.get(t) != talloc:
                        self.err(f"{where}: slot {s} points into temporary {t}, freed after "
                                 f"it was bound")
        if len(bound) != len(k.arg_kinds):
            self.err(f"{where}: kernel {k.name} takes {len(k.arg_kinds)} arguments, "
                     f"{len(bound)} are bound")
            return
        writes = []
        for i, ((s, _, value), kind) in enumerate(zip(bound, k.arg_kinds)):
            if not 0 <= s < nslots:
                continue
            info = p.slots[s]
            # a scalar argument: a parameter, the random key, or a loop's iteration number
            if (kind == ArgKind.SCALAR) != (info.role in (SlotRole.PARAM, SlotRole.RNG,
                                                          SlotRole.COUNTER)) or \
                    (kind == ArgKind.STATUS) != (info.role == SlotRole.STATUS):
                self.err(f"{where}: argument {i} of {k.name} wants a {_text(kind)}, slot {s} "
                         f"is {_text(info.role)}")
                continue
            if kind == ArgKind.SCALAR:
                continue
            if info.space != self.kspace:
                self.err(f"{where}: argument {i} of {k.name} reads slot {s} in "
                         f"{SPACE_NAMES.get(info.space)} space; the kernels run in "
                         f"{SPACE_NAMES.get(self.kspace)} space")
                continue
            if kind == ArgKind.STATUS:
                continue
            if info.role not in _MEMORY:
                self.err(f"{where}: argument {i} of {k.name}: slot {s} is not memory")
                continue
            if np.dtype(info.dtype) != np.dtype(k.arg_dtypes[i]):
                self.err(f"{where}: argument {i} of {k.name} is {np.dtype(k.arg_dtypes[i])}, "
                         f"slot {s} holds {np.dtype(info.dtype)}")
            lo, hi = k.arg_ranges[i]
            if hi >= lo:
                blo, top = self.extent(s)
                if lo < blo or hi > top:
                    self.err(f"{where}: argument {i} of {k.name} touches elements [{lo}, {hi}] "
                             f"outside slot {s}'s [{blo}, {top}]")
            if info.role == SlotRole.ALIAS:
                owners = [t for t, _, _, _ in value[1]] if value and value[0] == "ptr" else []
            else:
                owners = [s]
            if k.arg_writes[i]:
                for t in owners:
                    if not self.writable(t):
                        self.err(f"{where}: argument {i} of {k.name} writes "
                                 + ("read-only slot" if self.role(t) != SlotRole.INPUT else
                                    "input slot") + f" {t}"
                                 + (f" (through slot {s})" if t != s else "")
                                 + (", which the program does not declare as updated in place"
                                    if self.role(t) == SlotRole.INPUT else ""))
                writes.append((s, value))
            elif hi >= lo and not (self.initialized(st, s, value) or (
                    info.role == SlotRole.ALIAS and self.same_pointer(st, s, value) and
                    self.initialized(st, s))):
                self.err(f"{where}: argument {i} of {k.name} reads slot {s} before anything "
                         f"is written to it")
        for s, value in writes:
            self.wrote(st, s, where, value)

    def copy(self, where, op, ops, st: _State):
        dst, src, nbytes = ops
        p = self.p
        if not (0 <= dst < self.nslots and 0 <= src < self.nslots):
            self.err(f"{where}: slot out of range")
            return
        d, s = p.slots[dst], p.slots[src]
        if op is Opcode.COPY:
            # in the kernels' space only: a device executable copies device to device
            if d.space != self.kspace or s.space != self.kspace:
                self.err(f"{where}: copies {SPACE_NAMES.get(s.space)} slot {src} to "
                         f"{SPACE_NAMES.get(d.space)} slot {dst}; COPY stays in the kernels' "
                         f"space ({SPACE_NAMES.get(self.kspace)})")
        else:
            want_dst, want_src = ((Space.SPACE_DEVICE, Space.SPACE_HOST)
                                  if op is Opcode.TO_DEVICE
                                  else (Space.SPACE_HOST, Space.SPACE_DEVICE))
            if d.space != want_dst or s.space != want_src:
                self.err(f"{where}: copies {SPACE_NAMES.get(s.space)} slot {src} to "
                         f"{SPACE_NAMES.get(d.space)} slot {dst}")
        ok = True
        for slot in (dst, src):
            info = p.slots[slot]
            if info.role not in _MEMORY:
                self.err(f"{where}: slot {slot} is a {_text(info.role)} slot, not memory")
                ok = False
            elif self.targets(st, slot) is None:
                self.err(f"{where}: slot {slot} is used before it is allocated")
                ok = False
        if not ok:
            return
        owners = [t for t, _, _, _ in self.targets(st, dst)]
        for t in owners:
            if not self.writable(t):
                self.err(f"{where}: writes read-only slot {t}"
                         + (f" (through slot {dst})" if t != dst else ""))
        if d.lo != 0 or s.lo != 0:
            self.err(f"{where}: copies need slots addressed from element 0")
        if nbytes < 0 or nbytes > d.span_bytes or nbytes > s.span_bytes:
            self.err(f"{where}: {nbytes} bytes do not fit slots {dst} ({d.span_bytes}) and "
                     f"{src} ({s.span_bytes})")
        if nbytes > 0 and not self.initialized(st, src):
            self.err(f"{where}: reads slot {src} before anything is written to it")
        self.wrote(st, dst, where)
        if op is Opcode.TO_DEVICE and src in self.mutated and d.role == SlotRole.TEMP:
            st.copy_of[dst] = src
        elif op is Opcode.TO_HOST and st.copy_of.get(src) == dst:
            st.unsaved.pop(dst, None)
