"""Hypothesis: random differentiable programs, their gradients against finite differences.

A program is Python source (printed by hypothesis on failure, ready to paste), built of smooth
ops on float64 arrays whose shapes broadcast: unary functions kept in their domains,
arithmetic, broadcasting, reductions, scans, views, concatenation, gathers with constant
indices, np.where and matrix products.  The loss is a weighted sum of the last value; its
gradient with respect to every argument is compared with central differences, on the traced
values and on new values replayed through the same program."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import fastlaunch as fl

from .fd import check_gradient

# unary ops as source templates, each defined (and smooth) on every real input
UNARY = ["np.sin({})", "np.cos({})", "np.tanh({})", "np.exp(np.tanh({}))", "np.log1p({} ** 2)",
         "np.sqrt(1.0 + {} ** 2)", "np.arctan({})", "({}) ** 2", "np.sinh(np.tanh({}))",
         "1.0 / (1.5 + np.sin({}))", "np.abs({}) + 0.0", "np.maximum({}, 0.1)",
         "np.cumsum({}, axis=-1)", "np.flip({}, axis=-1)", "({})[..., ::-1] * 0.5"]
BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} / (1.0 + {} ** 2)", "np.hypot({}, {})",
          "np.where({0} > {1}, {0}, {1} * 2.0)", "np.arctan2({}, 1.5 + np.cos({}))"]


def _broadcasts(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


@st.composite
def programs(draw):
    rows = draw(st.integers(1, 4))
    cols = draw(st.integers(1, 5))
    shapes = draw(st.lists(st.sampled_from([(rows, cols), (cols,), (rows, 1), ()]),
                           min_size=1, max_size=3))
    names = [f"x{i}" for i in range(len(shapes))]
    values = dict(zip(names, shapes))
    lines = []
    for k in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "view"]))
        name = f"v{k}"
        a = draw(st.sampled_from(sorted(values)))
        sa = values[a]
        if kind == "unary":
            tmpl = draw(st.sampled_from(UNARY))
            if "axis=-1" in tmpl or "..., ::-1" in tmpl:
                if not sa:
                    continue
            expr, shape = tmpl.format(a), sa
        elif kind == "binary":
            b = draw(st.sampled_from(sorted(v for v in values if _broadcasts(sa, values[v]))))
            tmpl = draw(st.sampled_from(BINARY))
            expr = tmpl.format(a, b)
            shape = np.broadcast_shapes(sa, values[b])
        elif kind == "reduce":
            if not sa:
                continue
            fn = draw(st.sampled_from(["np.sum", "np.mean", "np.max", "np.prod"]))
            axis = draw(st.integers(-len(sa), len(sa) - 1))
            keep = draw(st.booleans())
            expr = f"{fn}({a}, axis={axis}, keepdims={keep})"
            shape = tuple(1 if d == axis % len(sa) else s for d, s in enumerate(sa)) if keep \
                else tuple(s for d, s in enumerate(sa) if d != axis % len(sa))
        else:
            if len(sa) == 2:
                choice = draw(st.sampled_from(["T", "matmul", "slice", "gather", "concat"]))
                if choice == "T":
                    expr, shape = f"{a}.T", sa[::-1]
                elif choice == "matmul":
                    expr, shape = f"{a} @ np.ones(({sa[1]}, 3)) * 0.3", (sa[0], 3)
                elif choice == "slice":
                    expr, shape = f"{a}[:, ::2]", (sa[0], (sa[1] + 1) // 2)
                elif choice == "gather":
                    expr, shape = f"{a}[[0, {sa[0] - 1}, 0]]", (3, sa[1])
                else:
                    expr, shape = f"np.concatenate([{a}, {a} * 2.0], axis=1)", (sa[0], 2 * sa[1])
            elif len(sa) == 1:
                expr, shape = f"{a}[:, None] * np.ones(2)", (sa[0], 2)
            else:
                expr, shape = f"{a} * np.ones(3)", (3,)
        lines.append(f"    {name} = {expr}")
        values[name] = tuple(shape)
    last = [v for v in values if v.startswith("v")][-1] if lines else names[0]
    src = (f"def f({', '.join(names)}):\n" + "\n".join(lines)
           + f"\n    return np.sum({last} * np.linspace(0.5, 1.5, np.size({last})).reshape("
           + f"np.shape({last})))\n")
    return src, shapes


@settings(max_examples=int(__import__("os").environ.get("FL_GRAD_EXAMPLES", 60)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_program_gradient(program, seed):
    src, shapes = program
    note(src)
    scope = {"np": np}
    exec(src, scope)
    f = scope["f"]
    rng = np.random.default_rng(seed)
    argnums = tuple(range(len(shapes)))
    g = fl.grad(f, argnums=argnums)
    for _ in range(2):       # the traced values, then new ones through the same program
        args = [rng.standard_normal(s) if s else float(rng.standard_normal()) for s in shapes]
        grads = g(*args)
        check_gradient(f, grads, args, argnums, rng, rtol=1e-5, atol=1e-7)
