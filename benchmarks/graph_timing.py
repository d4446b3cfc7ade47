"""GPU time of a piece of work replayed from a CUDA graph, shared by the benchmarks."""

from __future__ import annotations

from typing import Callable

import torch


def graph_replay_ms(fn: Callable[[], object], replays: int) -> float:
    """Milliseconds per replay of ``fn`` captured in one CUDA graph: the mean of ``replays``
    replays timed with CUDA events, after warm-up calls on a side stream (cuBLAS handles,
    workspaces, Triton compiles) and a few untimed replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays
