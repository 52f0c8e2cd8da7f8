"""fl.iterate: a whole loop over a compiled step replayed inside the interpreter.

The reference is always the Python loop calling the same compiled function (bit for bit) and
the same loop in plain NumPy (float tolerance)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.program import bytecode
from fastlaunch._launch import Opcode

POSIX = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals (Linux)")


def step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss


def inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    p, m, t = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype(np.float32)
    return p, m, v, t


def python_loop(f, iters, p, m, v, t, lr=1e-2, every=1, until=None):
    """What fl.iterate promises to equal: the loop calling f, rows kept every `every`-th
    iteration and at the last one (or the stopping one)."""
    rows = []
    for i in range(iters):
        p, m, v, loss = f(p, m, v, t, lr)
        stop = until is not None and until(loss)
        if every and ((i + 1) % every == 0 or i == iters - 1 or stop):
            rows.append(loss)
        if stop:
            break
    return p, m, v, np.array(rows, np.float32)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("n,iters", [(16, 1), (16, 2), (16, 3), (16, 4), (16, 37), (16, 38),
                                     (1000, 11), (1000, 10), (1_000_003, 3)])
def test_equals_the_python_loop_bit_for_bit_and_numpy_closely(n, iters):
    p, m, v, t = inputs(n)
    f = fl.compile(step)
    got = fl.iterate(f, iters, p, m, v, t, 1e-2, carry=("p", "m", "v"))
    want = python_loop(f, iters, p, m, v, t)
    for g, w in zip(got, want):
        assert same(g, w)
    # the same loop in plain NumPy
    ref = python_loop(step, iters, p, m, v, t)
    for g, w in zip(got, ref):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
    # the arguments are untouched, and the plain Python loop still works as before
    assert same(fl.compile(step)(p, m, v, t, 1e-2)[0], f(p, m, v, t, 1e-2)[0])
    assert same(inputs(n)[0], p)


def test_plain_function_positions_and_a_single_carried_result():
    def decay(x, k):
        return x * k + 1.0

    x = np.linspace(0, 1, 50)
    got = fl.iterate(decay, 9, x, 0.5, carry=0)
    want = x
    for _ in range(9):
        want = want * 0.5 + 1.0
    assert same(got, want)


@pytest.mark.parametrize("every,iters", [(2, 5), (3, 6), (4, 3), (1, 7)])
def test_collect_every_k(every, iters):
    p, m, v, t = inputs(16)
    f = fl.compile(step)
    got = fl.iterate(f, iters, p, m, v, t, 1e-2, carry=("p", "m", "v"), collect=every)
    want = python_loop(f, iters, p, m, v, t, every=every)
    assert got[3].shape == (-(-iters // every),)
    for g, w in zip(got, want):
        assert same(g, w)


def test_collect_false_returns_only_the_carry():
    p, m, v, t = inputs(16)
    f = fl.compile(step)
    got = fl.iterate(f, 8, p, m, v, t, 1e-2, carry=("p", "m", "v"), collect=False)
    want = python_loop(f, 8, p, m, v, t)
    assert isinstance(got, tuple) and len(got) == 3
    for g, w in zip(got, want[:3]):
        assert same(g, w)


@pytest.mark.parametrize("every", [1, 3, False])
def test_until_stops_where_the_python_loop_stops(every):
    p, m, v, t = inputs(16)
    f = fl.compile(step)
    losses = python_loop(f, 200, p, m, v, t)[3]
    threshold = float(losses[40])          # met first at some iteration > 0
    first = int(np.argmax(losses < threshold))
    assert 0 < first < 199

    def until(loss):
        return loss < threshold

    got = fl.iterate(f, 200, p, m, v, t, 1e-2, carry=("p", "m", "v"), collect=every,
                     until=until)
    want = python_loop(f, 200, p, m, v, t, every=every or 0, until=until)
    for g, w in zip(got, want if every else want[:3]):
        assert same(g, w)
    if every == 1:
        assert len(got[3]) == first + 1
    # never met: all iterations run
    got = fl.iterate(f, 30, p, m, v, t, 1e-2, carry=("p", "m", "v"),
                     until=lambda loss: loss < -1.0)
    assert len(got[3]) == 30 and same(got[0], python_loop(f, 30, p, m, v, t)[0])


def _stops(losses, n):
    """Iterations (0-based) that a threshold test `loss <= losses[k]` meets first: strict
    running minima; the first one, one at each parity of the 1-based count after it, and the
    last one where it is one."""
    minima = [k for k in range(n) if all(losses[k] < losses[:k])]
    picked = {0}
    for parity in (0, 1):
        picked |= set([k for k in minima if k >= 1 and k % 2 == parity][:1])
    if n - 1 in minima:
        picked.add(n - 1)
    assert len(picked) >= 3, minima
    return sorted(picked)


@pytest.mark.parametrize("iters", [29, 30])
@pytest.mark.parametrize("every", [1, 3, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_until_at_either_parity_stops_where_the_python_loop_stops(iters, every, inplace):
    """Unrolled by two, the loop leaves at four places (after the first iteration, after an
    even or an odd one, at the count): each gives the Python loop's results bit for bit."""
    p, m, v, t = inputs(16, seed=3)
    f = fl.compile(step)
    losses = python_loop(f, iters, p, m, v, t)[3]
    for k in _stops(losses, iters):
        threshold = float(losses[k])

        def until(loss):
            return loss <= threshold

        want = python_loop(f, iters, p, m, v, t, every=every or 0, until=until)
        args = [p.copy(), m.copy(), v.copy()]
        got = fl.iterate(f, iters, *args, t, 1e-2, carry=("p", "m", "v"), collect=every,
                         until=until, inplace=inplace)
        if not every:
            got = tuple(got) + (None,)
        for g, w in zip(got[:3], want[:3]):
            assert same(g, w), k
        if every:
            assert same(got[3], want[3]), k
        if every == 1:
            assert len(got[3]) == k + 1
        if inplace:
            assert all(g is a for g, a in zip(got[:3], args))
        else:
            assert same(args[0], p)


