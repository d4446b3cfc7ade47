"""benchmarks/decode_bench.py end to end on the CPU with the tiny shapes (the GPU runs the real
sizes): the first question timed again, each time from an empty cache, into the JSON and table; a
hybrid model's floor and long first question."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import decode_bench
from framewise.core.quantization.linear import Fp8Linear


def test_the_first_question_is_timed_again_from_an_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reused: list[int] = []
    ask = decode_bench.FramewiseRunner.ask

    def recording_ask(runner, ids, new_tokens):
        answer = ask(runner, ids, new_tokens)
        reused.append(runner.last.prefix_tokens_reused)
        return answer

    monkeypatch.setattr(decode_bench.FramewiseRunner, "ask", recording_ask)
    arguments = ["--sizes", "tiny", "--device", "cpu", "--dtypes", "float32", "--modes", "framewise",
                 "--new-tokens", "2", "--follow-ups", "1", "--first-repeats", "3", "--out", str(tmp_path)]
    assert decode_bench.main(arguments) == 0

    entry = json.loads((tmp_path / "decode_bench.json").read_text())["results"][0]["dtypes"]["float32"]["modes"]["framewise"]
    repeats = entry["ttft_first_repeats_ms"]
    assert len(repeats) == 3 and min(repeats) > 0
    assert min(repeats) <= entry["ttft_first_median_ms"] <= max(repeats)
    assert reused[-4] > 0  # the follow-up reused the first question's cache ...
    assert reused[-3:] == [0, 0, 0]  # ... and each repeat prefilled the whole question again
    row = next(line for line in (tmp_path / "decode_bench.md").read_text().splitlines()
               if line.startswith("| tiny | float32 | framewise |"))
    assert f"| {entry['ttft_first_median_ms']:.1f} ({min(repeats):.1f}–{max(repeats):.1f}) |" in row


def test_a_hybrid_model_counts_its_linear_states_in_the_floor_and_times_a_long_clip(tmp_path: Path) -> None:
    arguments = ["--sizes", "3.5-tiny", "--device", "cpu", "--dtypes", "float32", "--modes", "framewise,default",
                 "--new-tokens", "2", "--follow-ups", "0", "--first-repeats", "1", "--frames", "4", "--height", "64",
                 "--width", "64", "--long-frames", "8", "--long-pixels", str(8 * 192 * 320), "--long-repeats", "1",
                 "--out", str(tmp_path)]
    assert decode_bench.main(arguments) == 0

    run = json.loads((tmp_path / "decode_bench.json").read_text())["results"][0]["dtypes"]["float32"]
    framewise, default = run["modes"]["framewise"], run["modes"]["default"]
    assert "framewise mode" in default["skipped"]
    # 3.5-tiny: one full-attention layer of 2 KV heads of 32, three linear layers, float32.
    assert framewise["kv_bytes_per_token"] == 2 * 2 * 32 * 4
    conv = (2 * 2 * 16 + 4 * 16) * 4 * 4
    recurrent = 4 * 16 * 16 * 4
    assert framewise["linear_state_bytes"] == 3 * (conv + recurrent)
    assert run["state_bytes"] == 2 * framewise["linear_state_bytes"]  # read and written once a step
    assert run["floor_bytes"] == run["weight_bytes"] + run["state_bytes"]
    long = run["long_clip"]
    height, width = decode_bench.app_frame_size(8, 8 * 192 * 320)
    assert long["frames"] == 8 and long["clip"] == f"{width}x{height}" and len(long["prefill_ms"]) == 1
    assert long["prompt_tokens"] > long["video_tokens"] == 4 * (height // 32) * (width // 32)
    assert long["kv_bytes_per_token"] == framewise["kv_bytes_per_token"]
    table = (tmp_path / "decode_bench.md").read_text()
    assert f"| 3.5-tiny | float32 | 8 frames of {width}x{height} | {long['prompt_tokens']:,} |" in table
    assert f"| {long['kv_bytes_per_token'] / 1024:.1f} | {long['linear_state_bytes'] / 2**20:.2f} |" in table


def test_fp8_keeps_the_beta_and_decay_projections_float() -> None:
    model = decode_bench.build_model("3.5-tiny", torch.device("cpu"), torch.float32)
    decode_bench.quantize_decoder_layers(model, torch.device("cpu"))
    mixer = model.model.language_model.layers[0].linear_attn
    assert type(mixer.in_proj_a) is torch.nn.Linear and type(mixer.in_proj_b) is torch.nn.Linear
    assert isinstance(mixer.in_proj_qkv, Fp8Linear) and isinstance(mixer.out_proj, Fp8Linear)
    assert isinstance(model.model.language_model.layers[3].self_attn.q_proj, Fp8Linear)
