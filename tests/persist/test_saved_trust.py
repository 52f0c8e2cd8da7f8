"""What a tampered saved program can and cannot do (docs/security.md): one regression test per
rule of the verifier, the linker and the loader, each on a file edited with its checksum
recomputed (savedfuzz.pack), as an attacker would."""
import json

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.program import bytecode as bc
from fastlaunch._launch import Opcode
from fastlaunch.backends import get_backend
from fastlaunch.program.kernel_json import KernelFormatError, kernel_from_json, kernel_to_json
from fastlaunch.program.link import LinkError, link

import savedfuzz


def _save(tmp_path, fn, *args, name="p.flp", **kw):
    path = tmp_path / name
    fl.compile(fn, **kw).save(path, *args)
    return path


def _edit(path, change, name="edited.flp"):
    f = savedfuzz.unpack(path.read_bytes())
    change(f)
    out = path.parent / name
    out.write_bytes(savedfuzz.pack(f))
    return out


def _refused(path, match=None, **kw):
    with pytest.raises(fl.SavedProgramError, match=match):
        fl.load(path, **kw)


def _instructions(f):
    """(pc, opcode, operands) of the unpacked file's code."""
    out, pc, code = [], 0, f["code"]
    while pc < len(code):
        op = Opcode(int(code[pc]))
        out.append((pc, op, [int(x) for x in code[pc + 1:pc + (op & 0xFF)]]))
        pc += op & 0xFF
    return out


@pytest.fixture
def add_one(tmp_path):
    return _save(tmp_path, lambda x: x + 1.0, np.zeros(10))


# ---- the file's checksum is not a signature --------------------------------------------------
def test_a_recomputed_checksum_is_accepted_so_it_proves_nothing(add_one):
    """The premise of everything below: anyone can rewrite a file and fix its SHA-256."""
    edited = _edit(add_one, lambda f: f["meta"].update(graph="edited"))
    assert fl.load(edited).graph == "edited"


# ---- the kernels' tables come from their descriptions, not from the file ---------------------
def _grow_kernel(f, n):
    """The attack: a kernel description over n elements, the bytecode launching it n times,
    while the stored tables still claim the original small element ranges."""
    desc = f["meta"]["kernels"][0]["desc"]
    desc["space"] = [n]
    for pc, op, _ops in _instructions(f):
        if op is Opcode.LAUNCH:
            f["code"][pc + 2] = n
    f["pmeta"]["kernels"][0]["launch_size"] = n


@pytest.mark.parametrize("machine_code", [True, False])
def test_small_claimed_ranges_do_not_hide_a_big_kernel(add_one, machine_code):
    edited = _edit(add_one, lambda f: _grow_kernel(f, 1000))
    # the old loader trusted the stored arg_ranges ([0, 9]) and would have run this
    stored = savedfuzz.unpack(edited.read_bytes())["pmeta"]["kernels"][0]
    assert stored["arg_ranges"] == [[0, 9], [0, 9]] and stored["launch_size"] == 1000
    _refused(edited, "touches elements \\[0, 999\\]", machine_code=machine_code)


def test_stored_kernel_tables_are_ignored(add_one):
    """Tables edited to anything: the loader derives them again and the program runs right."""
    def lie(f):
        k = f["pmeta"]["kernels"][0]
        k.update(arg_ranges=[[0, 0], [0, 0]], launch_size=3, params=[-5], arg_writes=[True, True])
    g = fl.load(_edit(add_one, lie), machine_code=False)
    np.testing.assert_array_equal(g(np.arange(10.0)), np.arange(10.0) + 1)
    info = g._entries_list()[0].executable.program.kernels[0]
    assert info.arg_ranges == ((0, 9), (0, 9)) and info.launch_size == 10


def test_launch_size_beyond_the_kernel_is_refused(add_one):
    def bigger(f):
        for pc, op, ops in _instructions(f):
            if op is Opcode.LAUNCH:
                f["code"][pc + 2] = ops[1] + 1
    _refused(_edit(add_one, bigger), "launch size 11")