def test_until_on_an_array_result():
    def walk(x, step):
        return x + step, x * 2

    x = np.zeros(4)
    got_x, got_twice = fl.iterate(walk, 100, x, 0.25, carry="x",
                                  until=lambda twice: np.all(twice >= 3.0))
    # the Python loop: x after k steps is k / 4; twice (of the x before the step) >= 3 when
    # x >= 1.5, i.e. in iteration 7 (x = 1.5 going in)
    assert same(got_x, np.full(4, 1.75)) and got_twice.shape == (7, 4)
    assert same(got_twice[-1], np.full(4, 3.0))


@pytest.mark.parametrize("iters", [13, 14])
def test_inplace_updates_the_callers_arrays(iters):
    p, m, v, t = inputs(16)
    f = fl.compile(step)
    want = python_loop(f, iters, p, m, v, t)
    pp, mm, vv = p.copy(), m.copy(), v.copy()
    got = fl.iterate(f, iters, pp, mm, vv, t, 1e-2, carry=("p", "m", "v"), inplace=True)
    assert got[0] is pp and got[1] is mm and got[2] is vv
    for g, w in zip((pp, mm, vv, got[3]), want):
        assert same(g, w)
    # a non-contiguous carried array: the loop runs on a copy written back at the end
    base = np.zeros(32, np.float32)
    base[::2] = p
    q = base[::2]
    got = fl.iterate(f, iters, q, m.copy(), v.copy(), t, 1e-2, carry=("p", "m", "v"),
                     inplace=True)
    assert got[0] is q and same(q, want[0]) and (base[1::2] == 0).all()


@pytest.mark.parametrize("options", [
    dict(), dict(collect=3), dict(collect=False), dict(until=lambda loss: loss < 0.9),
    dict(inplace=True), dict(collect=2, until=lambda loss: loss < 0.9)])
def test_a_repeated_call_takes_the_dispatchers_path_and_gives_the_same(options):
    """The second call of the same loop with arguments of the same signature runs the loop
    program from the dispatcher's table (Iterated._miss is not entered), its results put
    together as the first call's were; other signatures and prepared arguments still take
    the slow path."""
    f = fl.compile(step)
    p, m, v, t = inputs(16)
    until = options.get("until")
    every = options.get("collect", True)
    want = python_loop(f, 7, p, m, v, t, every=0 if every is False else int(every),
                       until=until)
    loop = fl.iterated(f, 7, carry=("p", "m", "v"), **options)
    misses = []
    slow = type(loop)._miss

    def counting(self, args, kwargs):
        misses.append(len(args))
        return slow(self, args, kwargs)

    for call in range(3):
        args = [p.copy(), m.copy(), v.copy(), t, 1e-2]
        type(loop)._miss = counting
        try:
            got = loop(*args)
        finally:
            type(loop)._miss = slow
        if every is False:
            assert len(got) == 3
        for g, w in zip(got, want):
            assert same(g, w), call
        if options.get("inplace"):
            assert all(g is a for g, a in zip(got, args[:3]))
    assert misses == [5], misses                     # the first call only
    # through fl.iterate: the same object, found by the options as given
    assert fl.iterated(f, 7, carry=("p", "m", "v"), **options) is loop
    got = fl.iterate(f, 7, p.copy(), m.copy(), v.copy(), t, 1e-2, carry=("p", "m", "v"),
                     **options)
    assert all(same(g, w) for g, w in zip(got, want))


