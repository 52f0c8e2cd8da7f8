"""Test session setup: kernels compile into a fresh disk cache, not the user's."""
import os
import tempfile

# before any test imports the CPU backend, which reads the variable once
os.environ.setdefault("FASTLAUNCH_CACHE_DIR", tempfile.mkdtemp(prefix="fastlaunch-test-cache-"))
