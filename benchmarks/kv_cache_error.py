"""Error of an 8-bit (e4m3) KV cache against the float cache, layer by layer, on the CPU.

Two ways to scale the cached keys and values are compared, each against the same pass over a
float32 cache:

- ``token``: one scale per token and key/value head, written with the token (the layout
  :data:`framewise.core.quantization.kv_formats.E4M3_KV_CACHE` keeps);
- ``static``: one scale per layer and key/value head, calibrated on the same prompt's float
  keys and values (their largest magnitude mapped to 448). Calibrating on the very prompt it then
  runs is the best a static scale can do; a later token larger than the calibration's saturates.

For each model a prompt is prefilled in one pass, then ``--steps`` decode steps run on fixed
tokens (the float cache's greedy answer), so that every run sees the same inputs. Reported: the
relative error ``||h' - h|| / ||h||`` of the hidden state after each layer over every prompt
token (after the last layer, the final norm's output), and of the logits of the prefill's last
token and every step, with how many of their argmaxes agree.

Models: the bundled demo model on a held-out synthetic clip, and a Qwen3-VL with random weights
at the 8B text shapes (hidden 4096, 32 query and 8 key/value heads of 128, MLP 12288) and few
layers, on random token ids.

    python3 benchmarks/kv_cache_error.py [--layers 3] [--prompt 512] [--steps 16]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from transformers import Qwen3VLForConditionalGeneration

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framewise.core.decoding.decoder import Prompt  # noqa: E402
from framewise.core.decoding.defs import VisionRows  # noqa: E402
from framewise.core.decoding.kv_cache import StaticKVCache  # noqa: E402
from framewise.core.encoding.eager import EagerVisionEncoder  # noqa: E402
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter  # noqa: E402
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel  # noqa: E402
from framewise.core.families.qwen3_vl.processor import fit_video_frames, preprocess_video  # noqa: E402
from framewise.core.families.qwen3_vl.prompt import build_chat_inputs  # noqa: E402
from framewise.core.kernels.e4m3 import E4M3, E4M3_MAX, MIN_SCALE  # noqa: E402
from framewise.core.loading import load_model  # noqa: E402
from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, FLOAT_KV_CACHE, KVCacheFormat  # noqa: E402
from framewise.core.settings import ModelSettings, SamplingSettings  # noqa: E402
from training.demo_model import build_demo_config, build_demo_tokenizer, special_token_ids  # noqa: E402
from training.synthetic import HELD_OUT_SEEDS, make_scene, sample_scene  # noqa: E402


@dataclass(frozen=True)
class StaticHeadScales(KVCacheFormat):
    """e4m3 entries whose scales were set before the pass (one per layer and head, the same at every
    position): :meth:`write` divides by the scales already in the buffer instead of computing them."""

    def write(self, stored: torch.Tensor, scales: torch.Tensor | None, positions: torch.Tensor, x: torch.Tensor) -> None:
        assert scales is not None
        head_scales = scales.index_select(2, positions)[..., None]
        quantized = (x.float() / head_scales).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
        stored.view(torch.uint8).index_copy_(2, positions, quantized.view(torch.uint8))


STATIC_HEAD_SCALES = StaticHeadScales("static", E4M3)


@dataclass(frozen=True)
class Workload:
    """A prompt to prefill in one pass: ``input_ids`` (1, n), rotary positions ``rope`` (3, n) and
    the vision features in place of its vision tokens (None for text)."""

    input_ids: torch.Tensor
    rope: torch.Tensor
    vision: VisionRows | None


@dataclass
class Run:
    """What one pass gave: the hidden state after each layer (n, hidden) for every prompt token,
    the logits (steps + 1, vocab) of the prefill's last token and each step, the tokens the steps
    took, and the cache."""

    hidden: list[torch.Tensor]
    logits: torch.Tensor
    tokens: list[int]
    cache: StaticKVCache


def run(
    language: Qwen3VLLanguageModel, work: Workload, steps: int, tokens: list[int] | None = None,
    prepare: Callable[[StaticKVCache], None] = lambda cache: None,
) -> Run:
    """Prefill ``work``, then ``steps`` decode steps taking ``tokens`` (None: each the argmax of the
    logits before it), over a new cache that ``prepare`` may set up first."""
    count = work.input_ids.shape[1]
    cache = language.new_state(count + steps + 1)
    prepare(cache)
    hidden: list[torch.Tensor] = []
    handles = [
        layer.register_forward_pre_hook(lambda module, args: hidden.append(args[0].clone()))
        for layer in language.text.layers[1:]
    ]
    with torch.inference_mode():
        embeds = language.embed(work.input_ids)
        deepstack, vision_mask, vision_rows = [], None, None
        if work.vision is not None:
            embeds = embeds.masked_scatter(work.vision.mask[..., None], work.vision.embeds.to(embeds.dtype))
            deepstack, vision_mask = list(work.vision.deepstack), work.vision.mask
            vision_rows = vision_mask[0].nonzero().squeeze(1)
        cache.write_positions, cache.view_length = torch.arange(count), count
        final = language._prefill_stack(
            embeds, work.rope[:, None, :], cache, None, vision_mask, vision_rows, deepstack
        )
        for handle in handles:
            handle.remove()
        hidden.append(final[0])
        logits = [language.model.lm_head(final[:, -1]).float()]
        taken = []
        for step in range(steps):
            taken.append(int(logits[-1].argmax()) if tokens is None else tokens[step])
            position = count + step
            cache.view_length = position + 1
            at = torch.tensor([position])
            logits.append(language.step(cache, language.embed(torch.tensor([[taken[-1]]])), at, at))
    return Run(hidden, torch.cat(logits), taken, cache)


def calibrated(reference: StaticKVCache, count: int) -> Callable[[StaticKVCache], None]:
    """Set a cache's scales to the largest magnitude / 448 of each layer's and head's float keys
    and values over the ``count`` prompt positions of ``reference``."""

    def prepare(cache: StaticKVCache) -> None:
        pairs = zip((*reference.keys, *reference.values), (*cache.key_scales, *cache.value_scales))
        for entries, scales in pairs:
            largest = entries[0, :, :count].abs().amax(dim=(-1, -2)).clamp(min=MIN_SCALE * E4M3_MAX)
            scales.copy_((largest / E4M3_MAX)[None, :, None].expand_as(scales))

    return prepare


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm())


def compare(name: str, model: torch.nn.Module, work: Workload, steps: int) -> None:
    """Print the per-layer and logits errors of each scaling against the float cache."""
    reference = run(Qwen3VLLanguageModel(model, cache_format=FLOAT_KV_CACHE), work, steps)
    count = work.input_ids.shape[1]
    schemes = {
        "token": (E4M3_KV_CACHE, lambda cache: None),
        "static": (STATIC_HEAD_SCALES, calibrated(reference.cache, count)),
    }
    results = {
        scheme: run(Qwen3VLLanguageModel(model, cache_format=layout), work, steps, reference.tokens, prepare)
        for scheme, (layout, prepare) in schemes.items()
    }
    layers = len(reference.hidden)
    print(f"\n{name}: {count} prompt tokens, {steps} steps; relative error against the float32 cache")
    print(f"{'layer':<22}" + "".join(f"{scheme:>12}" for scheme in results))
    for layer in range(layers):
        label = f"{layer}" + (" (final norm)" if layer == layers - 1 else "")
        errors = (relative(result.hidden[layer], reference.hidden[layer]) for result in results.values())
        print(f"{label:<22}" + "".join(f"{error:12.4f}" for error in errors))
    for label, rows in (("logits, prefill", slice(0, 1)), ("logits, steps", slice(1, None))):
        errors = (relative(result.logits[rows], reference.logits[rows]) for result in results.values())
        print(f"{label:<22}" + "".join(f"{error:12.4f}" for error in errors))
    agree = [int((r.logits.argmax(-1) == reference.logits.argmax(-1)).sum()) for r in results.values()]
    print(f"{'argmax agreeing':<22}" + "".join(f"{f'{same}/{steps + 1}':>12}" for same in agree))


def demo_workload(model: torch.nn.Module, tokenizer: object, seed: int) -> Workload:
    """The demo model's prompt about held-out synthetic clip ``seed``, its features encoded eagerly."""
    adapter = Qwen3VLAdapter.for_model(model)
    sampling = SamplingSettings()
    sampled = sample_scene(make_scene(seed), sampling)
    frames = fit_video_frames(sampled.frames, sampling, geometry=adapter.geometry)
    video = preprocess_video(frames, sampled.timestamps, adapter.geometry)
    with torch.inference_mode():
        features = EagerVisionEncoder(adapter).encode([video.item]).items[0]
    inputs = build_chat_inputs(tokenizer, "Which way does the red shape move?", videos=[video], geometry=adapter.geometry)
    prompt = Prompt(inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, (features,))
    language = Qwen3VLLanguageModel(model)
    rope = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
    return Workload(prompt.input_ids, rope, prompt.vision_rows(0))


