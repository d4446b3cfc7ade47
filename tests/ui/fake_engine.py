"""A stand-in for ``core.backends.local.engine.Engine`` with the same API: frames from the clip (OpenCV), canned answers.

It implements :class:`~framewise.core.backends.base.AnsweringBackend` on the backends' shared
plumbing (a test holds it to the protocol) and follows the engine's event protocol: every event carries the request's id, EngineInfo is sent
when a model loads and when settings change the model or encoder, the conversation record is
emptied with a ConversationReset saying why, the encoder numbers come from the core accumulator,
and the answer's speed so far from the core meter (its final figures are canned).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from framewise.core.backends.base import BackendBase
from framewise.core.backends.reading import encode_done
from framewise.core.video import SampledFrames
from framewise.core.errors import ClipNotFoundError, ModelLoadError, UnreadableClipError
from framewise.core.events import (
    AnswerStats,
    ChunkStats,
    ClipSampled,
    Done,
    EncodeDone,
    EngineInfo,
    EventSink,
    Progress,
    ResetReason,
    Token,
)
from framewise.core.families import family_for
from framewise.core.metrics import DecodeSpeedMeter, EncoderMetricsAccumulator
from framewise.core.seam import FamilyLimits
from framewise.core.settings import AppSettings
from training.demo_model import DEMO_LABEL


# The fake stands in for the demo model, a Qwen3-VL checkpoint.
DEMO_LIMITS = family_for("qwen3_vl").limits


@dataclass(frozen=True)
class FakeClip:
    """The fake's open clip: its file (``None`` for frames given directly) and what opening it reported."""

    path: Path | None
    summary: EncodeDone