# ---- machine_code=False runs nothing from the file -----------------------------------------
def test_source_mode_never_loads_stored_machine_code(add_one, monkeypatch):
    def garbage(f):
        f["objects"] = [bytearray(b"\xcc" * len(o)) for o in f["objects"]]   # int3 traps
        for k in f["meta"]["kernels"]:
            k["text"] = "this is not LLVM IR"
    edited = _edit(add_one, garbage)
    be = get_backend("cpu")
    monkeypatch.setattr(be, "load_object",
                        lambda *a: pytest.fail("stored machine code was loaded"))
    monkeypatch.setattr(be, "compile_source", _wrap_no_text(be.compile_source))
    g = fl.load(edited, machine_code=False)
    np.testing.assert_array_equal(g(np.arange(10.0)), np.arange(10.0) + 1)


def _wrap_no_text(compile_source):
    def checked(text, *a, **kw):
        assert "this is not LLVM IR" not in text, "stored kernel source was compiled"
        return compile_source(text, *a, **kw)
    return checked


def test_other_target_compiles_descriptions_not_stored_source(add_one, monkeypatch):
    def other_target(f):
        f["meta"]["target"] += "|another-cpu"
        for k in f["meta"]["kernels"]:
            k["text"] = "this is not LLVM IR"
    edited = _edit(add_one, other_target)
    be = get_backend("cpu")
    monkeypatch.setattr(be, "compile_source", _wrap_no_text(be.compile_source))
    g = fl.load(edited)
    np.testing.assert_array_equal(g(np.arange(10.0)), np.arange(10.0) + 1)


def test_both_modes_compute_the_same(tmp_path):
    def fn(x, i, s):
        return np.cumsum(x[i] * s), x.T.reshape(-1)[:5].sum()
    x = np.random.default_rng(1).random((4, 6))
    i = np.array([0, 3, -1, 2])
    path = _save(tmp_path, fn, x, i, 2.0)
    want = fn(x, i, 2.0)
    for mode in (True, False):
        got = fl.load(path, machine_code=mode)(x, i, 2.0)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b)


# ---- kernel descriptions are decoded strictly ------------------------------------------------
def _desc(fn, *args):
    f = fl.compile(fn, backend="null")
    return kernel_to_json(f.lower(*args).plan.kernels[0])


@pytest.fixture(scope="module")
def gather_desc():
    return _desc(lambda x, i: x[i] * 2.0, np.zeros(8), np.array([1, 2]))


def _bad(desc, change, match):
    d = json.loads(json.dumps(desc))
    change(d)
    with pytest.raises(KernelFormatError, match=match):
        kernel_from_json(d)


def _node(d, kind):
    return next(n for n in d["nodes"] if n[0] == kind)


def test_description_round_trips(gather_desc):
    k = kernel_from_json(json.loads(json.dumps(gather_desc)))
    assert kernel_to_json(k) == gather_desc


def test_description_rules(gather_desc):
    d = gather_desc
    _bad(d, lambda d: _node(d, "load").__setitem__(1, 99), "argument must be")
    _bad(d, lambda d: _node(d, "load").__setitem__(2, "<f4"), "loads float32 from a int64")
    _bad(d, lambda d: d["args"][0].__setitem__(0, "scalar"), "as a buffer")
    _bad(d, lambda d: d.__setitem__("status", None), "status")
    _bad(d, lambda d: d["args"][d["status"]].__setitem__(0, "buffer"), "status")
    _bad(d, lambda d: d.__setitem__("rspace", [0]), "reduction loops without a reduction")
    _bad(d, lambda d: d.__setitem__("space", [1 << 40, 1 << 40]), "loop space too large")
    _bad(d, lambda d: d["args"][1].__setitem__(1, "|O"), "not a number dtype")
    _bad(d, lambda d: d["stores"][0].__setitem__(3, "xor"), "malformed store")
    _bad(d, lambda d: [a.__setitem__(2, False) for a in d["args"]], "not marked as written")
    _bad(d, lambda d: d.__setitem__("nodes", d["nodes"][::-1]), "must be an integer in")
    _bad(d, lambda d: d.__setitem__("format", 99), "format")


@pytest.fixture(scope="module")
def mean_desc():
    """A row mean: the sum's kernel stores sum / 16 (its epilogue; rows longer than
    ops.SMALL_REDUCE, which would be unrolled into a map)."""
    return _desc(lambda x: x.mean(axis=-1), np.ones((4, 16), np.float32))


