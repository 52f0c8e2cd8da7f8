"""The kernel disk cache trusts only what the user alone could have written: private folders,
no symbolic links, entries authenticated by a per-user key (docs/security.md)."""
import hashlib
import os
import stat
import warnings

import numpy as np
import pytest

from fastlaunch.backends import cache
from fastlaunch.backends.cpu import CPUBackend

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
UID = os.geteuid()


def _kernels():
    """Two small kernels of one shape (sqrt and exp): one's code can stand in for the other's."""
    from fastlaunch.ir import fuse
    from fastlaunch.ir.graph import Graph, Op
    out = []
    for op in (Op.SQRT, Op.EXP):
        g = Graph()
        x = g.add(Op.ARG, np.float64, (64,), position=0)
        g.outputs.append(g.add(op, np.float64, (64,), (x,)))
        out.append(fuse.plan(g, {0: (1,)}).kernels[0])
    return out


def _backend(folder):
    from fastlaunch.backends import cpu_schedule
    be = CPUBackend(cache_dir=str(folder))
    return be, [cpu_schedule.schedule_kernel(k) for k in _kernels()]


def _entry(folder, be, kernel):
    key = cache.kernel_key(be.source(kernel), be.target_key)
    return os.path.join(str(folder), key[:2], key + cache.SUFFIX), key


def _run(be, compiled):
    """Call a compiled 64-element kernel on [1, 2, ...] through ctypes."""
    import ctypes
    x = np.arange(1.0, 65.0)
    y = np.zeros(64)
    words = (ctypes.c_int64 * 2)(x.ctypes.data, y.ctypes.data)
    ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)(compiled.address)(
        0, 64, ctypes.addressof(words))
    return x, y


def _no_trust_warnings(record):
    return [w for w in record if issubclass(w.category, cache.CacheTrustWarning)]


# ---- folders ---------------------------------------------------------------------------------
def test_new_folders_keys_and_entries_are_private(tmp_path):
    folder = tmp_path / "a" / "b" / "cache"
    be, (k, _) = _backend(folder)
    be.compile(k)
    for d in (tmp_path / "a", tmp_path / "a" / "b", folder):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    key_file = folder / cache.KEY_FILE
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert len(key_file.read_bytes()) == cache.KEY_BYTES
    path, _ = _entry(folder, be, k)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    # a second process (a second backend) reuses it
    again, (k2, _) = _backend(folder)
    again.compile(k2)
    assert again.disk_loads == 1 and again.compile_count == 0


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_folder_writable_by_others_is_refused_with_one_warning(tmp_path, mode, monkeypatch):
    monkeypatch.delenv(cache.TRUST_ENV, raising=False)
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    be, (k1, k2) = _backend(folder)
    with pytest.warns(cache.CacheTrustWarning, match="writable by") as caught:
        be.compile(k1)
        be.compile(k2)
    assert len(_no_trust_warnings(caught)) == 1
    assert "FASTLAUNCH_CACHE_TRUST=shared" in str(caught[0].message)
    assert be.compile_count == 2 and not be.disk.enabled
    assert os.listdir(folder) == []          # nothing read, nothing written, no key made


def test_planted_entry_in_a_refused_folder_is_never_read(tmp_path, monkeypatch):
    """Someone who can write a shared folder plants a valid-looking entry: refused unread."""
    monkeypatch.delenv(cache.TRUST_ENV, raising=False)
    folder = tmp_path / "shared"
    good, (k, _) = _backend(folder)
    good.compile(k)
    folder.chmod(0o777)
    be, (k, _) = _backend(folder)
    with pytest.warns(cache.CacheTrustWarning):
        be.compile(k)
    assert be.disk_loads == 0 and be.compile_count == 1


def test_shared_opt_in_uses_a_group_writable_folder(tmp_path, monkeypatch):
    folder = tmp_path / "team"
    folder.mkdir()
    folder.chmod(0o2775)
    monkeypatch.setenv(cache.TRUST_ENV, "shared")
    be, (k, _) = _backend(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheTrustWarning)
        be.compile(k)
    again, (k, _) = _backend(folder)
    again.compile(k)
    assert again.disk_loads == 1
    # readable by the other members
    assert stat.S_IMODE(os.stat(folder / cache.KEY_FILE).st_mode) == 0o644


def test_parent_writable_by_others_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(cache.TRUST_ENV, raising=False)
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)                       # not sticky: others could rename our folder
    be, (k, _) = _backend(parent / "cache")
    with pytest.warns(cache.CacheTrustWarning, match="above the cache folder"):
        be.compile(k)
    assert not be.disk.enabled


@pytest.mark.skipif(not ROOT, reason="needs root to make a root-owned sticky folder")
def test_root_owned_sticky_parent_is_fine(tmp_path):
    parent = tmp_path / "tmp-like"
    parent.mkdir()
    parent.chmod(0o1777)
    be, (k, _) = _backend(parent / "mine")
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheTrustWarning)
        be.compile(k)
    assert be.disk.enabled and be.disk.writes == 1


