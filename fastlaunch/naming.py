"""How error messages name what the user called: the public name of a NumPy or SciPy function
(`np.linalg.inv`, not `np.inv`; `scipy.special.erf`, not `np.erf`), the library function in
which a traced array was converted to a NumPy array, and what to use instead (with the loop
statement around the user's line, `enclosing_loop`, for advice on a data-dependent `if`).

Suggestions name only what fastlaunch traces at the time: frontend/numpy registers its predicate
with `set_supported` (this module imports nothing of the tracer)."""
from __future__ import annotations

import linecache
import sys
from typing import Callable

import numpy as np

_supported: Callable[[object], bool] = lambda func: False  # noqa: E731


def set_supported(predicate: Callable[[object], bool]) -> None:
    global _supported
    _supported = predicate


def _public_module(module: str) -> str:
    """numpy.linalg._linalg -> np.linalg; scipy.special._ufuncs -> scipy.special."""
    parts = [p for p in module.split(".") if not p.startswith("_")]
    if parts and parts[0] == "numpy":
        parts[0] = "np"
    return ".".join(parts)


def public_name(func) -> str:
    """The name a user writes for `func` (a NumPy/SciPy function, ufunc or method)."""
    name = getattr(func, "__name__", None) or repr(func)
    if isinstance(func, np.ufunc):
        if getattr(np, name, None) is func:
            return f"np.{name}"
        for mod in ("scipy.special",):
            m = sys.modules.get(mod)
            if m is not None and getattr(m, name, None) is func:
                return f"{mod}.{name}"
        return f"np.{name}" if func.__module__ in (None, "numpy") else f"{name}"
    module = getattr(func, "__module__", None)
    if not module:
        return name
    qual = getattr(func, "__qualname__", name)
    public = _public_module(module)
    return f"{public}.{qual}" if public else qual


def _resolve(public: str):
    parts = public.split(".")
    obj = {"np": np}.get(parts[0]) or sys.modules.get(parts[0])
    for p in parts[1:]:
        obj = getattr(obj, p, None)
    # while a trace runs, some names are fastlaunch's entry points in front of NumPy's
    return obj.__wrapped__ if getattr(obj, "_fl_entry", False) else obj


# what to use instead: (text, the functions it needs traced); shown only when those are
_INSTEAD: dict = {
    "np.average": [("np.mean(x, axis), or np.sum(w * x, axis) / np.sum(w, axis) with weights",
                    ["np.mean", "np.sum"])],
    "np.flip": [("x[::-1] (or x[:, ::-1] along axis 1): a reversed view", [])],
    "np.fliplr": [("x[:, ::-1]", [])],
    "np.flipud": [("x[::-1]", [])],
    "np.diff": [("x[1:] - x[:-1] (along axis 0; x[:, 1:] - x[:, :-1] along axis 1)", [])],
    "np.roll": [("np.concatenate((x[-k:], x[:-k])) for a roll by k along axis 0",
                 ["np.concatenate"])],
    "np.tile": [("np.broadcast_to(x, (n,) + x.shape) (then .reshape) to repeat x n times",
                 ["np.broadcast_to"])],
    "np.repeat": [("np.broadcast_to(x[:, None], (len(x), k)).reshape(-1) to repeat each "
                   "element k times", ["np.broadcast_to"])],
    "np.pad": [("out = np.zeros(padded shape); out[p:-p, p:-p] = x (zero padding)", [])],
    "np.cov": [("xc = x - x.mean(axis=1, keepdims=True); xc @ xc.T / (x.shape[1] - 1)",
                ["np.mean", "np.matmul"])],
    "np.diag": [("a.reshape(-1)[::n + 1] to read the diagonal of an n x n matrix, "
                 "v[:, None] * np.eye(n) to build one", [])],
    "np.histogram": [("counts = np.zeros(bins); np.add.at(counts, idx, 1) with "
                      "idx = ((x - lo) / width).astype(int) clipped to the bins",
                      ["np.clip"])],
    "np.linalg.inv": [("np.linalg.solve(a, b) instead of np.linalg.inv(a) @ b",
                       ["np.linalg.solve"])],
    "scipy.linalg.inv": [("np.linalg.inv", ["np.linalg.inv"])],
    "scipy.linalg.solve": [("np.linalg.solve", ["np.linalg.solve"])],
    "scipy.linalg.cholesky": [("np.linalg.cholesky (lower triangular; scipy's default is "
                               "upper: take .T)", ["np.linalg.cholesky"])],
    "scipy.special.expit": [("1 / (1 + np.exp(-x))", ["np.exp"])],
    "scipy.special.logit": [("np.log(p / (1 - p))", ["np.log"])],
    "scipy.special.xlogy": [("np.where(x == 0, 0, x * np.log(y))", ["np.where", "np.log"])],
    "scipy.special.logsumexp": [("m = x.max(axis, keepdims=True); "
                                 "m + np.log(np.sum(np.exp(x - m), axis, keepdims=True))",
                                 ["np.exp", "np.log", "np.sum"])],
    "scipy.special.softmax": [("e = np.exp(x - x.max(axis, keepdims=True)); "
                               "e / e.sum(axis, keepdims=True)", ["np.exp"])],
}


