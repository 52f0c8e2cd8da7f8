"""Every Python-side lock in fastlaunch is made by forking.py, so that a fork() while another
thread holds it cannot leave the child hanging (forking.py's docstring says how). Two locks
made with threading.Lock() directly hung a forked child before this test existed."""
import ast
import pathlib

import fastlaunch

ROOT = pathlib.Path(fastlaunch.__file__).parent
LOCK_MAKERS = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"}


def _made_locks(path: pathlib.Path) -> list:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            owner = f.value.id if isinstance(f, ast.Attribute) and \
                isinstance(f.value, ast.Name) else None
            if name in LOCK_MAKERS and owner in (None, "threading"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_locks_are_made_by_forking():
    made = [hit for path in sorted(ROOT.rglob("*.py")) if path.name != "forking.py"
            for hit in _made_locks(path)]
    assert made == [], f"locks made outside forking.py (use forking.lock / trace_lock): {made}"
