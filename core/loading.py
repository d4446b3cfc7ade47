"""Loading checkpoints: the bundled demo model, a local folder, or a cached repo id.

The checks here are generic (config, weight files, dtypes, tokenizer, chat template); the model
family the checkpoint's ``model_type`` names (:func:`~framewise.core.families.family_for`) loads
its own classes. Where a source points, and its config.json, are read by
:mod:`framewise.core.model_source`, which needs no torch. Nothing here touches the network: a repo
id is looked up in the local Hugging Face cache only. Only safetensors weights and the classes shipped with transformers are used (no
remote code). A folder that is missing, incomplete or of another architecture gives a
:class:`~framewise.core.errors.ModelLoadError` that says what is wrong and what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from jinja2 import TemplateError
from safetensors import SafetensorError, safe_open
from transformers import AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from framewise.core.decoding.host_embedding import move_input_embedding_to_host
from framewise.core.encoding.cpu_forms import cpu_tower_dtype, use_cpu_forms
from framewise.core.errors import FramewiseError, ModelLoadError, SettingsError
from framewise.core.events import Progress
from framewise.core.families import family_for
from framewise.core.families.base import FamilyAdapter, ModelFamily
from framewise.core.memory_plan import Alternative, MemoryEstimate, shortfall_message, size_text
from framewise.core.model_source import (  # MODEL_INFO_FILE and read_model_info: importers read them here too
    DEMO_MODEL_DIR,
    MODEL_INFO_FILE,
    looks_like_path,
    read_model_info,
    read_config,
    read_model_type,
    resolve_model_source,
)
from framewise.core.quantization.formats import read_tensor_headers
from framewise.core.quantization.kv_formats import kv_cache_format
from framewise.core.quantization.registry import choose_weight_format, declared_weight_format, format_settings
from framewise.core.quantization.weight_format import WeightFormat
from framewise.core.seam import FamilyLimits, LanguageLayout
from framewise.core.settings import DEMO_MODEL, DTYPES, KV_CACHE_DTYPES, AppSettings, ModelSettings, context_needed

FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})
PICKLE_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
SAFETENSORS_INDEX = "model.safetensors.index.json"
LOAD_STEPS = 4

ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to answer: weights on ``device`` in ``dtype``, in eval mode.

    ``label`` is shown next to the model's answers when set: it comes from the folder's
    ``framewise.json`` (the demo model's says its weights are random). ``family`` is the model
    family that loaded it (preprocessing, prompt, cancel points); ``adapter`` the family's side of
    the encoder seam (graphs, eager forward, the decoder's language model);
    ``limits`` this checkpoint's vision limits; ``path`` the checkpoint folder. ``weight_format``
    is how the language model's linear layers hold their weights (chosen once, from the checkpoint
    and the dtype setting); ``dtype`` is that of the activations and of every float weight.
    ``layout`` is the language model's layers by kind, as the family reads them from config.json.
    """

    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    name: str
    is_demo: bool
    label: str | None
    device: torch.device
    dtype: torch.dtype
    family: ModelFamily
    adapter: FamilyAdapter
    limits: FamilyLimits
    path: Path
    weight_format: WeightFormat
    layout: LanguageLayout


