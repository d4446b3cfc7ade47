"""Synthetic shape clips with ground truth, for training and evaluating the demo model.

A :class:`Scene` is a plain canvas with one to four shapes (square, circle, triangle) of distinct
colors. Each shape moves in a straight line (left, right, up, down) or stays still, and may
appear after the start or disappear before the end. Everything about a scene follows from one
integer seed, so a seed range is a data split.

A scene is rendered at any time (``render_frame``), as a whole source clip (``render_clip``, for
writing sample videos) or at the frames the application would sample (``sample_scene``), or
written to an H.264 file and sampled back through the application's own decoder
(``sample_scene_file``). The questions (``questions_for``) are answered from what was sampled: a
shape counts as visible in a frame pair when it is drawn in either frame of the pair, which is
what the model sees. Each question kind has a few natural wordings (:data:`WORDINGS`); the first
is the canonical one.

Rendering is numpy and OpenCV; only ``sample_scene_file`` needs PyAV.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np

from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import (
    VideoInputs,
    fit_video_frames,
    preprocess_video,
    video_frame_sizing,
)
from framewise.core.settings import SamplingSettings
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS  # the demo model is a Qwen3-VL checkpoint
from framewise.core.video import sample_clip, sample_count, sample_times

ShapeKind = Literal["square", "circle", "triangle"]
QuestionKind = Literal["color", "motion", "count", "first", "appear"]

SHAPES: tuple[ShapeKind, ...] = ("square", "circle", "triangle")
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (40, 80, 230),
    "yellow": (245, 215, 30),
    "purple": (150, 50, 200),
    "orange": (250, 130, 20),
}
BACKGROUNDS: tuple[tuple[int, int, int], ...] = (
    (0, 0, 0), (40, 40, 40), (128, 128, 128), (205, 205, 205), (255, 255, 255)
)
DIRECTIONS = ("left", "right", "up", "down", "still")
QUESTION_KINDS: tuple[QuestionKind, ...] = ("color", "motion", "count", "first", "appear")
NO_MOTION_ANSWER = "it does not move"
# Ways of asking each kind of question; ``{shape}`` is the shape's kind. The first is canonical.
WORDINGS: dict[QuestionKind, tuple[str, ...]] = {
    "color": (
        "What color is the {shape}?",
        "Which color does the {shape} have?",
        "What is the color of the {shape}?",
        "What colour is the {shape}?",
    ),
    "motion": (
        "Which way does the {shape} move?",
        "In which direction does the {shape} move?",
        "Where does the {shape} go?",
        "Which direction is the {shape} moving?",
    ),
    "count": (
        "How many shapes are there?",
        "How many shapes do you see?",
        "Count the shapes.",
        "What is the number of shapes?",
    ),
    "first": (
        "What appears first?",
        "Which shape appears first?",
        "What do you see first?",
        "What is there first?",
    ),
    "appear": (
        "When does the {shape} appear?",
        "At what time does the {shape} appear?",
        "When do you first see the {shape}?",
        "When does the {shape} show up?",
    ),
}

TRAIN_SEEDS = range(0, 10_000_000)
HELD_OUT_SEEDS = range(10_000_000, 11_000_000)

_ASPECTS = ((1, 1), (4, 3), (3, 4), (16, 9), (9, 16), (3, 2), (2, 3), (12, 5), (5, 12))
_LONG_SIDE_MAX = 480
_NOISE_MARGIN = 61
_SOURCE_FPS = (8.0, 10.0, 12.0, 15.0, 24.0, 25.0, 30.0)
_UNIT_VECTORS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1), "still": (0, 0)}


@dataclass(frozen=True)
class Shape:
    """One shape: ``center`` (x, y) in pixels when it appears, ``velocity`` in pixels per second.

    ``size`` is the side of the square (the diameter of the circle, the side of the triangle's
    bounding box). The shape is drawn for ``appear_s <= t < disappear_s``.
    """

    kind: ShapeKind
    color: str
    size: int
    center: tuple[float, float]
    velocity: tuple[float, float]
    appear_s: float
    disappear_s: float

    @property
    def direction(self) -> str:
        vx, vy = self.velocity
        if vx == 0 and vy == 0:
            return "still"
        if abs(vx) >= abs(vy):
            return "right" if vx > 0 else "left"
        return "down" if vy > 0 else "up"

    @property
    def name(self) -> str:
        return f"the {self.color} {self.kind}"

    def visible(self, t: float) -> bool:
        return self.appear_s <= t < self.disappear_s

    def center_at(self, t: float) -> tuple[float, float]:
        elapsed = t - self.appear_s
        return (self.center[0] + self.velocity[0] * elapsed, self.center[1] + self.velocity[1] * elapsed)


@dataclass(frozen=True)
class Scene:
    """A clip's content: canvas, source frame rate and duration, background and shapes."""

    seed: int
    width: int
    height: int
    fps: float
    frame_count: int
    background: tuple[int, int, int]
    noise_std: float
    shapes: tuple[Shape, ...]

    @property
    def duration_s(self) -> float:
        return self.frame_count / self.fps

    def frame_times(self) -> np.ndarray:
        """(frame_count,) presentation time of every source frame in seconds."""
        return np.arange(self.frame_count) / self.fps


