"""No module over about 1,000 lines without a reason stated at its top (issue 26): a source file
of the package longer than LIMIT lines has a paragraph starting "Size:" in its module
docstring saying why it is not split yet (a .pyx's docstring too)."""
import ast
import os
import re

import fastlaunch

PACKAGE = os.path.dirname(fastlaunch.__file__)
LIMIT = 1000


def docstring(path: str) -> str:
    text = open(path).read()
    if path.endswith(".py"):
        return ast.get_docstring(ast.parse(text)) or ""
    # a .pyx: the first string after the leading comments (Cython directives)
    m = re.match(r'(?:\s*#[^\n]*\n)*\s*"""(.*?)"""', text, re.S)
    return m.group(1) if m else ""


def long_modules() -> dict:
    out = {}
    for dirpath, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith((".py", ".pyx")):
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    n = sum(1 for _ in fh)
                if n > LIMIT:
                    out[os.path.relpath(path, PACKAGE)] = path
    return out


def test_every_long_module_states_why_at_its_top():
    missing = [rel for rel, path in sorted(long_modules().items())
               if not re.search(r"^Size: \S", docstring(path), re.M)]
    assert not missing, (f"modules over {LIMIT} lines without a 'Size:' paragraph in their "
                         f"docstring (why they are not split yet): {missing}")


def test_the_check_sees_the_long_modules(tmp_path):
    assert {"jit.py", "ir/fuse.py", "program/bytecode.py", "_core.pyx", "codegen/llvm_base.py"} <= \
        set(long_modules())
    pyx = tmp_path / "m.pyx"
    pyx.write_text('# cython: language_level=3\n"""The docstring of a pyx."""\nimport x\n')
    assert docstring(str(pyx)) == "The docstring of a pyx."
