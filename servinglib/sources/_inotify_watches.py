"""InotifyWatches: any number of directory watches on one inotify descriptor and one thread."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import struct
import threading
from collections.abc import Callable, Iterator
from typing import final

import attrs

_log = logging.getLogger("servinglib.sources.fs_event_trigger")

# <sys/inotify.h>
_IN_MODIFY = 0x2
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_EXCL_UNLINK = 0x04000000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_READ_BYTES = 64 << 10


@final
class InotifyWatches:
    """Watches directories (each, if asked, with everything under it) with one inotify
    descriptor read by one daemon thread, however many are watched.

    Each event is passed as a path to ``on_change`` (the entry that appeared,
    disappeared, was renamed or written and closed, and written if
    ``include_modifications``).  A watched root deleted or moved away calls its
    ``on_lost``, as does a queue overflow (every root then, with ``on_change``
    of each: events were dropped, and subdirectories made meanwhile are not
    watched until the root is watched afresh).  A directory moved out of a
    watched tree keeps its watch (reporting under its old path) until it is
    deleted.  Callbacks run on the reader thread, with no lock held: keep them
    quick.  Linux only (see :func:`available`).
    Thread-safe.
    """

    def __init__(self, on_change: Callable[[str], None], *, include_modifications: bool) -> None:
        self._on_change = on_change
        self._mask = _mask(include_modifications)
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise _os_error("inotify_init1")
        self._fd: int = fd
        self._wake_read, self._wake_write = os.pipe()
        self._lock = threading.Lock()
        self._roots: dict[str, _Root] = {}  # guarded by: _lock
        self._paths: dict[int, str] = {}  # guarded by: _lock; watch descriptor → directory
        self._holders: dict[int, set[str]] = {}  # guarded by: _lock; wd → roots holding it
        self._warned_full = False  # guarded by: _lock
        self._closed = False  # guarded by: _lock
        self._thread = threading.Thread(target=self._run, name="servinglib-inotify", daemon=True)
        self._thread.start()

    def watch(self, root: str, *, recursive: bool, on_lost: Callable[[], None]) -> None:
        """Watches the directory ``root`` (absolute; with its subdirectories if ``recursive``).

        Raises OSError if ``root`` itself cannot be watched (gone, or out of
        inotify watches); a subdirectory that cannot is logged and skipped.
        Requires: ``root`` is not watched now.
        """
        with self._lock:
            if self._closed:
                return
            wd = self._add_locked(root)
            self._roots[root] = _Root(recursive, on_lost, {wd})
            self._holders.setdefault(wd, set()).add(root)
            if recursive:
                self._add_tree_locked(root, [root])

    def unwatch(self, root: str) -> None:
        """Stops watching ``root`` (and what only it watched); a root not watched is ignored."""
        with self._lock:
            found = self._roots.pop(root, None)
            if found is None or self._closed:
                return
            for wd in found.wds:
                holders = self._holders.get(wd)
                if holders is None:
                    continue
                holders.discard(root)
                if not holders:
                    self._remove_locked(wd)

    def close(self) -> None:
        """Stops the thread and closes the descriptor; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        os.write(self._wake_write, b"x")
        if threading.current_thread() is not self._thread:
            self._thread.join()
        os.close(self._fd)
        os.close(self._wake_read)
        os.close(self._wake_write)

    # -- watches (under _lock) ------------------------------------------------

    def _add_locked(self, path: str) -> int:
        wd: int = self._libc.inotify_add_watch(self._fd, os.fsencode(path), self._mask)
        if wd < 0:
            raise _os_error(f"cannot watch {path}")
        self._paths[wd] = path  # the same directory renamed: its new name
        return wd

    def _add_tree_locked(
        self, start: str, roots: list[str], found: list[str] | None = None
    ) -> None:
        """Watches the directories under ``start`` for each of ``roots`` (recursive ones);
        appends to ``found`` (if given) the entries under ``start``, each listed after its
        directory's watch was added.

        A directory made and filled before its watch was added (``mkdir -p a/b`` and a file
        written in ``b`` before the event of ``a`` was read) gives no events for what it
        already holds: its entries are what the caller reports instead.
        """
        for path, is_directory in _tree(start, files=found is not None):
            if found is not None and path != start:
                found.append(path)
            if not is_directory:
                continue
            try:
                wd = self._add_locked(path)
            except OSError as exc:
                if exc.errno == errno.ENOSPC and not self._warned_full:
                    self._warned_full = True
                    _log.warning("out of inotify watches (polling still picks changes up): %s", exc)
                continue
            for root in roots:
                self._roots[root].wds.add(wd)
            self._holders.setdefault(wd, set()).update(roots)

    def _remove_locked(self, wd: int) -> None:
        del self._holders[wd]
        self._paths.pop(wd, None)
        self._libc.inotify_rm_watch(self._fd, wd)  # -1 if the directory went already

    def _forget_locked(self, wd: int) -> None:
        """The kernel dropped ``wd`` (its directory is gone, or it was removed)."""
        self._paths.pop(wd, None)
        for root in self._holders.pop(wd, ()):
            self._roots[root].wds.discard(wd)

    # -- the reader thread ----------------------------------------------------

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        while True:
            poller.poll()
            with self._lock:
                if self._closed:
                    return
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                continue
            for call in self._handle(data):
                try:
                    call()
                except Exception:  # noqa: BLE001 - the watcher must outlive one failed callback
                    _log.exception("a file-system event callback failed")

    def _handle(self, data: bytes) -> list[Callable[[], None]]:
        """What ``data``'s events call, after updating the watches (under the lock)."""
        calls: list[Callable[[], None]] = []
        with self._lock:
            for wd, mask, name in _events(data):
                if mask & _IN_Q_OVERFLOW:
                    for root, found in self._roots.items():
                        calls += [found.on_lost, _bind(self._on_change, root)]
                    continue
                directory = self._paths.get(wd)
                if directory is None:
                    continue
                if mask & _IN_IGNORED:
                    self._forget_locked(wd)
                    continue
                path = os.path.join(directory, name) if name else directory
                holders = self._holders.get(wd, set())
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                    calls += [self._roots[r].on_lost for r in holders if r == directory]
                if mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO):
                    recursive = [r for r in holders if self._roots[r].recursive]
                    if recursive:
                        entries: list[str] = []
                        self._add_tree_locked(path, recursive, entries)
                        calls += [_bind(self._on_change, entry) for entry in entries]
                calls.append(_bind(self._on_change, path))
        return calls