@pytest.mark.skipif(not ROOT, reason="needs root to give a folder to another user")
def test_folder_owned_by_another_user_is_refused(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    be, (k, _) = _backend(folder)
    with pytest.warns(cache.CacheTrustWarning, match="owned by uid 65534"):
        be.compile(k)
    assert not be.disk.enabled


def test_symlinked_folder_is_judged_by_its_target(tmp_path, monkeypatch):
    monkeypatch.delenv(cache.TRUST_ENV, raising=False)
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(target)
    be, (k, _) = _backend(link)
    with pytest.warns(cache.CacheTrustWarning, match="open"):
        be.compile(k)
    # a link to a private folder is fine (a cache moved to another disk)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link2 = tmp_path / "link2"
    link2.symlink_to(private)
    be, (k, _) = _backend(link2)
    be.compile(k)
    assert be.disk.writes == 1


# ---- the rules on made-up stat results (other users, homes, sticky folders) ---------------
def _st(mode, uid):
    return os.stat_result((mode, 1, 1, 1, uid, 0, 0, 0, 0, 0))


DIR = stat.S_IFDIR


def test_check_folder_rules():
    assert cache.check_folder(_st(DIR | 0o700, 1000), 1000) is None
    assert cache.check_folder(_st(DIR | 0o755, 1000), 1000) is None
    assert "owned by uid 1001" in cache.check_folder(_st(DIR | 0o700, 1001), 1000)
    assert "owned by uid 0" in cache.check_folder(_st(DIR | 0o700, 0), 1000)
    assert "its group" in cache.check_folder(_st(DIR | 0o770, 1000), 1000)
    assert "all users" in cache.check_folder(_st(DIR | 0o707, 1000), 1000)
    assert "not a directory" in cache.check_folder(_st(stat.S_IFREG | 0o700, 1000), 1000)


def test_check_parent_rules():
    assert cache.check_parent(_st(DIR | 0o755, 0), 1000) == (None, False)
    assert cache.check_parent(_st(DIR | 0o700, 1000), 1000) == (None, False)
    assert cache.check_parent(_st(DIR | 0o1777, 0), 1000) == (None, True)       # /tmp
    why, _ = cache.check_parent(_st(DIR | 0o1777, 1001), 1000)                  # a user's
    assert "owned by uid 1001" in why
    why, _ = cache.check_parent(_st(DIR | 0o777, 0), 1000)                      # no sticky bit
    assert "all users" in why
    why, _ = cache.check_parent(_st(DIR | 0o755, 1001), 1000)
    assert "neither you" in why


def test_walk_stops_at_home_and_at_sticky_folders():
    tree = {"/": _st(DIR | 0o755, 0), "/home": _st(DIR | 0o777, 0),     # a careless /home
            "/home/u": _st(DIR | 0o750, 1000), "/home/u/.cache": _st(DIR | 0o755, 1000),
            "/home/u/.cache/fl": _st(DIR | 0o700, 1000),
            "/tmp": _st(DIR | 0o1777, 0), "/tmp/fl": _st(DIR | 0o700, 1000),
            "/srv": _st(DIR | 0o777, 0), "/srv/fl": _st(DIR | 0o700, 1000),
            "/data": _st(DIR | 0o755, 1001), "/data/fl": _st(DIR | 0o700, 1000)}
    look = tree.__getitem__
    assert cache.untrusted_reason("/home/u/.cache/fl", 1000, "/home/u", look) is None
    assert cache.untrusted_reason("/tmp/fl", 1000, "/home/u", look) is None
    assert "'/srv'" in cache.untrusted_reason("/srv/fl", 1000, "/home/u", look)
    assert "'/data'" in cache.untrusted_reason("/data/fl", 1000, "/home/u", look)
    # outside home the walk goes on to /: the careless /home is then caught
    assert "'/home'" in cache.untrusted_reason("/home/u/.cache/fl", 1000, "/elsewhere", look)


def test_check_entry_rules():
    reg = stat.S_IFREG
    assert cache.check_entry(_st(reg | 0o600, 1000), 1000, False) is None
    assert "owned by uid 1001" in cache.check_entry(_st(reg | 0o600, 1001), 1000, False)
    assert "writable" in cache.check_entry(_st(reg | 0o620, 1000), 1000, False)
    assert cache.check_entry(_st(reg | 0o664, 1001), 1000, True) is None      # shared
    assert "regular" in cache.check_entry(_st(stat.S_IFLNK | 0o777, 1000), 1000, True)


# ---- entries ---------------------------------------------------------------------------------
def _miss_then_recompile(tmp_path, damage):
    """Fill the cache with k, damage its entry, check a fresh backend recompiles (and runs the
    right code), and return the fresh backend."""
    be, (k, _) = _backend(tmp_path)
    be.compile(k)
    path, key = _entry(tmp_path, be, k)
    damage(path, key)
    fresh, (k, _) = _backend(tmp_path)
    compiled = fresh.compile(k)
    assert fresh.disk_loads == 0 and fresh.compile_count == 1
    x, y = _run(fresh, compiled)
    np.testing.assert_allclose(y, np.sqrt(x))
    return fresh, path


def test_recomputed_checksum_without_the_key_is_a_miss_and_never_loaded(tmp_path):
    """The attack the old format allowed: another kernel's machine code under this kernel's
    name, with a header and SHA-256 recomputed by someone who does not hold the key."""
    from fastlaunch.backends import cpu_schedule
    from fastlaunch.codegen.llvm import PLACEHOLDER_NAME
    exp_kernel = cpu_schedule.schedule_kernel(_kernels()[1])

    def plant(path, key):
        be = CPUBackend(cache_dir=None)
        # exp's code under sqrt's entry name: if it ran, the results would be exp(x)
        payload = be.object_code(be.source(exp_kernel).replace(PLACEHOLDER_NAME,
                                                                 "fl_" + key[:32]))
        # old-style integrity: a SHA-256 anyone can recompute, in the MAC's place
        head = cache._HEADER.pack(cache.MAGIC, cache.FORMAT_VERSION, 0, len(payload),
                                  hashlib.sha256(payload).digest(),
                                  key.encode().ljust(64, b"\x00"))
        with open(path, "wb") as f:
            f.write(head + payload)
        # a proper HMAC under a key that is not this folder's does not pass either
        assert cache.decode(cache.encode(key, payload, os.urandom(32)), key,
                            (tmp_path / cache.KEY_FILE).read_bytes()) is None

    fresh, path = _miss_then_recompile(tmp_path, plant)
    assert fresh.disk.rejected == 1


def test_entry_under_a_foreign_key_is_a_miss(tmp_path):
    def rekey(path, key):
        with open(path, "rb") as f:
            data = f.read()
        payload = data[cache._HEADER.size:]
        with open(path, "wb") as f:
            f.write(cache.encode(key, payload, b"k" * 32))
    _miss_then_recompile(tmp_path, rekey)


def test_symlinked_entry_is_never_followed(tmp_path):
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir()
    kept = []

    def link(path, key):
        target = outside / "entry.flk"
        os.replace(path, target)          # a valid entry, moved out of the folder
        os.symlink(target, path)
        kept.append(target)

    fresh, path = _miss_then_recompile(tmp_path, link)
    assert kept[0].exists()               # the link was removed, not its target
    assert fresh.disk.rejected == 1


def test_symlinked_subfolder_is_never_followed(tmp_path):
    outside = tmp_path.parent / (tmp_path.name + "-sub")

    def link(path, key):
        sub = os.path.dirname(path)
        os.replace(sub, outside)
        os.symlink(outside, sub)

    fresh, path = _miss_then_recompile(tmp_path, link)
    assert os.path.islink(os.path.dirname(path))
    assert fresh.disk.writes == 0         # nothing written through the link either


def test_entry_writable_by_others_is_a_miss(tmp_path):
    _miss_then_recompile(tmp_path, lambda path, key: os.chmod(path, 0o666))


@pytest.mark.skipif(not ROOT, reason="needs root to give a file to another user")
def test_entry_owned_by_another_user_is_a_miss(tmp_path):
    _miss_then_recompile(tmp_path, lambda path, key: os.chown(path, 65534, 65534))


def test_fifo_entry_does_not_block(tmp_path):
    def fifo(path, key):
        os.unlink(path)
        os.mkfifo(path, 0o600)
    _miss_then_recompile(tmp_path, fifo)


def test_key_file_readable_by_others_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(cache.TRUST_ENV, raising=False)
    be, (k, _) = _backend(tmp_path)
    be.compile(k)
    os.chmod(tmp_path / cache.KEY_FILE, 0o644)
    fresh, (k, _) = _backend(tmp_path)
    with pytest.warns(cache.CacheTrustWarning, match="key file"):
        fresh.compile(k)
    assert fresh.disk_loads == 0 and not fresh.disk.enabled


def test_symlinked_key_file_is_refused(tmp_path):
    be, (k, _) = _backend(tmp_path)
    be.compile(k)
    elsewhere = tmp_path.parent / (tmp_path.name + "-key")
    os.replace(tmp_path / cache.KEY_FILE, elsewhere)
    os.symlink(elsewhere, tmp_path / cache.KEY_FILE)
    fresh, (k, _) = _backend(tmp_path)
    with pytest.warns(cache.CacheTrustWarning, match="symbolic link"):
        fresh.compile(k)
    assert fresh.disk_loads == 0


def test_new_key_makes_old_entries_misses(tmp_path):
    be, (k, _) = _backend(tmp_path)
    be.compile(k)
    os.unlink(tmp_path / cache.KEY_FILE)
    fresh, (k, _) = _backend(tmp_path)
    fresh.compile(k)
    assert fresh.disk_loads == 0 and fresh.compile_count == 1
