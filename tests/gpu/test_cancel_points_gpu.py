"""Cancel points on CUDA hold the host a few modules ahead of the device: a Stop asked while the
device works through a long queue of modules is answered within about one module's time, and the
device is idle a few modules later (without the hold the host queues every module at once and
the Stop finds nothing left to stop)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from framewise.core.backends.cancel import CancelScope
from framewise.core.backends.local.cancel_points import RUN_AHEAD_MODULES, cancel_points
from framewise.core.errors import CancelledError

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

MODULES = 40
SLEEP_CYCLES = 4_000_000  # a few milliseconds of device time a module


class DeviceSleep(torch.nn.Module):
    """A module whose forward keeps the device busy for a fixed number of cycles."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        torch.cuda._sleep(SLEEP_CYCLES)
        return hidden


def module_ms(module: torch.nn.Module, hidden: torch.Tensor) -> float:
    """Device milliseconds of one call of ``module``, measured."""
    module(hidden)  # warm
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    module(hidden)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def test_a_stop_in_a_long_queue_is_answered_within_a_module_and_leaves_few_queued() -> None:
    modules = [DeviceSleep() for _ in range(MODULES)]
    hidden = torch.zeros(8, device="cuda")
    one = module_ms(modules[0], hidden)
    torch.cuda.synchronize()
    scope, request = CancelScope(), 1
    asked: list[float] = []
    after_s = MODULES / 2 * one / 1e3

    def ask() -> None:
        asked.append(time.perf_counter())
        scope.cancel(request)

    timer = threading.Timer(after_s, ask)
    with scope.request(request), cancel_points(modules, scope):
        timer.start()
        with pytest.raises(CancelledError):
            for module in modules:
                module(hidden)
        returned = time.perf_counter()
    torch.cuda.synchronize()
    idle = time.perf_counter()
    timer.join()
    to_return_ms, to_idle_ms = (returned - asked[0]) * 1e3, (idle - asked[0]) * 1e3
    # The host waits at most for one module to finish before it sees the Stop; what it had queued
    # is the modules it ran ahead by, and the one computing.
    assert to_return_ms <= one + 2, f"answered after {to_return_ms:.1f} ms; a module takes {one:.1f} ms"
    assert to_idle_ms <= (RUN_AHEAD_MODULES + 1) * one + 2, f"idle after {to_idle_ms:.1f} ms"
