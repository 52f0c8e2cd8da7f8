"""The on-disk kernel cache: compiled object code keyed by hash(kernel IR text, target).

A cache entry is machine code that the next process runs, so the cache trusts a file only
when nobody but the user could have written it (docs/security.md):

* the cache folder is created 0700; it must be owned by the user and writable by nobody
  else, and so must every folder above it, up to the user's home folder or a root-owned
  sticky folder such as /tmp (folders owned by root and not writable by others pass) -- the
  rule ssh applies to ~/.ssh.  A folder that fails is not used at all: one warning, then no
  disk cache.  FASTLAUNCH_CACHE_TRUST=shared opts out of the ownership and mode rules for a
  folder shared on purpose;
* nothing is followed through a symbolic link inside the folder (entries and sub-folders are
  opened with O_NOFOLLOW relative to the folder's descriptor), and an entry must be a regular
  file owned by the user and writable by nobody else;
* every entry carries an HMAC-SHA256 under a per-user secret key (`hmac-key` in the folder,
  created 0600 on first use): a file written by anyone without the key is a miss.  A plain
  checksum would not do: anyone can recompute one.

Files are written to a temporary name and renamed into place, so readers never see half a
file.  A truncated, corrupted, foreign or unauthenticated file is a miss (and is removed),
never a crash.  A cache folder that cannot be written degrades to no disk cache, with one
warning.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import os
import stat
import struct
import warnings

from .. import env, forking

MAGIC = b"FLKOBJ\x00\x01"
FORMAT_VERSION = 2
# magic, version, reserved, payload length, HMAC-SHA256, cache key
_HEADER = struct.Struct("<8sIIQ32s64s")
SUFFIX = ".flk"
KEY_FILE = "hmac-key"
KEY_BYTES = 32
MAX_ENTRY_BYTES = 1 << 30          # an object file is far smaller: anything larger is foreign
TRUST_ENV = "FASTLAUNCH_CACHE_TRUST"

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)    # a FIFO planted as an entry must not block open


class CacheTrustWarning(RuntimeWarning):
    """The kernel cache folder could be written by someone else; it is not used."""


def default_cache_dir() -> str | None:
    """FASTLAUNCH_CACHE_DIR if set ("" disables the disk cache), else the user cache dir."""
    folder = env.cache_dir()
    if folder is not None:
        return folder or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastlaunch")


def kernel_key(ir_text: str, target_key: str) -> str:
    return hashlib.sha256(ir_text.encode() + b"\x00" + target_key.encode()).hexdigest()


def trust_mode() -> str:
    """"private" (the default: the ownership and mode rules apply) or "shared"."""
    return env.cache_trust()


# ---- the trust rules, as functions of stat results (tests feed them made-up ones) ---------
def _writers(mode: int) -> str:
    who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "all users"))
           if mode & bit]
    return " and ".join(who)


def check_folder(st, uid: int) -> str | None:
    """Why the cache folder itself (with this stat) cannot be trusted, or None: it must be a
    directory owned by `uid` that nobody else can write."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by {_writers(st.st_mode)} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_parent(st, uid: int) -> tuple[str | None, bool]:
    """(why a folder above the cache folder cannot be trusted or None, whether the walk up
    stops here).  Owned by `uid` or root and writable by nobody else; a root-owned sticky
    folder (/tmp) is fine whatever its mode, and ends the walk: others may create entries in
    it but cannot rename or remove ours."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory", True
    if st.st_uid not in (uid, 0):
        return f"is owned by uid {st.st_uid}, neither you (uid {uid}) nor root", True
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if st.st_uid == 0 and st.st_mode & stat.S_ISVTX:
            return None, True
        return (f"is writable by {_writers(st.st_mode)} (mode "
                f"{stat.S_IMODE(st.st_mode):04o})"), True
    return None, False


def check_entry(st, uid: int, shared: bool) -> str | None:
    """Why a cache entry or key file cannot be trusted, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if shared:
        return None
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by you"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by {_writers(st.st_mode)}"
    return None


def untrusted_reason(path: str, uid: int | None = None, home: str | None = None,
                     lstat=os.stat) -> str | None:
    """Why the folder `path` (resolved, existing) cannot hold trusted kernels, or None.
    Checks the folder, then each folder above it up to `home` (checked itself) or a root-owned
    sticky folder, whichever comes first, else up to /."""
    uid = os.geteuid() if uid is None else uid
    home = _home() if home is None else home
    why = check_folder(lstat(path), uid)
    if why:
        return f"{path!r} {why}"
    here = path
    while True:
        parent = os.path.dirname(here)
        if parent == here or here == home:
            return None
        here = parent
        why, stop = check_parent(lstat(here), uid)
        if why:
            return f"{here!r} (above the cache folder) {why}"
        if stop:
            return None


def _home() -> str:
    try:
        import pwd
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except (ImportError, KeyError):
        home = os.path.expanduser("~")
    return os.path.realpath(home) if home else "/"