def test_repeated_calls_keep_checking_their_options_and_arguments():
    f = fl.compile(lambda x: (x + 1, x.sum()))
    x = np.ones(3)
    fl.iterate(f, 2, x, carry="x", collect=False)
    fl.iterate(f, 2, x, carry=["x"], collect=False)            # unhashable options: no cache
    with pytest.raises(ValueError, match="collect must be"):
        fl.iterate(f, 2, x, carry="x", collect=0)             # 0 == False, yet refused
    with pytest.raises(TypeError, match="must be an int"):
        fl.iterate(f, 2.0, x, carry="x", collect=False)
    g = fl.compile(lambda a, b: (a + 1, b + 1))
    a, b = np.ones(4), np.ones(4)
    fl.iterate(g, 2, a, b, carry=("a", "b"), inplace=True)
    fl.iterate(g, 2, a, b, carry=("a", "b"), inplace=True)
    np.testing.assert_array_equal(a, 5.0)
    with pytest.raises(ValueError, match="two carried arguments share memory"):
        fl.iterate(g, 2, a, a, carry=("a", "b"), inplace=True)
    with pytest.raises(TypeError, match="positionally"):
        fl.iterated(g, 2, carry="a")(a, b=b)


def test_zero_iterations():
    p, m, v, t = inputs(16)
    got = fl.iterate(step, 0, p, m, v, t, 1e-2, carry=("p", "m", "v"))
    assert got[0] is p and got[3].shape == (0,) and got[3].dtype == np.float32


