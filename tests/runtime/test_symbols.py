"""No kernel is loaded with a symbol the JIT cannot resolve: the object code's undefined
symbols are checked first (backends/elf.py), and a clear Python error names the missing one.
Before, MCJIT aborted the process (or the call jumped to address 0), so these run in a child.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap


def run_child(code: str, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "OK" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


PRELUDE = """
import numpy as np
import pytest
from fastlaunch.backends import elf
from fastlaunch.backends.cpu import CPUBackend, UnresolvedSymbolError
from fastlaunch.backends.cache import kernel_key
from fastlaunch.codegen.llvm import PLACEHOLDER_NAME

def kernel(callee):
    return f'''
declare double @{callee}(double)
define void @{PLACEHOLDER_NAME}(i64 %start, i64 %end, ptr %args) {{
  %x = call double @{callee}(double 1.0)
  store double %x, ptr %args
  ret void
}}
'''
"""


def test_a_kernel_calling_an_unknown_function_is_an_error_naming_it(tmp_path):
    run_child(PRELUDE + f"""
be = CPUBackend(cache_dir={str(tmp_path)!r})
with pytest.raises(UnresolvedSymbolError, match="'fl_no_such_function_anywhere'"):
    be.compile_source(kernel("fl_no_such_function_anywhere"))
# nothing half-loaded, nothing cached; the backend goes on working
assert be.loaded_kernels == 0 and be.disk.writes == 0
ok = be.compile_source(kernel("cos"))
import ctypes
out = np.zeros(1)
ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)(ok.address)(0, 1, out.ctypes.data)
assert out[0] == np.cos(1.0)
print("OK")
""")


def test_cached_or_saved_objects_are_checked_too(tmp_path):
    run_child(PRELUDE + f"""
be = CPUBackend(cache_dir={str(tmp_path)!r})
good = kernel("sin")
bad_obj = be.object_code(kernel("fl_missing_symbol").replace(PLACEHOLDER_NAME, "fl_x"))
assert [s.name for s in elf.undefined_symbols(bad_obj)] == ["fl_missing_symbol"]
# a saved program's machine code (same target): checked before it is loaded
with pytest.raises(UnresolvedSymbolError, match="fl_missing_symbol"):
    be.load_object(good, bad_obj, be.target_key)
with pytest.raises(elf.ElfError):
    be.load_object(good, b"not an object file at all" * 10, be.target_key)
with pytest.raises(elf.ElfError):
    be.load_object(good, bad_obj[:100], be.target_key)
# a disk-cache entry that cannot be loaded (another process's build, say): compiled again
be.disk.put(kernel_key(good, be.target_key), bad_obj)
k = be.compile_source(good)
assert k.origin == "compiled" and k.address
print("OK")
""")