def _makedirs_private(path: str):
    """Create `path` and any missing folder above it with mode 0700 (os.makedirs gives only
    the last one its mode)."""
    missing = []
    here = path
    while not os.path.isdir(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass


class DiskCache:
    """get(key) -> payload or None; put(key, payload).  Opened on first use."""

    def __init__(self, directory: str | None):
        # "" disables the cache, as FASTLAUNCH_CACHE_DIR="" does (not: the current folder)
        self.directory = directory or None
        self.enabled = self.directory is not None
        self.shared = trust_mode() == "shared"
        self._warned = False
        self._opened = False
        self._dir_fd: int | None = None
        self._mac_key: bytes | None = None
        self._uid = os.geteuid() if hasattr(os, "geteuid") else -1
        self._lock = forking.lock(forking.INNER)
        self.refused: str | None = None     # why the folder is not used (trust rules)
        self.hits = self.misses = self.writes = self.rejected = 0

    def __del__(self, _close=os.close):
        # os.close bound at definition: at interpreter exit the module's globals may be gone
        fd = getattr(self, "_dir_fd", None)
        if fd is not None:
            try:
                _close(fd)
            except OSError:
                pass

    # ---- opening -------------------------------------------------------------------------
    def _warn(self, message: str, category=RuntimeWarning):
        self.enabled = False
        if not self._warned:
            self._warned = True
            warnings.warn(message, category, stacklevel=4)

    def _open(self) -> bool:
        """Create or check the folder, open it, read or make the key; False: no disk cache."""
        if self._opened:
            return self.enabled
        self._opened = True
        if not self.enabled:
            return False
        try:
            path = os.path.realpath(os.path.abspath(self.directory))
            _makedirs_private(path)
            before = os.stat(path)
        except OSError as err:
            self._warn(f"fastlaunch: kernel disk cache at {self.directory!r} is not writable "
                       f"({err}); continuing without it")
            return False
        if not self.shared:
            try:
                why = untrusted_reason(path, self._uid)
            except OSError as err:
                why = f"a folder on its path cannot be checked ({err})"
            if why is not None:
                self.refused = why
                self._warn(
                    f"fastlaunch: not using the kernel disk cache at {self.directory!r}: {why}. "
                    f"Cache entries are machine code that fastlaunch runs, so anyone who can "
                    f"write there could make this process run their code. Use a private "
                    f"folder (chmod 700, or point FASTLAUNCH_CACHE_DIR elsewhere), or set "
                    f"{TRUST_ENV}=shared if everyone who can write it is trusted; continuing "
                    f"without a disk cache", CacheTrustWarning)
                return False
        try:
            fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
        except OSError as err:
            self._warn(f"fastlaunch: kernel disk cache at {self.directory!r} cannot be opened "
                       f"({err}); continuing without it")
            return False
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            os.close(fd)
            self._warn(f"fastlaunch: kernel disk cache folder {self.directory!r} changed while "
                       f"it was checked; continuing without it", CacheTrustWarning)
            return False
        self._dir_fd = fd
        try:
            self._mac_key = self._load_key()
        except OSError as err:
            self._warn(f"fastlaunch: kernel disk cache at {self.directory!r} is not writable "
                       f"({err}); continuing without it")
            return False
        if self._mac_key is None:
            return False
        return True

    def _load_key(self) -> bytes | None:
        """The folder's secret key, made on first use (0600; shared folders: 0644)."""
        fd = self._dir_fd
        for _ in range(3):
            try:
                kfd = os.open(KEY_FILE, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC,
                              dir_fd=fd)
            except FileNotFoundError:
                self._make_key()
                continue
            except OSError as err:
                if err.errno == errno.ELOOP:
                    return self._bad_key("is a symbolic link")
                raise
            try:
                st = os.fstat(kfd)
                why = check_entry(st, self._uid, self.shared)
                if why is None and not self.shared and st.st_mode & 0o077:
                    why = (f"can be read by others (mode {stat.S_IMODE(st.st_mode):04o}; "
                           f"it must be 0600)")
                if why is None and st.st_size != KEY_BYTES:
                    why = f"is {st.st_size} bytes, not {KEY_BYTES}"
                if why is not None:
                    return self._bad_key(why)
                key = os.read(kfd, KEY_BYTES + 1)
            finally:
                os.close(kfd)
            if len(key) != KEY_BYTES:
                return self._bad_key("changed while it was read")
            return key
        raise OSError(errno.EIO, "the cache key file keeps disappearing")

    def _bad_key(self, why: str):
        self.refused = f"its key file {KEY_FILE!r} {why}"
        self._warn(f"fastlaunch: not using the kernel disk cache at {self.directory!r}: its key "
                   f"file {KEY_FILE!r} {why}. Remove the file (a new key is made; old entries "
                   f"become misses) or point FASTLAUNCH_CACHE_DIR elsewhere; continuing "
                   f"without a disk cache", CacheTrustWarning)
        return None

    def _make_key(self):
        """Write a fresh key under a temporary name and link it into place: a concurrent
        process either wins (and we read its key) or reads ours whole."""
        fd = self._dir_fd
        tmp = f".tmp-key-{os.getpid()}-{os.urandom(6).hex()}"
        mode = 0o644 if self.shared else 0o600
        kfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                      mode, dir_fd=fd)
        try:
            try:
                os.fchmod(kfd, mode)            # whatever the umask
                os.write(kfd, os.urandom(KEY_BYTES))
                os.fsync(kfd)
            finally:
                os.close(kfd)
            try:
                os.link(tmp, KEY_FILE, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                pass
        finally:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass

    def _subdir(self, key: str, create: bool) -> int | None:
        """A descriptor of the entry's sub-folder (key[:2]), never through a link."""
        name = key[:2]
        flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
        try:
            sub = os.open(name, flags, dir_fd=self._dir_fd)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.mkdir(name, 0o755 if self.shared else 0o700, dir_fd=self._dir_fd)
            except FileExistsError:
                pass
            sub = os.open(name, flags, dir_fd=self._dir_fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                self.rejected += 1
                return None
            raise
        if not self.shared and check_folder(os.fstat(sub), self._uid) is not None:
            os.close(sub)
            self.rejected += 1
            return None
        return sub

    # ---- entries -------------------------------------------------------------------------
    def _name(self, key: str) -> str:
        return key + SUFFIX

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + SUFFIX)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            if not self._open():
                return None
            try:
                payload = self._get(key)
            except OSError:
                payload = None
            if payload is None:
                self.misses += 1
            else:
                self.hits += 1
            return payload

    def _get(self, key: str) -> bytes | None:
        sub = self._subdir(key, create=False)
        if sub is None:
            return None
        name = self._name(key)
        try:
            try:
                fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC,
                             dir_fd=sub)
            except FileNotFoundError:
                return None
            except OSError as err:
                if err.errno == errno.ELOOP:          # a symbolic link: never followed
                    self._reject(sub, name)
                return None
            try:
                st = os.fstat(fd)
                if check_entry(st, self._uid, self.shared) is not None or \
                        st.st_size > MAX_ENTRY_BYTES:
                    data = None
                else:
                    data = _read_all(fd, st.st_size)
            finally:
                os.close(fd)
            payload = None if data is None else decode(data, key, self._mac_key)
            if payload is None:
                self._reject(sub, name)
            return payload
        finally:
            os.close(sub)

    def _reject(self, sub: int, name: str):
        self.rejected += 1
        try:
            os.unlink(name, dir_fd=sub)
        except OSError:
            pass

    def put(self, key: str, payload: bytes) -> None:
        with self._lock:
            if not self._open():
                return
            try:
                if self._put(key, payload):
                    self.writes += 1
            except OSError as err:
                self._warn(f"fastlaunch: kernel disk cache at {self.directory!r} is not "
                           f"writable ({err}); continuing without it")

    def _put(self, key: str, payload: bytes) -> bool:
        sub = self._subdir(key, create=True)
        if sub is None:
            return False
        try:
            tmp = f".tmp-{os.getpid()}-{os.urandom(6).hex()}{SUFFIX}"
            mode = 0o644 if self.shared else 0o600
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                         mode, dir_fd=sub)
            try:
                try:
                    if self.shared:
                        os.fchmod(fd, mode)
                    data = encode(key, payload, self._mac_key)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
                os.replace(tmp, self._name(key), src_dir_fd=sub, dst_dir_fd=sub)
                return True
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=sub)
                except OSError:
                    pass
                raise
        finally:
            os.close(sub)

    # ---- maintenance (python -m fastlaunch cache) ----
    def entries(self) -> list[str]:
        if not self.directory or not os.path.isdir(self.directory):
            return []
        out = []
        for root, _, files in os.walk(self.directory):
            out += [os.path.join(root, f) for f in files
                    if f.endswith(SUFFIX) and not f.startswith(".tmp-")]
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