def instead(public: str) -> str:
    """'; use ... instead' for a public name with a traceable equivalent, else ''."""
    for text, needs in _INSTEAD.get(public, ()):
        if all(_supported(_resolve(n)) for n in needs):
            return f"; instead, use {text}"
    return ""


def unsupported(func, what: str = "") -> str:
    """The message for a call fastlaunch cannot trace: `np.linalg.inv is not supported ...`."""
    public = public_name(func) + what
    return f"{public} is not supported by fastlaunch yet{instead(public)}"


# the packages whose functions convert their arguments with np.asarray instead of dispatching
_CONVERTING = ("numpy", "scipy", "sklearn", "pandas")


def _callable(qual: str) -> str:
    """What the user called for a code object's qualified name: a class for its __init__."""
    return qual[:-len(".__init__")] if qual.endswith(".__init__") else qual


def converting_function(frame) -> tuple[str, str]:
    """Walking out from `frame` (inside an np.asarray of a traced array): the outermost
    library function, i.e. the one the user's code called, and where it was called:
    ('scipy.linalg.inv', 'file:line'), or ('', '') when the conversion happened in the
    user's own code."""
    entry = inner = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        top = module.split(".")[0]
        if top == "fastlaunch":
            frame = frame.f_back
            continue
        if top not in _CONVERTING:
            break
        entry, inner = frame, entry
        frame = frame.f_back
    if entry is None:
        return "", ""
    code = entry.f_code
    qual = getattr(code, "co_qualname", code.co_name)
    if "<locals>" in qual and inner is not None:
        # a decorator's wrapper (SciPy's batching of scipy.linalg.lstsq, ...): name the
        # function it wraps, the library frame it called
        entry = inner
        code = entry.f_code
        qual = getattr(code, "co_qualname", code.co_name)
    public = f"{_public_module(entry.f_globals.get('__name__', ''))}.{_callable(qual)}"
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
    return public, where


# libraries whose own code, reached with traced arrays, fails in ways that name neither the
# function the user called nor fastlaunch (SciPy's C routines' TypeErrors, writes into
# read-only arrays, attributes of ndarray a tracer lacks)
_FOREIGN = ("scipy", "sklearn", "pandas", "skimage", "statsmodels")


def _raised_in_library(err: BaseException) -> bool:
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").split(".")[0] in _FOREIGN:
            return True
        tb = tb.tb_next
    return False


def library_failure(err: BaseException) -> str:
    """For an exception raised inside such a library's code called from the user's traced
    function: a message naming the library function as the user called it; else ''."""
    if any(f"{lib}." in str(err) for lib in _FOREIGN):
        # our own message names the library function already; an attribute a tracer lacks
        # (x.flags read inside SciPy) still becomes a TracingError, not SciPy's AttributeError
        if isinstance(err, AttributeError) and "not supported by fastlaunch" in str(err) and \
                _raised_in_library(err):
            return str(err)
        return ""
    tb = err.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    caller = None
    for k, frame in enumerate(frames):
        top = frame.f_globals.get("__name__", "").split(".")[0]
        if top in _FOREIGN and caller is not None:
            code = frame.f_code
            qual = getattr(code, "co_qualname", code.co_name)
            if "<locals>" in qual and k + 1 < len(frames):
                # a decorator's wrapper (SciPy's batching): name the function it wraps
                frame = frames[k + 1]
                code = frame.f_code
                qual = getattr(code, "co_qualname", code.co_name)
            public = f"{_public_module(frame.f_globals.get('__name__', ''))}.{_callable(qual)}"
            return (f"{public} (called at {caller.f_code.co_filename}:{caller.f_lineno}) failed "
                    f"inside its own code on traced arrays ({type(err).__name__}: {err}) -- "
                    f"fastlaunch traces NumPy functions that dispatch on their arguments, and "
                    f"a list of SciPy functions, not this one{instead(public)}; call it outside "
                    f"the compiled function, or write it with NumPy functions")
        if top not in ("fastlaunch", "numpy") and top not in _FOREIGN:
            caller = frame            # the user's code (the last frame before the library)
    return ""


def enclosing_loop(frame) -> str:
    """'while' or 'for' for the innermost loop statement around the user's current line in
    its function (by indentation), else ''."""
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "fastlaunch":
        frame = frame.f_back
    if frame is None:
        return ""
    try:
        name, first = frame.f_code.co_filename, frame.f_code.co_firstlineno
        text = linecache.getline(name, frame.f_lineno)
        indent = len(text) - len(text.lstrip())
        for lineno in range(frame.f_lineno - 1, first - 1, -1):
            text = linecache.getline(name, lineno)
            code = text.strip()
            if not code or code.startswith("#"):
                continue
            depth = len(text) - len(text.lstrip())
            if depth < indent:
                if code.startswith(("while ", "for ")):
                    return code.split()[0]
                if code.startswith(("def ", "class ", "async def ")):
                    return ""
                indent = depth
    except Exception:   # noqa: BLE001  (no source)
        return ""
    return ""