def test_a_stacked_result_no_array_can_hold_is_a_value_error_naming_the_count():
    """Before: a bytecode VerifyError with the program's dump (issue 25)."""
    step = fl.compile(lambda x: (x + 1, x.sum(), x[:2]))
    x = np.zeros(3)
    for n, collect, rows in [(2**62, True, 2**62), (2**62, 3, -(-2**62 // 3)),
                             (2**60, True, 2**60)]:
        with pytest.raises(ValueError, match=rf"n={n} iterations .* a \({rows},\) float64 "
                                             rf"result, .* larger than the most"):
            fl.iterate(step, n, x, carry=0, collect=collect)
    # nothing collected: the same count is a valid loop (not run here: it would take ages)
    assert fl.iterated(step, 2**62, carry=0, collect=False).n == 2**62


def test_stacked_results_out_of_memory_name_the_count():
    code = """
        import resource
        import numpy as np
        import fastlaunch as fl
        step = fl.compile(lambda x: (x + 1, x.sum()))
        step(np.zeros(3))                       # compiled before the limit
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
        try:
            fl.iterate(step, 2**33, np.zeros(3), carry=0)    # 64 GiB of sums
        except MemoryError as err:
            print(err)
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"n={2**33} iterations collect a row of each result per iteration" in done.stdout


def test_carried_results_must_match_the_arguments():
    def bad_dtype(x):
        return x.astype(np.float32), x.sum()

    def bad_shape(x):
        return x[:3], x.sum()

    x = np.ones(5)
    with pytest.raises(TypeError, match=r"result 0 of bad_dtype .*float64\[5\].*float32\[5\]"):
        fl.iterate(bad_dtype, 3, x, carry="x")
    with pytest.raises(TypeError, match=r"result 0 of bad_shape .*float64\[5\].*float64\[3\]"):
        fl.iterate(bad_shape, 3, x, carry="x")
    with pytest.raises(TypeError, match="carry names 'y'"):
        fl.iterate(bad_shape, 3, x, carry="y")
    with pytest.raises(TypeError, match="carried argument 'x' must be a NumPy array or a "
                                        "scalar, got list"):
        fl.iterate(lambda x: x + 1, 3, [1.0, 2.0], carry="x")
    with pytest.raises(ValueError, match="n must be from 0"):
        fl.iterate(bad_shape, -1, x, carry="x")
    with pytest.raises(TypeError, match="n .* must be an int"):
        fl.iterate(bad_shape, 2.0, x, carry="x")
    with pytest.raises(ValueError, match="collect must be"):
        fl.iterate(bad_shape, 2, x, carry="x", collect=0)
    with pytest.raises(TypeError, match="until must return one boolean"):
        fl.iterate(lambda x: (x + 1, x.sum()), 3, x, carry="x", until=lambda s: s + 1)


def test_scalar_state_is_carried_as_a_0d_array():
    """A Python float or a NumPy scalar as carried state is taken as a 0-d array of NumPy's
    dtype for it (as fl.compile takes scalars), and comes back as a NumPy scalar: what the
    Python loop over the compiled step gives, bit for bit."""
    def relax(p, target):
        return p - 0.25 * (p - target), (p - target) ** 2

    step = fl.compile(relax)
    for p0 in (1.0, np.float64(1.0), np.float32(1.0), np.int64(3)):
        if isinstance(p0, np.int64):
            halve = fl.compile(lambda p: (p // 2, p % 2))
            got = fl.iterate(halve, 2, p0, carry="p")
            assert got[0] == 0 and type(got[0]) is np.int64
            np.testing.assert_array_equal(got[1], [1, 1])
            continue
        p, want = p0, []
        for _ in range(5):
            p, err = step(p, 0.5)
            want.append(err)
        got_p, got_err = fl.iterate(step, 5, p0, 0.5, carry="p")
        assert type(got_p) is type(p) and got_p == p, (p0, got_p, p)
        np.testing.assert_array_equal(got_err, np.array(want))
        assert got_err.dtype == np.asarray(want[0]).dtype
        # collect=False with one carried value: that value alone; n=0: the argument itself
        assert fl.iterate(step, 5, p0, 0.5, carry="p", collect=False) == p
        assert fl.iterate(step, 0, p0, 0.5, carry="p", collect=False) is p0
    with pytest.raises(ValueError, match=r"inplace=True\): carried argument 'p' is a float, "
                                         r"which cannot be written in place"):
        fl.iterate(step, 2, 1.0, 0.5, carry="p", inplace=True)


def test_random_steps_are_refused():
    def noisy(x):
        return x + np.random.standard_normal(x.shape)

    with pytest.raises(NotImplementedError, match="random numbers"):
        fl.iterate(noisy, 3, np.zeros(4), carry="x")


def test_dis_shows_the_loop_and_the_program_verifies():
    p, m, v, t = inputs(16)
    it = fl.iterated(step, 25, carry=("p", "m", "v"), until=lambda loss: loss < 1e-9)
    text = it.lower(p, m, v, t, 1e-2).bytecode
    assert "; ---- loop" in text and "again while" in text
    for op in ("LOOP", "NEXT", "JUMP", "ROW", "BREAK_IF", "SET", "BIND", "LAUNCH"):
        assert f": {op} " in text, op
    prog = it.lower(p, m, v, t, 1e-2).program
    (head, end, ctr, count), = prog.loops()
    assert count == 25 and head < end
    code = list(prog.instructions())
    body = [(pc, op, ops) for pc, op, ops in code if head <= pc <= end]
    ops_in_body = [op for _, op, _ in body]
    # no ALLOC or FREE inside the body: the pool is not touched
    assert Opcode.ALLOC not in ops_in_body and Opcode.FREE not in ops_in_body
    # unrolled by two: iteration 1 before the head, then two iterations per round, each
    # ended by NEXT (to the exit when the count is reached) or LOOP
    assert ops_in_body.count(Opcode.LAUNCH) == 2 * len(prog.kernels)
    nexts = [(pc, ops) for pc, op, ops in code if op is Opcode.NEXT]
    assert len(nexts) == 2 and nexts[0][0] < head < nexts[1][0] < end
    assert all(ops[0] == ctr and ops[1] == 25 and ops[2] > end for _, ops in nexts)
    assert [op for _, op, _ in code if op is Opcode.BREAK_IF].__len__() == 3
    # carried arrays stay in their two buffers: no pointer moves between iterations, and the
    # body binds again only the words ROW moves (a result's row, the until flag)
    assert not {Opcode.ROTATE, Opcode.MOVE} & {op for _, op, _ in code}
    for pc, op, ops in body:
        if op is Opcode.BIND:
            listed = prog.arg_lists[ops[1]:ops[1] + ops[2]]
            assert all(prog.slots[s].role == "alias" for s in listed), prog.line_at(pc)
    assert sum(ops[2] for _, op, ops in body if op is Opcode.BIND) <= 2 * 3
    bytecode.verify(prog, KSPACE())


def KSPACE():
    """The kernels' space of the backend the suite runs on (pytest --backend)."""
    return int(fl.compile(step).backend.memory.kernel_space)


# ---- the verifier rejects malformed loops ------------------------------------------------
def _loop_program(iters=10, **kw):
    p, m, v, t = inputs(16)
    prog = fl.iterated(step, iters, carry=("p", "m", "v"), **kw).lower(p, m, v, t, 1e-2).program
    bytecode.verify(prog, KSPACE())          # as recorded, it passes
    return prog


def _with(prog, edit):
    q = bytecode.Program.from_bytes(prog.to_bytes())
    code = q.code.copy()
    edit(q, code)
    q.code = code
    return q


def _find(prog, opcode):
    return [(pc, ops) for pc, op, ops in prog.instructions() if op is opcode]


def _rejects(prog, pattern):
    with pytest.raises(bytecode.VerifyError, match=pattern):
        bytecode.verify(prog, KSPACE())


def test_verifier_rejects_a_loop_count_past_the_stacked_rows():
    prog = _loop_program()
    (pc, (ctr, count, target)), = _find(prog, Opcode.LOOP)
    _rejects(_with(prog, lambda q, c: c.__setitem__(pc + 2, count + 1)),
             r"ROW: slot \d+ addresses elements \[.*\] of slot \d+'s \[0, 9\]")
    # the NEXT inside the body counting past the rows lets the next iteration's ROW past them
    # (the one before the loop cannot: the LOOP's count bounds the counter at the head)
    (npc, (_, count, _)), = [x for x in _find(prog, Opcode.NEXT) if x[0] > target]
    _rejects(_with(prog, lambda q, c: c.__setitem__(npc + 2, count + 1)),
             r"ROW: slot \d+ addresses elements \[.*\] of slot \d+'s \[0, 9\]")


def test_verifier_rejects_a_row_stride_past_its_output():
    prog = _loop_program()
    rows = _find(prog, Opcode.ROW)
    assert len(rows) == 3                   # one per copy of the body
    # (the first iteration's ROW, at counter 0, is safe with any stride)
    for pc, ops in rows[1:]:
        _rejects(_with(prog, lambda q, c: c.__setitem__(pc + 5, ops[4] * 2)),
                 "addresses elements")


def test_verifier_rejects_bad_jump_targets():
    prog = _loop_program()
    (pc, (ctr, count, target)), = _find(prog, Opcode.LOOP)
    _rejects(_with(prog, lambda q, c: c.__setitem__(pc + 3, target + 1)),
             "is not the start of an instruction")
    _rejects(_with(prog, lambda q, c: c.__setitem__(pc + 3, len(q.code))),
             "jumps forward")
    _rejects(_with(prog, lambda q, c: c.__setitem__(pc + 3, -4)),
             "is not the start of an instruction")
    # (an odd count: the final values are in the output buffers after the LOOP, and JUMP
    # passes over the copies out of the other buffers)
    uprog = _loop_program(11, until=lambda loss: loss < 0)
    (lpc, (_, _, head)), = _find(uprog, Opcode.LOOP)
    breaks = _find(uprog, Opcode.BREAK_IF)
    assert len(breaks) == 3
    for bpc, _ in breaks[1:]:
        _rejects(_with(uprog, lambda q, c: c.__setitem__(bpc + 2, head)), "only LOOP jumps back")
    nexts = _find(uprog, Opcode.NEXT)
    (npc, _), = [x for x in nexts if x[0] > head]
    _rejects(_with(uprog, lambda q, c: c.__setitem__(npc + 3, head)), "only LOOP jumps back")
    (jpc, (target,)), = _find(uprog, Opcode.JUMP)
    _rejects(_with(uprog, lambda q, c: c.__setitem__(jpc + 1, head)), "only LOOP jumps back")
    _rejects(_with(uprog, lambda q, c: c.__setitem__(jpc + 1, target + 1)),
             "is not the start of an instruction")
    # from before the loop into the middle of its body (the second iteration of a round)
    (fpc, _), = [x for x in nexts if x[0] < head]
    _rejects(_with(uprog, lambda q, c: c.__setitem__(fpc + 3, npc + 4)),
             "jumps into the middle of the loop")


def test_verifier_rejects_a_counter_never_set_or_reset_in_the_body():
    prog = _loop_program()
    (spc, (ctr, _)), = _find(prog, Opcode.SET)
    alias = next(i for i, s in enumerate(prog.slots) if s.role == "alias")
    _rejects(_with(prog, lambda q, c: c.__setitem__(spc + 1, alias)),
             f"slot {alias} is not a counter")
    # a SET of the counter moved into the body would make the loop endless
    (lpc, (_, _, head)), = _find(prog, Opcode.LOOP)

    def reset_in_body(q, c):
        rpc, _ = next(x for x in _find(q, Opcode.ROW) if head <= x[0] < lpc)
        # overwrite the ROW (6 words) with SET ctr 0 (3 words) + a no-op MOVE of an alias
        dst = int(c[rpc + 1])
        c[rpc:rpc + 6] = [Opcode.SET, ctr, 0, Opcode.MOVE, dst, dst]
    _rejects(_with(prog, reset_in_body), "the loop might never end|is not memory|not an alias")


def test_verifier_rejects_an_alias_read_before_it_is_set():
    # the first iteration's ROW replaced by two SETs of the counter: the row alias the next
    # BIND reads was never set
    prog = _loop_program()
    (spc, (ctr, _)), = _find(prog, Opcode.SET)
    rpc, (dst, *_) = _find(prog, Opcode.ROW)[0]

    def no_row(q, c):
        c[rpc:rpc + 6] = [Opcode.SET, ctr, 0, Opcode.SET, ctr, 0]
    _rejects(_with(prog, no_row), f"slot {dst} is read before it is set")


def test_verifier_rejects_writes_through_an_alias_into_an_argument():
    # a ROW of the collected row into the (read-only) first argument: the step's kernel would
    # write the caller's array (on a device backend: an alias cannot leave the kernels' space)
    prog = _loop_program()
    for pc, _ in _find(prog, Opcode.ROW):
        _rejects(_with(prog, lambda q, c: c.__setitem__(pc + 2, 0)), "writes|cannot point into")


def test_verifier_rejects_a_carried_buffer_bound_to_an_argument():
    # the argument words bound once before the loop: a buffer the step writes replaced by the
    # caller's (read-only) array
    prog = _loop_program()
    (lpc, (_, _, head)), = _find(prog, Opcode.LOOP)
    written = {i for i, s in enumerate(prog.slots) if s.role in ("temp", "output")}
    for pc, (_args_at, list_at, count) in _find(prog, Opcode.BIND):
        if pc > head:
            continue
        for k in range(count):
            slot = int(prog.arg_lists[list_at + k])
            if slot in written and prog.slots[slot].dtype == prog.slots[0].dtype and \
                    prog.slots[slot].hi == prog.slots[0].hi:
                q = bytecode.Program.from_bytes(prog.to_bytes())
                q.arg_lists = q.arg_lists.copy()
                q.arg_lists[list_at + k] = 0
                _rejects(q, "writes input slot 0|reads slot 0 in host space|kernels run in")
                return
    raise AssertionError("no carried buffer bound before the loop")


def test_verifier_rejects_alloc_inside_a_loop():
    prog = _loop_program()
    (lpc, (_, _, head)), = _find(prog, Opcode.LOOP)
    rpc, _ = next(x for x in _find(prog, Opcode.ROW) if head <= x[0] < lpc)
    temp = next(i for i, s in enumerate(prog.slots) if s.role == "temp")

    def alloc_in_body(q, c):
        c[rpc:rpc + 6] = [Opcode.ALLOC, temp, 1 << 20, Opcode.FREE, temp, Opcode.POLL]
    _rejects(_with(prog, alloc_in_body), "inside the loop")


# ---- saving, interrupting, other backends ----------------------------------------------------
def test_saved_loop_replays_in_a_fresh_process(tmp_path):
    p, m, v, t = inputs(16)
    f = fl.compile(step)
    path = str(tmp_path / "loop.flp")
    it = fl.iterated(f, 21, carry=("p", "m", "v"), collect=4, until=lambda loss: loss < 1e-12)
    it.save(path, p, m, v, t, 1e-2)
    want = it(p, m, v, t, 1e-2)
    ref = str(tmp_path / "want.npz")
    np.savez(ref, *want)
    code = f"""
        import numpy as np, fastlaunch as fl
        rng = np.random.default_rng(0)
        g = fl.load({path!r})
        assert isinstance(g, fl.LoadedIteration), g
        z = np.load({ref!r})
        args = [z["arr_0"], z["arr_1"], z["arr_2"]]
        rng = np.random.default_rng(0)
        p, m, t = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
        v = np.abs(rng.standard_normal(16)).astype(np.float32)
        got = g(p, m, v, t, 1e-2)
        for i, x in enumerate(got):
            assert np.array_equal(x, z[f"arr_{{i}}"]), i
        print("loaded loop ok", got[3].shape)
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))] +
        [x for x in [os.environ.get("PYTHONPATH")] if x])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0 and "loaded loop ok (6,)" in done.stdout, done.stderr[-3000:]


def test_saved_loop_with_a_mismatched_count_is_refused(tmp_path):
    import json
    p, m, v, t = inputs(16)
    path = str(tmp_path / "loop.flp")
    fl.iterated(step, 5, carry=("p", "m", "v")).save(path, p, m, v, t, 1e-2)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "persist"))
    try:
        import savedfuzz
    finally:
        sys.path.pop(0)
    f = savedfuzz.unpack(open(path, "rb").read())
    f["meta"]["iterate"]["n"] = 4
    json.dumps(f["meta"])
    open(path, "wb").write(savedfuzz.pack(f))
    with pytest.raises(fl.SavedProgramError, match="iteration count"):
        fl.load(path)
    # a NEXT (the end of an iteration inside the unrolled body) counting to another number:
    # memory-safe, but the loop would stop before the rows it hands back are written
    fl.iterated(step, 5, carry=("p", "m", "v")).save(path, p, m, v, t, 1e-2)
    for which in range(2):
        f = savedfuzz.unpack(open(path, "rb").read())
        nexts, pc = [], 0
        while pc < len(f["code"]):
            op, _ = bytecode.decode(f["code"], pc)
            if op is Opcode.NEXT:
                nexts.append(pc)
            pc += bytecode.width(op)
        assert len(nexts) == 2
        f["code"] = f["code"].copy()
        f["code"][nexts[which] + 2] = 4
        bad = str(tmp_path / f"next{which}.flp")
        open(bad, "wb").write(savedfuzz.pack(f))
        with pytest.raises(fl.SavedProgramError, match="iteration count"):
            fl.load(bad)


@pytest.mark.parametrize("iters", [9, 10])
@pytest.mark.parametrize("backend", ["devsim", "null"])
def test_other_backends(backend, iters):
    p, m, v, t = inputs(16)
    f = fl.compile(step, backend=backend)
    got = fl.iterate(f, iters, p, m, v, t, 1e-2, carry=("p", "m", "v"), collect=2,
                     until=lambda loss: loss < 0.5)
    want = python_loop(f, iters, p, m, v, t, every=2, until=lambda loss: loss < 0.5)
    if backend == "null":
        # kernels do nothing: only the structure is checked
        assert [np.shape(g) for g in got][:3] == [np.shape(w) for w in want][:3]
        return
    for g, w in zip(got, want):
        assert same(g, w)
    if backend == "devsim":
        from fastlaunch import _devsim
        before = _devsim.device_stats()["live_bytes"]
        fl.iterate(f, 9, p, m, v, t, 1e-2, carry=("p", "m", "v"))
        assert _devsim.device_stats()["live_bytes"] == before


def test_kernel_error_inside_the_loop_names_the_instruction():
    table = np.arange(5.0)

    def gather(i, x):
        return i + 1, x + fl.asarray(table)[i]

    i = np.array([0, 1, 2])
    with pytest.raises(IndexError, match=r"at \d+: CHECK"):
        fl.iterate(gather, 4, i, np.zeros(3), carry="i")
    got_i, xs = fl.iterate(gather, 2, i, np.zeros(3), carry="i")
    assert same(got_i, i + 2) and same(xs, np.array([[0.0, 1, 2], [1, 2, 3]]))


@POSIX
def test_sigint_stops_a_long_loop_promptly():
    """Ctrl-C 0.3 s into a loop of many seconds: KeyboardInterrupt at an iteration boundary,
    the caller's arrays (inplace=True) as they were, no pool memory left live; then the
    same loop runs to its end."""
    code = r"""
        import os, signal, threading, time, gc
        import numpy as np, fastlaunch as fl
        from fastlaunch import _core
        # inherited as ignored from a parent that ignores it (a shell's background job)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        def step(x, y):
            return np.sqrt(x * x + 1e-3) * 0.999 + y, (x * x).sum()
        n = 200_000
        x0 = np.linspace(0, 1, n)
        y = np.full(n, 1e-3)
        x = x0.copy()
        it = fl.iterated(step, 100_000_000, carry="x", collect=False, inplace=True)
        short = fl.iterated(step, 3, carry="x", collect=False)
        short(x, y)
        assert any(op.name == "POLL" for _, op, _ in it.lower(x, y).program.instructions())
        for rep in range(2):
            gc.collect()
            live = _core.memory_stats()["live_bytes"]
            sent = []
            def fire():
                time.sleep(0.3)
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGINT)
            th = threading.Thread(target=fire)
            th.start()
            try:
                it(x, y)
            except KeyboardInterrupt:
                latency = time.monotonic() - sent[0]
            else:
                raise SystemExit("not interrupted")
            th.join()
            gc.collect()
            assert latency < 0.5, latency
            assert np.array_equal(x, x0), "the caller's array changed"
            assert _core.memory_stats()["live_bytes"] == live
            print("latency", latency)
        want = x0
        for _ in range(3):
            want = step(want, y)[0]
        assert np.array_equal(short(x, y), want)
        print("loop interrupt ok")
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "loop interrupt ok" in done.stdout, \
        (done.stdout, done.stderr[-3000:])


def test_collect_false_with_one_carried_array_returns_it():
    def halve(x, y):
        return x * 0.5 + y, x.sum()

    x, y = np.arange(4.0), np.ones(4)
    got = fl.iterate(halve, 3, x, y, carry="x", collect=False)
    want = ((x * 0.5 + y) * 0.5 + y) * 0.5 + y
    assert isinstance(got, np.ndarray) and same(got, want)
    assert fl.iterate(halve, 0, x, y, carry="x", collect=False) is x


def test_steps_that_update_arguments_in_place_and_swap_carried_arrays():
    def sgd(p, g):
        p -= 0.1 * g
        return p, (p * p).sum()

    p, g = np.linspace(0, 1, 8), np.ones(8)
    q = p.copy()
    got_p, sums = fl.iterate(sgd, 5, q, g, carry="p")
    f, want, want_sums = fl.compile(sgd), p.copy(), []
    for _ in range(5):
        want, s = f(want, g)
        want_sums.append(s)
    assert got_p is q and same(q, want) and same(sums, np.array(want_sums))
    np.testing.assert_allclose(q, p - 0.5)

    def swap(a, b):
        return b, a, a.sum()

    a, b = np.zeros(3), np.ones(3)
    got = fl.iterate(swap, 3, a, b, carry=("a", "b"))
    assert same(got[0], b) and same(got[1], a) and same(got[2], np.array([0.0, 3.0, 0.0]))


def test_the_gil_is_released_for_the_whole_loop():
    """Another Python thread runs while one long loop call does: it counts in the middle of
    the call (with the GIL held, it could not run at all until the call returned)."""
    import threading
    import time

    def grow(x, y):
        return np.sqrt(x * x + 1.0) * 0.5 + y, x.sum()

    x, y = np.linspace(0, 1, 20000), np.full(20000, 1e-3)
    fl.iterate(grow, 200, x, y, carry="x", collect=False)
    t0 = time.perf_counter()
    fl.iterate(grow, 200, x, y, carry="x", collect=False)
    per_iter = (time.perf_counter() - t0) / 200
    it = fl.iterated(grow, max(200, int(0.4 / per_iter)), carry="x", collect=False)
    it.lower(x, y)                            # built before the clock starts
    stamps, done = [], threading.Event()

    def count():
        while not done.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)

    th = threading.Thread(target=count)
    th.start()
    time.sleep(0.02)
    t0 = time.perf_counter()
    it(x, y)
    t1 = time.perf_counter()
    done.set()
    th.join()
    inside = [t for t in stamps if t0 + 0.1 * (t1 - t0) < t < t1 - 0.1 * (t1 - t0)]
    assert len(inside) >= 5, (len(inside), t1 - t0)


