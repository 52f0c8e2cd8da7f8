"""Buffer.role, KernelArg.kind and the kinds of traced results are string enums (issue 26):
members of BufferRole / ArgKind / ResultSource wherever a plan or a trace is made, equal to and
printed as their old string values, so comparisons, descriptions and saved JSON are unchanged."""
import json

import numpy as np

from fastlaunch.program import bytecode
from fastlaunch.ir import fuse
from fastlaunch.ir.kernel import ArgKind, KernelArg
from fastlaunch.frontend.trace import ResultSource

from _stages import fused


def step(x, idx, s):
    x[0] += 1.0                                   # an argument updated in place
    return x[idx] * s + np.exp(x).sum(), x, 3     # a gather (status), a reduction, an input, a value


def test_plans_and_traces_hold_the_enums():
    traced, _, plan = fused(step, np.linspace(0, 1, 50), np.array([1, 4, -2]), 2.0)
    roles = {b.role for b in plan.buffers}
    assert all(type(r) is fuse.BufferRole for r in roles)
    assert {"input", "param", "output", "temp", "status"} <= roles
    kinds = {a.kind for k in plan.kernels for a in k.args}
    assert all(type(k) is ArgKind for k in kinds) and kinds == {"buffer", "scalar", "status"}
    sources = [o[0] for o in traced.outputs]
    assert all(type(s) is ResultSource for s in sources)
    assert sources == [ResultSource.NEW, ResultSource.INPUT, ResultSource.VALUE]


def test_they_compare_and_print_as_their_values():
    arg = KernelArg("buffer", np.dtype(np.float64), 0)
    assert arg.kind is ArgKind.BUFFER and arg.kind == "buffer" and f"{arg.kind}" == "buffer"
    assert json.dumps({"kind": arg.kind}) == '{"kind": "buffer"}'
    assert bytecode.ArgKind is ArgKind                   # one definition, re-exported
    buf = fuse.Buffer(0, "temp", np.dtype(np.int8), 4)
    assert buf.role is fuse.BufferRole.TEMP and str(buf.role) == "temp"
    assert {"new": 1}[ResultSource.NEW] == 1
