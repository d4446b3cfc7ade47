"""Timing the encoder's passes: CUDA events on a GPU (read after the stream is done), a host clock elsewhere."""

from __future__ import annotations

import time

import torch


class StageTimer:
    """Times a region of work: CUDA events on a GPU (read after the stream is done), else a host clock.

    ``events`` (start, end) lets a caller reuse timing events it keeps instead of creating two, and
    ``stream`` spares looking the current stream up at every record.
    """

    def __init__(
        self,
        device: torch.device,
        events: tuple[torch.cuda.Event, torch.cuda.Event] | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        self._cuda = device.type == "cuda"
        if self._cuda:
            self._start, self._end = events or (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._stream = stream

    def __enter__(self) -> StageTimer:
        if self._cuda:
            self._start.record(self._stream)
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda:
            self._end.record(self._stream)
        else:
            self._elapsed_ms = (time.perf_counter() - self._t0) * 1e3

    def elapsed_ms(self) -> float:
        """Milliseconds between enter and exit; synchronizes on the end event on a GPU."""
        if self._cuda:
            self._end.synchronize()
            return self._start.elapsed_time(self._end)
        return self._elapsed_ms
