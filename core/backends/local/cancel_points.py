"""Cancel points inside the model: a cancel stops the work before the next module runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from framewise.core.backends.cancel import CancelScope


@contextmanager
def cancel_points(
    modules: Sequence[torch.nn.Module], cancel: CancelScope, while_: Callable[[], bool] = lambda: True
) -> Iterator[None]:
    """Raise CancelledError before the next of ``modules`` runs once the request running is
    cancelled (and ``while_()`` holds).

    Hooks run only where Python calls the modules (eager passes, the prefill), not inside a
    CUDA-graph replay, which is short; the engine checks again after each such stage.
    """

    def check(module: torch.nn.Module, args: Any) -> None:
        if while_():
            cancel.raise_if_cancelled()

    handles = [module.register_forward_pre_hook(check) for module in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
