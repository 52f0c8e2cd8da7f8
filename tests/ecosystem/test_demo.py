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
