"""What one flattened call argument is, as tracing, recording and verification see it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._launch import Space


@dataclass(frozen=True)
class LeafSpec:
    """kind "array": dtype, shape and element strides (and the memory space it lives in);
    kind "scalar": dtype and, for a Python bool/int/float, its type (a NEP 50 weak scalar)."""
    kind: str
    dtype: np.dtype
    shape: tuple = ()
    strides: tuple = ()
    weak: type | None = None
    space: int = int(Space.SPACE_HOST)

    @staticmethod
    def array(dtype, shape, strides=None, space=int(Space.SPACE_HOST)) -> "LeafSpec":
        shape = tuple(int(s) for s in shape)
        if strides is None:
            strides = contiguous_strides(shape)
        return LeafSpec("array", np.dtype(dtype), shape, tuple(int(s) for s in strides),
                        None, int(space))

    @staticmethod
    def scalar(dtype, weak=None) -> "LeafSpec":
        return LeafSpec("scalar", np.dtype(dtype), (), (), weak)

    @property
    def is_array(self) -> bool:
        return self.kind == "array"

    def text(self) -> str:
        if self.is_array:
            where = "" if self.space == Space.SPACE_HOST else " (device)"
            return f"{self.dtype}{list(self.shape)}{where}"
        return self.weak.__name__ if self.weak is not None else str(self.dtype)


def contiguous_strides(shape) -> tuple:
    """Element strides of a C-ordered array of this shape."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def element_range(shape, strides) -> tuple[int, int]:
    """Smallest and largest element offset an array with these element strides addresses."""
    if any(s == 0 for s in shape):
        return 0, -1
    lo = sum(min(0, (n - 1) * st) for n, st in zip(shape, strides))
    hi = sum(max(0, (n - 1) * st) for n, st in zip(shape, strides))
    return lo, hi