def eight_b_shapes(layers: int) -> torch.nn.Module:
    """A float32 Qwen3-VL with random weights at the 8B text shapes and ``layers`` layers."""
    tokenizer = build_demo_tokenizer()
    config = build_demo_config(
        len(tokenizer), special_token_ids(tokenizer), depth=1, deepstack_visual_indexes=(0,),
        text_hidden=4096, text_intermediate=12288, text_layers=layers, text_heads=32, text_kv_heads=8, head_dim=128,
    )
    torch.manual_seed(0)
    return Qwen3VLForConditionalGeneration._from_config(config, dtype=torch.float32).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=3, help="layers of the 8B-shaped model")
    parser.add_argument("--prompt", type=int, default=512, help="random prompt tokens of the 8B-shaped model")
    parser.add_argument("--steps", type=int, default=16, help="decode steps after each prefill")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    loaded = load_model(ModelSettings(source="demo", device="cpu", dtype="float32"))
    compare("demo model, held-out clip " + str(HELD_OUT_SEEDS[0]), loaded.model,
            demo_workload(loaded.model, loaded.tokenizer, HELD_OUT_SEEDS[0]), args.steps)
    model = eight_b_shapes(args.layers)
    ids = torch.randint(0, model.config.text_config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    rope = torch.arange(args.prompt).expand(3, -1)
    compare(f"random weights, 8B text shapes, {args.layers} layers", model, Workload(ids, rope, None), args.steps)


if __name__ == "__main__":
    main()
