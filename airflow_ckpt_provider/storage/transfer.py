"""Parallel, hashing file copies between fsspec filesystems, with progress in the user's words.
Reads and writes through fsspec filesystems, and the local disk directly (``os`` calls).

Files are streamed in chunks (never read whole unless smaller than one chunk) and hashed with
SHA-256 while they are copied. Work runs on worker threads: file I/O and hashlib release the GIL.
Local paths bypass fsspec's file wrappers (``os.open``/``os.read``/``os.pwrite``) because
per-file overhead dominates checkpoints made of many small files.

Verified copy to a local archive (:func:`copy_verified`). Each block read from the source is
hashed, written to the archive file at its offset, read back from that file and compared byte for
byte with the very bytes object the hash consumed, before the next block is read; at the end the
file's size must equal the number of bytes hashed. The file then holds exactly the byte sequence
whose SHA-256 goes into the manifest, so re-hashing it could only give the same digest: one
SHA-256 pass plus a memcmp instead of two SHA-256 passes. The argument needs the comparison to be
against the hashed bytes themselves. Comparing the read-back with a second read of the source, or
copying in the kernel (``copy_file_range``/``sendfile``: the bytes never reach us) and hashing
only one side, leaves undetected a source that changed between the two reads, or a copy that
differs from what was hashed; such schemes are sound only with both sides hashed, the cost this
avoids. The read-back goes through the page cache: it proves what the filesystem returns for the
file (short, torn or misdirected writes, copy bugs, a concurrent writer), not what the medium
returns years later; ``verify_archive`` (an independent re-hash against the manifest) covers that
at restore and when an archive is reused.

A file can still be changed after it was compared. So :func:`copy_verified` also returns the
file's stamp (mtime, ctime, inode) read right after the check, and :func:`check_unchanged` lists
the archive once more before the manifest is written: exactly the copied files, each with the
size and stamp it had when verified, or :class:`ArchiveCorrupt`. Any write, truncation, chmod or
replacement changes the ctime or the inode, and only the kernel sets the ctime. Left unseen: a
change to an already compared block while later blocks of the same file are still being copied,
one within the clock tick of the stamp (kernels without multigrain timestamps, before 6.13), and
one after the final listing: windows of milliseconds, where the second re-hash pass this replaces
left every file unwatched from its re-hash until the manifest was written.

Other archive destinations (object stores, ``memory://``): the source is hashed while copying
(:func:`copy_file`) and a second pass re-reads and hashes the archive (:func:`verify_files`): an
upload can only be read back once it is closed, when the source blocks are gone.

Reading ahead: on a local source, :class:`Readahead` has the kernel start reading the next files
(``posix_fadvise(WILLNEED)``) while the workers copy, hash or verify the current ones.

Durability of a local archive: :func:`flush_filesystem` is one ``syncfs(2)`` of the archive's
filesystem after the last file (the archive runs it while its final checks run). An ``fsync`` per
file costs a device flush (and, with a journal, a commit) per file: archiving the 20,000 files of
``bench/archive.py`` took 6.6-6.9 s with one per file against 5.0-5.1 s with one syncfs
(alternating runs on one machine). Files of 64 KiB or more get a write-back head start
(:func:`start_writeback`) so the disk works while later files are hashed and the final syncfs has
less left to do. :func:`~airflow_ckpt_provider.storage.files.write_private_file` with
``atomic=True`` then writes the manifest under a temporary name, fsyncs it, renames it into place
and fsyncs the directory. Local archive files are created with mode 0o640 and directories 0o750 (less if the
umask says so): checkpoints hold application state.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import hashlib
import itertools
import logging
import os
import posixpath
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, NamedTuple, TypeVar

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import ArchiveCorrupt, UnsafeEntry
from airflow_ckpt_provider.checkpoint.manifest import ArchivedFile, human_bytes
from airflow_ckpt_provider.storage.files import (
    FILE_MODE,
    O_CLOEXEC,
    O_NOFOLLOW,
    entry_kind,
    is_local,
    make_private_dirs,
    open_regular,
    pwrite_all,
    unsafe_link,
)
from airflow_ckpt_provider.storage.listing import find_entries

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
WRITEBACK_MIN = 64 * 1024

_O_READ = os.O_RDONLY | O_CLOEXEC
_O_ARCHIVE = os.O_RDWR | os.O_CREAT | os.O_TRUNC | O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)

T = TypeVar("T")
R = TypeVar("R")


def default_workers(*filesystems: AbstractFileSystem) -> int:
    """Local disks only: one thread per CPU (2 to 8), since hashing and page-cache copies keep a
    thread busy and more threads than CPUs only contend (copying the 2 GiB tree of
    ``bench/archive.py`` on 2 CPUs, 5 alternating rounds: 2 threads took a median 4.7 s and 7.7 CPU
    s, 4 threads 5.4 s and 9.4 CPU s). 16 threads when an object store (latency-bound) is
    involved."""
    if all(is_local(fs) for fs in filesystems):
        return max(2, min(8, os.cpu_count() or 2))
    return 16


def _open(fs: AbstractFileSystem, path: str, mode: str) -> IO[bytes]:
    """A raw file (readinto/write are syscalls) on a local disk, opened by :func:`open_regular`:
    never through a link, never a FIFO or device; fsspec's file elsewhere."""
    if is_local(fs):  # written files get the mode open() gives them (0o666 less the umask)
        flags = os.O_RDONLY if "r" in mode else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        return os.fdopen(open_regular(path, flags, 0o666), mode, buffering=0)
    return fs.open(path, mode)