@dataclass(frozen=True)
class SampledScene:
    """A scene as the application samples it.

    ``frames``: (T, H, W, 3) uint8 RGB, at the source canvas size when rendered, at the
    Qwen3-VL size when ``decoded`` (the application's decoder resizes); ``timestamps``: (T,)
    seconds, ``pair_timestamps``: the time of each frame pair (mean of its two frames), as the
    prompt's markers show it; ``visible``: (T, shapes) which shape is drawn in which frame.
    """

    scene: Scene
    frames: np.ndarray
    timestamps: tuple[float, ...]
    pair_timestamps: tuple[float, ...]
    visible: np.ndarray
    decoded: bool = False


@dataclass(frozen=True)
class Question:
    """A question and its answer; ``shape`` is the kind it names (None for count and first),
    ``wording`` the index of its text in :data:`WORDINGS`."""

    kind: QuestionKind
    text: str
    answer: str
    shape: str | None = None
    wording: int = 0

    @classmethod
    def worded(cls, kind: QuestionKind, answer: str, shape: str | None = None, wording: int = 0) -> Question:
        return cls(kind, WORDINGS[kind][wording].format(shape=shape), answer, shape, wording)

    def reworded(self, wording: int) -> Question:
        """The same question asked in another of its wordings."""
        return Question.worded(self.kind, self.answer, self.shape, wording)


