"""A guard against a reference-count bug in PySide6 6.12.0 that would abort the process.

In PySide6 6.12.0 every ``SignalInstance.emit()`` called from Python hands back ``True`` without
taking a reference to it, so each emit releases one reference that was never taken. On CPython
3.11, where ``True`` is an ordinary object, a few thousand emits (a long streamed answer, or
pyqtgraph's own range signals while a plot resizes) bring its count to zero and CPython aborts with
"bool_dealloc: deallocating True or False". CPython 3.12 and later make ``True`` immortal, and
PySide6 6.11 does not have the bug.

:func:`guard_against_emit_refcount_bug` checks for the bug by emitting once, and where it is present
gives ``True`` a reserve of references large enough that no run can spend it. ``True`` is never freed
in any case; only the count is raised.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

RESERVE = 1 << 40


class _Probe(QObject):
    fired = Signal()


def emit_releases_true() -> bool:
    """True when emitting a signal from Python drops a reference to ``True`` (PySide6 6.12.0)."""
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(8):
        probe.fired.emit()
    return sys.getrefcount(True) < before - 4


def guard_against_emit_refcount_bug() -> bool:
    """Give ``True`` a reserve of references when the bug is present; returns whether it was."""
    if sys.version_info >= (3, 12) or not emit_releases_true():
        return False
    ctypes.c_ssize_t.from_address(id(True)).value += RESERVE  # ob_refcnt is the object's first field
    return True
