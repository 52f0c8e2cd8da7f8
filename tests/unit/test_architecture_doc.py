"""docs/architecture.md stays true where the code can check it: its opcode table lists every
opcode of _launch.pxd with its value, width and operand names (bytecode.OPERANDS), and it has a
line for every source file under fastlaunch/.

Run as a script to print the generated columns of the opcode table."""
import os
import re

from fastlaunch import _launch
from fastlaunch.program import bytecode

import fastlaunch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "architecture.md")
PACKAGE = os.path.dirname(os.path.abspath(fastlaunch.__file__))


def doc_text() -> str:
    with open(DOC) as f:
        return f.read()


def generated_rows() -> dict:
    """opcode name -> the generated cells (name, value, width, operands)."""
    return {op.name: (f"`{op.name}`", f"`{int(op):#06x}`", str(bytecode.width(op)),
                      " ".join(bytecode.OPERANDS[op]) or "—")
            for op in _launch.Opcode}


def doc_rows() -> dict:
    """The rows of the doc's table whose header starts with `| opcode |`."""
    lines = doc_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if re.match(r"\|\s*opcode\s*\|", ln))
    rows = {}
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = tuple(cells)
    return rows


def table_text() -> str:
    return "\n".join("| " + " | ".join(cells) + " | ... |" for cells in generated_rows().values())


def test_opcode_table_lists_every_opcode():
    want, got = generated_rows(), doc_rows()
    assert set(got) == set(want), f"the table should have exactly these rows:\n{table_text()}"
    for name, cells in want.items():
        assert got[name][:4] == cells, f"{name}: the doc says {got[name][:4]}, the code " \
                                       f"{cells}; generated rows:\n{table_text()}"
        assert len(got[name]) == 5 and got[name][4], f"{name}: no meaning given"


def source_files() -> list:
    """Every source file of the package, relative to fastlaunch/ (C generated from a .pyx,
    built extensions and caches excluded)."""
    out = []
    for dirpath, dirnames, files in os.walk(PACKAGE):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
        for f in files:
            stem, ext = os.path.splitext(f)
            if ext in (".py", ".pyx", ".pxd", ".h") or \
                    (ext == ".c" and not os.path.exists(os.path.join(dirpath, stem + ".pyx"))):
                out.append(os.path.relpath(os.path.join(dirpath, f), PACKAGE).replace(os.sep, "/"))
    return sorted(out)


def test_every_source_file_has_its_line():
    text = doc_text()
    files = source_files()
    assert "_core.pyx" in files and "csrc/runtime.c" in files
    missing = [f for f in files if f"- `{f}`:" not in text]
    assert not missing, f"docs/architecture.md has no line for {missing}"


if __name__ == "__main__":
    print(table_text())
