"""The command line that starts a vLLM server for Framewise, its encoder CUDA graphs sized like
Framewise's encoder settings (shown by ``framewise info --server`` and the Encoder panel)."""

from __future__ import annotations

import dataclasses
import json
import shlex

from framewise.core.backends.vllm.family import served_family
from framewise.core.events import ServerInfo
from framewise.core.settings import PRUNING_WORDS, AppSettings, EncoderSettings, SamplingSettings


def vllm_serve_command(
    model: str, encoder: EncoderSettings, sampling: SamplingSettings, *, served_name: str | None = None
) -> str:
    """A command line that starts vLLM (0.32) serving ``model`` (a folder or a hub id) for
    Framewise, under ``served_name`` where that differs, with the server's encoder CUDA graphs
    sized like Framewise's encoder settings, and pruning video tokens at ``sampling``'s rate when it
    sets one (:func:`server_pruning_rate`).

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
    rate = server_pruning_rate(sampling)
    if rate is not None:
        arguments += ["--video-pruning-rate", str(rate)]
    return shlex.join(arguments)


def server_pruning_rate(sampling: SamplingSettings) -> float | None:
    """The ``--video-pruning-rate`` a server started for ``sampling`` gets: its rate when it sets one
    above 0, else ``None``. vLLM sets the rate once, when the server starts, for every clip: it
    cannot prune only long clips, so ``auto`` gets none."""
    if sampling.pruning in PRUNING_WORDS:
        return None
    rate = float(sampling.pruning)
    return rate if rate > 0 else None


def pruning_note(sampling: SamplingSettings) -> str | None:
    """What ``sampling``'s pruning means with a vLLM server answering, for a person; ``None`` when off."""
    rate = server_pruning_rate(sampling)
    if rate is None and sampling.pruning != "auto":
        return None
    own_rate = "a vLLM server prunes every clip at the one rate it was started with (--video-pruning-rate)"
    if sampling.pruning == "auto":
        return (
            f"Pruning on auto works on this machine only: {own_rate}, so the serve command sets none. "
            "Set a rate to have the server prune."
        )
    return (
        f"Pruning is the server's: {own_rate}, and Framewise sends none with a question; the serve command "
        f"passes {rate}. vLLM's prompt may write each frame's token count from the rate rather "
        "than from the tokens it kept (vLLM issue 30847), unlike this machine's."
    )


def with_serve_command(server: ServerInfo, settings: AppSettings) -> ServerInfo:
    """``server`` with its serve command and pruning note for ``settings`` (after the encoder or
    sampling changed)."""
    command = vllm_serve_command(
        server.model_source or server.model, settings.encoder, settings.sampling, served_name=server.model
    )
    return dataclasses.replace(server, serve_command=command, pruning_note=pruning_note(settings.sampling))

