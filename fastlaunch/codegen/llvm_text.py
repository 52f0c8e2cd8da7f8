"""A small writer of LLVM IR text: fresh names, basic blocks, and loops with carried values."""
from __future__ import annotations


class FunctionWriter:
    def __init__(self):
        self.lines: list = []
        self._count = 0
        self.block = "entry"

    def fresh(self, hint: str = "t") -> str:
        self._count += 1
        return f"%{hint}{self._count}"

    def label(self, hint: str) -> str:
        self._count += 1
        return f"{hint}{self._count}"

    def emit(self, text: str):
        self.lines.append("  " + text)

    def op(self, text: str, hint: str = "t") -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {text}")
        return name

    def start(self, label: str):
        self.lines.append(f"{label}:")
        self.block = label

    def br(self, label: str):
        self.emit(f"br label %{label}")

    def cond_br(self, cond: str, then: str, otherwise: str):
        self.emit(f"br i1 {cond}, label %{then}, label %{otherwise}")

    def placeholder(self) -> int:
        self.lines.append(None)
        return len(self.lines) - 1

    def fill(self, at: int, text: str):
        self.lines[at] = "  " + text

    # ---- loops -------------------------------------------------------------------------
    def counted_loop(self, lo: str, hi: str, carried, body, step: str = "1"):
        """for i in [lo, hi) by step: vals = body(i, vals).  carried: [(llvm type, initial
        value)].  step: a positive i64 (a constant, or a value such as a grid-stride loop's
        thread count).

        Returns the final carried values (the initial ones when the range is empty).
        """
        pre = self.block
        head, done = self.label("loop"), self.label("done")
        self.cond_br(self.op(f"icmp slt i64 {lo}, {hi}"), head, done)
        self.start(head)
        i = self.fresh("i")
        slot_i = self.placeholder()
        phis = [(self.fresh("c"), self.placeholder()) for _ in carried]
        new_vals = body(i, [p for p, _ in phis])
        latch = self.block
        nxt = self.op(f"add nuw nsw i64 {i}, {step}")
        self.cond_br(self.op(f"icmp slt i64 {nxt}, {hi}"), head, done)
        self.fill(slot_i, f"{i} = phi i64 [ {lo}, %{pre} ], [ {nxt}, %{latch} ]")
        for (ty, init), (name, at), new in zip(carried, phis, new_vals):
            self.fill(at, f"{name} = phi {ty} [ {init}, %{pre} ], [ {new}, %{latch} ]")
        self.start(done)
        return [self.op(f"phi {ty} [ {init}, %{pre} ], [ {new}, %{latch} ]", "r")
                for (ty, init), new in zip(carried, new_vals)]

    def nested_loops(self, sizes, carried, body, outer=()):
        """Full loops over every dim of `sizes`; body(indices, vals) -> vals."""
        if not sizes:
            return body(list(outer), carried_values(carried))
        return self.counted_loop(
            "0", str(sizes[0]), carried,
            lambda i, vals: self.nested_loops(sizes[1:], list(zip(types(carried), vals)), body,
                                              tuple(outer) + (i,)))

    def flat_range(self, sizes, lo: str, hi: str, carried, body):
        """Visit the C-order flat positions [lo, hi) of an N-d space, one row at a time.

        The innermost dimension stays a plain counted loop that LLVM can vectorise; outer
        indices are recomputed once per row by division by constants.
        """
        if len(sizes) == 0:
            pre = self.block
            then, done = self.label("one"), self.label("done")
            self.cond_br(self.op(f"icmp slt i64 {lo}, {hi}"), then, done)
            self.start(then)
            new = body([], carried_values(carried))
            last = self.block
            self.br(done)
            self.start(done)
            return [self.op(f"phi {ty} [ {init}, %{pre} ], [ {v}, %{last} ]", "r")
                    for (ty, init), v in zip(carried, new)]
        if len(sizes) == 1:
            return self.counted_loop(lo, hi, carried, lambda i, vals: body([i], vals))
        inner = sizes[-1]
        pre = self.block
        head, done = self.label("row"), self.label("rowsdone")
        self.cond_br(self.op(f"icmp slt i64 {lo}, {hi}"), head, done)
        self.start(head)
        cur = self.fresh("pos")
        slot_cur = self.placeholder()
        phis = [(self.fresh("c"), self.placeholder()) for _ in carried]
        row = self.op(f"udiv i64 {cur}, {inner}")
        j0 = self.op(f"urem i64 {cur}, {inner}")
        left = self.op(f"sub i64 {hi}, {cur}")
        jend = self.op(f"add i64 {j0}, {left}")
        jend = self.op(f"call i64 @llvm.umin.i64(i64 {jend}, i64 {inner})")
        outer = []
        rest = row
        for size in reversed(sizes[1:-1]):
            outer.append(self.op(f"urem i64 {rest}, {size}"))
            rest = self.op(f"udiv i64 {rest}, {size}")
        # the outermost index is the rest as it is (positions stay below the space's size):
        # no code reads the outermost extent, so one kernel serves every size of it
        # (program/symbolic.py)
        outer.append(rest)
        outer.reverse()
        vals = self.counted_loop(j0, jend, list(zip(types(carried), [p for p, _ in phis])),
                                 lambda j, v: body(outer + [j], v))
        latch = self.block
        step = self.op(f"sub i64 {jend}, {j0}")
        nxt = self.op(f"add i64 {cur}, {step}")
        self.cond_br(self.op(f"icmp slt i64 {nxt}, {hi}"), head, done)
        self.fill(slot_cur, f"{cur} = phi i64 [ {lo}, %{pre} ], [ {nxt}, %{latch} ]")
        for (ty, init), (name, at), new in zip(carried, phis, vals):
            self.fill(at, f"{name} = phi {ty} [ {init}, %{pre} ], [ {new}, %{latch} ]")
        self.start(done)
        return [self.op(f"phi {ty} [ {init}, %{pre} ], [ {new}, %{latch} ]", "r")
                for (ty, init), new in zip(carried, vals)]

    def text(self) -> str:
        return "\n".join(self.lines)


def types(carried):
    return [ty for ty, _ in carried]


def carried_values(carried):
    return [v for _, v in carried]
