"""Cancel points inside the model: a cancel stops the work before the next module runs."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from framewise.core.backends.cancel import CancelScope

# How many modules' work the host may queue on a CUDA device ahead of the module the device is
# computing. Enough to keep the device fed (the host queues a decoder layer far faster than the
# device computes one over a long clip); few enough that a Stop leaves little queued work behind
# it, and that the host is never held in a wait for a whole prefill chunk, where it could not
# answer a Stop.
RUN_AHEAD_MODULES = 4


@contextmanager
def cancel_points(
    modules: Sequence[torch.nn.Module], cancel: CancelScope, while_: Callable[[], bool] = lambda: True
) -> Iterator[None]:
    """Raise CancelledError before the next of ``modules`` runs once the request running is
    cancelled (and ``while_()`` holds).

    Hooks run only where Python calls the modules (eager passes, the prefill), not inside a
    CUDA-graph replay, which is short; the engine checks again after each such stage. On a CUDA
    device the hooks also keep the host at most :data:`RUN_AHEAD_MODULES` modules ahead of the
    device, so that a Stop is answered within about one module's device time and the device is
    idle a few modules later.
    """
    queued: deque[torch.cuda.Event] = deque()

    def check(module: torch.nn.Module, args: Any) -> None:
        if not while_():
            return
        cancel.raise_if_cancelled()
        if args and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
            _hold_run_ahead(queued, cancel)

    handles = [module.register_forward_pre_hook(check) for module in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _hold_run_ahead(queued: deque[torch.cuda.Event], cancel: CancelScope) -> None:
    """Mark where the host is in the device's queue; wait until the device has reached the mark
    :data:`RUN_AHEAD_MODULES` modules back, then check ``cancel`` again (a Stop may have come
    during the wait)."""
    mark = torch.cuda.Event()
    mark.record()
    queued.append(mark)
    if len(queued) > RUN_AHEAD_MODULES:
        queued.popleft().synchronize()
        cancel.raise_if_cancelled()
