"""The engine with a model family that is not Qwen3-VL: a checkpoint whose ``model_type`` is
``toy_vl`` loads through the toy family registered for the test, and a clip is sampled, sized,
preprocessed, encoded and asked about through that family alone (its frame size, its patch rows,
its prompt tokens, its tower and its language model)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from framewise.core import families
from framewise.core.encoding.defs import VisionItem
from framewise.core.backends.local.engine import Engine
from framewise.core.errors import SettingsError
from framewise.core.events import ChunkStats, Event
from framewise.core.families.base import CancelPoints
from framewise.core.loading import DEMO_MODEL_DIR
from framewise.core.quantization.kv_formats import KVCacheFormat
from framewise.core.quantization.weight_format import WeightFormat
from framewise.core.seam import DecodedAnswer, FamilyLimits, PieceGrid, VisionSpan
from framewise.core.settings import AppSettings, SamplingSettings
from framewise.core.video import FrameSizing, Resize
from tests.conftest import SAMPLE_CLIPS
from tests.core.encoding.test_manager import ToyAdapter
from tests.core.families.test_toy_family import TOY_LIMITS, VISION_PAD, VOCAB, BagOfTokensModel

FRAME_SIZE = (2 * TOY_LIMITS.block_side, 3 * TOY_LIMITS.block_side)
ROW_WIDTH = 3  # a patch row: the patch's mean colour over the frames of its slice
# Valid for the toy family and for the default one (frame counts multiples of 6, budgets of 36).
SETTINGS = (
    AppSettings()
    .replace("model", source="")
    .replace("sampling", fps=2.0, min_frames=6, max_frames=6, max_pixels=6 * 128 * 128)
    .replace("encoder", budgets=(144, 1440), max_items_per_batch=4, max_frame_pairs_per_batch=8)
    .replace("generation", max_new_tokens=5)
)


class ToyVisionModel(torch.nn.Module):
    """The toy checkpoint: a tower that averages each merge block's patch rows into one token of
    the language model's width, beside the bag-of-tokens language model."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.tower = torch.nn.Linear(ROW_WIDTH, BagOfTokensModel().embedding.shape[1])
        self.language = BagOfTokensModel()
        self.generation_config = SimpleNamespace(eos_token_id=None)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """rows (n, ROW_WIDTH), n a multiple of the merge area -> tokens (n / merge area, hidden)."""
        return self.tower(rows.reshape(-1, TOY_LIMITS.merge_area, ROW_WIDTH).mean(1))


class ToyEngineAdapter(ToyAdapter):
    """The toy model behind the encoder seam (eager only, as on the CPU), with its language model."""

    def __init__(self, model: ToyVisionModel) -> None:
        super().__init__(model)  # type: ignore[arg-type]
        self.model = model

    def output_rows(self, rows: int) -> int:
        return rows // TOY_LIMITS.merge_area

    def check_item(self, item: VisionItem) -> None:
        assert item.pixel_values.shape == (item.patches, ROW_WIDTH)

    def eager_forward(self, items: Sequence[VisionItem]) -> Sequence[torch.Tensor]:
        return (self.model(torch.cat([item.pixel_values for item in items])),)

    def language_model(self, cache_format: KVCacheFormat) -> BagOfTokensModel:
        """The bag of tokens, which sums its context's embeddings exactly: float32 whatever layout is asked."""
        return self.model.language


@dataclass(frozen=True)
class ToyVideo:
    item: VisionItem
    slices: int

    def without_pixels(self) -> ToyVideo:
        return ToyVideo(self.item.without_pixels(), self.slices)


@dataclass(frozen=True)
class ToyPrompt:
    input_ids: torch.Tensor
    token_types: torch.Tensor
    spans: tuple[VisionSpan, ...]
    grids: tuple[PieceGrid, ...]
    text: str
    unpruned: None = None  # the toy family prunes nothing


