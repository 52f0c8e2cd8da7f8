"""Kernel description -> LLVM IR text: the names the backends import.

llvm_base.py holds the target-neutral code generator (every op's semantics, addressing,
reductions, the loop body) behind a small set of target hooks; llvm_cpu.py is the CPU target
(entry ABI, libm/libmvec math, the [start, end) loop driver, tiled reductions); llvm_text.py
writes the IR text.
"""
from .llvm_base import MATH_FUNCTIONS, PLACEHOLDER_NAME, LLVMEmitter
from .llvm_cpu import (MATH_ALIAS_PREFIX, STREAM_MARK, CPUEmitter, MathTarget, generate,
                       mark_nontemporal)

__all__ = ["MATH_FUNCTIONS", "PLACEHOLDER_NAME", "LLVMEmitter", "MATH_ALIAS_PREFIX", "CPUEmitter",
           "MathTarget", "generate", "mark_nontemporal", "STREAM_MARK"]