def test_epilogue_round_trips_and_its_rules(mean_desc):
    d = mean_desc
    assert d["format"] == 2 and d["reduction"]["then"] is not None
    assert any(n[0] == "reduced" for n in d["nodes"])
    k = kernel_from_json(json.loads(json.dumps(d)))
    assert kernel_to_json(k) == d and k.reduction.then is not None
    reduced = next(i for i, n in enumerate(d["nodes"]) if n[0] == "reduced")
    load = next(i for i, n in enumerate(d["nodes"]) if n[0] == "load")
    # the epilogue reads the reduced value and constants only
    _bad(d, lambda d: d["reduction"].__setitem__("then", load), "reads only the reduced value")
    # of the output's dtype
    _bad(d, lambda d: d["reduction"].__setitem__("then", reduced) or
         d["nodes"][reduced].__setitem__(1, "<f8"), "stored into a float32 buffer")
    # never on partial results or scans
    _bad(d, lambda d: d["reduction"].__setitem__("scan", True), "a scan")
    _bad(d, lambda d: d["reduction"].__setitem__("chunk", 2), "partial results")
    # a reduced value nowhere else (here: the reduction's own value)
    _bad(d, lambda d: d["reduction"].__setitem__("value", reduced), "outside a reduction's")
    # a format-1 description has no reduced values; format 1 without them is still read
    _bad(d, lambda d: d.__setitem__("format", 1), "unknown kind 'reduced'")
    old = json.loads(json.dumps(_desc(lambda x: x.sum(axis=-1), np.ones((4, 16), np.float32))))
    old["format"] = 1
    del old["reduction"]["then"]
    assert kernel_from_json(old).reduction.then is None


def _set_first_index(d, index):
    _node(d, "load")[3] = index


def test_description_index_rules(gather_desc):
    d = gather_desc
    _bad(d, lambda d: _set_first_index(d, [0, [[["loop", 5], 1]]]), "loop dimension")
    _bad(d, lambda d: _set_first_index(d, [0, [[["loop", 0], 1 << 62], [["loop", 0], 1 << 62]]]),
         "62-bit")
    _bad(d, lambda d: _set_first_index(d, [0, [[["divmod", [-1, [[["loop", 0], 1]]], 1, 4, 8],
                                                1]]]), "negative")
    _bad(d, lambda d: _set_first_index(d, [0, [[["divmod", [0, [[["loop", 0], 1]]], 0, 4, 8],
                                                1]]]), "divisor")
    _bad(d, lambda d: _set_first_index(d, [0, [[["pick", 10 ** 6, 4], 1]]]), "pick expression")
    _bad(d, lambda d: _set_first_index(d, [0, [[["bogus", 1], 1]]]), "unknown index atom")


def test_divmod_bound_is_raised_to_what_the_loops_allow(gather_desc):
    """The code skips the modulo below a DivMod's claimed bound: a bound that lies about the
    operand is replaced, so (f // div) % mod stays below mod."""
    d = json.loads(json.dumps(gather_desc))
    d["space"] = [2]
    _set_first_index(d, [0, [[["divmod", [0, [[["loop", 0], 100]]], 1, 8, 1], 1]]])
    k = kernel_from_json(d)
    load = next(e for e in __import__("fastlaunch.ir.kernel", fromlist=["walk"]).walk(k._roots())
                if type(e).__name__ == "Load")
    atom = load.index.terms[0][0]
    assert atom.bound == 101 and atom.div * atom.mod < atom.bound


# ---- the bytecode and its tables -------------------------------------------------------------
def _step_like(tmp_path):
    def fn(x, y):
        t = np.exp(x) * y
        return t.sum(), t - 1
    return _save(tmp_path, fn, np.ones(40000), np.ones(40000))   # a split sum: temporaries


def test_shrunken_signature_is_refused(add_one):
    def shrink(f):
        words = np.frombuffer(bytes.fromhex(f["meta"]["signature"]), np.int64).copy()
        words[1] = 4                     # the array's length: 10 -> 4
        f["meta"]["signature"] = words.tobytes().hex()
    _refused(_edit(add_one, shrink), "addressing \\[0, 3\\]")