@attrs.define
class _Root:
    """A watched root: whether its tree is watched, what its loss calls, its descriptors."""

    recursive: bool
    on_lost: Callable[[], None]
    wds: set[int]


def available() -> bool:
    """True where inotify can be used (Linux with a libc that has it)."""
    try:
        return hasattr(ctypes.CDLL(None), "inotify_init1")
    except OSError:
        return False


def _mask(include_modifications: bool) -> int:
    """The events worth a look: entries appearing, disappearing, renamed, or closed after writing.

    Leaving out open/read-only close/attrib events spares decoding the events
    each poll's own directory listing causes, and a copy's every write;
    ``include_modifications`` adds writes (a watched file edited in place).
    """
    mask = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CLOSE_WRITE
    mask |= _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW | _IN_EXCL_UNLINK
    return mask | (_IN_MODIFY if include_modifications else 0)


def _events(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(watch descriptor, mask, name) of each event in ``data``."""
    offset = 0
    while offset + _EVENT.size <= len(data):
        wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
        offset += _EVENT.size
        name = os.fsdecode(data[offset : offset + length].rstrip(b"\0"))
        offset += length
        yield wd, mask, name


def _tree(start: str, *, files: bool) -> Iterator[tuple[str, bool]]:
    """``start`` and every directory under it (and each file, with ``files``), as (path, is a
    directory): a directory before its own listing, its files after (symlinks not followed;
    errors skipped)."""
    yield start, True
    for directory, names, found in os.walk(start):
        for name in names:
            yield os.path.join(directory, name), True
        for name in found if files else ():
            yield os.path.join(directory, name), False


def _bind(call: Callable[[str], None], path: str) -> Callable[[], None]:
    return lambda: call(path)


def _os_error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")