_buffers = threading.local()


def _buffer(size: int) -> memoryview:
    """One reusable buffer per thread: fresh multi-MiB bytes per chunk cost page faults."""
    buf = getattr(_buffers, "buf", None)
    if buf is None or len(buf) != size:
        buf = memoryview(bytearray(size))
        _buffers.buf = buf
    return buf


def _chunks(handle: IO[bytes], chunk: int) -> Iterator[memoryview | bytes]:
    """Successive blocks of ``handle``; views into the thread's buffer when it supports readinto."""
    readinto = getattr(handle, "readinto", None)
    if readinto is None:
        while block := handle.read(chunk):
            yield block
        return
    buf = _buffer(chunk)
    while True:
        n = readinto(buf)
        if not n:
            return
        yield buf[:n]


def hash_file(fs: AbstractFileSystem, path: str, chunk: int = CHUNK) -> tuple[int, str]:
    """(size, sha256 hex) of one file, streamed."""
    digest, size = hashlib.sha256(), 0
    with _open(fs, path, "rb") as handle:
        for block in _chunks(handle, chunk):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def copy_file(
    src_fs: AbstractFileSystem, src: str, dst_fs: AbstractFileSystem, dst: str, chunk: int = CHUNK
) -> tuple[int, str]:
    """Copy one file, hashing the bytes as they pass; returns (size, sha256 hex)."""
    digest, size = hashlib.sha256(), 0
    with _open(src_fs, src, "rb") as fin, _open(dst_fs, dst, "wb") as fout:
        for block in _chunks(fin, chunk):
            digest.update(block)
            view = memoryview(block)
            while view:  # raw writes may be partial
                written = fout.write(view)
                view = view[written if written is not None else len(view):]
            size += len(block)
    return size, digest.hexdigest()


class Copied(NamedTuple):
    """A file in a local archive as verified: size, SHA-256 hex, stamp (mtime, ctime, inode)."""

    size: int
    sha256: str
    stamp: tuple[int, int, int]


class ReadBackMismatch(Exception):
    """A local archive file did not read back as the bytes written to it (``detail`` says where)."""

    def __init__(self, path: str, detail: str) -> None:
        self.path, self.detail = path, detail
        super().__init__(f"{path}: {detail}")


def _reader(fs: AbstractFileSystem, path: str) -> tuple[Callable[[int], bytes], Callable[[], None]]:
    """(read(n), close) of a source file: plain syscalls on a local disk (:func:`open_regular`)."""
    if is_local(fs):
        fd = open_regular(path)
        return functools.partial(os.read, fd), functools.partial(os.close, fd)
    handle = fs.open(path, "rb")
    return handle.read, handle.close


