"""The vLLM serve command Framewise offers: its encoder CUDA graphs sized like Framewise's."""

from __future__ import annotations

import json

from framewise.core.backends.vllm.serve_command import pruning_note, vllm_serve_command
from framewise.core.settings import EncoderSettings, SamplingSettings


def test_the_serve_command_sizes_the_servers_encoder_graphs_like_framewise() -> None:
    encoder = EncoderSettings(budgets=(1024, 4096, 16384), max_items_per_batch=4, max_frame_pairs_per_batch=48)
    command = vllm_serve_command("Qwen/Qwen3-VL-8B-Instruct", encoder, SamplingSettings(max_frames=64))
    config = json.loads(command.split("--compilation-config ")[1].strip("'"))
    assert config == {
        "cudagraph_mm_encoder": True,
        "encoder_cudagraph_token_budgets": [256, 1024, 4096],  # merged tokens: patches / 4
        "encoder_cudagraph_max_vision_items_per_batch": 4,
        "encoder_cudagraph_max_frames_per_batch": 48,
    }
    assert command.startswith("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-VL-8B-Instruct")
    assert "--trust-request-mm-kwargs" in command and '"num_frames": 64' in command
    limits = json.loads(command.split("--limit-mm-per-prompt ")[1].split(" --")[0].strip("'"))
    # No count: vLLM's own default (999 a question) admits every clip and picture a conversation holds.
    assert limits == {"video": {"num_frames": 64}}


def test_a_pruning_rate_goes_into_the_serve_command_and_auto_or_off_put_none() -> None:
    encoder = EncoderSettings()
    rated = vllm_serve_command("m", encoder, SamplingSettings(pruning="0.75"))
    assert rated.endswith("--video-pruning-rate 0.75")
    for pruning in ("off", "auto", "0"):
        assert "--video-pruning-rate" not in vllm_serve_command("m", encoder, SamplingSettings(pruning=pruning))


def test_the_pruning_note_says_the_server_prunes_at_its_own_rate_with_its_marker_counts() -> None:
    assert pruning_note(SamplingSettings()) is None and pruning_note(SamplingSettings(pruning="0")) is None
    rated = pruning_note(SamplingSettings(pruning="0.5"))
    assert rated is not None and "--video-pruning-rate" in rated and "passes 0.5" in rated and "30847" in rated
    auto = pruning_note(SamplingSettings(pruning="auto"))
    assert auto is not None and "this machine only" in auto and "sets none" in auto