def load_model(settings: ModelSettings, progress: ProgressCallback | None = None) -> LoadedModel:
    """Load the checkpoint ``settings.source`` names onto the chosen device and dtype.

    Emits ``Progress(stage="load")`` before each step (config, weights, tokenizer, device) and
    once when done. Raises ModelLoadError for a source that cannot be loaded, SettingsError for
    a device or dtype this machine lacks.
    """
    report = progress or (lambda event: None)
    device = pick_device(settings.device)
    dtype = pick_dtype(settings.dtype, device)
    name = _display_name(settings.source)

    report(Progress("load", 0, LOAD_STEPS, f"Reading the configuration of {name}"))
    path = resolve_model_source(settings.source)
    model_type = check_checkpoint(path)
    family = family_for(model_type)
    label = read_model_info(path).get("label")
    weight_format = choose_weight_format(read_config(path), settings.dtype, device)

    report(Progress("load", 1, LOAD_STEPS, f"Loading the weights of {name}"))
    model = _load_weights(family, path, model_type, weight_format, dtype, device)

    report(Progress("load", 2, LOAD_STEPS, "Loading the tokenizer"))
    tokenizer = _load_tokenizer(path)
    check_chat_template(tokenizer, path, family)

    report(Progress("load", 3, LOAD_STEPS, f"Moving the model to {device.type}"))
    move_input_embedding_to_host(model, device)  # before the move, which leaves a HostEmbedding where it is
    try:
        # requires_grad alike for every checkpoint and dtype: torch.compile guards on it, and a
        # process that loads models of both kinds would otherwise compile the fused kernels anew
        # for each, until its recompile limit leaves them uncompiled
        model = model.to(device).eval().requires_grad_(False)
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(
            f"{name} does not fit in the memory of {device}; choose a smaller model, the CPU, or a smaller dtype."
        ) from error
    if device.type == "cpu":
        use_cpu_forms(family.vision_tower(model), pick_tower_dtype(settings.dtype, device, dtype))

    adapter = family.adapter(model)
    report(Progress("load", LOAD_STEPS, LOAD_STEPS, f"Loaded {name}"))
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        is_demo=path == DEMO_MODEL_DIR,
        label=label,
        device=device,
        dtype=dtype,
        family=family,
        adapter=adapter,
        limits=family.limits_of(model),
        path=path,
        weight_format=weight_format,
        layout=family.language_layout(read_config(path)),
    )


def estimate_memory(settings: AppSettings) -> MemoryEstimate:
    """What the model ``settings`` name will take on their device, from its config.json alone:
    linear layers in the weight format loading would choose, everything else in the activations'
    dtype, the KV cache of the settings' context in the layout ``decoding.kv_cache_dtype`` chooses,
    the encoder graphs' budgets (none on the CPU or with graphs off), and the features of the
    largest clip the sampling settings allow.

    Raises ModelLoadError for a source that cannot be read, as :func:`load_model` would."""
    model = settings.model
    path = resolve_model_source(model.source)
    family = family_for(read_model_type(path))
    config = read_config(path)
    device = pick_device(model.device)
    budgets = settings.encoder.token_budgets(family.limits) if settings.encoder.use_graphs and device.type == "cuda" else ()
    activations = pick_dtype(model.dtype, device)
    weight_format = choose_weight_format(config, model.dtype, device)
    context, clip = settings.context_tokens(family.limits), family.limits.video_tokens(settings.sampling.max_pixels)
    cache_format = kv_cache_format(settings.decoding.kv_cache_dtype)
    tower = pick_tower_dtype(model.dtype, device, activations)
    return family.estimate_memory(
        config, weight_format, activations, context, budgets, device.type, clip, cache_format, tower
    )


def memory_estimate_text(settings: AppSettings) -> str:
    """:func:`estimate_memory` in a few lines for a settings page, after the checkpoint's family and
    layers (:func:`checkpoint_text`), or why there is none: on a CUDA device also how much is
    available there, or, when the model would not fit, the refusal :func:`check_memory_fits` would
    give (with the settings that would fit)."""
    try:
        estimate = estimate_memory(settings)
        device = pick_device(settings.model.device)
        checkpoint = checkpoint_text(settings)
    except FramewiseError as error:
        return f"No memory estimate: {error}"
    if device.type == "cpu":
        return f"{checkpoint} Needs {estimate.describe()} on the CPU."
    available = _available_memory(device)
    shortfall = _shortfall(settings, estimate, device, available)
    if shortfall is not None:
        return f"{checkpoint} {shortfall}"
    return f"{checkpoint} Needs {estimate.describe()} on the GPU, of the {size_text(available)} available there."


def checkpoint_text(settings: AppSettings) -> str:
    """The family of the checkpoint ``settings`` name and its language layers, from its config.json:
    "A Qwen3.5 checkpoint: 24 linear-attention + 8 full-attention layers, 32.0 KiB of keys and values
    a token." (in the KV cache's layout the settings choose on their device). Raises
    ModelLoadError for a source that cannot be read."""
    path = resolve_model_source(settings.model.source)
    family = family_for(read_model_type(path))
    layout = family.language_layout(read_config(path))
    activations = pick_dtype(settings.model.dtype, pick_device(settings.model.device))
    per_token = kv_cache_format(settings.decoding.kv_cache_dtype).bytes_per_token(
        layout.kv_layers, layout.kv_heads, layout.head_dim, activations
    )
    return f"A {family.name} checkpoint: {layout.describe()}, {size_text(per_token)} of keys and values a token."