def _checked_stamp(fd: int, size: int, path: str) -> tuple[int, int, int]:
    """The stamp of a file just verified; its size must be ``size``; mode narrowed to 0o640."""
    info = os.fstat(fd)
    if info.st_size != size:
        raise ReadBackMismatch(path, f"{info.st_size} bytes on disk after writing {size}")
    mode = stat.S_IMODE(info.st_mode)
    if mode & ~FILE_MODE:  # a file left by an earlier attempt or another tool
        os.fchmod(fd, mode & FILE_MODE)
        info = os.fstat(fd)
    return _stamp(info)


def copy_verified(src_fs: AbstractFileSystem, src: str, dst: str, *, size_hint: int = -1,
                  chunk: int = CHUNK) -> Copied:
    """Copy one file to the LOCAL path ``dst`` (created 0o640, truncated if there) and verify it.

    Each block read from ``src`` is hashed, written at its offset, read back from ``dst`` and
    compared with the hashed block before the next read; the final size must be the bytes hashed
    (see the module docstring for why that equals re-hashing ``dst``). ``size_hint`` (the listed
    size) sizes the first read, so a file smaller than ``chunk`` takes one read plus the read that
    finds its end. Files of ``WRITEBACK_MIN`` bytes or more get a write-back head start
    (:func:`start_writeback`); durability is the caller's :func:`flush_filesystem`. Raises
    :class:`ReadBackMismatch` if ``dst`` does not read back as written, ``OSError`` on I/O
    errors; a partial ``dst`` is left for a re-run to overwrite.
    """
    read, close = _reader(src_fs, src)
    try:
        fd = os.open(dst, _O_ARCHIVE, FILE_MODE)
        try:
            digest, offset = hashlib.sha256(), 0
            want = min(size_hint + 1, chunk) if size_hint >= 0 else chunk
            while block := read(want):
                digest.update(block)
                pwrite_all(fd, block, offset)
                if os.pread(fd, len(block), offset) != block:
                    raise ReadBackMismatch(dst, f"bytes {offset}-{offset + len(block)} read back differently")
                offset += len(block)
                want = chunk if len(block) == want else 1  # after a short read: just find the end
            stamp = _checked_stamp(fd, offset, dst)
            if offset >= WRITEBACK_MIN:
                start_writeback(fd)
        finally:
            os.close(fd)
    finally:
        close()
    return Copied(offset, digest.hexdigest(), stamp)


def same_verified(src_fs: AbstractFileSystem, src: str, dst: str, *, chunk: int = CHUNK) -> Copied | None:
    """:class:`Copied` if the LOCAL file ``dst`` holds exactly the bytes of ``src`` (block by block
    comparison; the hash is of the compared source bytes, as in :func:`copy_verified`), else None.
    Used to keep the files an interrupted earlier attempt finished."""
    read, close = _reader(src_fs, src)
    try:
        try:
            fd = open_regular(dst)
        except (OSError, UnsafeEntry):
            return None
        try:
            digest, offset = hashlib.sha256(), 0
            while block := read(chunk):
                if os.pread(fd, len(block), offset) != block:
                    return None
                digest.update(block)
                offset += len(block)
            try:
                return Copied(offset, digest.hexdigest(), _checked_stamp(fd, offset, dst))
            except ReadBackMismatch:
                return None
        finally:
            os.close(fd)
    finally:
        close()


def check_unchanged(fs: AbstractFileSystem, root: str, files: Sequence[ArchivedFile],
                    stamps: Mapping[str, Any], *, where: str) -> None:
    """List ``root`` once: it must hold exactly ``files``, each with the size and stamp recorded
    when it was verified; :class:`ArchiveCorrupt` naming the first file that was added, removed
    or touched since."""
    present, now, _ = scan_tree(fs, root)

    def changed(entry: ArchivedFile) -> tuple[str, str] | None:
        if present[entry.path] != entry.size or now[entry.path] != stamps.get(entry.path):
            return (f"{present[entry.path]} bytes, changed after it was verified",
                    f"{entry.size} bytes, untouched since verified")
        return None

    _raise_first(_listing_problems(present, sorted(files, key=lambda f: f.path), changed), where)


