"""The on-disk kernel cache: compiled object code keyed by hash(kernel IR text, target).

Files are written to a temporary name and renamed into place, so readers never see half a
file; each starts with a magic number and format version and carries a SHA-256 of its
payload.  A truncated, corrupted or foreign file is a miss (and is removed), never a crash.
A cache directory that cannot be written degrades to no disk cache, with one warning.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import warnings

MAGIC = b"FLKOBJ\x00\x01"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIQ32s64s")   # magic, version, reserved, payload length, sha256, key
SUFFIX = ".flk"


def default_cache_dir() -> str | None:
    """FASTLAUNCH_CACHE_DIR if set ("" disables the disk cache), else the user cache dir."""
    env = os.environ.get("FASTLAUNCH_CACHE_DIR")
    if env is not None:
        return env or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastlaunch")


def kernel_key(ir_text: str, target_key: str) -> str:
    return hashlib.sha256(ir_text.encode() + b"\x00" + target_key.encode()).hexdigest()


class DiskCache:
    def __init__(self, directory: str | None):
        self.directory = directory
        self.enabled = directory is not None
        self._warned = False
        self.hits = self.misses = self.writes = self.rejected = 0

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + SUFFIX)

    def get(self, key: str) -> bytes | None:
        if not self.enabled:
            return None
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            self.misses += 1
            return None
        payload = decode(data, key)
        if payload is None:
            self.rejected += 1
            self.misses += 1
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        self.hits += 1
        return payload

    def put(self, key: str, payload: bytes) -> None:
        if not self.enabled:
            return
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=SUFFIX)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(encode(key, payload))
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            self.writes += 1
        except OSError as err:
            self.enabled = False
            if not self._warned:
                self._warned = True
                warnings.warn(f"fastlaunch: kernel disk cache at {self.directory!r} is not "
                              f"writable ({err}); continuing without it", RuntimeWarning,
                              stacklevel=3)

    # ---- maintenance (python -m fastlaunch cache) ----
    def entries(self) -> list[str]:
        if not self.directory or not os.path.isdir(self.directory):
            return []
        out = []
        for root, _, files in os.walk(self.directory):
            out += [os.path.join(root, f) for f in files if f.endswith(SUFFIX)]
        return sorted(out)

    def clear(self) -> int:
        removed = 0
        for path in self.entries():
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
        return removed


def encode(key: str, payload: bytes) -> bytes:
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(payload), hashlib.sha256(payload).digest(),
                        key.encode().ljust(64, b"\x00")[:64])
    return head + payload


def decode(data: bytes, key: str) -> bytes | None:
    """The payload of a cache file, or None if it is not a valid file for `key`."""
    if len(data) < _HEADER.size:
        return None
    magic, version, _, length, digest, stored_key = _HEADER.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION:
        return None
    if stored_key.rstrip(b"\x00") != key.encode()[:64]:
        return None
    payload = data[_HEADER.size:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload
