"""The command line that starts a vLLM server for Framewise, its encoder CUDA graphs sized like
Framewise's encoder settings (shown by ``framewise info --server`` and the Encoder panel)."""

from __future__ import annotations

import dataclasses
import json
import shlex

from framewise.core.backends.vllm.family import served_family
from framewise.core.events import ServerInfo
from framewise.core.settings import AppSettings, EncoderSettings, SamplingSettings


def vllm_serve_command(
    model: str, encoder: EncoderSettings, sampling: SamplingSettings, *, served_name: str | None = None
) -> str:
    """A command line that starts vLLM (0.32) serving ``model`` (a folder or a hub id) for
    Framewise, under ``served_name`` where that differs, with the server's encoder CUDA graphs
    sized like Framewise's encoder settings.

    Framewise's budgets count patch rows; vLLM's ``encoder_cudagraph_token_budgets`` count merged
    output tokens (a merge block of patches each), so each budget is divided by the merge area. Items per batch carry over;
    frames per batch counts attention sequences (one per frame pair) in both. Per-request frame
    times need ``--trust-request-mm-kwargs``; ``num_frames -1`` keeps every frame sent (vLLM's
    default silently keeps 32). ``--limit-mm-per-prompt`` names no count, so vLLM admits its own
    default (999 videos and 999 pictures a question), whatever a conversation holds; its frame count
    sizes the server's memory profile for Framewise's longest video.
    """
    limits = served_family().limits
    budgets = [budget // limits.merge_area for budget in encoder.token_budgets(limits)]
    compilation = {
        "cudagraph_mm_encoder": True,
        "encoder_cudagraph_token_budgets": budgets,
        "encoder_cudagraph_max_vision_items_per_batch": min(encoder.max_items_per_batch, budgets[0]),
        "encoder_cudagraph_max_frames_per_batch": encoder.max_frame_pairs_per_batch,
    }
    arguments = [
        "python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        *(["--served-model-name", served_name] if served_name and served_name != model else []),
        "--trust-request-mm-kwargs",
        "--limit-mm-per-prompt",
        json.dumps({"video": {"num_frames": sampling.max_frames}}),
        "--media-io-kwargs", json.dumps({"video": {"num_frames": -1}}),
        "--compilation-config", json.dumps(compilation, separators=(",", ":")),
    ]
    return shlex.join(arguments)


def with_serve_command(server: ServerInfo, settings: AppSettings) -> ServerInfo:
    """``server`` with its serve command sized for ``settings`` (after the encoder or sampling changed)."""
    command = vllm_serve_command(
        server.model_source or server.model, settings.encoder, settings.sampling, served_name=server.model
    )
    return dataclasses.replace(server, serve_command=command)
