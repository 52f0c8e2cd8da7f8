"""The program: a scheduled plan recorded as bytecode, verified, held in an artifact, linked to
a backend, saved and loaded."""