def make_scene(seed: int, shape_count: int | None = None) -> Scene:
    """The scene for ``seed``; the same seed always gives the same scene.

    ``shape_count`` (1-4) fixes the number of shapes (a training curriculum starts with one);
    by default it is drawn from the seed like everything else."""
    rng = np.random.default_rng(seed)
    aspect_w, aspect_h = _ASPECTS[rng.integers(len(_ASPECTS))]
    longest_short_side = min(256, _LONG_SIDE_MAX * min(aspect_w, aspect_h) // max(aspect_w, aspect_h))
    short_side = int(rng.integers(96, longest_short_side + 1))
    scale = short_side / min(aspect_w, aspect_h)
    width, height = int(round(aspect_w * scale)), int(round(aspect_h * scale))
    fps = float(_SOURCE_FPS[rng.integers(len(_SOURCE_FPS))])
    duration = float(rng.uniform(2.0, 8.0))
    frame_count = max(2, int(round(duration * fps)))
    duration = frame_count / fps
    background = BACKGROUNDS[rng.integers(len(BACKGROUNDS))]
    noise_std = float(rng.choice([0.0, 0.0, 2.0, 4.0]))
    count = int(rng.integers(1, 5))
    if shape_count is not None:
        count = shape_count
    shapes = _place_shapes(rng, count, width, height, duration)
    return Scene(seed, width, height, fps, frame_count, background, noise_std, shapes)


def _place_shapes(rng: np.random.Generator, count: int, width: int, height: int, duration: float) -> tuple[Shape, ...]:
    """Shapes with distinct colors whose paths stay inside the canvas and do not overlap while visible."""
    colors = rng.permutation(list(COLORS))[:count]
    shapes: list[Shape] = []
    for color in colors:
        for _ in range(50):
            candidate = _random_shape(rng, str(color), width, height, duration)
            if all(not _overlap(candidate, other, duration) for other in shapes):
                shapes.append(candidate)
                break
    return tuple(shapes)


def _random_shape(rng: np.random.Generator, color: str, width: int, height: int, duration: float) -> Shape:
    short_side = min(width, height)
    size = max(28, int(round(short_side * rng.uniform(0.2, 0.34))))
    kind = SHAPES[rng.integers(len(SHAPES))]
    direction = DIRECTIONS[rng.integers(len(DIRECTIONS))]
    appear, disappear = 0.0, math.inf
    if duration >= 3.0 and rng.random() < 0.5:
        appear = float(rng.uniform(0.8, duration - 1.8))
    if rng.random() < 0.25 and duration - appear >= 3.5:
        disappear = float(rng.uniform(appear + 2.0, duration - 0.6))
    ux, uy = _UNIT_VECTORS[direction]
    half = size / 2 + 2
    # Travel a clear distance while visible (half the free room or more) without leaving the canvas.
    room_x, room_y = width - 2 * half, height - 2 * half
    room = room_x if ux else room_y
    travel = float(rng.uniform(0.5, 0.95)) * room if direction != "still" else 0.0
    speed = travel / (min(disappear, duration) - appear)
    start_x = _start_along(rng, ux, half, room_x, travel)
    start_y = _start_along(rng, uy, half, room_y, travel)
    return Shape(kind, color, size, (start_x, start_y), (ux * speed, uy * speed), appear, disappear)


def _start_along(rng: np.random.Generator, unit: int, half: float, room: float, travel: float) -> float:
    """Start coordinate on one axis so that ``travel`` pixels along ``unit`` stay within the canvas."""
    if unit > 0:
        return half + float(rng.uniform(0, room - travel))
    if unit < 0:
        return half + travel + float(rng.uniform(0, room - travel))
    return half + float(rng.uniform(0, room))


def _overlap(a: Shape, b: Shape, duration: float) -> bool:
    """Whether two shapes come within touching distance at any time both are visible."""
    gap = (a.size + b.size) / 2 + 4
    for t in np.linspace(0.0, duration, 41):
        if a.visible(t) and b.visible(t):
            (ax, ay), (bx, by) = a.center_at(t), b.center_at(t)
            if abs(ax - bx) < gap and abs(ay - by) < gap:
                return True
    return False


def render_frame(scene: Scene, t: float) -> np.ndarray:
    """(H, W, 3) uint8 RGB picture of the scene at time ``t`` seconds."""
    frame = np.empty((scene.height, scene.width, 3), np.uint8)
    frame[:] = scene.background
    for shape in scene.shapes:
        if shape.visible(t):
            _draw(frame, shape, shape.center_at(t), COLORS[shape.color], cv2.LINE_AA)
    if scene.noise_std > 0:
        # Sensor-like noise: a window of the scene's noise field that moves with every frame.
        field = _noise_field(scene.seed, scene.height, scene.width, scene.noise_std)
        offset = round(t * scene.fps) % _NOISE_MARGIN
        noise = field[:, offset : offset + scene.width]
        frame = np.clip(frame + noise, 0, 255).astype(np.uint8)
    return frame


@functools.lru_cache(maxsize=32)
def _noise_field(seed: int, height: int, width: int, std: float) -> np.ndarray:
    """(height, width + margin, 3) int16 Gaussian noise, fixed per scene."""
    rng = np.random.default_rng([seed, 2])
    return np.round(rng.standard_normal((height, width + _NOISE_MARGIN, 3), dtype=np.float32) * std).astype(np.int16)


def render_labels(scene: Scene, t: float) -> np.ndarray:
    """(H, W) uint8 map of which shape covers each pixel at time ``t``: its index in
    ``scene.shapes`` plus one, 0 for the background (edges not anti-aliased)."""
    labels = np.zeros((scene.height, scene.width), np.uint8)
    for index, shape in enumerate(scene.shapes):
        if shape.visible(t):
            _draw(labels, shape, shape.center_at(t), index + 1, cv2.LINE_8)
    return labels


def _draw(image: np.ndarray, shape: Shape, center: tuple[float, float], color: Any, line_type: int) -> None:
    shift = 4  # sub-pixel positions: coordinates are in 1/16 pixel
    one = 1 << shift
    cx, cy = center
    half = shape.size / 2
    if shape.kind == "circle":
        cv2.circle(image, (round(cx * one), round(cy * one)), round(half * one), color, -1, line_type, shift)
        return
    if shape.kind == "square":
        corners = [(cx - half, cy - half), (cx + half, cy - half), (cx + half, cy + half), (cx - half, cy + half)]
    else:
        corners = [(cx, cy - half), (cx + half, cy + half), (cx - half, cy + half)]
    points = np.array([[round(x * one), round(y * one)] for x, y in corners], np.int32)
    cv2.fillPoly(image, [points], color, line_type, shift)


def render_clip(scene: Scene) -> np.ndarray:
    """(frame_count, H, W, 3) uint8: every source frame, for writing the scene as a video file."""
    return np.stack([render_frame(scene, float(t)) for t in scene.frame_times()])


def sample_scene(scene: Scene, sampling: SamplingSettings = SamplingSettings()) -> SampledScene:
    """Render the frames the application samples from the scene's clip (``core.video``'s rule:
    ``sample_count`` target times, each taking the source frame on screen at that time)."""
    count = sample_count(scene.duration_s, sampling, scene.frame_count, multiple=QWEN3_VL_LIMITS.frames_per_slice)
    targets = sample_times(scene.duration_s, count)
    indices = [min(scene.frame_count - 1, math.floor(t * scene.fps + 1e-6)) for t in targets]
    times = scene.frame_times()[indices]
    frames = np.stack([render_frame(scene, float(t)) for t in times])
    return _sampled(scene, frames, times, decoded=False)


def _sampled(scene: Scene, frames: np.ndarray, times: Any, *, decoded: bool) -> SampledScene:
    visible = np.array([[shape.visible(float(t)) for shape in scene.shapes] for t in times], bool).reshape(
        len(times), len(scene.shapes)
    )
    pairs = tuple(float(times[i] + times[i + 1]) / 2 for i in range(0, len(times), 2))
    return SampledScene(scene, frames, tuple(float(t) for t in times), pairs, visible, decoded)


def even_sized(scene: Scene) -> Scene:
    """The scene on a canvas of even width and height (4:2:0 video needs them), one pixel
    smaller where a side is odd."""
    return dataclasses.replace(scene, width=scene.width // 2 * 2, height=scene.height // 2 * 2)


def sample_scene_file(
    scene: Scene,
    sampling: SamplingSettings = SamplingSettings(),
    folder: Path | None = None,
    geometry: VisionGeometry = VisionGeometry(),
) -> SampledScene:
    """The scene as the application sees it from a file: every source frame is written to an
    H.264 MP4 (``training.clip_writer``), which ``core.video.sample_clip`` samples, decodes and
    resizes to the Qwen3-VL size of ``geometry``, as the application does.

    The canvas is made even-sized first (:func:`even_sized`); the result's ``scene`` is that
    scene. With ``folder`` the file ``scene-<seed>.mp4`` is kept there and reused when it exists
    (written to a temporary name, then renamed, so concurrent callers never read half a file).
    """
    from training.clip_writer import write_clip

    scene = even_sized(scene)
    keep = folder is not None
    folder = Path(folder) if keep else Path(tempfile.mkdtemp(prefix="framewise-scene-"))
    path = folder / f"scene-{scene.seed}.mp4"
    try:
        if not path.exists():
            partial = folder / f".scene-{scene.seed}-{os.getpid()}.mp4"
            write_clip(partial, render_clip(scene), scene.fps, preset="veryfast")
            os.replace(partial, path)
        sampled = sample_clip(path, sampling, video_frame_sizing(sampling, geometry))
    finally:
        if not keep:
            path.unlink(missing_ok=True)
            folder.rmdir()
    return _sampled(scene, sampled.frames, sampled.timestamps, decoded=True)


def model_frames(sampled: SampledScene, sampling: SamplingSettings, geometry: VisionGeometry) -> np.ndarray:
    """(T, h, w, 3) uint8 frames at the Qwen3-VL size for the clip, as the application hands
    them to the engine: decoded frames already are; rendered ones are resized as the clip readers
    resize (``core.families.qwen3_vl.processor.fit_video_frames``)."""
    if sampled.decoded:
        return sampled.frames
    return fit_video_frames(sampled.frames, sampling, geometry=geometry)


def video_inputs(sampled: SampledScene, sampling: SamplingSettings, geometry: VisionGeometry) -> VideoInputs:
    """The vision input the application builds from these frames: at the Qwen3-VL size for the
    clip (:func:`model_frames`), then patchified (``core.families.qwen3_vl.processor``)."""
    return preprocess_video(model_frames(sampled, sampling, geometry), sampled.timestamps, geometry)


def marker_seconds(seconds: float) -> float:
    """The time as the prompt's ``<t.t seconds>`` marker prints it."""
    return float(f"{seconds:.1f}")


def about_seconds(marker: float) -> str:
    """Canonical answer for a time read off a marker: the nearest whole second (halves round up)."""
    whole = math.floor(marker + 0.5)
    return f"about {whole} second" if whole == 1 else f"about {whole} seconds"


def questions_for(sampled: SampledScene) -> list[Question]:
    """Every question with an unambiguous answer in what was sampled, in :data:`QUESTION_KINDS` order.

    Questions name a shape by its kind, so they are asked only about a kind that occurs once.
    """
    scene = sampled.scene
    pair_visible = sampled.visible.reshape(-1, 2, len(scene.shapes)).any(axis=1)
    seen = pair_visible.any(axis=0)
    shapes = [shape for shape, shown in zip(scene.shapes, seen) if shown]
    first_pair = {shape: int(np.argmax(pair_visible[:, i])) for i, shape in enumerate(scene.shapes) if seen[i]}
    unique = [shape for shape in shapes if sum(other.kind == shape.kind for other in shapes) == 1]
    questions: list[Question] = []
    for shape in unique:
        questions.append(Question.worded("color", shape.color, shape.kind))
    for shape in unique:
        visible_pairs = int(pair_visible[:, scene.shapes.index(shape)].sum())
        if visible_pairs >= 2:
            answer = NO_MOTION_ANSWER if shape.direction == "still" else shape.direction
            questions.append(Question.worded("motion", answer, shape.kind))
    if shapes:
        questions.append(Question.worded("count", str(len(shapes))))
    if len(shapes) >= 2:
        earliest = min(first_pair.values())
        leaders = [shape for shape in shapes if first_pair[shape] == earliest]
        if len(leaders) == 1:
            questions.append(Question.worded("first", leaders[0].name))
    for shape in unique:
        pair = first_pair[shape]
        if pair > 0:
            marker = marker_seconds(sampled.pair_timestamps[pair])
            questions.append(Question.worded("appear", about_seconds(marker), shape.kind))
    return questions


def answer_words() -> list[str]:
    """Every word a question or an answer uses (digits and punctuation aside), for the tokenizer."""
    texts = [
        *(wording.format(shape="") for wordings in WORDINGS.values() for wording in wordings),
        "about second seconds the",
        NO_MOTION_ANSWER,
        " ".join((*SHAPES, *COLORS, *DIRECTIONS)),
    ]
    words = {word.strip("?.").lower() for text in texts for word in text.split()}
    return sorted(words - {"still", ""})
