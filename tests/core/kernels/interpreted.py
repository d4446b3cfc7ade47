"""Triton kernels run on the CPU through Triton's interpreter, for tests without a GPU.

Triton decides when it is imported, and when each ``@triton.jit`` function is defined (its own
library's included), whether kernels compile or are interpreted (``TRITON_INTERPRET=1``); a test
session imports Triton to compile kernels (tests/core/test_decode_kernels_compile.py), so the
interpreted tests run in a process of their own: a module marked :data:`only_interpreted` skips
its tests in the session, and :mod:`tests.core.kernels.test_interpreted_kernels` runs it in a
pytest subprocess with the variable set (listed in its ``MODULES``).

The interpreter computes each program in NumPy, its scalars as one-element arrays; NumPy 2.4 no
longer turns those into an ``int``, which the interpreter needs for a loop bound read from memory
(triton-lang/triton#9171), so in an interpreted process that conversion takes the one element.
"""

from __future__ import annotations

import os

import pytest

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

only_interpreted = pytest.mark.skipif(
    not INTERPRETED,
    reason="runs through Triton's interpreter, in tests/core/kernels/test_interpreted_kernels.py's subprocess",
)


def _take_scalars_by_their_element() -> None:
    """Make the interpreter's ``tl.tensor.__index__`` read a scalar's one element (triton#9171)."""
    from triton.runtime import interpreter

    patch_lang_tensor = interpreter._patch_lang_tensor

    def patched(tensor, scope) -> None:
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


if INTERPRETED:
    pytest.importorskip("triton", reason="the kernels need Triton, which interprets them on the CPU")
    _take_scalars_by_their_element()
