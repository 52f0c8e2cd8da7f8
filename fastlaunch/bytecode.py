"""The program: int64 bytecode plus the tables it indexes.  Assembler, disassembler, verifier
and (de)serialiser.  Opcodes come from `_launch.pxd` (via fastlaunch._launch), never repeated.

Slots are 8-byte words: a buffer pointer or a scalar's bits.  Slots 0..nleaves-1 hold the
flattened call arguments in order; constants, outputs and temporaries follow.
"""
from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import asdict, dataclass, field

import numpy as np

from ._launch import Opcode

# Operand names per opcode, for the disassembler; their count must match the width in the enum.
OPERANDS = {
    Opcode.ALLOC: ("slot", "nbytes"),
    Opcode.FREE: ("slot",),
    Opcode.BIND: ("args_at", "list_at", "count"),
    Opcode.LAUNCH: ("kernel", "n", "args_at"),
    Opcode.CHECK: ("slot",),
}
for _op, _names in OPERANDS.items():
    assert (_op & 0xFF) == 1 + len(_names), f"{_op.name}: width and operand names disagree"


VALID_OPCODES = {int(op) for op in OPERANDS}


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
    role: str                 # input | param | const | output | temp | status
    dtype: str                # dtype.str
    lo: int = 0               # addressable element range [lo, hi] relative to the pointer
    hi: int = -1
    nbytes: int = 0           # temporaries: bytes to allocate
    label: str = ""


@dataclass
class KernelInfo:
    name: str
    label: str
    arg_kinds: tuple          # "buffer" | "scalar" per argument
    arg_ranges: tuple         # (lo, hi) elements touched, per buffer argument ((0, -1) if none)
    arg_writes: tuple
    arg_dtypes: tuple
    work_per_item: int = 1
    bytes_moved: int = 0


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

    def launch_count(self) -> int:
        return sum(1 for _, op, _ in self.instructions() if op is Opcode.LAUNCH)

    @property
    def status_slot(self) -> int:
        """The slot kernels raise index errors through (-1: the program has no checks)."""
        return next((i for i, s in enumerate(self.slots) if s.role == "status"), -1)

    # ---- disassembly -----------------------------------------------------------------------
    def disassemble(self) -> str:
        lines = [f"; {len(self.slots)} slots, {self.nargwords} argument words, "
                 f"{len(self.kernels)} kernels, peak temporaries {self.peak_temp_bytes()} bytes"]
        for i, s in enumerate(self.slots):
            extra = f" nbytes={s.nbytes}" if s.role == "temp" else ""
            lines.append(f";   slot {i}: {s.role} {np.dtype(s.dtype)} {s.label}{extra}")
        pc = 0
        for pc, op, operands in self.instructions():
            lines.append(f"{pc:04d}: {op.name:<7}" + self._operand_text(op, operands))
            pc += width(op)
        if pc < len(self.code):
            _, reason = decode(self.code, pc)
            lines.append(f"{pc:04d}: ?? {reason}; raw words {[int(x) for x in self.code[pc:pc + 4]]}")
        return "\n".join(lines)

    def _operand_text(self, op, operands) -> str:
        named = " ".join(f"{n}={v}" for n, v in zip(OPERANDS[op], operands))
        if op is Opcode.BIND and 0 <= operands[1] <= operands[1] + operands[2] <= len(self.arg_lists):
            listed = self.arg_lists[operands[1]:operands[1] + operands[2]]
            named += "  [" + ", ".join(self._slot_name(int(s)) for s in listed) + "]"
        elif op is Opcode.LAUNCH and 0 <= operands[0] < len(self.kernels):
            named += f"  ; {self.kernels[operands[0]].label} ({self.kernels[operands[0]].name})"
        elif op in (Opcode.ALLOC, Opcode.FREE, Opcode.CHECK):
            named += f"  ; {self._slot_name(operands[0])}"
        return " " + named

    def _slot_name(self, s: int) -> str:
        if 0 <= s < len(self.slots):
            return f"{s}:{self.slots[s].label or self.slots[s].role}"
        return f"{s}:?"

    # ---- serialisation ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        meta = {
            "slots": [asdict(s) for s in self.slots],
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
        src = io.BytesIO(data)
        meta = json.loads(_read_blob(src))
        code = np.frombuffer(_read_blob(src), np.int64).copy()
        arg_lists = np.frombuffer(_read_blob(src), np.int64).copy()
        consts = []
        for slot in meta["consts"]:
            dt, shape = json.loads(_read_blob(src))
            arr = np.frombuffer(_read_blob(src), np.dtype(dt)).reshape(shape).copy()
            arr.setflags(write=False)
            consts.append((slot, arr))
        return Program(
            code=code, arg_lists=arg_lists,
            slots=[SlotInfo(**s) for s in meta["slots"]],
            kernels=[KernelInfo(**{**k, "arg_kinds": tuple(k["arg_kinds"]),
                                   "arg_ranges": tuple(tuple(r) for r in k["arg_ranges"]),
                                   "arg_writes": tuple(k["arg_writes"]),
                                   "arg_dtypes": tuple(k["arg_dtypes"])})
                     for k in meta["kernels"]],
            nargwords=meta["nargwords"], nleaves=meta["nleaves"], consts=consts,
            outputs=[(s, dt, tuple(shape)) for s, dt, shape in meta["outputs"]],
            mutated_leaves=meta["mutated_leaves"])

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()


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

    def launch(self, kernel: int, n: int, slots: list[int]):
        """BIND the argument slots into fresh argument words, then LAUNCH."""
        args_at = self.nargwords
        self.nargwords += len(slots)
        list_at = len(self.arg_lists)
        self.arg_lists += list(slots)
        self.code += [Opcode.BIND, args_at, list_at, len(slots)]
        self.code += [Opcode.LAUNCH, kernel, n, args_at]

    def arrays(self):
        return np.array(self.code, np.int64), np.array(self.arg_lists, np.int64)