def check_memory_fits(settings: AppSettings) -> None:
    """Refuse, before loading, a model whose estimate exceeds what its CUDA device has.

    Available is the device's free memory plus what this process's allocator already holds (a
    model being replaced gives that back, or the load retries without it). The ModelLoadError
    names the settings that would fit: a dtype that quantizes the weights, a shorter context,
    smaller or no encoder graphs. Nothing is checked on the CPU, nor for a source whose config cannot be read (loading
    it reports why)."""
    device = pick_device(settings.model.device)
    if device.type != "cuda":
        return
    try:
        estimate = estimate_memory(settings)
    except ModelLoadError:
        return
    shortfall = _shortfall(settings, estimate, device, _available_memory(device))
    if shortfall is not None:
        raise ModelLoadError(shortfall)


def _available_memory(device: torch.device) -> int:
    """Bytes a model loaded now could take on a CUDA ``device``: its free memory and what this
    process's allocator holds (a model being replaced gives that back)."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device)


def _shortfall(settings: AppSettings, estimate: MemoryEstimate, device: torch.device, available: int) -> str | None:
    """Why the model ``settings`` name does not fit in ``available`` bytes, with the changes of
    settings that would fit; None when it fits."""
    if estimate.total <= available:
        return None
    model, encoder = settings.model, settings.encoder
    path = resolve_model_source(model.source)
    weight_format = choose_weight_format(read_config(path), model.dtype, device)
    weights = weight_format.weight_dtype or str(pick_dtype(model.dtype, device)).removeprefix("torch.")
    changes = []
    if not weight_format.quantized:
        changes += [(f"choose dtype {choice} (Settings ▸ Model, --dtype {choice})", settings.replace("model", dtype=choice))
                    for choice in format_settings()]
    if settings.decoding.kv_cache_dtype == "auto":
        changes += [(f"choose KV cache {choice} (Settings ▸ Model, --kv-cache {choice})",
                     settings.replace("decoding", kv_cache_dtype=choice))
                    for choice in KV_CACHE_DTYPES if choice != "auto"]
    changes += _smaller_clip_or_context(settings, family_for(read_model_type(path)).limits)
    if encoder.use_graphs:
        changes.append(("turn the encoder's CUDA graphs off (encoder.use_graphs)", settings.replace("encoder", use_graphs=False)))
    alternatives = [Alternative(change, estimate_memory(changed)) for change, changed in changes]
    what = f"{_display_name(model.source)} in {weights}"
    return shortfall_message(what, estimate, available, str(device), alternatives)


def _smaller_clip_or_context(settings: AppSettings, limits: FamilyLimits) -> list[tuple[str, AppSettings]]:
    """Settings that take less memory for clips: the family's released pixel budget where the
    sampling settings allow more (a smaller clip, and the automatic context with it), or a
    context of 4096 tokens where one question about the largest clip fits in it."""
    sampling, released = settings.sampling, limits.released_clip_pixels
    changes = []
    if sampling.max_pixels > released and sampling.max_frames * sampling.min_pixels_per_frame <= released:
        changes.append((
            f"lower sampling max pixels to {released:,} ({limits.video_tokens(released):,} video tokens, as "
            f"{limits.name}'s released preprocessing; now {limits.video_tokens(sampling.max_pixels):,})",
            settings.replace("sampling", max_pixels=released),
        ))
    context = settings.context_tokens(limits)
    if context > 4096 and context_needed(sampling, settings.generation, limits=limits).fits(4096):
        changes.append((f"lower the context to 4096 tokens (decoding.max_context_tokens, now {context})",
                        settings.replace("decoding", max_context_tokens=4096)))
    return changes


def check_checkpoint(path: Path) -> str:
    """Check that ``path`` holds a complete checkpoint of a supported family; return its ``model_type``.

    Checks, in order: config.json readable, a model_type some family loads, safetensors
    weights present (pickle weights are refused), every shard of the safetensors index present,
    every tensor floating point, tokenizer files present. Raises ModelLoadError saying which check
    failed. Loading then checks that every weight the architecture needs came with the right shape
    (:func:`check_loaded_weights`) and that the chat template renders (:func:`check_chat_template`).
    """
    model_type = read_model_type(path)
    _check_weights(path)
    check_weight_dtypes(path)
    _check_tokenizer_files(path)
    return model_type


def _check_weights(path: Path) -> None:
    index_file = path / SAFETENSORS_INDEX
    if index_file.is_file():
        try:
            shards = set(json.loads(index_file.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, AttributeError) as error:
            raise ModelLoadError(f"{index_file} cannot be read ({error}); the download may be damaged.") from error
        missing = sorted(shard for shard in shards if not (path / shard).is_file())
        if missing:
            raise ModelLoadError(
                f"{path} is incomplete: {len(missing)} of {len(shards)} weight shards are missing "
                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}). Finish or repeat the download."
            )
        return
    if any(path.glob("*.safetensors")):
        return
    pickled = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_WEIGHT_SUFFIXES)
    if pickled:
        raise ModelLoadError(
            f"{path} has weights only in pickle format ({', '.join(pickled[:3])}); Framewise loads only "
            ".safetensors weights, since pickle files can run code. Download the safetensors version of the model."
        )
    raise ModelLoadError(f"{path} has no weights (*.safetensors); finish or repeat the download.")


def _check_tokenizer_files(path: Path) -> None:
    has_fast = (path / "tokenizer.json").is_file()
    has_bpe_files = (path / "vocab.json").is_file() and (path / "merges.txt").is_file()
    if not (has_fast or has_bpe_files):
        raise ModelLoadError(
            f"{path} has no tokenizer (tokenizer.json, or vocab.json and merges.txt); finish or repeat the download."
        )


def _load_weights(
    family: ModelFamily, path: Path, model_type: str, weight_format: WeightFormat, dtype: torch.dtype, device: torch.device
) -> torch.nn.Module:
    bars_enabled = transformers_logging.is_progress_bar_enabled()
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.disable_progress_bar()  # progress goes through our own events
    transformers_logging.set_verbosity_error()  # so does the load report: check_loaded_weights words it
    try:
        model, loading_info = family.load_weights(path, model_type, weight_format, dtype, device)
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(
            f"The weights of {path.name} do not fit in the memory of {device}; choose {_smaller_choices()}."
        ) from error
    except (OSError, ValueError, RuntimeError, KeyError, TypeError, SafetensorError) as error:
        raise ModelLoadError(
            f"The weights in {path} could not be loaded ({error}); the download may be damaged or incomplete."
        ) from error
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars_enabled:
            transformers_logging.enable_progress_bar()
    check_loaded_weights(path, loading_info)
    return model


def check_loaded_weights(path: Path, loading_info: dict[str, Any]) -> None:
    """Refuse a model some of whose weights the checkpoint did not supply (transformers would leave
    them randomly initialised) or supplied with another shape; the message lists them.

    ``loading_info`` is ``from_pretrained(..., output_loading_info=True)``'s report: its
    ``missing_keys`` already leave out weights tied to others (the output embedding).
    """
    missing = sorted(loading_info.get("missing_keys") or ())
    mismatched = sorted(str(entry[0] if isinstance(entry, (tuple, list)) else entry)
                        for entry in loading_info.get("mismatched_keys") or ())
    problems = []
    if missing:
        problems.append(f"{len(missing)} weights the architecture needs are missing ({_first_few(missing)})")
    if mismatched:
        problems.append(f"{len(mismatched)} weights have another shape than config.json gives them ({_first_few(mismatched)})")
    if problems:
        raise ModelLoadError(
            f"{path} is incomplete: {'; '.join(problems)}. Finish or repeat the download, or choose the checkpoint "
            "whose config.json matches its weights."
        )


def check_weight_dtypes(path: Path) -> None:
    """Refuse safetensors files whose tensors Framewise cannot run: in a checkpoint without a
    quantization_config, anything but floating point (loading integers into float weights would
    give nonsense); in a quantized one, anything but the quantized weights and scales of the weight
    format its config declares, or a quantization no format runs: a QuantizationFormatError naming
    the format and what to choose instead."""
    declared = declared_weight_format(read_config(path))
    if declared is not None:
        declared.checked_scales(read_tensor_headers(sorted(path.glob("*.safetensors"))))
        return
    wrong: list[str] = []
    for weights in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(weights, framework="pt") as handle:
                wrong += [f"{name} ({handle.get_slice(name).get_dtype()})" for name in handle.keys()
                          if handle.get_slice(name).get_dtype() not in FLOAT_DTYPES]
        except (OSError, SafetensorError) as error:
            raise ModelLoadError(
                f"The weights in {weights} could not be loaded ({error}); the download may be damaged or incomplete."
            ) from error
    if wrong:
        raise ModelLoadError(
            f"{path} holds {len(wrong)} tensors that are not floating point ({_first_few(wrong)}); Framewise loads "
            "float checkpoints (bfloat16, float16 or float32 weights) and quantized ones whose config.json "
            "declares their quantization."
        )


def check_chat_template(tokenizer: PreTrainedTokenizerBase, path: Path, family: ModelFamily) -> None:
    """Render a question about a video with the tokenizer's chat template, as every question will be.

    Raises ModelLoadError when the checkpoint has no template or it does not render.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(
            f"{path} has no chat template (chat_template.jinja, or chat_template in tokenizer_config.json), which "
            "Framewise needs to write its prompts. Copy chat_template.jinja from the model's original repository."
        )
    try:
        tokenizer.apply_chat_template(
            family.chat_messages("What happens?", videos=1),
            tokenize=False,
            add_generation_prompt=True,
            **family.chat_template_options,
        )
    except (TemplateError, ValueError, TypeError, KeyError) as error:
        raise ModelLoadError(f"The chat template in {path} does not render a question about a video: {error}") from error


