"""The process survives many signal emits, whatever the PySide6 version's reference counting of True."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

_EMIT_MANY = """
import sys
import framewise.ui  # applies the guard
from PySide6.QtCore import QObject, Signal

class Source(QObject):
    changed = Signal(bool)

source = Source()
source.changed.connect(lambda value: None)
start = sys.getrefcount(True)
for _ in range(20000):  # more emits than True has references in a fresh interpreter
    source.changed.emit(False)
print("alive", start > 0)
"""


def test_twenty_thousand_emits_do_not_free_true():
    result = subprocess.run(
        [sys.executable, "-c", _EMIT_MANY], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["alive", "True"]