def test_leaf_count_must_match_the_signature(add_one):
    _refused(_edit(add_one, lambda f: f["pmeta"].__setitem__("nleaves", 2)))


@pytest.mark.parametrize("result", [[0, 5, False], [1, 3, False], [1, -1, False],
                                    [0, 0, 1], [7, 0, False]])
def test_result_indices_are_checked(add_one, result):
    _refused(_edit(add_one, lambda f: f["meta"].__setitem__("results", [result])))


@pytest.mark.parametrize("bound", [[0, 0, 5], [3, 0, 5], [-1, 0, 5]])
def test_int_bound_leaves_are_checked(tmp_path, bound):
    path = _save(tmp_path, lambda x, k: x * k, np.ones(3), 2)
    _refused(_edit(path, lambda f: f["meta"].__setitem__("int_bounds", [bound])))


def test_constant_and_output_slots_are_checked(tmp_path):
    table = np.arange(4.0)
    path = _save(tmp_path, lambda i: fl.asarray(table)[i], np.array([0, 3]))
    _refused(_edit(path, lambda f: f["pmeta"].__setitem__("consts", [0])))
    out = savedfuzz.unpack(path.read_bytes())["pmeta"]["outputs"][0]
    _refused(_edit(path, lambda f: f["pmeta"]["outputs"][0].__setitem__(2, [1])),
             "not the \\(1,\\) result")
    _refused(_edit(path, lambda f: f["pmeta"]["outputs"][0].__setitem__(0, out[0] - 1)))
    _refused(_edit(path, lambda f: f["consts"][0].__setitem__(1, b"\0" * 8)))


def test_status_and_mutated_leaves_are_checked(tmp_path):
    def fn(x, i):
        x += 0.5                                    # leaf 0 is updated in place
        return fl.asarray(np.arange(4.0))[i]        # a checked gather: a status slot
    path = _save(tmp_path, fn, np.ones(2), np.array([0, 3]))
    slots = savedfuzz.unpack(path.read_bytes())["pmeta"]["slots"]
    status = next(i for i, s in enumerate(slots) if s["role"] == "status")

    def two_statuses(f):
        f["pmeta"]["slots"].append(dict(f["pmeta"]["slots"][status]))
    _refused(_edit(path, two_statuses), "several status slots")
    _refused(_edit(path, lambda f: f["pmeta"].__setitem__("mutated_leaves", [5])),
             "mutated leaf 5")
    _refused(_edit(path, lambda f: f["pmeta"].__setitem__("mutated_leaves", [1])))

    def check_other(f):
        for pc, op, _ops in _instructions(f):
            if op is Opcode.CHECK:
                f["code"][pc + 1] = 0
    _refused(_edit(path, check_other), "not a status slot")


@pytest.mark.parametrize("slot", [-1, -(1 << 62), 1 << 40])
def test_negative_and_huge_slots_are_refused(tmp_path, slot):
    path = _step_like(tmp_path)

    def bad_alloc(f):
        for pc, op, _ops in _instructions(f):
            if op is Opcode.ALLOC:
                f["code"][pc + 1] = slot
                return
    _refused(_edit(path, bad_alloc), "not a temporary")
    _refused(_edit(path, lambda f: f["lists"].__setitem__(0, slot)), "out of range")


def test_word_bound_from_a_freed_temporary_is_refused():
    """BIND a temporary, free it and allocate it again, then LAUNCH: the argument word would
    hold the old, dangling pointer."""
    def program(between):
        code = [Opcode.ALLOC, 2, 32,
                Opcode.BIND, 0, 0, 2, Opcode.LAUNCH, 0, 8, 0,      # in0 -> tmp
                Opcode.BIND, 2, 2, 2] + between + [                 # tmp -> out0 ...
                Opcode.LAUNCH, 1, 8, 2, Opcode.FREE, 2]              # ... launched later
        slots = [bc.SlotInfo("input", "<f4", 0, 7), bc.SlotInfo("output", "<f4", 0, 7),
                 bc.SlotInfo("temp", "<f4", 0, 7, 32)]
        info = dict(arg_kinds=("buffer", "buffer"), arg_ranges=((0, 7), (0, 7)),
                    arg_writes=(False, True), arg_dtypes=("<f4", "<f4"), launch_size=8)
        return bc.Program(np.array(code, np.int64), np.array([0, 2, 2, 1], np.int64), slots,
                          [bc.KernelInfo("k0", "m", **info), bc.KernelInfo("k1", "m", **info)],
                          4, 1, outputs=[(1, "<f4", (8,))])
    bc.verify(program([]), strict=True)
    with pytest.raises(bc.VerifyError, match="freed after it was bound"):
        bc.verify(program([Opcode.FREE, 2, Opcode.ALLOC, 2, 32]), strict=True)