def _first_few(names: list[str], count: int = 5) -> str:
    shown = ", ".join(names[:count])
    return shown + (f", and {len(names) - count} more" if len(names) > count else "")


def count_question_tokens(source: str, question: str) -> int:
    """Tokens ``question`` takes in the tokenizer of the checkpoint ``source`` names, without loading its weights.

    Raises ModelLoadError, as :func:`load_model` would, for a source that cannot be loaded.
    """
    path = resolve_model_source(source)
    check_checkpoint(path)
    return len(_load_tokenizer(path)(question, add_special_tokens=False)["input_ids"])


def _load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as error:
        raise ModelLoadError(f"The tokenizer in {path} could not be loaded: {error}") from error


def _smaller_choices() -> str:
    """What to choose instead of weights that do not fit: a smaller model, each dtype that chooses a
    quantized format (``dtype <setting>``), or the CPU."""
    choices = ["a smaller model", *(f"dtype {setting}" for setting in format_settings()), "the CPU"]
    return ", ".join(choices[:-1]) + ", or " + choices[-1]


def _display_name(source: str) -> str:
    source = source.strip()
    if source == DEMO_MODEL:
        return "demo"
    path = Path(source).expanduser()
    if path.is_dir() or looks_like_path(source):
        return path.resolve().name or source
    return source


