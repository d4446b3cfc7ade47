"""benchmarks/memory_bench.py end to end on the CPU with the tiny shapes (the GPU runs the real
sizes): it writes a checkpoint the loader accepts, runs each dtype in fresh processes through the
engine and tabulates what it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import Qwen3_5ForConditionalGeneration, Qwen3VLForConditionalGeneration

from benchmarks import memory_bench

TINY_RUN = ("--size", "tiny", "--device", "cpu", "--short-frames", "4", "--long-frames", "8",
            "--long-pixels", str(8 * 192 * 320), "--new-tokens", "4")


@pytest.mark.parametrize(("size", "parameters"), [("2B", 2.13e9), ("8B", 8.77e9)])
def test_the_checkpoint_has_the_released_shapes_and_vocabulary(size: str, parameters: float) -> None:
    config = memory_bench.checkpoint_config(size)
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    assert config.text_config.vocab_size == 151936
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(parameters, rel=0.01)


def test_fp8_runs_load_a_clip_and_a_long_clip_in_fresh_processes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert memory_bench.main([*TINY_RUN, "--dtypes", "fp8", "--out", str(out), "--cache", str(tmp_path / "cache")]) == 0
    runs = {memory_bench.RunSpec(**run["spec"]).name: run for run in json.loads((out / "memory_bench.json").read_text())["runs"]}
    assert sorted(runs) == ["tiny-fp8-long-1", "tiny-fp8-short-1", "tiny-fp8-short-2"]
    assert not [run["error"] for run in runs.values() if "error" in run]
    short, long = runs["tiny-fp8-short-2"], runs["tiny-fp8-long-1"]
    assert short["clip"]["frames"] == 4 and long["clip"]["frames"] == 8
    clip = long["clip"]
    assert clip["prompt_tokens"] > 8 * clip["height"] * clip["width"] // 2048  # its video tokens reached the prompt
    assert {share["dtype"] for share in short["held_memory"]["weights"]} >= {"float8_e4m3fn", "float32"}
    assert short["after_load"] == {"max_reserved": None, "reserved": None, "device_used": None}  # no CUDA here
    table = (out / "memory_bench.md").read_text()
    held = short["held_memory"]["total"] / 2**30
    first, second = runs["tiny-fp8-short-1"]["load_seconds"], short["load_seconds"]
    assert f"| tiny | fp8 | – | – / – / – | – / – / – | {held:.2f} | – | {first:.1f} / {second:.1f} |" in table
    assert f"long clip: 8 frames of {clip['width']}x{clip['height']}" in table


def test_the_table_gives_gib_per_stage_and_names_failed_runs() -> None:
    def run(scenario: str, start: int, peaks: tuple[int, int], seconds: float) -> dict:
        spec = memory_bench.RunSpec("ckpt", "8B", "fp8", "cuda", scenario, start, 32, None, 128)
        memory = [{"max_reserved": peak, "reserved": peak, "device_used": peak + 2**29} for peak in peaks]
        return {"spec": spec.__dict__, "load_seconds": seconds, "held_memory": {"total": 9 * 2**30},
                "after_load": memory[0], "after_clip": memory[1]}

    gib = 2**30
    failed = {"spec": memory_bench.RunSpec("ckpt", "8B", "bfloat16", "cuda", "long", 1, 768, 1, 128).__dict__,
              "error": "did not finish within 600 s"}
    labelled = run("long", 1, (8 * gib, 10 * gib), 30.0)
    labelled["spec"] = {**labelled["spec"], "label": "2048"}
    table = memory_bench.markdown_table([
        run("short", 1, (10 * gib, 11 * gib), 40.0), run("short", 2, (10 * gib, 11 * gib), 12.5),
        run("long", 1, (12 * gib, 14 * gib), 41.0), failed, labelled,
    ])
    assert ("| 8B | fp8 | – | 10.00 / 11.00 / 14.00 | 10.50 / 11.50 / 14.50 | 9.00 | 12.00 → 14.00, 1.167 "
            "| 40.0 / 12.5 |") in table
    assert "| 8B | fp8 | 2048 | – / – / 10.00 | – / – / 10.50 | 9.00 | 8.00 → 10.00, 1.250 | – / – |" in table
    assert "| 8B | bfloat16 | – | – / – / – | – / – / – | – | – | – / – |" in table
    assert "- 8B-bfloat16-long-1: did not finish within 600 s" in table


def test_a_run_past_its_time_limit_is_recorded_as_failed(tmp_path: Path) -> None:
    spec = memory_bench.RunSpec(str(tmp_path / "none"), "tiny", "fp8", "cpu", "short", 1, 4, None, 4)
    result = memory_bench.run_child(spec, tmp_path, tmp_path / "compile", timeout_s=0.5)
    assert result["error"] == "did not finish within 0 s"
    assert json.loads((tmp_path / "runs" / f"{spec.name}.json").read_text())["error"] == result["error"]


def test_long_runs_alone_take_further_settings_and_a_label(tmp_path: Path) -> None:
    out = tmp_path / "out"
    arguments = [*TINY_RUN, "--dtypes", "bfloat16", "--scenarios", "long", "--set", "generation.max_new_tokens=2",
                 "--label", "two", "--out", str(out), "--cache", str(tmp_path / "cache")]
    assert memory_bench.main(arguments) == 0
    runs = json.loads((out / "memory_bench.json").read_text())["runs"]
    assert [memory_bench.RunSpec(**run["spec"]).name for run in runs] == ["tiny-bfloat16-long-1-two"]
    assert "error" not in runs[0]
    assert runs[0]["clip"]["new_tokens"] == 2  # the further setting held, over --new-tokens 4
    assert "| tiny | bfloat16 | two |" in (out / "memory_bench.md").read_text()


def test_a_setting_the_app_lacks_fails_its_run_by_name(tmp_path: Path) -> None:
    spec = memory_bench.RunSpec("checkpoint", "tiny", "fp8", "cpu", "long", 1, 8, None, 4,
                                overrides=(("decoding.no_such_field", "fp8"),))
    with pytest.raises(TypeError, match="no_such_field"):
        memory_bench.run_settings(spec)
    assert memory_bench._setting_value("0.75") == 0.75 and memory_bench._setting_value("fp8") == "fp8"


def test_the_qwen3_5_checkpoint_has_the_9b_shapes() -> None:
    config = memory_bench.checkpoint_config("3.5-9B")
    with torch.device("meta"):
        model = Qwen3_5ForConditionalGeneration(config)
    language = [*model.model.language_model.parameters(), *model.lm_head.parameters()]  # the head is untied
    assert config.text_config.vocab_size == 248320
    assert sum(p.numel() for p in language) == pytest.approx(8.95e9, rel=0.01)
    assert config.text_config.layer_types.count("full_attention") == 8  # 32 KiB of keys and values a token in bf16
    assert model.model.visual.config.out_hidden_size == 4096 and not hasattr(model.model.visual, "deepstack_merger_list")


def test_random_weights_repeat_one_pool_but_not_row_by_row(tmp_path: Path) -> None:
    config = memory_bench.checkpoint_config("tiny")
    memory_bench.write_random_weights(tmp_path, config)
    tensors = {}
    for shard in tmp_path.glob("*.safetensors"):
        tensors.update(load_file(shard))
    with torch.device("meta"):
        expected = Qwen3VLForConditionalGeneration(config).state_dict()
    assert {name: tuple(t.shape) for name, t in tensors.items()} == {
        name: tuple(t.shape) for name, t in expected.items() if name != "lm_head.weight"}  # tied head left out
    norm = next(name for name in tensors if "norm" in name)
    assert torch.equal(tensors[norm], torch.ones_like(tensors[norm]))
    matrix = tensors["model.language_model.layers.0.mlp.down_proj.weight"].float()
    assert not torch.equal(matrix[0], matrix[1]) and 0.015 < matrix.std() < 0.025