def test_poll_after_an_in_place_write_is_refused():
    asm = bc.Assembler()
    asm.launch(0, 8, [0])
    asm.poll()
    code, lists = asm.arrays()
    p = bc.Program(code, lists, [bc.SlotInfo("input", "<f4", 0, 7)],
                   [bc.KernelInfo("k", "m", ("buffer",), ((0, 7),), (True,), ("<f4",),
                                  launch_size=8)], 1, 1, mutated_leaves=[0])
    with pytest.raises(bc.VerifyError, match="after an argument was written"):
        bc.verify(p)


def test_overlapping_bind_replaces_the_words_it_covers(add_one):
    """The verifier knows each argument word: a second BIND over the first one's last word
    (the result) puts the argument there, and the LAUNCH that follows would write it."""
    def overlap(f):
        launch = next(x for x in _instructions(f) if x[1] is Opcode.LAUNCH)
        f["code"] = np.concatenate([f["code"][:launch[0]],
                                    [int(Opcode.BIND), 1, 0, 1],
                                    f["code"][launch[0]:]]).astype(np.int64)
        f["pmeta"]["nargwords"] = max(f["pmeta"]["nargwords"], 2)
    _refused(_edit(add_one, overlap), "writes input slot 0")

    def shifted(f):
        # the LAUNCH one word further on: its last word was never bound
        launch = next(x for x in _instructions(f) if x[1] is Opcode.LAUNCH)
        f["code"][launch[0] + 3] = 1
        f["pmeta"]["nargwords"] = max(f["pmeta"]["nargwords"], 3)
    _refused(_edit(add_one, shifted, "shifted.flp"), "takes 2 arguments, 1 are bound")

    def unbound(f):
        launch = next(x for x in _instructions(f) if x[1] is Opcode.LAUNCH)
        f["code"][launch[0] + 3] = 2
        f["pmeta"]["nargwords"] = max(f["pmeta"]["nargwords"], 4)
    _refused(_edit(add_one, unbound, "unbound.flp"), "no arguments bound at 2")


def test_kernel_count_must_match_the_compiled_kernels(add_one):
    import dataclasses
    g = fl.load(add_one)
    art = g._entries_list()[0].info          # the loaded program's artifact
    with pytest.raises(LinkError, match="1 kernels, 0 are compiled"):
        link(dataclasses.replace(art, kernels=()), get_backend("cpu"))


def test_loading_on_a_backend_of_another_memory_space_is_refused(tmp_path):
    """A host program on the device backend would hand host pointers to device code."""
    path = _save(tmp_path, lambda x: x + 1.0, np.zeros(10), backend="cpu")
    _refused(path, "space", backend="devsim")
    path = _save(tmp_path, lambda x: x + 1.0, np.zeros(10), backend="devsim", name="d.flp")
    _refused(path, "space", backend="cpu")


def test_metadata_is_read_strictly(add_one):
    for key, value in [("static_positions", [-1]), ("static_positions", [2, 1]),
                       ("statics", [["object", 1]]), ("statics", [["|O", 1]]),
                       ("keys", [[[1]]]), ("out_tree", {"kind": "namedtuple"}),
                       ("out_tree", {"kind": "dict", "keys": ["a", "a"],
                                     "children": [{"kind": "leaf"}, {"kind": "leaf"}]}),
                       ("signature", "zz"), ("backend", 3)]:
        _refused(_edit(add_one, lambda f: f["meta"].__setitem__(key, value)))
    deep = {"kind": "leaf"}
    for _ in range(150):
        deep = {"kind": "tuple", "children": [deep]}
    _refused(_edit(add_one, lambda f: f["meta"].__setitem__("out_tree", deep)), "deeply")


