# cython: language_level=3
# Makes the enums of _launch.pxd importable from Python (fastlaunch._launch.Opcode, .Status):
# the bytecode's Python mirror reads them from here instead of repeating them.
