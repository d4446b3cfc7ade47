"""Clips and pictures read, preprocessed and encoded for the local engine.

:class:`ClipEncoder` reads a file the engine opens through the backends' read flow
(:class:`~framewise.core.backends.reading.FileRead`): a still picture is encoded as one image item;
a clip is sampled on a reading thread while the engine's thread preprocesses and encodes it, chunk
by chunk (the encoder's own passes, planned by :func:`chunk_frames`) as the frames arrive, so the
clip is ready one pass after its last frame is read. Frames given directly are encoded in one go.

A clip's video tokens are then pruned where the sampling settings say
(:meth:`~framewise.core.settings.SamplingSettings.pruning_rate`): after the encoder, over the
whole clip, so the tower and its graphs see every patch, whatever the rate
(:mod:`~framewise.core.encoding.pruning`). The clip keeps only its pruned features, and the model
family's prepared clip says which tokens they are, for the prompt.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from framewise.core.backends.base import Emit
from framewise.core.backends.cancel import CancelScope
from framewise.core.backends.local.cancel_points import cancel_points
from framewise.core.backends.local.parts import ModelParts
from framewise.core.backends.reading import FileRead, encode_done
from framewise.core.encoding.defs import EncodedItem, VisionItem
from framewise.core.encoding.held_features import joined, settled
from framewise.core.encoding.planning import BatchLimits, PlanItem, plan_batches
from framewise.core.encoding.pruning import Retention, prune_encoded, retained_mask
from framewise.core.events import ChunkStats, EncodeDone, Progress
from framewise.core.families.base import PreparedVideo
from framewise.core.metrics import EncoderMetricsAccumulator
from framewise.core.seam import FamilyLimits
from framewise.core.settings import AppSettings, EncoderSettings, SamplingSettings
from framewise.core.video import ReadProgress, SampledClip, SampledFrames, sample_clip
from framewise.core.video.feed import ChunkFeed, FrameChunk
from framewise.core.video.thumbnails import clip_sampled


@dataclass(frozen=True)
class EncodedClip:
    """A clip sampled, preprocessed and encoded: everything a question about it needs.

    ``path`` is the file it was read from (``None`` for frames given directly). A clip has
    ``video``; a still picture has ``image`` instead (one image item, no times).
    """

    path: Path | None
    video: PreparedVideo | None
    features: EncodedItem
    summary: EncodeDone
    image: VisionItem | None = None

    @property
    def kind(self) -> str:
        """``"image"`` or ``"video"``."""
        return "image" if self.image is not None else "video"


class ClipEncoder:
    """Reads and encodes the items the engine opens with the model in ``parts``, sending what it
    does to ``emit`` and stopping when the request's ``cancel`` scope says so.

    Emits Progress (decode, encode), FramesRead while reading, ClipSampled, one ChunkStats per
    encoder pass and EncoderMetrics (:attr:`metrics`, over the engine's run); the item's
    EncodeDone is in what it returns, for the engine to send once the item is kept.
    """

    def __init__(self, parts: ModelParts, emit: Emit, stamp: Emit, cancel: CancelScope) -> None:
        self.parts = parts
        self._emit = emit
        self._stamp = stamp
        self._cancel = cancel
        self.metrics = EncoderMetricsAccumulator()

    def read(self, path: Path, settings: AppSettings, span: tuple[float, float] | None = None) -> EncodedClip:
        """``path`` read (a still picture as an image, anything else sampled as a clip, or only its
        ``span`` (start, end) seconds) and encoded."""
        self._cancel.raise_if_cancelled()
        read = FileRead(path, self._emit)
        picture = read.picture() if span is None else None
        if picture is not None:
            return self._encode_picture(picture)
        return self._stream_clip(read, settings, span)

    def encode_frames(self, sampled: SampledFrames, sampling: SamplingSettings) -> EncodedClip:
        """Preprocess and encode sampled frames (T, H, W, 3) uint8 in one go, as a clip, and prune
        its tokens as ``sampling`` says."""
        loaded = self.parts.require_model()
        started = time.perf_counter()
        timestamps = sampled.timestamps
        video = loaded.family.preprocess_video(sampled.frames, timestamps, loaded.limits)
        preprocess_ms = (time.perf_counter() - started) * 1e3
        self._cancel.raise_if_cancelled()

        self._emit(Progress("encode", 0, 1, f"Encoding {len(timestamps)} frames"))
        with cancel_points(loaded.family.cancel_points(loaded.model).vision, self._cancel):
            output = self.parts.require_encoder().encode([video.item])
        parts = _EncodedParts()
        parts.add(video.without_pixels(), output.items[0], output.chunks)
        encoded = _Encoded(parts.videos[0], parts.features(), parts.chunks, preprocess_ms)
        return self._finish_clip(encoded, sampled, sampling)

    def _stream_clip(self, read: FileRead, settings: AppSettings, span: tuple[float, float] | None) -> EncodedClip:
        """Sample the clip ``read`` is for (its ``span`` only, when given) and encode it as it is read."""
        loaded = self.parts.require_model()
        sampling = settings.sampling
        feed = ChunkFeed(lambda count, size: chunk_frames(count, size, settings.encoder, loaded.limits))
        sizing = loaded.family.frame_sizing(sampling, loaded.limits)

        def take(report: Callable[[], None]) -> _EncodedParts:
            try:
                return self._encode_chunks(feed.chunks(idle=report), report, reading=feed.arrivals.reading)
            finally:
                feed.close()

        def sample(on_progress: Callable[[ReadProgress], None]) -> SampledClip:
            return sample_clip(
                read.path, sampling, sizing, should_cancel=self._cancel.is_set, on_progress=on_progress, sink=feed, span=span
            )

        sampled, encoded = read.clip(sample, feed.arrivals, take, feed.end)
        video = loaded.family.join_videos(encoded.videos)
        encoded_clip = _Encoded(video, encoded.features(), encoded.chunks, encoded.preprocess_ms)
        return self._finish_clip(encoded_clip, sampled, sampling, span)

    def _encode_chunks(
        self, chunks: Iterator[FrameChunk], report: Callable[[], None], reading: Callable[[], bool]
    ) -> _EncodedParts:
        """Preprocess and encode each chunk of frames as it comes (one encoder pass each);
        ``reading`` says whether frames are still being read."""
        loaded = self.parts.require_model()
        encoder = self.parts.require_encoder()
        parts = _EncodedParts()
        for chunk in chunks:
            self._cancel.raise_if_cancelled()
            with _one_thread_beside_the_decoders(loaded.device, reading()):
                started = time.perf_counter()
                video = loaded.family.preprocess_video(chunk.frames, chunk.times, loaded.limits)
                parts.preprocess_ms += (time.perf_counter() - started) * 1e3
                self._cancel.raise_if_cancelled()
                # Before this chunk's pass is queued, so that copying the last one waits for no other.
                parts.settle()
                with cancel_points(loaded.family.cancel_points(loaded.model).vision, self._cancel):
                    output = encoder.encode([video.item])
            parts.add(video.without_pixels(), output.items[0], output.chunks)
            report()
        return parts

    def _finish_clip(
        self,
        encoded: _Encoded,
        sampled: SampledFrames,
        sampling: SamplingSettings,
        span: tuple[float, float] | None = None,
    ) -> EncodedClip:
        """The encoded clip, its tokens pruned as ``sampling`` says, reported: its frames (T, H, W, 3)
        uint8 for the strip, one ChunkStats per pass, the metrics and the summary (of a closer look
        over ``span``, when given)."""
        self._cancel.raise_if_cancelled()  # a cancel during the last pass still keeps the previous clip
        self._emit(clip_sampled(sampled))
        tokens = encoded.features.embeds.shape[0]
        rate = sampling.pruning_rate(tokens)
        retention = None
        if rate > 0:
            encoded, retention = self._pruned(encoded, rate)
        summary = self._report_encoded(
            encoded.video.item, tokens, encoded.chunks, sampled, encoded.preprocess_ms, span, retention
        )
        return EncodedClip(path=sampled.path, video=encoded.video, features=encoded.features, summary=summary)

    def _pruned(self, encoded: _Encoded, rate: float) -> tuple[_Encoded, Retention]:
        """``encoded`` with its features cut to the tokens pruning at ``rate`` keeps over the whole
        clip, and its prepared clip told which; and that retention."""
        loaded = self.parts.require_model()
        t, h, w = encoded.video.item.grid_thw
        merge = loaded.limits.merge_size
        retention = retained_mask(encoded.features.embeds, (t, h // merge, w // merge), rate)
        video = loaded.family.with_retention(encoded.video, retention)
        return dataclasses.replace(encoded, video=video, features=prune_encoded(encoded.features, retention)), retention

    def _encode_picture(self, picture: SampledFrames) -> EncodedClip:
        """Preprocess and encode a still picture (one frame (1, H, W, 3) uint8) as one image item (no times)."""
        loaded = self.parts.require_model()
        self._emit(clip_sampled(picture, kind="image"))
        self._cancel.raise_if_cancelled()
        started = time.perf_counter()
        item = loaded.family.preprocess_image(picture.frames[0], loaded.limits)
        preprocess_ms = (time.perf_counter() - started) * 1e3
        self._cancel.raise_if_cancelled()
        self._emit(Progress("encode", 0, 1, "Encoding the picture"))
        with cancel_points(loaded.family.cancel_points(loaded.model).vision, self._cancel):
            output = self.parts.require_encoder().encode([item])
        self._cancel.raise_if_cancelled()  # a cancel during the last pass still keeps the previous clip
        features = output.items[0]
        summary = self._report_encoded(item, features.embeds.shape[0], output.chunks, picture, preprocess_ms)
        return EncodedClip(
            path=picture.path, video=None, image=item.without_pixels(), features=features, summary=summary
        )

    def _report_encoded(
        self,
        item: VisionItem,
        tokens: int,
        chunks: Sequence[ChunkStats],
        sampled: SampledFrames,
        preprocess_ms: float,
        span: tuple[float, float] | None = None,
        retention: Retention | None = None,
    ) -> EncodeDone:
        """Send one ChunkStats per encoder pass of ``item`` (numbered) and the encoder metrics; the
        item's summary: its ``tokens`` and, after a pruning, the ``retention`` of them."""
        sent = tuple(self._emit(dataclasses.replace(chunk, chunk_index=index)) for index, chunk in enumerate(chunks))
        metrics = self._emit(self.metrics.add_item(sent))
        kept_tokens, kept_per_frame = None, ()
        if retention is not None:
            per_slice = self.parts.require_model().limits.frames_per_slice
            kept_tokens, kept_per_frame = retention.kept, retention.kept_per_frame(len(sampled.timestamps), per_slice)
        summary = encode_done(
            sampled, patches=item.patches, video_tokens=tokens, preprocess_ms=preprocess_ms, kind=item.modality,
            span=span, chunks=sent, metrics=metrics, kept_tokens=kept_tokens, kept_per_frame=kept_per_frame,
        )
        return self._stamp(summary)


@contextmanager
def _one_thread_beside_the_decoders(device: torch.device, reading: bool) -> Iterator[None]:
    """On a CPU, while the clip is ``reading``, preprocess and encode on one of torch's intra-op
    threads (this thread's own count, put back after). FFmpeg's decoders take every core meanwhile,
    and beside them torch's OpenMP workers spin-wait: a pass of the demo tower over 64 frame pairs
    took 2 to 7 times as long on two threads as on one (the shared 2-core machine, its load average
    10-12). Once every frame is read, the chunks left take every thread."""
    if device.type != "cpu" or not reading:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def chunk_frames(count: int, size: tuple[int, int], encoder: EncoderSettings, limits: FamilyLimits) -> list[int]:
    """Frames per encoder pass for a clip of ``count`` frames of ``size`` = (h, w): the passes the
    encoder's planner makes for it under ``encoder`` settings (each a whole number of slices)."""
    per_slice = limits.frames_per_slice
    slices = -(-count // per_slice)
    grid = (slices, size[0] // limits.patch_size, size[1] // limits.patch_size)
    plan = plan_batches([PlanItem("video", grid)], BatchLimits.from_settings(encoder, limits))
    frames = [sum(piece.count for piece in batch.pieces) * per_slice for batch in plan]
    frames[-1] -= slices * per_slice - count
    return frames


@dataclass(frozen=True)
class _Encoded:
    """A clip preprocessed and encoded: its ``video``, the tower's ``features``, one ChunkStats
    per pass and the milliseconds spent preprocessing."""

    video: PreparedVideo
    features: EncodedItem
    chunks: tuple[ChunkStats, ...]
    preprocess_ms: float


@dataclass
class _EncodedParts:
    """The chunks of a clip encoded so far, in order."""

    videos: list[PreparedVideo] = dataclasses.field(default_factory=list)
    items: list[EncodedItem] = dataclasses.field(default_factory=list)
    chunks: tuple[ChunkStats, ...] = ()
    preprocess_ms: float = 0.0

    def add(self, video: PreparedVideo, features: EncodedItem, chunks: Sequence[ChunkStats]) -> None:
        self.videos.append(video)
        self.items.append(features)
        self.chunks += tuple(chunks)

    def settle(self) -> None:
        """Keep the chunks' features where they should wait (:func:`~framewise.core.encoding.held_features.settled`)."""
        self.items = settled(self.items)

    def features(self) -> EncodedItem:
        """The clip's features: each output's rows (tokens, hidden), chunk after chunk, where they wait."""
        return joined(settled(self.items))