# ---- verifier ----------------------------------------------------------------------------
def verify(p: Program) -> None:
    """Raise VerifyError unless every instruction is well formed, every slot read is set,
    every kernel argument fits its slot, and every temporary is freed."""
    errors: list[str] = []
    nslots = len(p.slots)
    always_set = {i for i, s in enumerate(p.slots) if s.role != "temp"}
    live: dict[int, int] = {}
    bound: dict[int, list] = {}   # args_at -> slots bound there
    pc, code = 0, p.code
    while pc < len(code):
        op, ops = decode(code, pc)
        if op is None:
            errors.append(f"{pc:04d}: {ops}")
            break
        where = f"{pc:04d}: {op.name}"
        if op is Opcode.ALLOC:
            slot, nbytes = ops
            if not 0 <= slot < nslots or p.slots[slot].role != "temp":
                errors.append(f"{where}: slot {slot} is not a temporary")
            elif slot in live:
                errors.append(f"{where}: slot {slot} is already allocated")
            elif nbytes < 0 or nbytes < p.slots[slot].nbytes:
                errors.append(f"{where}: {nbytes} bytes is less than slot {slot} needs")
            else:
                live[slot] = nbytes
        elif op is Opcode.FREE:
            (slot,) = ops
            if slot not in live:
                errors.append(f"{where}: slot {slot} is not allocated")
            else:
                del live[slot]
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
                bound[args_at] = slots
        elif op is Opcode.CHECK:
            (slot,) = ops
            if not 0 <= slot < nslots or p.slots[slot].role != "status":
                errors.append(f"{where}: slot {slot} is not a status slot")
        elif op is Opcode.LAUNCH:
            kernel, n, args_at = ops
            if not 0 <= kernel < len(p.kernels):
                errors.append(f"{where}: kernel {kernel} out of range")
            elif n < 0:
                errors.append(f"{where}: negative launch size {n}")
            elif args_at not in bound:
                errors.append(f"{where}: no arguments bound at {args_at}")
            else:
                errors += _check_arguments(p, where, p.kernels[kernel], bound[args_at], live)
        pc += width(op)
    for slot in live:
        errors.append(f"end: temporary slot {slot} is never freed")
    for slot, _, _ in p.outputs:
        if not 0 <= slot < nslots or p.slots[slot].role != "output":
            errors.append(f"outputs: slot {slot} is not an output slot")
    if errors:
        raise VerifyError("invalid program:\n  " + "\n  ".join(errors)
                          + "\n\n" + p.disassemble())


def _check_arguments(p: Program, where: str, k: KernelInfo, slots: list, live: dict) -> list:
    errors = []
    if len(slots) != len(k.arg_kinds):
        return [f"{where}: kernel {k.name} takes {len(k.arg_kinds)} arguments, "
                f"{len(slots)} are bound"]
    for i, (s, kind) in enumerate(zip(slots, k.arg_kinds)):
        if not 0 <= s < len(p.slots):
            continue
        info = p.slots[s]
        if (kind == "scalar") != (info.role == "param") or (kind == "status") != (info.role == "status"):
            errors.append(f"{where}: argument {i} of {k.name} wants a {kind}, slot {s} is {info.role}")
            continue
        if kind in ("scalar", "status"):
            continue
        if np.dtype(info.dtype) != np.dtype(k.arg_dtypes[i]):
            errors.append(f"{where}: argument {i} of {k.name} is {np.dtype(k.arg_dtypes[i])}, "
                          f"slot {s} holds {np.dtype(info.dtype)}")
        lo, hi = k.arg_ranges[i]
        if hi >= lo:
            top = info.hi if info.role != "temp" else info.nbytes // np.dtype(info.dtype).itemsize - 1
            if lo < info.lo or hi > top:
                errors.append(f"{where}: argument {i} of {k.name} touches elements [{lo}, {hi}] "
                              f"outside slot {s}'s [{info.lo}, {top}]")
        if k.arg_writes[i] and info.role in ("const", "param"):
            errors.append(f"{where}: argument {i} of {k.name} writes read-only slot {s}")
        if k.arg_writes[i] and info.role == "input" and s not in p.mutated_leaves:
            errors.append(f"{where}: argument {i} of {k.name} writes input slot {s}, "
                          f"which the program does not declare as updated in place")
    return errors