class FakeEngine(BackendBase[FakeClip]):
    """``core.backends.local.engine.Engine``'s API without a model: frames come from the clip (OpenCV), answers are canned.

    Class attributes let a test slow answers down, make them run to ``max_new_tokens`` (``endless``),
    hold ``load`` until ``load_gate`` is set, hold reading a clip until ``read_gate`` is set (a
    cancel ends the read meanwhile, as the engine's does), or make a call fail.
    """

    token_delay_s = 0.005
    answer_words = ("The", " red", " square", " moves", " to", " the", " right", ".")
    endless = False
    load_gate: threading.Event | None = None
    read_gate: threading.Event | None = None
    fail_ask_with: Exception | None = None
    fail_load_for_source: str | None = None
    frames_per_pass = 4

    def __init__(self, settings: AppSettings, sink: EventSink) -> None:
        super().__init__(settings, sink)
        self.calls: list[tuple[str, float]] = []
        self.metrics = EncoderMetricsAccumulator()

    def _limits_for(self, settings: AppSettings) -> FamilyLimits:
        return DEMO_LIMITS

    def load(self, request_id: int | None = None) -> EngineInfo:
        with self._serving(request_id):
            if self.load_gate is not None:
                self.load_gate.wait(10)
            if self.settings.model.source == self.fail_load_for_source:
                raise ModelLoadError(f"{self.settings.model.source} is not a Qwen3-VL checkpoint folder")
            self._emit(Progress("load", 0, 2, "Reading the configuration"))
            self._emit(Progress("load", 1, 2, "Loading the weights"))
            self._emit(Progress("load", 2, 2, "Loaded"))
            return self._emit(self.info())

    def apply_settings(self, settings: AppSettings, request_id: int | None = None) -> EngineInfo | None:
        with self._serving(request_id):
            old, self.settings = self.settings, settings.validate(DEMO_LIMITS)
            budgets = settings.encoder.token_budgets(DEMO_LIMITS)[:3]
            for index, budget in enumerate(budgets):
                self._emit(Progress("capture", index, len(budgets), f"Capturing encoder graph for {budget} patches"))
            self._emit(Progress("capture", len(budgets), len(budgets), f"Captured {len(budgets)} encoder graphs"))
            info = None
            if settings.model != old.model or settings.encoder != old.encoder:
                info = self._emit(self.info())
            if self.open_clip_path() and (settings.model != old.model or settings.sampling != old.sampling):
                self._sample_again(self.clips)
            return info

    def info(self) -> EngineInfo:
        return EngineInfo(
            device="cpu",
            device_kind="cpu",
            dtype="float32",
            model_name="framewise-demo",
            model_label=DEMO_LABEL,
            encoder_name="eager",
            graphs_enabled=False,
            graphs_reason="no CUDA device: the encoder runs eager on the CPU",
            attention_backends=("eager", "sdpa_masked"),
            limits=DEMO_LIMITS,
        )

    def _open_clip(self, path: Path, reason: ResetReason) -> EncodeDone:
        return self._read(path, reason, "open_clip")

    def _add_clip(self, path: Path, span: tuple[float, float] | None) -> EncodeDone:
        return self._read(path, None, "add_clip" if span is None else "look_closer", span)

    def _read(
        self, path: Path, reason: ResetReason | None, call: str, span: tuple[float, float] | None = None
    ) -> EncodeDone:
        """Sample ``path`` and open it (``reason``: why the conversation empties) or, with ``None``, add it
        (a ``span`` is only named and marked: the fake samples the whole clip)."""
        self.calls.append((call, time.perf_counter()))
        while self.read_gate is not None and not self.read_gate.wait(0.01):
            self._cancel.raise_if_cancelled()
        if not path.is_file():
            raise ClipNotFoundError(f"{path} does not exist")
        frames, timestamps, duration = _sample_with_opencv(
            str(path), self.settings.sampling.fps, self.settings.sampling.max_frames
        )
        size_and_duration = (frames.shape[2], frames.shape[1], duration)
        return self._encode(SampledFrames(frames, timestamps, path.name, path, 5.0, size_and_duration), reason, span)

    def _use_frames(self, sampled: SampledFrames) -> EncodeDone:
        return self._encode(sampled, "new_clip")

    def _encode(
        self, sampled: SampledFrames, reason: ResetReason | None, span: tuple[float, float] | None = None
    ) -> EncodeDone:
        """Pretend to encode frames (T, H, W, 3) uint8 in passes of ``frames_per_pass``, and make them
        the open clip (``reason``: why the conversation empties) or, with ``None``, add them to the
        conversation."""
        frames, timestamps, name = sampled.frames, tuple(sampled.timestamps), sampled.name
        width, height, duration = sampled.size_and_duration
        self._emit(ClipSampled(name, str(sampled.path or ""), timestamps, tuple(frames), width, height, duration))
        self._emit(Progress("encode", 0, 1, f"Encoding {len(frames)} frames"))
        chunks = []
        step = self.frames_per_pass
        for index in range(0, len(frames), step):
            self._cancel.raise_if_cancelled()
            count = min(step, len(frames) - index)
            chunks.append(self._emit(ChunkStats(index // step, 1, count, count * 64, None, 0.0, (2.0 + index / 10) * count, False, "no CUDA")))
        metrics = self._emit(self.metrics.add_item(chunks))
        tokens = len(frames) * 16  # 64 patches a frame, 4 patches a token
        rate = self.settings.sampling.pruning_rate(tokens)
        kept_per_frame = (1.0, 1.0, *(1 - rate for _ in frames[2:])) if rate else ()
        done = encode_done(
            sampled, patches=len(frames) * 64, video_tokens=tokens, preprocess_ms=1.0, span=span, chunks=chunks,
            metrics=metrics, kept_tokens=round(16 * sum(kept_per_frame)) if rate else None,
            kept_per_frame=kept_per_frame,
        )
        if reason is None:
            self.added.append(FakeClip(sampled.path, done))
        else:
            self._make_open(FakeClip(sampled.path, done), reason)
        self._emit(Progress("encode", 1, 1, f"{name} is ready"))
        return self._emit(done)

    def _ask(self, question: str) -> Done:
        self.calls.append(("ask", time.perf_counter()))
        if self.fail_ask_with is not None:
            raise self.fail_ask_with
        text = ""
        count = 0
        speed = DecodeSpeedMeter()
        limit = self.settings.generation.max_new_tokens
        if not self.endless:
            limit = min(limit, len(self.answer_words))
        for count in range(1, limit + 1):
            if self._cancel.is_set():
                break
            piece = self.answer_words[(count - 1) % len(self.answer_words)]
            text += piece
            measured = speed.add()
            if measured is not None:
                self._emit(measured)
            self._emit(Token(piece))
            time.sleep(self.token_delay_s)
        cancelled = self._cancel.is_set()
        if not cancelled:
            self.turns.append((question, text.strip()))
        stats = AnswerStats(12.0, count, 150.0, cancelled)
        return self._emit(Done(text.strip(), stats, kept=not cancelled))


def _sample_with_opencv(path: str, fps: float, max_frames: int) -> tuple[np.ndarray, tuple[float, ...], float]:
    """Frames (T, H, W, 3) uint8 RGB about ``fps`` apart (at most ``max_frames``), their times and the clip's seconds."""
    capture = cv2.VideoCapture(path)
    try:
        clip_fps = capture.get(cv2.CAP_PROP_FPS) or 0.0
        frames, times = [], []
        index = 0
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            if clip_fps and index % max(1, round(clip_fps / fps)) == 0 and len(frames) < max_frames:
                frames.append(np.ascontiguousarray(frame[:, :, ::-1]))
                times.append(index / clip_fps)
            index += 1
    finally:
        capture.release()
    if not frames:
        raise UnreadableClipError(f"{Path(path).name} is not a video file any reader understands")
    return np.stack(frames), tuple(times), index / clip_fps