def test_strict_pick_round_trips():
    """np.bincount's values are strict picks ([0, n) only, KernelError.RANGE): the flag survives
    the description; any other strictness word is refused."""
    f = fl.compile(lambda x: np.bincount(x, minlength=4), backend="null")
    d = next(kernel_to_json(k) for k in f.lower(np.array([0, 3, 1])).plan.kernels
             if k.label.startswith("scatter"))
    assert '["pick", ' in json.dumps(d) and ', 4, 1]' in json.dumps(d)
    k = kernel_from_json(json.loads(json.dumps(d)))
    assert kernel_to_json(k) == d
    assert "pick!(v0, 4)" in k.describe()
    text = json.dumps(d).replace(", 4, 1]", ", 4, 2]")
    with pytest.raises(KernelFormatError, match="strictness"):
        kernel_from_json(json.loads(text))


# ---- sort kernels ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def argsort_desc():
    return _desc(lambda x: np.argsort(x * 2.0, axis=0, kind="stable"), np.zeros((50, 3)))


def test_sort_description_round_trips_and_rules(argsort_desc):
    d = argsort_desc
    assert d["sort"]["positions"] is True
    assert kernel_to_json(kernel_from_json(json.loads(json.dumps(d)))) == d
    _bad(d, lambda d: d.__setitem__("rspace", [50, 2]), "exactly one non-empty row loop")
    _bad(d, lambda d: d["sort"].__setitem__("positions", False), "stores float64 into a int64")
    _bad(d, lambda d: d["args"][d["sort"]["scratch"]].__setitem__(1, "<u4"), "scratch")
    _bad(d, lambda d: d["args"][d["sort"]["pscratch"]].__setitem__(1, "<f8"), "positions scratch")
    _bad(d, lambda d: d["sort"].__setitem__("pscratch", d["sort"]["arg"]), "distinct")
    _bad(d, lambda d: d.__setitem__("reduction", {"op": "sum"}), "a sort and a reduction")


def test_saved_sort_program_runs_from_descriptions(tmp_path):
    """A saved program with sort kernels loads and runs, from machine code or recompiled from
    its descriptions."""
    x = np.random.default_rng(3).standard_normal((40, 7)).astype(np.float32)
    fn = lambda x: (np.sort(x, axis=0), np.argsort(x, kind="stable"), np.median(x, axis=1))  # noqa: E731
    path = str(tmp_path / "sort.flp")
    fl.compile(fn).save(path, x)
    want = fn(x)
    for mode in (True, False):
        got = fl.load(path, machine_code=mode)(x)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_a_files_machine_code_never_stands_in_for_a_later_compile():
    """A saved program's machine code is loaded under a key of its own bytes.  Before: it was
    remembered under its stored source's key, so once a hostile file was loaded (in the
    default machine_code=True mode), every later compile of that source in the process ran
    the file's code instead."""
    from fastlaunch.backends.cpu import CPUBackend
    from fastlaunch.codegen.llvm import PLACEHOLDER_NAME
    be = CPUBackend(cache_dir=None)
    x = np.arange(4.0)

    def kernel_text(fn):
        return be.source(fl.compile(fn, backend="cpu").lower(x).plan.kernels[0])

    honest, other = kernel_text(lambda a: a + 1.0), kernel_text(lambda a: a * 3.0)
    name = "fl_" + be.compile_source(honest).key[:32]
    be.release()
    be = CPUBackend(cache_dir=None)                  # a process that has compiled nothing yet
    forged = be.object_code(other.replace(PLACEHOLDER_NAME, name))
    loaded = be.load_object(honest, forged, be.target_key)
    assert loaded.origin == "saved"
    again = be.load_object(honest, forged, be.target_key)
    assert again.owner is loaded.owner               # the same bytes share one engine
    compiled = be.compile_source(honest)
    assert compiled.origin == "compiled" and compiled.owner is not loaded.owner
    # ... and a load after that compile uses the process's own code, not the file's
    assert be.load_object(honest, forged, be.target_key).owner is compiled.owner
