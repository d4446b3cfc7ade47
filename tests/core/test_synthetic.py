"""The synthetic shape clips: deterministic per seed, and their answers agree with the pixels."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import preprocess_video
from framewise.core.settings import SamplingSettings
from training.synthetic import (
    COLORS,
    HELD_OUT_SEEDS,
    NO_MOTION_ANSWER,
    QUESTION_KINDS,
    TRAIN_SEEDS,
    Scene,
    make_scene,
    questions_for,
    render_clip,
    render_labels,
    sample_scene,
    video_inputs,
)

SEEDS = range(200, 240)


def clean(scene: Scene) -> Scene:
    """The scene without pixel noise, so shape pixels are exactly their color."""
    return dataclasses.replace(scene, noise_std=0.0)


def color_mask(frame: np.ndarray, color: str) -> np.ndarray:
    """(H, W) bool: pixels of exactly ``color``."""
    return np.all(frame == np.array(COLORS[color], np.uint8), axis=-1)


def answers(scene: Scene) -> dict[str, str]:
    return {q.text: q.answer for q in questions_for(sample_scene(scene))}


def test_same_seed_same_scene_frames_and_questions() -> None:
    for seed in (0, 7, 12345):
        first, second = sample_scene(make_scene(seed)), sample_scene(make_scene(seed))
        assert first.scene == second.scene
        assert np.array_equal(first.frames, second.frames)
        assert first.timestamps == second.timestamps
        assert questions_for(first) == questions_for(second)


def test_seeds_give_varied_scenes() -> None:
    scenes = [make_scene(seed) for seed in range(100)]
    assert len({(s.width, s.height) for s in scenes}) > 20
    assert len({s.fps for s in scenes}) > 3
    assert len({len(sample_scene(s).timestamps) for s in scenes[:40]}) > 3
    assert {len(s.shapes) for s in scenes} == {1, 2, 3, 4}
    assert {shape.direction for s in scenes for shape in s.shapes} == {"left", "right", "up", "down", "still"}
    assert any(w > h for w, h in ((s.width, s.height) for s in scenes))
    assert any(w < h for w, h in ((s.width, s.height) for s in scenes))
    kinds = {q.kind for s in scenes[:60] for q in questions_for(sample_scene(s))}
    assert kinds == set(QUESTION_KINDS)


def test_train_and_held_out_seeds_are_disjoint() -> None:
    assert TRAIN_SEEDS.stop <= HELD_OUT_SEEDS.start


@pytest.mark.parametrize("seed", SEEDS)
def test_said_color_is_the_shapes_pixels(seed: int) -> None:
    sampled = sample_scene(clean(make_scene(seed)))
    for question in questions_for(sampled):
        if question.kind != "color":
            continue
        kind = question.text.removeprefix("What color is the ").removesuffix("?")
        [shape] = [s for s in sampled.scene.shapes if s.kind == kind]
        index = sampled.scene.shapes.index(shape)
        frame_index = int(np.argmax(sampled.visible[:, index]))
        x, y = shape.center_at(sampled.timestamps[frame_index])
        assert tuple(sampled.frames[frame_index, round(y), round(x)]) == COLORS[question.answer]


@pytest.mark.parametrize("seed", SEEDS)
def test_each_color_region_has_its_shapes_form(seed: int) -> None:
    sampled = sample_scene(clean(make_scene(seed)))
    fill_by_kind = {"square": (0.9, 1.01), "circle": (0.7, 0.86), "triangle": (0.38, 0.62)}
    for index, shape in enumerate(sampled.scene.shapes):
        for frame, visible in zip(sampled.frames, sampled.visible[:, index]):
            mask = color_mask(frame, shape.color)
            assert mask.any() == visible
            if visible:
                ys, xs = np.nonzero(mask)
                box = (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
                low, high = fill_by_kind[shape.kind]
                assert low <= mask.sum() / box <= high, shape


@pytest.mark.parametrize("seed", SEEDS)
def test_said_direction_matches_the_centroid_shift(seed: int) -> None:
    sampled = sample_scene(clean(make_scene(seed)))
    for question in questions_for(sampled):
        if question.kind != "motion":
            continue
        kind = question.text.removeprefix("Which way does the ").removesuffix(" move?")
        [shape] = [s for s in sampled.scene.shapes if s.kind == kind]
        frames = [f for f, v in zip(sampled.frames, sampled.visible[:, sampled.scene.shapes.index(shape)]) if v]
        centroids = [np.argwhere(color_mask(f, shape.color)).mean(axis=0) for f in (frames[0], frames[-1])]
        dy, dx = centroids[1] - centroids[0]
        moved = {"left": -dx, "right": dx, "up": -dy, "down": dy}
        if question.answer == NO_MOTION_ANSWER:
            assert abs(dx) < 1 and abs(dy) < 1
        else:
            assert moved[question.answer] >= 8, (question, dx, dy)
            assert abs(dy if question.answer in ("left", "right") else dx) < 1


@pytest.mark.parametrize("seed", SEEDS)
def test_count_first_and_appear_time_follow_the_frames(seed: int) -> None:
    sampled = sample_scene(clean(make_scene(seed)))
    pairs = sampled.frames.reshape(-1, 2, *sampled.frames.shape[1:])
    first_pair = {}
    for color in COLORS:
        shown = [i for i, pair in enumerate(pairs) if any(color_mask(frame, color).any() for frame in pair)]
        if shown:
            first_pair[color] = shown[0]
    for question in questions_for(sampled):
        if question.kind == "count":
            assert int(question.answer) == len(first_pair)
        elif question.kind == "first":
            color = question.answer.split()[1]
            assert first_pair[color] < min(p for c, p in first_pair.items() if c != color)
        elif question.kind == "appear":
            kind = question.text.removeprefix("When does the ").removesuffix(" appear?")
            [shape] = [s for s in sampled.scene.shapes if s.kind == kind]
            marker = f"{sampled.pair_timestamps[first_pair[shape.color]]:.1f}"
            seconds = int(re.fullmatch(r"about (\d+) seconds?", question.answer).group(1))
            assert abs(seconds - float(marker)) <= 0.5
            assert first_pair[shape.color] > 0


def test_sampling_follows_the_application_and_its_settings() -> None:
    scene = make_scene(3)
    geometry = VisionGeometry()
    default = sample_scene(scene)
    assert len(default.timestamps) % 2 == 0
    assert 4 <= len(default.timestamps) <= 32
    assert all(0 <= t < scene.duration_s for t in default.timestamps)
    fewer = sample_scene(scene, SamplingSettings(fps=0.5, min_frames=4, max_frames=4))
    assert len(fewer.timestamps) == 4
    inputs = video_inputs(default, SamplingSettings(), geometry)
    assert inputs.pair_timestamps == default.pair_timestamps
    t, h, w = inputs.item.grid_thw
    assert t == len(default.timestamps) // 2 and h % 2 == 0 and w % 2 == 0
    blank = np.zeros((len(default.timestamps), h * 16, w * 16, 3), np.uint8)
    resized = preprocess_video(blank, default.timestamps, geometry)
    assert resized.pair_timestamps == default.pair_timestamps


def test_whole_clip_render_matches_sampled_frames() -> None:
    scene = make_scene(11)
    clip = render_clip(scene)
    assert clip.shape == (scene.frame_count, scene.height, scene.width, 3)
    sampled = sample_scene(scene)
    for frame, t in zip(sampled.frames, sampled.timestamps):
        assert np.array_equal(frame, clip[round(t * scene.fps)])


@pytest.mark.parametrize("seed", range(300, 310))
def test_label_maps_cover_each_shapes_pixels(seed: int) -> None:
    scene = clean(make_scene(seed))
    sampled = sample_scene(scene)
    for frame, t in zip(sampled.frames, sampled.timestamps):
        labels = render_labels(scene, t)
        for index, shape in enumerate(scene.shapes):
            labelled, painted = labels == index + 1, color_mask(frame, shape.color)
            assert labelled.any() == shape.visible(t)
            if labelled.any():
                # Only the anti-aliased rim of the painted shape may fall outside its label.
                assert (painted & labelled).sum() >= 0.9 * painted.sum()
                assert (painted & labelled).sum() >= 0.7 * labelled.sum()