def pick_device(name: str) -> torch.device:
    """``"auto"``: CUDA when available, else the CPU. Asking for CUDA without it is a SettingsError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SettingsError("model.device", "CUDA is not available on this machine; choose auto or cpu.")
    if name not in ("cpu", "cuda"):
        raise SettingsError("model.device", f"unknown device {name!r}; choose auto, cpu or cuda.")
    return torch.device(name)


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    """The activations' dtype. ``"auto"``: bfloat16 on a GPU that supports it, else float32; so is
    a setting that chooses a quantized weight format (:func:`~framewise.core.quantization.registry.format_settings`),
    whose quantized weights are the language model's linear layers only. A named float dtype is used
    as is, except bfloat16 on a GPU without it (a SettingsError)."""
    supports_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if name == "auto" or name in format_settings():
        return torch.bfloat16 if supports_bf16 else torch.float32
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in dtypes:
        choices = ", ".join(DTYPES[:-1]) + " or " + DTYPES[-1]
        raise SettingsError("model.dtype", f"unknown dtype {name!r}; choose {choices}.")
    if name == "bfloat16" and device.type == "cuda" and not supports_bf16:
        raise SettingsError("model.dtype", "this GPU has no bfloat16; choose float16, float32 or auto.")
    return dtypes[name]


def pick_tower_dtype(name: str, device: torch.device, activations: torch.dtype) -> torch.dtype:
    """The vision tower's dtype for the dtype setting ``name``, whose activations are in
    ``activations``: on the CPU :func:`~framewise.core.encoding.cpu_forms.cpu_tower_dtype`
    (bfloat16 where the CPU multiplies it natively and the setting leaves the choice), elsewhere
    the activations'."""
    return cpu_tower_dtype(name, activations) if device.type == "cpu" else activations
