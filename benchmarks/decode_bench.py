"""Answer-decoding benchmark: transformers' generate() against Framewise's decoder, same run.

Qwen3-VL language models at the released text sizes (``2B``, ``8B``) and Qwen3.5 ones (``3.5-0.8B``,
``3.5-9B``: hybrid Gated DeltaNet and full attention, the framewise mode only) with random weights
(built from their configs; nothing is downloaded), a pre-encoded clip (random features of the right
shape injected where the video pads are; by default 32 frames at the size the app samples a
1280x720 clip to, the clip the first-question target is set for), a first question and
follow-ups, ``--new-tokens`` each, greedy. Every answer runs to ``--new-tokens`` (no end-of-answer token). Modes:

- ``default``: ``generate()`` with its dynamic cache, the whole conversation prefilled per question
  (what Framewise ran before it had a decoder);
- ``static``: ``generate()`` with one ``StaticCache`` reused across questions, so transformers
  compiles its decode step (the compile seconds are the first call's extra time);
- ``framewise``: :class:`~framewise.core.decoding.Decoder`: static KV cache, decode steps through
  CUDA graphs per context bucket, follow-ups prefill only their new tokens (through a prefill
  graph per token and context bucket); the steps run the Triton step kernels;
- ``framewise_ops``: the same with the step's arithmetic as torch ops (what the kernels buy);
- ``framewise_unfused``: the same with the model's own layers in the decode steps (what the
  few-kernel layout buys).

Per weight dtype (``--dtypes bfloat16,fp8``, one process: the fp8 run quantizes the same model's
decoder linear layers in place, per channel, as ``model.dtype = fp8`` does on load) and mode:
time to first token (first question; for the framewise modes also the median and range of
``--first-repeats`` more first questions from an empty cache; follow-ups' mean), per-token time after the first token
(mean, p99) and its tokens/s, the ratio of the per-token time to the memory-bandwidth
floor (the weights read once per token at the copy bandwidth measured in this run), capture
seconds (``framewise``: the decode graphs, captured twice to show a second start), and device
memory held by the cache and graphs. Every mode runs under its own time limit (``--mode-budgets``): no question starts after it, and
a mode that would not fit the run's limit (``--total-budget-s``) is skipped with the reason.
For fp8 also: each decoder layer's output error against the first dtype (bf16 normally; relative
Frobenius norm, every layer fed that model's input to it, 64 text tokens) and the share of greedy
answer tokens that agree with its answers (the agreeing prefix of each answer over its length).
For a hybrid model the floor's bytes include its linear states, read and written once a step.
``--long-frames N`` also times, per size and dtype, a first question about a clip of N frames at
``--long-pixels`` (default: Qwen3-VL's released preprocessing's, 768 frames' full budget) from an empty state, prefilled in the
decoder's default chunks, with the bytes the state takes per position (keys and values) and
fixed (a hybrid model's linear states).
``--quick`` runs the 8B shapes, bf16 and fp8, the ``framewise`` mode, a first question and one
follow-up: a few minutes on one GPU. ``--profile`` asks each framewise mode's first question once
more under ``torch.profiler`` and writes its kernel table (``profile_<size>_<dtype>_<mode>.txt``),
with the wall and GPU milliseconds of that prefill in the results: what a first question's time
goes to; and twice more, with 1 and 33 new tokens, for each kernel's time per decode step
(``profile_<size>_<dtype>_<mode>_step.txt``).

    python3 benchmarks/decode_bench.py --out results/ [--sizes 2B,8B] [--modes default,static,framewise]
    python3 benchmarks/decode_bench.py --sizes 8B --dtypes bfloat16,fp8 --modes framewise --out results/
    python3 benchmarks/decode_bench.py --quick --out results/
    python3 benchmarks/decode_bench.py --sizes 8B --dtypes bfloat16,fp8 --modes framewise --follow-ups 0 --profile --out results/
    python3 benchmarks/decode_bench.py --sizes 8B,3.5-9B --dtypes bfloat16,fp8 --modes framewise --follow-ups 1 \
        --long-frames 768 --long-repeats 1 --out results/    # both families, a 768-frame first question each
    python3 benchmarks/decode_bench.py --sizes tiny,3.5-tiny --device cpu --dtypes float32 --new-tokens 8   # smoke test
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import (  # noqa: E402
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    StaticCache,
)
from transformers.generation.streamers import BaseStreamer  # noqa: E402

from framewise.core.decoding import Decoder, Prompt, SamplingRule  # noqa: E402
from framewise.core.encoding.defs import EncodedItem  # noqa: E402
from framewise.core.families.qwen3_5.config import TextShape  # noqa: E402
from framewise.core.families.qwen3_5.language import Qwen35LanguageModel  # noqa: E402
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel  # noqa: E402
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS  # noqa: E402
from framewise.core.families.qwen3_vl.prompt import TEXT_TOKEN, VIDEO_TOKEN, vision_spans
from framewise.core.metrics import percentile  # noqa: E402
from framewise.core.quantization.fp8 import QUANTIZE_ON_LOAD_SCHEME  # noqa: E402
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat  # noqa: E402
from framewise.core.quantization.linear import Fp8Linear  # noqa: E402
from training.feature_injection import FeatureInjector  # noqa: E402

# hidden, intermediate, layers, heads, kv heads, head_dim, tied embeddings (released Qwen3-VL text models)
TEXT_SIZES = {
    "2B": (2048, 6144, 28, 16, 8, 128, True),
    "8B": (4096, 12288, 36, 32, 8, 128, False),
    "tiny": (128, 384, 2, 4, 2, 32, True),
}
VOCAB = 151936
# Qwen3.5 text models (released configs): hidden, intermediate, layers (every fourth full attention),
# heads, kv heads, head_dim, linear-attention key heads, value heads, their head dim, tied embeddings.
QWEN3_5_SIZES = {
    "3.5-0.8B": (1024, 3584, 24, 8, 2, 256, 16, 16, 128, True),
    "3.5-9B": (4096, 12288, 32, 16, 4, 256, 16, 32, 128, False),
    "3.5-tiny": (128, 384, 4, 4, 2, 32, 2, 4, 16, True),
}
QWEN3_5_VOCAB = 248320
IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END = 151655, 151656, 151652, 151653
QUESTION_TOKENS, MARKER_TOKENS, SYSTEM_TOKENS, TURN_TOKENS = 20, 6, 20, 5
# How each Framewise mode's decode steps run (the language models' options).
FRAMEWISE_STEPS = {
    "framewise": dict(fused_steps=True),
    "framewise_ops": dict(fused_steps=True, step_kernels=False),
    "framewise_unfused": dict(fused_steps=False),
}


def build_model(size: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A model with the language model of ``size`` (a Qwen3-VL size of TEXT_SIZES, or a Qwen3.5 one
    of QWEN3_5_SIZES) and random weights; the vision tower is a minimal one (its features are
    injected, never computed)."""
    if size in QWEN3_5_SIZES:
        return _build_qwen3_5(size, device, dtype)
    hidden, intermediate, layers, heads, kv_heads, head_dim, tied = TEXT_SIZES[size]
    config = Qwen3VLConfig(
        text_config=dict(
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            vocab_size=VOCAB,
            max_position_embeddings=262144,
            rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [24, 20, 20],
                             "mrope_interleaved": True} if head_dim == 128 else
            {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [6, 5, 5], "mrope_interleaved": True},
            tie_word_embeddings=tied,
        ),
        vision_config=dict(depth=3, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=hidden,
                           deepstack_visual_indexes=[0, 1, 2]),
        image_token_id=IMAGE_PAD,
        video_token_id=VIDEO_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        tie_word_embeddings=tied,
    )
    config._attn_implementation = "sdpa"
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(config).to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def qwen3_5_text_config(size: str) -> dict[str, Any]:
    """The ``text_config`` of a Qwen3.5 of ``size``: every fourth layer full attention, rotary on a
    quarter of each head (interleaved mrope in the released 11:11:10 proportion)."""
    hidden, intermediate, layers, heads, kv_heads, head_dim, key_heads, value_heads, linear_dim, tied = (
        QWEN3_5_SIZES[size]
    )
    half_rotary = head_dim // 8  # a quarter of the head rotates; mrope sections split half of that
    section = [round(half_rotary * 11 / 32), round(half_rotary * 11 / 32)]
    return {
        "hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": layers,
        "full_attention_interval": 4, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": head_dim, "vocab_size": QWEN3_5_VOCAB, "max_position_embeddings": 262144,
        "linear_num_key_heads": key_heads, "linear_num_value_heads": value_heads,
        "linear_key_head_dim": linear_dim, "linear_value_head_dim": linear_dim, "linear_conv_kernel_dim": 4,
        "tie_word_embeddings": tied,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [*section, half_rotary - sum(section)], "mrope_interleaved": True},
    }


