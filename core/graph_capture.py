"""Capturing CUDA graphs: the warm-up, memory pool and streams every captured forward here shares."""

from __future__ import annotations

from typing import Callable, Iterable

import torch


class GraphCapture:
    """Captures graphs into one shared memory pool, each after a warm-up run on one side stream.

    The warm-up runs the forward outside any capture, so its kernels are chosen and compiled and
    the libraries' workspaces allocated before the capture records it. Every warm-up runs on the
    same stream: cuBLAS keeps a workspace for each stream it has run on, so a new stream per
    graph would leave a workspace behind per graph (up to the 32 streams torch's pool hands out).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self._warmup_stream = torch.cuda.Stream(device)

    def warm(self, forward: Callable[[], None]) -> None:
        """Run ``forward`` once on the warm-up stream, outside any capture."""
        current = torch.cuda.current_stream(self.device)
        self._warmup_stream.wait_stream(current)
        with torch.cuda.stream(self._warmup_stream):
            forward()
        current.wait_stream(self._warmup_stream)

    def warm_before_capturing(self, forwards: Iterable[Callable[[], None]]) -> None:
        """Run each of ``forwards`` once on the warm-up stream, then give the memory they held back
        to the device: the graphs captured next (without warm-ups of their own) fill their pool
        without the warm-ups' blocks still reserved beside it."""
        for forward in forwards:
            self.warm(forward)
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()

    def capture(self, forward: Callable[[], None], *, warm_up: bool = True) -> torch.cuda.CUDAGraph:
        """``forward`` run once on the warm-up stream (unless ``warm_up`` is off: a forward with the
        same kernels and libraries ran before, :meth:`warm`), then captured as a graph in the pool."""
        if warm_up:
            self.warm(forward)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            forward()
        return graph


def memory_reserved(device: torch.device) -> int:
    """Device memory the caching allocator holds once its unused blocks are released."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device)
