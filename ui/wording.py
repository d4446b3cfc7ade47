"""How the window words what the engine reports: plain functions, no Qt (the session uses them too)."""

from __future__ import annotations

from framewise.core.events import EngineInfo, Progress

STAGE_NAMES = {
    "load": "Loading the model",
    "capture": "Capturing CUDA graphs",
    "decode": "Decoding",
    "encode": "Encoding",
}
# Stages whose ``current`` counts the steps finished before the one ``message`` names (the others,
# such as decoding, count seconds of video and say so in their message).
_STEP_STAGES = frozenset({"load", "capture"})


def progress_text(progress: Progress) -> str:
    """The status line for ``progress``: its message, with "(k of N)" for the step under way when the
    stage counts steps, e.g. "Capturing encoder graph for 4096 patches (2 of 5)"."""
    if not progress.message:
        return f"{STAGE_NAMES.get(progress.stage, progress.stage.capitalize())}…"
    if progress.stage in _STEP_STAGES and 1 < progress.total and progress.current < progress.total:
        return f"{progress.message} ({progress.current + 1} of {progress.total})"
    return progress.message


def model_text(info: EngineInfo) -> str:
    """The model's name, with its label when it has one (the demo model does)."""
    return f"{info.model_name} ({info.model_label})" if info.model_label else info.model_name


def held_memory_text(info: EngineInfo) -> str:
    """What the loaded model holds, for Settings ▸ Model ("" where it is not loaded here)."""
    held = info.held_memory
    return f"Loaded now, {info.model_name} holds {held.describe()}." if held else ""


def engine_text(info: EngineInfo, model: str) -> str:
    """``model`` (a name for it), the device, the weights' dtype (where the model is loaded here) and
    the encoder: "demo · cpu · fp8 · eager (no CUDA graphs)"."""
    dtype = [] if info.server is not None else [info.weight_dtype or info.dtype]
    return " · ".join([model, info.device, *dtype, encoder_text(info)])


def encoder_text(info: EngineInfo) -> str:
    """The encoder in a few words."""
    if info.server is not None:
        return "encoder on the vLLM server"
    return info.encoder_name if info.graphs_enabled else "eager (no CUDA graphs)"