def _listing_problems(present: Mapping[str, int], files: Sequence[ArchivedFile],
                      differs: Callable[[ArchivedFile], tuple[str, str] | None]) -> list[tuple[str, str, str]]:
    """(file, found, expected) for each listed file the manifest lacks, then, in the order of
    ``files``, each manifest file that is missing or for which ``differs`` says (found, expected)."""
    expected = {f.path for f in files}
    problems = [(path, "a file the manifest does not list", "only the manifest's files")
                for path in sorted(set(present) - expected)]
    for entry in files:
        if entry.path not in present:
            problems.append((entry.path, "the file is missing", f"{entry.size} bytes"))
        elif (difference := differs(entry)) is not None:
            problems.append((entry.path, *difference))
    return problems


@functools.cache
def _libc(name: str, *argtypes: Any) -> Callable[..., int] | None:
    """A libc function through ctypes (the GIL is released while it runs); None where missing."""
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):  # not Linux / no such symbol
        return None
    function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function


_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages now, without waiting (Linux
    ``sync_file_range(SYNC_FILE_RANGE_WRITE)``; nothing elsewhere). Only a head start so the disk
    works while later files are hashed: it guarantees nothing, :func:`flush_filesystem` does (and
    reports any write-back error), so its result is ignored."""
    function = _libc("sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    if function is not None:
        function(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def flush_filesystem(path: str) -> str:
    """Make everything written so far to the LOCAL filesystem holding ``path`` durable: one
    ``syncfs(2)`` (data, inodes and directory entries of every file; Linux), else ``os.sync()``.
    Returns "syncfs" or "sync". ``OSError`` if the kernel reports a write-back error (syncfs
    only: ``sync`` reports nothing)."""
    syncfs = _libc("syncfs", ctypes.c_int)
    if syncfs is None:
        os.sync()
        return "sync"
    fd = os.open(path, os.O_RDONLY | O_CLOEXEC)
    try:
        if syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"syncfs failed: {os.strerror(code)}", path)
    finally:
        os.close(fd)
    return "syncfs"


def scan_tree(fs: AbstractFileSystem, root: str) -> tuple[dict[str, int], dict[str, Any], list[str]]:
    """One listing under ``root``: ({rel file: size}, {rel file: modification stamp or None},
    [rel empty directories]). Local stamps are (mtime, ctime, inode); others the first of
    ``_STAMP_KEYS`` the listing gives."""
    root = root.rstrip("/")
    if is_local(fs):
        files, stamps, dirs = _scan_local(root)
    else:
        files, stamps, dirs = _scan_fsspec(fs, root)
    parents = {posixpath.dirname(p) for p in files} | {posixpath.dirname(d) for d in dirs}
    expanded: set[str] = set()
    for parent in parents:
        while parent and parent not in expanded:
            expanded.add(parent)
            parent = posixpath.dirname(parent)
    return files, stamps, sorted(d for d in dirs if d not in expanded)


def _scan_local(root: str) -> tuple[dict[str, int], dict[str, Any], set[str]]:
    """os.scandir walk: fsspec's find costs a Python-level info() per entry (seconds at 20k files).
    The one walk of local trees: links are never followed (:class:`UnsafeEntry` naming the link and
    its target, whether it stays in the tree or not: Spark writes none) and a FIFO, socket or device
    is refused, before anything reads it."""
    real_root = os.path.realpath(root)
    files: dict[str, int] = {}
    stamps: dict[str, Any] = {}
    dirs: set[str] = set()
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            entries = os.scandir(os.path.join(root, rel) if rel else root)
        except FileNotFoundError:
            continue
        with entries:
            for entry in entries:
                name = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_symlink():
                    raise unsafe_link(entry.path, real_root)
                if entry.is_dir(follow_symlinks=False):
                    dirs.add(name)
                    pending.append(name)
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed since the listing: a running query purges old batches
                    continue
                if not stat.S_ISREG(info.st_mode):
                    raise UnsafeEntry(found=f"{entry_kind(info.st_mode)} at {entry.path}",
                                      expected="regular files and folders only", path=entry.path)
                files[name] = info.st_size
                stamps[name] = _stamp(info)
    return files, stamps, dirs


def _stamp(info: os.stat_result) -> tuple[int, int, int]:
    """(mtime, ctime, inode) of a local file: any write, truncation or replacement changes it."""
    return info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def _scan_fsspec(fs: AbstractFileSystem, root: str) -> tuple[dict[str, int], dict[str, Any], set[str]]:
    prefix = root + "/"
    entries = find_entries(fs, root, withdirs=True)
    files: dict[str, int] = {}
    stamps: dict[str, Any] = {}
    dirs: set[str] = set()
    for name, info in entries.items():
        name = name.rstrip("/")
        if not name.startswith(prefix):
            continue
        rel = name[len(prefix):]
        if info.get("type") == "directory":
            dirs.add(rel)
        else:
            files[rel] = int(info.get("size") or 0)
            stamps[rel] = next((info[k] for k in _STAMP_KEYS if info.get(k) is not None), None)
    return files, stamps, dirs


_STAMP_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modificationTime", "ETag", "etag", "created")


def list_tree(fs: AbstractFileSystem, root: str) -> tuple[dict[str, int], list[str]]:
    """({relative file path: size}, [relative empty directories]) under ``root``; one listing."""
    files, _, empty = scan_tree(fs, root)
    return files, empty


def make_dirs(fs: AbstractFileSystem, root: str, rel_files: Iterable[str], rel_dirs: Iterable[str] = (), *,
              private: bool = False) -> None:
    """Create every directory the files need (leaves only), once each; ``private`` on a local
    filesystem: each directory created gets mode 0o750 (:func:`make_private_dirs`)."""
    needed = {posixpath.dirname(p) for p in rel_files} | set(rel_dirs)
    ancestors: set[str] = set()
    for rel in needed:
        parent = posixpath.dirname(rel)
        while parent and parent not in ancestors:
            ancestors.add(parent)
            parent = posixpath.dirname(parent)
    leaves = needed - ancestors
    private = private and is_local(fs)
    for rel in sorted(leaves | {""}):
        path = posixpath.join(root, rel) if rel else root
        if private:
            make_private_dirs(path)
        else:
            fs.makedirs(path, exist_ok=True)


def eta_text(done: float, total: float, elapsed: float) -> str:
    """``about 42 s left`` at the rate so far; ``time left unknown`` before any progress."""
    if done <= 0 or total <= done:
        return "time left unknown" if total > done else "almost done"
    left = (total - done) * elapsed / done
    return f"about {left:.0f} s left" if left < 120 else f"about {left / 60:.0f} min left"


class Progress:
    """Thread-safe counter that logs ``<verb> 1,200 of 20,000 files, 1.1 GiB of 2.0 GiB (85.3 MiB/s,
    about 11 s left)``.

    Logs every ``every_files`` files or ``every_s`` seconds, whichever comes first, and once at
    the end (:meth:`finish`).
    """

    def __init__(self, log: logging.Logger, verb: str, total_files: int, total_bytes: int, *,
                 every_files: int = 1000, every_s: float = 10.0) -> None:
        self.log, self.verb = log, verb
        self.total_files, self.total_bytes = total_files, total_bytes
        self.every_files, self.every_s = max(1, every_files), every_s
        self.files = self.bytes = self.skipped = 0
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()
        self._last_files = 0

    def add(self, nbytes: int, *, skipped: bool = False) -> None:
        with self._lock:
            self.files += 1
            self.bytes += nbytes
            self.skipped += int(skipped)
            now = time.monotonic()
            if self.files - self._last_files >= self.every_files or now - self._last >= self.every_s:
                self._last, self._last_files = now, self.files
                self._emit(now)

    def rate(self) -> float:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        return self.bytes / elapsed

    def _emit(self, now: float, final: bool = False) -> None:
        elapsed = max(now - self._start, 1e-9)
        skipped = f", {self.skipped:,} already there" if self.skipped else ""
        took = f" in {elapsed:.1f} s" if final else ""
        eta = "" if final else f", {eta_text(self.bytes, self.total_bytes, elapsed)}"
        self.log.info("%s %s of %s files, %s of %s%s (%s/s%s)%s", self.verb, f"{self.files:,}",
                      f"{self.total_files:,}", human_bytes(self.bytes), human_bytes(self.total_bytes), took,
                      human_bytes(self.bytes / elapsed), eta, skipped)

    def finish(self) -> float:
        """Log the final line (with the elapsed time); returns the elapsed seconds."""
        now = time.monotonic()
        self._emit(now, final=True)
        return now - self._start


def spread_directories(paths: Iterable[str]) -> list[str]:
    """``paths`` sorted, then dealt out one directory at a time (``a/1, b/1, c/1, a/2, ...``) so
    parallel workers create files in different directories: creating a file locks its directory,
    and workers in the same one would wait for each other."""
    groups: dict[str, list[str]] = {}
    for path in sorted(paths):
        groups.setdefault(posixpath.dirname(path), []).append(path)
    columns = list(groups.values())
    spread: list[str] = []
    for row in range(max(map(len, columns), default=0)):
        spread.extend(column[row] for column in columns if row < len(column))
    return spread


READAHEAD_BYTES = 64 * 1024 * 1024
READAHEAD_FILES = 64


class Readahead:
    """Keeps the kernel reading the LOCAL files the workers will open next.

    :meth:`reach` (called with an item's index before it is worked on) asks the kernel, with
    ``posix_fadvise(POSIX_FADV_WILLNEED)``, to start reading the files from that index up to
    ``window_bytes`` (or ``window_files``) ahead, and returns without waiting. Workers then find
    their files in the page cache instead of waiting for the disk one read at a time: with the
    2 GiB, 20,000-file tree of ``bench/archive.py`` evicted from the page cache, archiving it took a
    median 5.0 s with it against 6.7 s without, and re-hashing the archive 2.3 s against 3.0 s
    (2 threads, 3 alternating rounds each). Only a hint: a file that cannot be opened is skipped
    (the copy reports it), nothing is read into our memory, and the open never blocks
    (``O_NONBLOCK``). Use :meth:`for_files`, which gives None where hints cannot help (object
    stores, no ``posix_fadvise``).
    """

    def __init__(self, paths: Sequence[str], sizes: Sequence[int], *, window_bytes: int = READAHEAD_BYTES,
                 window_files: int = READAHEAD_FILES) -> None:
        self.paths = paths
        self.starts = list(itertools.accumulate(sizes, initial=0))  # starts[i]: bytes before item i
        self.window_bytes, self.window_files = window_bytes, max(1, window_files)
        self.hinted = 0  # items [0, hinted) were hinted
        self._lock = threading.Lock()

    @classmethod
    def for_files(cls, fs: AbstractFileSystem, root: str, rel_paths: Iterable[str], sizes: Sequence[int],
                  **window: int) -> Readahead | None:
        """Over ``root``/each of ``rel_paths`` (``sizes`` in the same order); None unless ``fs`` is
        local and the platform has ``posix_fadvise``."""
        if not is_local(fs) or not hasattr(os, "posix_fadvise"):
            return None
        return cls([posixpath.join(root, rel) for rel in rel_paths], sizes, **window)

    def reach(self, index: int) -> None:
        """A worker is about to read item ``index``: hint the items from it to the window's end."""
        with self._lock:
            first = max(self.hinted, index)
            end = bisect.bisect_left(self.starts, self.starts[index] + self.window_bytes, lo=index + 1)
            end = min(end, index + self.window_files, len(self.paths))
            if end <= first:
                return
            self.hinted = end
        for item in range(first, end):
            self._hint(self.paths[item], min(self.starts[item + 1] - self.starts[item], self.window_bytes))

    @staticmethod
    def _hint(path: str, length: int) -> None:
        """Read ahead the first ``length`` bytes of ``path`` (a big file: the window's worth; the
        kernel's own readahead follows the reads after that)."""
        try:
            fd = os.open(path, _O_READ | os.O_NONBLOCK | O_NOFOLLOW)
        except OSError:
            return
        try:
            os.posix_fadvise(fd, 0, length, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def run_parallel(items: Sequence[T], work: Callable[[T], R], workers: int, *,
                 readahead: Readahead | None = None) -> list[R]:
    """``[work(item) ...]`` on ``workers`` threads pulling from one shared cursor (no future per
    item: tens of thousands of small files make per-task overhead visible). The first exception
    stops the others after their current item and is re-raised. ``readahead`` (over the same
    items, in the same order) is told each index before its item is worked on."""
    def one(index: int) -> R:
        if readahead is not None:
            readahead.reach(index)
        return work(items[index])

    if workers <= 1 or len(items) <= 1:
        return [one(index) for index in range(len(items))]
    results: list[Any] = [None] * len(items)
    cursor = iter(range(len(items)))
    lock = threading.Lock()
    failed: list[BaseException] = []

    def worker() -> None:
        while not failed:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            try:
                results[index] = one(index)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                failed.append(exc)
                return

    threads = [threading.Thread(target=worker, name=f"ckpt-copy-{i}", daemon=True)
               for i in range(min(workers, len(items)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    return results


def check_listing(fs: AbstractFileSystem, root: str, files: Sequence[ArchivedFile], *, where: str,
                  ignore: frozenset[str] = frozenset()) -> None:
    """One listing of ``root`` (the safe walk: links and special files refused) must name exactly
    ``files`` with their sizes (and may hold the ``ignore`` files besides); :class:`ArchiveCorrupt`
    naming the first that is missing, extra or of another size. Reads no file."""
    present, _ = list_tree(fs, root) if fs.exists(root) else ({}, [])
    present = {path: size for path, size in present.items() if path not in ignore}

    def resized(entry: ArchivedFile) -> tuple[str, str] | None:
        if present[entry.path] != entry.size:
            return f"{present[entry.path]} bytes", f"{entry.size} bytes"
        return None

    _raise_first(_listing_problems(present, files, resized), where)


def verify_files(
    fs: AbstractFileSystem,
    root: str,
    files: Sequence[ArchivedFile],
    *,
    where: str,
    workers: int,
    log: logging.Logger,
    verb: str = "verified",
    chunk: int = CHUNK,
    ignore: frozenset[str] = frozenset(),
) -> None:
    """Re-read and hash every file under ``root``; :class:`ArchiveCorrupt` naming the first bad file.

    Missing files, size differences, checksum differences and files the manifest does not list
    all fail. ``where`` is the location shown in the error.
    """
    check_listing(fs, root, files, where=where, ignore=ignore)
    progress = Progress(log, verb, len(files), sum(f.size for f in files))

    def check(entry: ArchivedFile) -> tuple[str, str, str] | None:
        size, digest = hash_file(fs, posixpath.join(root, entry.path), chunk)
        progress.add(size)
        if (size, digest) != (entry.size, entry.sha256):
            found = f"sha256 {digest[:16]}… ({size} bytes)"
            return entry.path, found, f"sha256 {entry.sha256[:16]}… ({entry.size} bytes)"
        return None

    readahead = Readahead.for_files(fs, root, [f.path for f in files], [f.size for f in files])
    results = run_parallel(list(files), check, workers, readahead=readahead)
    progress.finish()
    _raise_first(sorted(r for r in results if r is not None), where)


def _raise_first(problems: list[tuple[str, str, str]], where: str) -> None:
    if not problems:
        return
    path, found, expected = problems[0]
    more = f" (and {len(problems) - 1} more files)" if len(problems) > 1 else ""
    raise ArchiveCorrupt(file=path, found=found + more, expected=expected, path=where)


def copy_tree(src_fs: AbstractFileSystem, src: str, dst_fs: AbstractFileSystem, dst: str, *,
              skip: Callable[[str], bool] = lambda rel: False,
              workers: int | None = None) -> dict[str, tuple[int, str]]:
    """Copy every file under ``src`` to ``dst`` (relative paths kept) except those ``skip(rel)``
    names; files that vanish while the copy runs (a running query's temporary files, purged
    batches) are left out. Returns {relative path: (size, sha256)} of what was copied. The source
    is only read. For a snapshot of a running query's checkpoint (a trial copy), not an archive:
    archives use :func:`copy_verified` and a manifest."""
    files, empty = list_tree(src_fs, src)
    chosen = sorted(rel for rel in files if not skip(rel))
    make_dirs(dst_fs, dst, chosen, [d for d in empty if not skip(d)])
    copied: dict[str, tuple[int, str]] = {}

    def one(rel: str) -> None:
        try:
            copied[rel] = copy_file(src_fs, posixpath.join(src, rel), dst_fs, posixpath.join(dst, rel))
        except FileNotFoundError:
            log.debug("%s vanished while copying: left out", rel)

    run_parallel(chosen, one, workers or default_workers(src_fs, dst_fs))
    return copied