def _build_qwen3_5(size: str, device: torch.device, dtype: torch.dtype) -> Qwen3_5ForConditionalGeneration:
    text = qwen3_5_text_config(size)
    config = Qwen3_5Config(
        text_config=text,
        vision_config=dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=text["hidden_size"]),
        image_token_id=IMAGE_PAD,
        video_token_id=VIDEO_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        tie_word_embeddings=text["tie_word_embeddings"],
    )
    config._attn_implementation = "sdpa"
    with torch.device(device):
        # Built in the weights' dtype: a float32 9B would take twice its bf16 size before the cast.
        model = Qwen3_5ForConditionalGeneration._from_config(config, dtype=dtype).to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def is_hybrid(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a Qwen3.5, whose language model mixes linear and full attention."""
    return model.config.model_type == "qwen3_5"


def language_model(model: torch.nn.Module, steps: dict[str, Any], cache_format: KVCacheFormat = FLOAT_KV_CACHE):
    """The decoder's language model of ``model``, its keys and values kept in ``cache_format``;
    ``steps`` are FRAMEWISE_STEPS' options (both families take them)."""
    if is_hybrid(model):
        return Qwen35LanguageModel(model, cache_format=cache_format, **steps)
    return Qwen3VLLanguageModel(model, **steps, cache_format=cache_format)


def unsupported_mode(model: torch.nn.Module, mode: str) -> str | None:
    """Why ``mode`` cannot run on ``model``, or None when it can."""
    if is_hybrid(model) and mode not in FRAMEWISE_STEPS:
        return "Qwen3.5 runs only the framewise modes (generate() takes no injected features here)"
    return None


def linear_state_traffic(model: torch.nn.Module) -> int:
    """Bytes of a hybrid model's linear-layer states that a decode step reads and writes (each state
    once each way: the convolution's in the activations' dtype, the recurrent one in float32); 0 for
    a model without linear layers."""
    if not is_hybrid(model):
        return 0
    shape = TextShape.from_text_config(model.config.text_config.to_dict())
    dtype = model.model.language_model.embed_tokens.weight.dtype
    return 2 * shape.linear_layers * shape.linear.state_bytes(dtype)


def stays_float_in_fp8(model: torch.nn.Module, name: str) -> bool:
    """Whether the decoder layers' linear layer ``name`` (relative to ``layers``) stays in floating
    point when the model is quantized on load: Qwen3.5's beta and decay projections (a few dozen
    rows that scale the recurrent state at every token) do."""
    return is_hybrid(model) and name.rpartition(".")[2] in ("in_proj_a", "in_proj_b")


@dataclasses.dataclass
class Conversation:
    """Token ids of a synthetic conversation about one clip: the first prompt, and per follow-up the
    tokens appended after the previous answer."""

    grid_thw: tuple[int, int, int]
    first: list[int]
    follow_ups: list[list[int]]

    def prompt(self, answers: list[list[int]]) -> list[int]:
        """The whole prompt of question ``len(answers)``, given the answers so far."""
        ids = list(self.first)
        for answer, follow_up in zip(answers, self.follow_ups):
            ids += answer + follow_up
        return ids


def app_frame_size(frames: int, max_pixels: int | None = None) -> tuple[int, int]:
    """(height, width) the app samples a 1280x720 clip of ``frames`` frames to at its default
    settings (the Qwen3-VL family's sizing), within ``max_pixels`` for the whole clip where given,
    else the default pixel budget."""
    from framewise.core.families import family_for
    from framewise.core.settings import AppSettings

    family = family_for("qwen3_vl")
    settings = AppSettings()
    if max_pixels is not None:
        settings = settings.replace("sampling", max_frames=max(frames, settings.sampling.max_frames), max_pixels=max_pixels)
    return family.frame_sizing(settings.sampling, family.limits).size(frames, 720, 1280)


def make_conversation(frames: int, height: int, width: int, follow_ups: int, seed: int = 0) -> Conversation:
    """Random text ids around ``frames`` frames of ``height`` x ``width``, laid out as Framewise's
    prompt is: per frame pair a time marker, vision start, video pads, vision end."""
    generator = torch.Generator().manual_seed(seed)

    def text(count: int) -> list[int]:
        return torch.randint(1000, 100000, (count,), generator=generator).tolist()

    grid = (frames // 2, height // 16, width // 16)
    pads = grid[1] * grid[2] // 4
    first = text(SYSTEM_TOKENS)
    for _ in range(grid[0]):
        first += text(MARKER_TOKENS) + [VISION_START] + [VIDEO_PAD] * pads + [VISION_END]
    first += text(QUESTION_TOKENS) + text(TURN_TOKENS)
    return Conversation(grid, first, [text(TURN_TOKENS + QUESTION_TOKENS + TURN_TOKENS) for _ in range(follow_ups)])


def random_features(tokens: int, hidden: int, device: torch.device, dtype: torch.dtype, deepstack: int = 3) -> EncodedItem:
    """Features of the right shape: (tokens, hidden) merged tokens and ``deepstack`` layers alike."""
    def draw() -> torch.Tensor:
        return (torch.randn(tokens, hidden, device=device) * 0.02).to(dtype)

    return EncodedItem(embeds=draw(), deepstack=tuple(draw() for _ in range(deepstack)))


def features_for(model: torch.nn.Module, tokens: int, device: torch.device, dtype: torch.dtype) -> EncodedItem:
    """Random features of ``tokens`` video tokens as ``model``'s tower makes them: Qwen3-VL's with
    three deepstack layers, Qwen3.5's with none."""
    return random_features(tokens, model.config.text_config.hidden_size, device, dtype, 0 if is_hybrid(model) else 3)


def clip_prompt(ids: list[int], grid: tuple[int, int, int], features: EncodedItem) -> Prompt:
    """The decoder's prompt of token ``ids`` about one clip of ``grid`` whose video tokens take ``features``."""
    input_ids = torch.tensor([ids])
    types = torch.where(input_ids == VIDEO_PAD, VIDEO_TOKEN, TEXT_TOKEN)
    grids = (("video", grid),)
    return Prompt(input_ids, types, vision_spans(types, grids, merge_area=4), grids, (features,), owner=features)


class _Clock(BaseStreamer):
    """Records when generate() hands over each new token (after a device sync)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


@dataclasses.dataclass
class Answer:
    token_ids: list[int]
    ttft_ms: float
    token_ms: list[float]


def _answer_from_times(started: float, times: list[float], token_ids: list[int]) -> Answer:
    return Answer(token_ids, (times[0] - started) * 1e3, [(b - a) * 1e3 for a, b in zip(times, times[1:])])


class GenerateRunner:
    """transformers' generate() over the whole conversation per question, features injected."""

    def __init__(self, model, features: EncodedItem, grid: tuple[int, int, int], static_len: int | None) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.injector = FeatureInjector(model)
        self.features = features
        self.grid = grid
        self.cache = None
        if static_len is not None:
            self.cache = StaticCache(config=model.config.text_config, max_cache_len=static_len)

    def ask(self, ids: list[int], new_tokens: int) -> Answer:
        input_ids = torch.tensor([ids], device=self.device)
        types = torch.full_like(input_ids, TEXT_TOKEN)
        types[input_ids == VIDEO_PAD] = VIDEO_TOKEN
        options: dict[str, Any] = {}
        clock = _Clock()
        _sync(self.device)
        started = time.perf_counter()
        with torch.inference_mode(), self.injector.serving(video=[self.features]):
            if self.cache is not None:
                self.cache.reset()
                options["past_key_values"] = self.cache
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                mm_token_type_ids=types,
                pixel_values_videos=torch.empty(0, device=self.device),
                video_grid_thw=torch.tensor([self.grid], device=self.device),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                streamer=clock,
                **options,
            )
        return _answer_from_times(started, clock.times, output[0, len(ids):].tolist())


class FramewiseRunner:
    """Framewise's decoder: the cache keeps the conversation, each question prefills what is new."""

    def __init__(self, model, features: EncodedItem, grid, context: int, min_bucket: int, steps: dict) -> None:
        self.language = language_model(model, steps)
        self.features = features
        self.grid = grid
        started = time.perf_counter()
        self.decoder = Decoder(self.language, context, min_bucket, use_graphs=True)
        self.first_start_s = time.perf_counter() - started
        self.first_capture_s = capture_seconds(self.decoder)
        self.decoder.close()
        del self.decoder
        gc.collect()
        started = time.perf_counter()
        self.decoder = Decoder(self.language, context, min_bucket, use_graphs=True)
        self.second_start_s = time.perf_counter() - started

    def ask(self, ids: list[int], new_tokens: int) -> Answer:
        prompt = clip_prompt(ids, self.grid, self.features)
        times: list[float] = []
        started = time.perf_counter()
        result = self.decoder.answer(
            prompt, SamplingRule(new_tokens), lambda token: times.append(time.perf_counter()), lambda: False
        )
        self.last = result
        return _answer_from_times(started, times, result.token_ids)


def capture_seconds(decoder: Decoder) -> float:
    """Seconds the decoder spent capturing its decode-step and follow-up prefill graphs."""
    return decoder.steps.capture_seconds + decoder.prefills.capture_seconds


def run_conversation(
    runner, conversation: Conversation, new_tokens: int, deadline: float, follow_ups: int
) -> list[Answer]:
    """The first question and ``follow_ups`` follow-ups, each answer part of the next prompt; no
    question starts after ``deadline``."""
    answers: list[Answer] = []
    for _ in range(follow_ups + 1):
        if time.perf_counter() > deadline:
            break
        answers.append(runner.ask(conversation.prompt([a.token_ids for a in answers]), new_tokens))
    return answers


def summarize(answers: list[Answer], floor_bytes: int, bandwidth: float, expected: int) -> dict[str, Any]:
    token_ms = sorted(ms for answer in answers for ms in answer.token_ms)
    mean = sum(token_ms) / len(token_ms) if token_ms else float("nan")
    floor_ms = floor_bytes / bandwidth * 1e3
    follow = [answer.ttft_ms for answer in answers[1:]]
    return {
        "questions": len(answers),
        "questions_planned": expected,
        "ttft_first_ms": answers[0].ttft_ms if answers else None,
        "ttft_follow_up_ms": sum(follow) / len(follow) if follow else None,
        "token_ms_mean": mean,
        "token_ms_p99": percentile(token_ms, 99),
        "tokens_per_s": 1e3 / mean if token_ms else None,
        "floor_ratio": mean / floor_ms if token_ms else None,
    }


def copy_bandwidth(device: torch.device, megabytes: int = 1024) -> float:
    """Bytes per second a device-to-device copy moves (read + write), best of 5."""
    source = torch.empty(megabytes * 2**20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        started = time.perf_counter()
        target.copy_(source)
        _sync(device)
        best = min(best, time.perf_counter() - started)
    return 2 * source.numel() / best


def language_weight_bytes(model) -> int:
    """Bytes a decode step reads: every decoder layer (FP8 weights and their scales are buffers),
    the final norm and the output head."""
    text = model.model.language_model
    modules = [text.layers, text.norm, model.lm_head]
    return sum(t.numel() * t.element_size() for module in modules for t in (*module.parameters(), *module.buffers()))


def read_floor(model, bandwidth: float) -> dict[str, Any]:
    """What one decode step must move at least, as the model is now: the weights it reads
    (:func:`language_weight_bytes`) and a hybrid model's linear states it reads and writes
    (:func:`linear_state_traffic`); the tokens per second that allows at ``bandwidth``."""
    weight_bytes, state_bytes = language_weight_bytes(model), linear_state_traffic(model)
    floor_bytes = weight_bytes + state_bytes
    return {"weight_bytes": weight_bytes, "state_bytes": state_bytes, "floor_bytes": floor_bytes,
            "floor_tokens_per_s": bandwidth / floor_bytes, "modes": {}}


LAYER_ERROR_TOKENS = 64


def record_layer_io(model, device: torch.device) -> list[tuple[tuple, dict, torch.Tensor]]:
    """Each decoder layer's inputs (positional and keyword) and output (1, tokens, hidden) on
    LAYER_ERROR_TOKENS random text tokens, in the model's current weights."""
    text = model.model.language_model
    records: list[tuple[tuple, dict, torch.Tensor]] = []

    def keep(module, args, kwargs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        records.append((args, kwargs, hidden.detach().clone()))

    handles = [layer.register_forward_hook(keep, with_kwargs=True) for layer in text.layers]
    tokens = torch.randint(1000, 100000, (1, LAYER_ERROR_TOKENS), generator=torch.Generator().manual_seed(1)).to(device)
    try:
        with torch.inference_mode():
            text(input_ids=tokens, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return records


def layer_errors(model, reference: list[tuple[tuple, dict, torch.Tensor]]) -> list[float]:
    """Each decoder layer's relative output error against ``reference`` (:func:`record_layer_io`
    of the bf16 model), the layer fed the reference's own input."""
    errors = []
    with torch.inference_mode():
        for layer, (args, kwargs, expected) in zip(model.model.language_model.layers, reference):
            output = layer(*args, **kwargs)
            got = output[0] if isinstance(output, tuple) else output
            errors.append(float((got.float() - expected.float()).norm() / expected.float().norm()))
    return errors


def quantize_decoder_layers(model, device: torch.device) -> None:
    """Replace the decoder layers' linear layers by Fp8Linear in place, one at a time (the bf16
    weight freed before the next), as quantize-on-load does (those it keeps float stay)."""
    layers = model.model.language_model.layers
    for name, module in list(layers.named_modules()):
        if isinstance(module, torch.nn.Linear) and not stays_float_in_fp8(model, name):
            parent, _, child = name.rpartition(".")
            setattr(layers.get_submodule(parent), child, Fp8Linear.from_linear(module, QUANTIZE_ON_LOAD_SCHEME))
    _free(device)


def bench_size(size: str, args, device, bandwidth: float, save: Callable[[dict], None]) -> dict[str, Any]:
    print(f"== {size}: building", flush=True)
    started = time.perf_counter()
    torch.manual_seed(0)
    activations = torch.bfloat16 if args.dtypes == ["fp8"] else getattr(torch, args.dtypes[0].replace("fp8", "bfloat16"))
    model = build_model(size, device, activations)
    conversation = make_conversation(args.frames, args.height, args.width, args.follow_ups)
    video_tokens = conversation.first.count(VIDEO_PAD)
    features = features_for(model, video_tokens, device, activations)
    context = len(conversation.prompt([[0] * args.new_tokens] * args.follow_ups)) + args.new_tokens + 64
    result: dict[str, Any] = {
        "size": size, "build_s": time.perf_counter() - started, "prompt_tokens": len(conversation.first),
        "video_tokens": video_tokens, "context": context, "dtypes": {},
    }
    print(f"   built in {result['build_s']:.1f} s; prompt {len(conversation.first)} tokens, context {context}", flush=True)
    reference_io = record_layer_io(model, device) if "fp8" in args.dtypes else None
    # fp8's errors and agreement are against the first dtype's model and answers (bf16 normally)
    reference_answers: list[list[int]] | None = None
    save(result)
    for dtype in args.dtypes:
        if dtype == "fp8":
            quantize_decoder_layers(model, device)
        run = read_floor(model, bandwidth)
        result["dtypes"][dtype] = run
        if dtype == "fp8":
            errors = layer_errors(model, reference_io)
            run["layer_error"] = {"mean": sum(errors) / len(errors), "max": max(errors), "per_layer": errors}
            run["reference_dtype"] = args.dtypes[0] if args.dtypes[0] != "fp8" else "bfloat16"
            del reference_io
            reference_io = None
        answers_by_mode = bench_modes(run, model, features, conversation, context, run["floor_bytes"], bandwidth, device,
                                      args, lambda: save(result), label=f"{size}_{dtype}")
        first = answers_by_mode.get(args.modes[0])
        if dtype != "fp8":
            reference_answers = first
        elif reference_answers and first:
            prefixes = [_agreeing(a, b) for a, b in zip(first, reference_answers)]
            run["greedy_agreement"] = sum(prefixes) / sum(len(b) for b in reference_answers[: len(prefixes)])
            run["agreeing_prefix_per_answer"] = prefixes
        if args.long_frames:
            save(result)
            run["long_clip"] = long_first_question(model, args, device, activations, f"{size}_{dtype}")
        save(result)
    del model, features
    _free(device)
    return result


def bench_modes(run, model, features, conversation, context, floor_bytes, bandwidth, device, args, save_all, label):
    """Every mode of ``args.modes`` on ``model`` as it is now; fills ``run["modes"]`` (saving the
    whole result after each mode); returns each finished mode's answers (token ids per question).
    ``floor_bytes`` is what one decode step must move at least; ``label`` (size and dtype) names
    the profile files."""
    answers_by_mode: dict[str, list[list[int]]] = {}
    reference: list[list[int]] | None = None
    for mode in args.modes:
        run["modes"][mode] = entry = {}
        mode_started = time.perf_counter()
        deadline = mode_started + args.mode_budgets[mode]
        try:
            skipped = _skip_reason(model, mode, args, mode_started)
            if skipped:
                raise _Skipped(skipped)
            runner, answers, follow_ups = _converse(mode, model, features, conversation, context, device, args,
                                                    entry, deadline)
        except Exception as error:  # noqa: BLE001 - a mode that fails is reported, the others still run
            entry["skipped"] = str(error) if isinstance(error, _Skipped) else f"{type(error).__name__}: {str(error)[:300]}"
            print(f"   {mode}: skipped ({entry['skipped']})", flush=True)
            _free(device)
            continue
        entry.update(summarize(answers, floor_bytes, bandwidth, follow_ups + 1))
        entry["seconds"] = time.perf_counter() - mode_started
        if mode.startswith("framewise"):
            entry.update(framewise_details(runner, conversation, device, args, f"{label}_{mode}"))
        if mode == "static":
            entry["first_call_s"] = entry["warm_up_s"]  # the compile and one whole answer
        ids = [answer.token_ids for answer in answers]
        answers_by_mode[mode] = ids
        if reference is None:
            reference = ids
        else:  # bf16 kernels differ, so greedy answers may part ways; count the agreeing prefix
            entry["tokens_agreeing_with_" + args.modes[0]] = [
                _agreeing(a, b) for a, b in zip(ids, reference)
            ]
        print(f"   {mode}: {json.dumps(_rounded(entry))}", flush=True)
        save_all()
        del runner
        _free(device)
    return answers_by_mode


class _Skipped(Exception):
    """A mode not run, with the reason as its message."""


def _skip_reason(model, mode: str, args, now: float) -> str | None:
    """Why ``mode`` is not run on ``model``: one it cannot run, or one that would not end within the
    run's time limit; None when it runs."""
    unsupported = unsupported_mode(model, mode)
    if unsupported:
        return unsupported
    budget, left = args.mode_budgets[mode], args.run_deadline - now
    if left < budget:
        return f"{left:.0f} s of the run's time limit left, under the mode's {budget:.0f} s"
    return None


def _converse(mode, model, features, conversation, context, device, args, entry, deadline):
    """The mode's runner, warmed up (its seconds into ``entry``), then the conversation until
    ``deadline``: the runner, the answers and the follow-ups asked for."""
    runner, warm = make_runner(mode, model, features, conversation, context, args)
    warm_started = time.perf_counter()
    warm(conversation.first)
    entry["warm_up_s"] = time.perf_counter() - warm_started
    if time.perf_counter() > deadline:
        raise TimeoutError(f"its warm-up alone took {entry['warm_up_s']:.0f} s")
    _reset_peak(device)
    follow_ups = args.follow_ups if mode.startswith("framewise") else args.baseline_follow_ups
    return runner, run_conversation(runner, conversation, args.new_tokens, deadline, follow_ups), follow_ups


def framewise_details(runner: FramewiseRunner, conversation: Conversation, device, args, label: str) -> dict[str, Any]:
    """A framewise mode's decoder after its conversation: capture seconds, graphs, the state's bytes
    (keys and values per position, a hybrid model's fixed linear states), the last answer's prefix
    reuse; the first question repeated and profiled where asked (profile files named by ``label``)."""
    decoder = runner.decoder
    details = dict(
        capture_first_s=runner.first_capture_s, start_first_s=runner.first_start_s,
        start_second_s=runner.second_start_s, capture_second_s=capture_seconds(decoder),
        graphs=decoder.graphs_enabled, graphs_reason=decoder.graphs_reason,
        buckets=list(decoder.steps.buckets), cache_mb=decoder.cache.nbytes / 2**20,
        graph_mb=(decoder.steps.graph_memory_bytes + decoder.prefills.graph_memory_bytes) / 2**20,
        prefix_reused_last=runner.last.prefix_tokens_reused, prompt_last=runner.last.prompt_tokens,
        prefill_graph_last=runner.last.prefill_graph,
        kv_bytes_per_token=decoder.cache.nbytes / decoder.max_tokens,
        linear_state_bytes=decoder.state.nbytes - decoder.cache.nbytes,
    )
    if args.first_repeats:
        repeats = repeat_first_question(runner, conversation, args.first_repeats)
        details.update(ttft_first_repeats_ms=repeats, ttft_first_median_ms=percentile(sorted(repeats), 50))
    if args.profile:
        details["first_question_profile"] = profile_first_question(
            runner, conversation, device, args.out / f"profile_{label}.txt"
        )
        details["decode_step_profile"] = profile_decode_steps(
            runner, conversation, device, args.out / f"profile_{label}_step.txt"
        )
    return details


def long_first_question(model, args, device: torch.device, activations: torch.dtype, label: str) -> dict[str, Any]:
    """The first question about a long clip (``args.long_frames`` frames of a 1280x720 clip within
    ``args.long_pixels``, random features), from an empty state, prefilled in the decoder's default
    chunks without graphs (a first question's prefill runs eagerly): one untimed, then
    ``args.long_repeats`` timed. Its prefill and first-token milliseconds, and the bytes the
    decoder's state takes: keys and values per position, and a hybrid model's fixed linear states.
    With ``args.profile`` the prefill once more under ``torch.profiler`` (``profile_<label>_long.txt``)."""
    height, width = app_frame_size(args.long_frames, args.long_pixels)
    conversation = make_conversation(args.long_frames, height, width, follow_ups=0)
    video_tokens = conversation.first.count(VIDEO_PAD)
    prompt = clip_prompt(conversation.first, conversation.grid_thw, features_for(model, video_tokens, device, activations))
    decoder = Decoder(language_model(model, FRAMEWISE_STEPS["framewise"]), len(conversation.first) + 64,
                      args.min_bucket, use_graphs=False)
    prefill_ms, ttft_ms = [], []
    for _ in range(1 + args.long_repeats):
        decoder.state.reset()
        first: list[float] = []
        _sync(device)
        started = time.perf_counter()
        decoded = decoder.answer(prompt, SamplingRule(1), lambda token: first.append(time.perf_counter()), lambda: False)
        prefill_ms.append(decoded.prefill_ms)
        ttft_ms.append((first[0] - started) * 1e3)
    result = {
        "frames": args.long_frames, "clip": f"{width}x{height}", "prompt_tokens": len(conversation.first),
        "video_tokens": video_tokens, "chunks": decoded.prefill_chunks, "prefill_ms": prefill_ms[1:],
        "ttft_ms": ttft_ms[1:], "prefill_median_ms": percentile(sorted(prefill_ms[1:]), 50),
        "kv_bytes_per_token": decoder.cache.nbytes / decoder.max_tokens,
        "linear_state_bytes": decoder.state.nbytes - decoder.cache.nbytes,
    }
    if args.profile:
        result["profile"] = profile_long_prefill(decoder, prompt, device, args.out / f"profile_{label}_long.txt")
    print(f"   long clip: {json.dumps(_rounded(result))}", flush=True)
    decoder.close()
    del decoder, prompt
    _free(device)
    return result


def repeat_first_question(runner: FramewiseRunner, conversation: Conversation, repeats: int) -> list[float]:
    """The first question's time to first token, in milliseconds, ``repeats`` more times, each from
    an empty cache with one new token: one first question is a single sample of a prefill that
    runs eagerly, so its spread shows only over several."""
    samples = []
    for _ in range(repeats):
        runner.decoder.state.reset()
        samples.append(runner.ask(conversation.first, 1).ttft_ms)
    runner.decoder.state.reset()
    return samples


def profile_first_question(runner: FramewiseRunner, conversation: Conversation, device: torch.device,
                           path: Path) -> dict[str, Any]:
    """The first question's prefill and first token once more, from an empty cache, under
    ``torch.profiler``: writes the table of its kernels by self GPU time (CPU time on the CPU) to
    ``path`` and returns the wall and GPU milliseconds with the ten costliest kernels. GPU time well
    under the wall time means the host launching kernels is what the prefill waits on."""
    wall_ms, averages, kernels = _profiled(lambda: runner.ask(conversation.first, 1), runner.decoder.state.reset, device)
    path.write_text(averages.table(sort_by=_time_key(device), row_limit=40) + "\n")
    on_gpu = device.type == "cuda"
    return {
        "wall_ms": wall_ms,
        "gpu_ms": sum(kernels.values()) / 1e3 if on_gpu else None,
        "top": [{"name": name[:100], "ms": us / 1e3, "calls": calls} for name, (us, calls) in
                sorted(_with_calls(kernels, averages, device).items(), key=lambda item: -item[1][0])[:10]],
        "table": path.name,
    }


def profile_long_prefill(decoder: Decoder, prompt, device: torch.device, path: Path) -> dict[str, Any]:
    """A long clip's first question once more under ``torch.profiler``, from an empty state: writes
    its kernel table to ``path``; returns the wall and GPU milliseconds and the ten costliest kernels."""
    def ask() -> None:
        decoder.answer(prompt, SamplingRule(1), lambda token: None, lambda: False)

    wall_ms, averages, kernels = _profiled(ask, decoder.state.reset, device)
    path.write_text(averages.table(sort_by=_time_key(device), row_limit=40) + "\n")
    return {
        "wall_ms": wall_ms,
        "gpu_ms": sum(kernels.values()) / 1e3 if device.type == "cuda" else None,
        "top": [{"name": name[:100], "ms": us / 1e3, "calls": calls} for name, (us, calls) in
                sorted(_with_calls(kernels, averages, device).items(), key=lambda item: -item[1][0])[:10]],
        "table": path.name,
    }


def profile_decode_steps(runner: FramewiseRunner, conversation: Conversation, device: torch.device,
                         path: Path, steps: int = 32) -> dict[str, Any]:
    """What one decode step's time goes to: the first question profiled with one new token and with
    ``1 + steps``, each from an empty cache; each kernel's time in the second less the first, over
    ``steps``. Writes the per-token kernel list to ``path``; returns the GPU (CPU on the CPU)
    microseconds per token and the ten costliest kernels per token."""
    _, short_averages, short = _profiled(lambda: runner.ask(conversation.first, 1), runner.decoder.state.reset, device)
    _, long_averages, long = _profiled(lambda: runner.ask(conversation.first, 1 + steps), runner.decoder.state.reset, device)
    short_calls = _with_calls(short, short_averages, device)
    per_token = {
        name: ((us - short.get(name, 0.0)) / steps, (calls - short_calls.get(name, (0.0, 0))[1]) / steps)
        for name, (us, calls) in _with_calls(long, long_averages, device).items()
    }
    ranked = sorted(((name, us, calls) for name, (us, calls) in per_token.items() if us > 0), key=lambda item: -item[1])
    path.write_text("".join(f"{us:10.2f} us {calls:6.2f} calls  {name}\n" for name, us, calls in ranked))
    return {
        "steps": steps,
        "us_per_token": sum(us for _, us, _ in ranked),
        "top": [{"name": name[:100], "us": us, "calls": calls} for name, us, calls in ranked[:10]],
        "table": path.name,
    }


def _time_key(device: torch.device) -> str:
    return "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"


def _profiled(ask: Callable[[], Any], reset: Callable[[], None], device: torch.device):
    """``ask()`` after ``reset()`` (emptying the cache) under ``torch.profiler``: its wall milliseconds, the profiler's
    averages, and each kernel's self time in microseconds by name (on the CPU: every operator's
    CPU time). On the GPU only the kernels count, since an operator's row repeats its kernels' time."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.type == "cuda"
    reset()
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_gpu else [ProfilerActivity.CPU]
    _sync(device)
    started = time.perf_counter()
    with profile(activities=activities) as profiler:
        ask()
        _sync(device)
    wall_ms = (time.perf_counter() - started) * 1e3
    averages = profiler.key_averages()
    key = _time_key(device)
    kernels = {event.key: getattr(event, key) for event in averages if getattr(event, key) > 0
               and (not on_gpu or event.device_type == torch.autograd.DeviceType.CUDA)}
    return wall_ms, averages, kernels


def _with_calls(kernels: dict[str, float], averages, device: torch.device) -> dict[str, tuple[float, int]]:
    """``kernels`` (name -> microseconds) with each one's call count from ``averages``."""
    counts = {event.key: event.count for event in averages
              if device.type != "cuda" or event.device_type == torch.autograd.DeviceType.CUDA}
    return {name: (us, counts.get(name, 0)) for name, us in kernels.items()}


def make_runner(mode: str, model, features, conversation: Conversation, context: int, args) -> tuple[Any, Callable]:
    """The mode's runner and its warm-up (the static mode's warm-up is its compile)."""
    if mode in FRAMEWISE_STEPS:
        runner = FramewiseRunner(model, features, conversation.grid_thw, context, args.min_bucket, FRAMEWISE_STEPS[mode])
        return runner, lambda ids: (runner.ask(ids, 4), runner.decoder.state.reset())
    if mode in ("default", "static"):
        runner = GenerateRunner(model, features, conversation.grid_thw, context if mode == "static" else None)
        return runner, lambda ids: runner.ask(ids, args.warm_up_tokens if mode == "default" else args.new_tokens)
    raise ValueError(f"unknown mode {mode}")


def _agreeing(a: list[int], b: list[int]) -> int:
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def markdown(results: list[dict[str, Any]], header: dict[str, Any]) -> str:
    lines = [
        f"{header['device']}, torch {header['torch']}, transformers {header['transformers']}, "
        f"{header['date']}; copy bandwidth {header['bandwidth_gbs']:.0f} GB/s; clip {header['clip']}",
        "",
        "| size | dtype | mode | TTFT first (ms) | TTFT first, repeated: median (min–max) | TTFT follow-ups (ms) | "
        "decode tok/s | per token mean / p99 (ms) | p99/mean | x floor | capture (s) | cache + graphs (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    accuracy, profiles, long_clips = [], [], []
    for result in results:
        for dtype, run in result["dtypes"].items():
            lines += _mode_rows(result["size"], dtype, run)
            profiles += _profile_rows(result["size"], dtype, run)
            long_clips += _long_clip_rows(result["size"], dtype, run)
            if "layer_error" in run:
                error = run["layer_error"]
                agreement = run.get("greedy_agreement")
                accuracy.append(
                    f"| {result['size']} | {dtype} vs {run['reference_dtype']} | {error['mean']:.4f} | {error['max']:.4f} | "
                    f"{'–' if agreement is None else f'{agreement:.0%}'} |"
                )
    if accuracy:
        lines += ["", "| size | dtype | layer output error, mean | max | greedy answer tokens agreeing |",
                  "|---|---|---|---|---|", *accuracy]
    if long_clips:
        lines += ["", "| size | dtype | long clip | prompt tokens | prefill passes | prefill (ms), median | TTFT (ms) | "
                  "keys and values per position (KiB) | linear states (MiB) |",
                  "|---|---|---|---|---|---|---|---|---|", *long_clips]
    if profiles:
        lines += ["", "| size | dtype | mode | first question profiled: wall ms | GPU ms | costliest kernels (ms, calls) | "
                  "decode step: GPU µs per token | costliest kernels per token (µs, calls) |",
                  "|---|---|---|---|---|---|---|---|", *profiles]
    return "\n".join(lines)


def _profile_rows(size: str, dtype: str, run: dict[str, Any]) -> list[str]:
    rows = []
    for mode, entry in run["modes"].items():
        profile = entry.get("first_question_profile")
        if profile:
            gpu = "–" if profile["gpu_ms"] is None else f"{profile['gpu_ms']:.1f}"
            top = "; ".join(f"{item['name'][:48]} {item['ms']:.1f} ({item['calls']})" for item in profile["top"][:4])
            step = entry.get("decode_step_profile")
            step_cells = ("– | –" if step is None else f"{step['us_per_token']:.1f} | " + "; ".join(
                f"{item['name'][:48]} {item['us']:.1f} ({item['calls']:.1f})" for item in step["top"][:5]))
            rows.append(f"| {size} | {dtype} | {mode} | {profile['wall_ms']:.1f} | {gpu} | {top} | {step_cells} |")
    return rows


def _long_clip_rows(size: str, dtype: str, run: dict[str, Any]) -> list[str]:
    long = run.get("long_clip")
    if not long:
        return []
    ttft = " / ".join(f"{ms:.0f}" for ms in long["ttft_ms"])
    return [f"| {size} | {dtype} | {long['frames']} frames of {long['clip']} | {long['prompt_tokens']:,} | {long['chunks']} | "
            f"{long['prefill_median_ms']:.0f} | {ttft} | {long['kv_bytes_per_token'] / 1024:.1f} | "
            f"{long['linear_state_bytes'] / 2**20:.2f} |"]


def _mode_rows(size: str, dtype: str, run: dict[str, Any]) -> list[str]:
    lines = []
    for mode, entry in run["modes"].items():
        if "skipped" in entry:
            lines.append(f"| {size} | {dtype} | {mode} | skipped: {entry['skipped']} ||||||||||")
            continue
        capture = ""
        memory = ""
        if mode.startswith("framewise"):
            capture = f"{entry['capture_first_s']:.2f} / {entry['capture_second_s']:.2f}"
            memory = f"{entry['cache_mb']:.0f} + {entry['graph_mb']:.0f}"
        elif mode == "static":
            capture = f"first call {entry['first_call_s']:.0f} (compile)"
        follow = entry["ttft_follow_up_ms"]
        repeats = entry.get("ttft_first_repeats_ms")
        repeated = f"{entry['ttft_first_median_ms']:.1f} ({min(repeats):.1f}–{max(repeats):.1f})" if repeats else "–"
        lines.append(
            f"| {size} | {dtype} | {mode} | {entry['ttft_first_ms']:.1f} | {repeated} | "
            f"{'–' if follow is None else f'{follow:.1f}'} | {entry['tokens_per_s']:.1f} | "
            f"{entry['token_ms_mean']:.2f} / {entry['token_ms_p99']:.2f} | "
            f"{entry['token_ms_p99'] / entry['token_ms_mean']:.2f} | {entry['floor_ratio']:.2f} | {capture} | {memory} |"
        )
    state = f" + {run['state_bytes'] / 2**20:.2f} MiB of linear states" if run.get("state_bytes") else ""
    lines.append(
        f"| {size} | {dtype} | floor | | | | {run['floor_tokens_per_s']:.0f} | "
        f"{run['weight_bytes'] / 2**30:.2f} GiB{state} per token | | 1.00 | | |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--sizes", default="2B,8B")
    parser.add_argument("--modes", default="framewise,framewise_ops,framewise_unfused,default,static")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--dtypes", default="bfloat16",
        help="weight dtypes, in order, from bfloat16, float32, float16, fp8 (fp8: bf16 activations, FP8 decoder layers)",
    )
    parser.add_argument("--quick", action="store_true",
                        help="8B shapes, bfloat16 and fp8, the framewise mode, one follow-up")
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--height", type=int, default=None,
                        help="frame height (default: what the app samples a 1280x720 clip of --frames frames to)")
    parser.add_argument("--width", type=int, default=None, help="frame width (default: as --height)")
    parser.add_argument("--long-frames", type=int, default=0,
                        help="also time a first question about a clip of this many frames per size and dtype (0: none)")
    parser.add_argument("--long-pixels", type=int, default=QWEN3_VL_LIMITS.released_clip_pixels,
                        help="the long clip's pixel budget (sampling max pixels; default: Qwen3-VL's released preprocessing's)")
    parser.add_argument("--long-repeats", type=int, default=2, help="timed long first questions, after one untimed")
    parser.add_argument("--follow-ups", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "--baseline-follow-ups", type=int, default=3, help="follow-ups the transformers modes answer (time)"
    )
    parser.add_argument("--warm-up-tokens", type=int, default=8)
    parser.add_argument("--min-bucket", type=int, default=256)
    parser.add_argument(
        "--mode-budgets",
        default="framewise=30,framewise_ops=30,framewise_unfused=30,default=60,static=120",
        help="seconds one mode may take at one size: no question starts after them",
    )
    parser.add_argument("--first-repeats", type=int, default=5,
                        help="framewise modes: the first question's time to first token this many more times (0: none)")
    parser.add_argument("--profile", action="store_true",
                        help="profile each framewise mode's first question once more (kernel tables in --out)")
    parser.add_argument("--total-budget-s", type=float, default=3600.0, help="a mode that would end past it is skipped")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.dtypes, args.modes, args.follow_ups = "8B", "bfloat16,fp8", "framewise", 1
        args.mode_budgets = "framewise=90"  # room for the FP8 kernels' first compile
    args.dtypes = [dtype for dtype in args.dtypes.split(",") if dtype]
    unknown = set(args.dtypes) - {"bfloat16", "float32", "float16", "fp8"}
    if unknown or args.dtypes.count("fp8") and args.dtypes[-1] != "fp8":
        parser.error("--dtypes: bfloat16, float32, float16 or fp8, with fp8 last (it quantizes the model in place)")
    args.modes = [mode for mode in args.modes.split(",") if mode]
    if args.height is None or args.width is None:
        args.height, args.width = app_frame_size(args.frames)
    args.run_deadline = time.perf_counter() + args.total_budget_s
    args.mode_budgets = {name: float(seconds) for name, seconds in (item.split("=") for item in args.mode_budgets.split(","))}
    device = torch.device(args.device)
    bandwidth = copy_bandwidth(device)
    import transformers

    header = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "dtypes": args.dtypes,
        "bandwidth_gbs": bandwidth / 1e9, "command": " ".join(sys.argv),
        "clip": f"{args.frames} frames of {args.width}x{args.height}",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []

    def save(result: dict[str, Any]) -> None:
        """Write what is measured so far, so a run stopped from outside still leaves its numbers."""
        done = [item for item in results if item is not result] + [result]
        (args.out / "decode_bench.json").write_text(json.dumps({"header": header, "results": _rounded(done)}, indent=1))

    for size in args.sizes.split(","):
        results.append(bench_size(size, args, device, bandwidth, save))
    save(results[-1])
    table = markdown(_rounded(results), header)  # the numbers the JSON holds, so the two agree to the digit
    (args.out / "decode_bench.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
