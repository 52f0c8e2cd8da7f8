"""`python -m fastlaunch`: progress while it runs, a table whose last column compares the
replay with its lower bound at every size, and a PNG (or a clear word when matplotlib is
missing)."""
import numpy as np
import pytest

from fastlaunch import __main__ as demo_module


def test_demo_writes_its_plot_and_names_the_bound(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "demo.png"
    out = demo_module.demo(sizes=(16, 262144), quick=True, plot=str(path))
    assert out["plot"] == str(path) and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr()
    assert "[1/2] n=16" in text.err and "[2/2] n=262144" in text.err
    assert f"plot: {path}" in text.out
    small, large = (row[-1] for row in out["rows"])
    assert small.endswith(("x empty call", "x copy"))   # at n=16 the two are close
    assert large.endswith("x copy")                # 7 MB moved: bound by memory traffic
    assert all(float(r[-1].split("x")[0]) > 0 for r in out["rows"])
    # the gradient section: fl.value_and_grad's step checked equal to the hand-derived one
    # (the demo exits otherwise), then timed at the first and last size
    assert "checking fl.value_and_grad's step against the hand-derived one... equal" in text.err
    assert "Gradients: the same step with its gradient from fl.value_and_grad(loss)" in text.out
    assert [row[0] for row in out["gradient_rows"]] == [16, 262144]
    assert all(float(row[-1].rstrip("x")) > 0 for row in out["gradient_rows"])


def test_demo_without_matplotlib_says_so(tmp_path, capsys, monkeypatch):
    def missing(*args, **kwargs):
        raise ImportError("No module named 'matplotlib'")
    monkeypatch.setattr(demo_module, "plot_times", missing)
    out = demo_module.demo(sizes=(16,), quick=True, plot=str(tmp_path / "x.png"))
    assert out["plot"] is None and not (tmp_path / "x.png").exists()
    assert "matplotlib is not installed" in capsys.readouterr().out


def test_quick_option_and_no_plot(capsys, monkeypatch):
    seen = {}
    monkeypatch.setattr(demo_module, "demo", lambda **kw: seen.update(kw))
    demo_module.main(["--quick", "--no-plot"])
    assert seen == {"sizes": demo_module.QUICK_SIZES, "quick": True, "plot": None}
    demo_module.main([])
    assert seen["plot"] == "fastlaunch-demo.png" and seen["sizes"] == demo_module.DEMO_SIZES
    assert np.all(np.diff(demo_module.DEMO_SIZES) > 0)


def _fake_timings(monkeypatch, per_size):
    """interleaved_samples replaced: per size (in call order) {runner: [batch times]}."""
    calls = iter(per_size)

    def fake(runners, **kw):
        if set(runners) == {"hand", "auto"}:        # the gradient section
            return {"hand": [1e-6] * 5, "auto": [1.1e-6] * 5}
        return {k: list(v) for k, v in next(calls).items()}
    monkeypatch.setattr(demo_module, "interleaved_samples", fake)
    monkeypatch.setattr(demo_module, "_load", lambda: (0.1, 2))


def _batches(numpy, replay, empty=1e-6, copy=1e-6):
    return {"numpy": numpy, "re-trace": [1e-3] * len(numpy), "replay": replay,
            "empty call": [empty] * len(numpy), "np.copyto, same bytes": [copy] * len(numpy)}


def test_demo_explains_a_replay_below_its_bound_and_flags_swinging_timings(capsys,
                                                                          monkeypatch):
    """Replay vs bound below 1 is explained (streaming stores against the copy; noise against
    the empty call); a size whose numpy/replay ratio swings between batches (2x to 5.2x, as
    seen at 65,536 elements on a busy machine) is starred and a note says the machine was
    busy; steady sizes are not.  The output names no DESIGN.md."""
    _fake_timings(monkeypatch, [
        _batches([4e-6] * 5, [2e-6] * 5, empty=2.5e-6),                    # steady, < empty
        _batches([2e-4, 5.2e-4, 2e-4, 4e-4, 3e-4], [1e-4] * 5, copy=1e-5),  # swings
        _batches([1e-2] * 5, [1e-3] * 5, copy=2e-3),                       # < copy, steady
    ])
    out = demo_module.demo(sizes=(16, 65536, 1048576), quick=True, plot=None)
    text = capsys.readouterr()
    assert [row[6] for row in out["rows"]] == ["2.0x", "3.0x*", "10.0x"]
    assert [row[-1] for row in out["rows"]] == ["0.8x empty call", "10.0x copy", "0.5x copy"]
    assert out["swings"] == [(65536, 2.0, pytest.approx(5.2))]
    assert "Below 1x against the copy: the replay's kernels write large results with " \
        "streaming stores" in text.out
    assert "Below 1x against the empty call: the two differ by less than the timing " \
        "noise" in text.out
    assert "* numpy/replay swung between timing batches (n=65536: 2.0x to 5.2x): the " \
        "machine was busy (load average 0.1 on 2 CPUs)" in text.out
    assert "DESIGN" not in text.out + text.err

    _fake_timings(monkeypatch, [_batches([4e-6] * 5, [2e-6] * 5)])
    out = demo_module.demo(sizes=(16,), quick=True, plot=None)
    text = capsys.readouterr().out
    assert out["swings"] == [] and "swung" not in text and "Below 1x" not in text