def _read_all(fd: int, size: int) -> bytes:
    chunks, total = [], 0
    while total <= size:
        chunk = os.read(fd, max(1, size + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _mac(mac_key: bytes, head: bytes, payload: bytes) -> bytes:
    """HMAC-SHA256 over the header (its MAC field zeroed) and the payload."""
    m = hmac.new(mac_key, digestmod=hashlib.sha256)
    m.update(head)
    m.update(payload)
    return m.digest()


def encode(key: str, payload: bytes, mac_key: bytes) -> bytes:
    stored_key = key.encode().ljust(64, b"\x00")[:64]
    blank = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(payload), b"\x00" * 32, stored_key)
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(payload), _mac(mac_key, blank, payload),
                        stored_key)
    return head + payload


def decode(data: bytes, key: str, mac_key: bytes) -> bytes | None:
    """The payload of a cache file, or None if it is not a valid file for `key` written by
    someone holding `mac_key`."""
    if len(data) < _HEADER.size:
        return None
    magic, version, reserved, length, mac, stored_key = _HEADER.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION:
        return None
    if stored_key != key.encode().ljust(64, b"\x00")[:64]:
        return None
    payload = data[_HEADER.size:]
    if len(payload) != length:
        return None
    blank = _HEADER.pack(magic, version, reserved, length, b"\x00" * 32, stored_key)
    if not hmac.compare_digest(_mac(mac_key, blank, payload), mac):
        return None
    return payload