class EngineToyFamily:
    """A whole family for the engine: loading, limits, frame sizing, patch rows, prompt, cancel points.
    Its prompt is ``[2]``, per slice ``[3] + pads + [4]``, then per turn the question's and the
    answer's ids folded into the toy vocabulary; it records the calls the engine makes."""

    name = TOY_LIMITS.name
    model_types = ("toy_vl",)
    limits = TOY_LIMITS

    def __init__(self) -> None:
        self.calls: list[str] = []

    def load_weights(
        self, path: Path, model_type: str, weight_format: WeightFormat, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.nn.Module, dict[str, Any]]:
        assert not weight_format.quantized, "the toy family loads float weights only"
        self.calls.append(f"load {model_type}")
        return ToyVisionModel(), {"missing_keys": [], "mismatched_keys": []}

    def adapter(self, model: torch.nn.Module) -> ToyEngineAdapter:
        return ToyEngineAdapter(model)  # type: ignore[arg-type]

    def limits_of(self, model: torch.nn.Module) -> FamilyLimits:
        return TOY_LIMITS

    def cancel_points(self, model: torch.nn.Module) -> CancelPoints:
        return CancelPoints(vision=[model.tower], language=[])

    def vision_tower(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.tower

    def frame_sizing(self, sampling: SamplingSettings, limits: FamilyLimits, resize: Resize | None = None) -> FrameSizing:
        def nearest(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
            rows = np.linspace(0, frames.shape[1] - 1, size[0]).astype(int)
            columns = np.linspace(0, frames.shape[2] - 1, size[1]).astype(int)
            return frames[:, rows][:, :, columns]

        return FrameSizing(lambda count, height, width: FRAME_SIZE, resize or nearest, limits.frames_per_slice)

    def preprocess_video(self, frames: np.ndarray, timestamps: Sequence[float], limits: FamilyLimits) -> ToyVideo:
        self.calls.append(f"preprocess {frames.shape}")
        t, height, width, _ = frames.shape
        slices, side = t // limits.frames_per_slice, limits.patch_size
        blocks = frames.reshape(slices, limits.frames_per_slice, height // side, side, width // side, side, 3)
        rows = torch.from_numpy(blocks.mean(axis=(1, 3, 5)).reshape(-1, 3).astype(np.float32) / 255)
        grid = (slices, height // side, width // side)
        return ToyVideo(VisionItem(rows, grid, "video"), slices)

    def join_videos(self, parts: Sequence[ToyVideo]) -> ToyVideo:
        rows = torch.cat([part.item.pixel_values for part in parts])
        _, height, width = parts[0].item.grid_thw
        slices = sum(part.slices for part in parts)
        return ToyVideo(VisionItem(rows, (slices, height, width), "video"), slices)

    def preprocess_image(self, image: np.ndarray, limits: FamilyLimits) -> VisionItem:
        raise NotImplementedError("the engine test asks about a clip")

    def build_prompt(
        self,
        tokenizer: Any,
        question: str,
        *,
        videos: Sequence[ToyVideo] = (),
        images: Sequence[VisionItem] = (),
        history: Sequence[tuple[str, str]] = (),
        limits: FamilyLimits,
    ) -> ToyPrompt:
        self.calls.append(f"prompt {question}")
        ids, spans = [2], []
        for item, video in enumerate(videos):
            tokens = video.item.patches // limits.merge_area // video.slices
            for index in range(video.slices):
                ids.append(3)
                spans.append(VisionSpan(item, len(ids), tokens, row=index * tokens))
                ids += [VISION_PAD] * tokens + [4]
        for asked, answer in [*history, (question, None)]:
            ids += [5 + token % (VOCAB - 5) for token in tokenizer.encode(asked, add_special_tokens=False)]
            if answer is not None:
                assert isinstance(answer, DecodedAnswer), "the engine keeps what it decoded"
                ids += list(answer.token_ids)
        input_ids = torch.tensor([ids])
        grids = tuple(("video", video.item.grid_thw) for video in videos)
        return ToyPrompt(input_ids, torch.zeros_like(input_ids), tuple(spans), grids, question)

    def chat_messages(
        self, question: str, *, videos: int = 0, images: int = 0, history: Sequence[tuple[str, str]] = ()
    ) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [*({"type": "video"} for _ in range(videos)), {"type": "text", "text": question}]}]


@pytest.fixture
def toy_family() -> Iterator[EngineToyFamily]:
    family = EngineToyFamily()
    families.register("toy_vl", lambda: family)
    yield family
    families.unregister("toy_vl")


@pytest.fixture
def toy_checkpoint(tmp_path: Path) -> Path:
    """A folder that passes the generic checks: config of model_type toy_vl, safetensors, tokenizer."""
    folder = tmp_path / "toy-vl"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "toy_vl"}))
    save_file({"tower.weight": torch.zeros(8, ROW_WIDTH)}, str(folder / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(DEMO_MODEL_DIR / name, folder / name)
    return folder


def test_the_engine_loads_encodes_and_answers_through_a_toy_family(
    toy_family: EngineToyFamily, toy_checkpoint: Path
) -> None:
    events: list[Event] = []
    engine = Engine(SETTINGS.replace("model", source=str(toy_checkpoint)), sink=events.append)
    info = engine.load()
    assert info.model_name and engine.loaded is not None and engine.loaded.family is toy_family
    assert engine.loaded.limits == TOY_LIMITS

    clip = sorted(SAMPLE_CLIPS.glob("*.mp4"))[0]
    summary = engine.open_clip(clip)
    assert summary.frames == 6, "frame counts follow the settings in multiples of the toy's 3 frames per slice"
    height, width = FRAME_SIZE
    assert summary.patches == 2 * (height // 8) * (width // 8), "the toy's 8x8 patches of its own frame size"
    chunks = [event for event in events if isinstance(event, ChunkStats)]
    assert chunks and sum(chunk.frames for chunk in chunks) == 6

    first = engine.ask("What moves?")
    second = engine.ask("And then?")
    assert first.stats.new_tokens == second.stats.new_tokens == SETTINGS.generation.max_new_tokens
    prompt_tokens = 1 + 2 * (2 + summary.patches // 2 // TOY_LIMITS.merge_area)
    assert first.stats.decoder.prompt_tokens > prompt_tokens
    assert second.stats.decoder.prefix_tokens_reused == first.stats.decoder.prompt_tokens + 4, (
        "the follow-up reuses the clip, the first question and the answer the toy decoded"
    )
    assert [question for question, _ in engine.turns] == ["What moves?", "And then?"]
    assert toy_family.calls[0] == "load toy_vl" and toy_family.calls[1] == f"preprocess (6, {height}, {width}, 3)"
    assert toy_family.calls[2:] == ["prompt What moves?", "prompt And then?"]


# Valid for the toy family only: 3 frames per slice, budgets of 9 patch rows (TOY_LIMITS).
TOY_ONLY = (
    SETTINGS.replace("sampling", min_frames=3, max_frames=9, max_pixels=9 * 64 * 64)
    .replace("encoder", budgets=(90, 900))
)


def test_settings_are_checked_against_the_chosen_models_family_before_it_loads(
    toy_family: EngineToyFamily, toy_checkpoint: Path
) -> None:
    toy_only = TOY_ONLY.replace("model", source=str(toy_checkpoint))
    engine = Engine(toy_only)
    assert engine.settings == toy_only, "the toy's config.json names its family: its limits apply, not the default's"
    with pytest.raises(SettingsError):
        Engine(TOY_ONLY.replace("model", source="demo"))
    engine.apply_settings(toy_only.replace("sampling", max_frames=6))
    assert engine.settings.sampling.max_frames == 6
    with pytest.raises(SettingsError):
        engine.apply_settings(TOY_ONLY.replace("model", source="demo"))


def test_a_loaded_models_family_limits_check_new_settings(toy_family: EngineToyFamily, toy_checkpoint: Path) -> None:
    engine = Engine(SETTINGS.replace("model", source=str(toy_checkpoint)))
    engine.load()
    toy_only = TOY_ONLY.replace("model", source=str(toy_checkpoint))
    engine.apply_settings(toy_only)
    assert engine.settings == toy_only
    with pytest.raises(SettingsError, match="multiple of 9"):
        engine.apply_settings(toy_only.replace("encoder", budgets=(128, 1024)))
    assert engine.settings == toy_only, "a refused change leaves the settings as they were"