def test_device_arrays_as_invariant_arguments():
    p, m, v, t = inputs(16)
    f = fl.compile(step, backend="devsim")
    dt = fl.to_device(t, "devsim")
    got = fl.iterate(f, 5, p, m, v, dt, 1e-2, carry=("p", "m", "v"))
    want = python_loop(f, 5, p, m, v, t)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and same(g, w)
    with pytest.raises(TypeError, match="carried argument 'p' is a DeviceArray"):
        fl.iterate(f, 5, fl.to_device(p, "devsim"), m, v, dt, 1e-2, carry=("p", "m", "v"))


def test_long_iterations_poll_between_launches_too():
    """An iteration of more than record.POLL_WORK operations POLLs before each launch (as a
    long plain call does), not only at the loop's head; short loops do not POLL at all."""
    def step2(x, y):
        a = np.sqrt(x * x + 1e-3)
        s = a.sum()
        return a * 0.999 + y + s * 1e-12, s

    big = np.linspace(0, 1, 12_000_000, dtype=np.float32)
    prog = fl.iterated(fl.compile(step2, backend="null"), 3, carry="x").lower(big, big).program
    (head, end, _, _), = prog.loops()
    ops = [(pc, op) for pc, op, _ in prog.instructions() if head <= pc <= end]
    launches = [pc for pc, op in ops if op is Opcode.LAUNCH]
    polls = [pc for pc, op in ops if op is Opcode.POLL]
    assert len(polls) == len(launches) and polls[0] == head
    small = np.ones(16, np.float32)
    prog = fl.iterated(step2, 3, carry="x").lower(small, small).program
    assert not any(op is Opcode.POLL for _, op, _ in prog.instructions())


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
@pytest.mark.parametrize("count", [1, 2, 5])
def test_steps_with_library_calls_loop(backend, count, tmp_path):
    """Matrix products large enough for BLAS and LAPACK routines (LIBCALL) inside the loop:
    the same bits as the Python loop over the compiled step, on both parities of the
    unrolled loop, and after save/load.  Before: recording the loop raised AttributeError
    ('LibraryCall' object has no attribute 'launch_size')."""
    def train(W, X, T, S, lr):
        h = np.tanh(X @ W)
        W = W - lr * (X.T @ (h - T)) + 1e-3 * np.linalg.eigh(S)[0].sum()
        return W, ((h - T) ** 2).mean()

    rng = np.random.default_rng(3)
    W = rng.random((64, 64)) * 0.01
    X, T = rng.random((256, 64)), rng.random((256, 64))
    S = rng.random((20, 20))
    S = S + S.T
    f = fl.compile(train, backend=backend)
    it = fl.iterated(f, count, carry="W")
    program = it.lower(W, X, T, S, 0.01).bytecode
    assert program.count("LIBCALL") >= 3 * 2      # each copy of the step calls them itself
    want, losses = W, []
    for _ in range(count):
        want, loss = f(want, X, T, S, 0.01)
        losses.append(loss)
    got_w, got_losses = it(W, X, T, S, 0.01)
    assert same(got_w, want) and same(got_losses, np.array(losses))
    path = tmp_path / "loop.flp"
    it.save(path, W, X, T, S, 0.01)
    loaded = fl.load(path)
    got_w, got_losses = loaded(W, X, T, S, 0.01)
    assert same(got_w, want) and same(got_losses, np.array(losses))
