"""How a checkpoint's config.json says its weights are stored, and whether its tensors match.

This is the checkpoint's side of the weight formats (:mod:`.weight_format`): the FP8 formats read
from a checkpoint (:mod:`.fp8_formats`) check its tensors here before anything is loaded. Three
layouts are known:

- unquantized floats (bf16, fp16, fp32): no ``quantization_config`` in config.json;
- Qwen's official block-wise FP8 (``quant_method: "fp8"``, ``weight_block_size: [128, 128]``):
  each quantized ``X.weight`` is e4m3 (N, K) with ``X.weight_scale_inv`` (ceil(N/128),
  ceil(K/128)), the factor each 128x128 block is multiplied by to give the real weight;
- compressed-tensors FP8 (``quant_method: "compressed-tensors"``, ``format: "float-quantized"``,
  the ``FP8_DYNAMIC`` scheme): each quantized ``X.weight`` is e4m3 (N, K) with ``X.weight_scale``
  (N, 1), one factor per output channel; activations, when quantized, are quantized per token at
  run time, so the checkpoint holds no activation scales. Its block strategy (``FP8_BLOCK``,
  ``weight_scale`` per 128x128 block) is read as the block-wise format.

In both FP8 formats the scale multiplies (``real = e4m3 * scale``) despite the ``_inv`` in
Qwen's name. The checkpoint itself says which tensors are quantized: every e4m3 tensor is one, and
the config's exclusion list (``modules_to_not_convert`` / ``ignore``) names modules that must not
be. Anything else no registered weight format claims (int8, int4, AWQ, GPTQ, per-tensor FP8 with
static activation scales) raises :class:`~framewise.core.errors.QuantizationFormatError` naming
the format and what to choose instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from safetensors import SafetensorError, safe_open

from framewise.core.errors import ModelLoadError, QuantizationFormatError
from framewise.core.kernels.e4m3 import BLOCK_SIZE

E4M3_DTYPE = "F8_E4M3"
E5M2_DTYPE = "F8_E5M2"
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})

Scheme = Literal["none", "block", "channel"]

_CHOOSE_INSTEAD = (
    "Choose Qwen's official FP8 checkpoint (a repo ending in -FP8), a compressed-tensors FP8_DYNAMIC export, "
    "or the bf16 checkpoint with Settings ▸ Model ▸ dtype fp8 (--dtype fp8) to quantize it while loading."
)


def scale_shape(scheme: Literal["block", "channel"], weight_shape: tuple[int, ...]) -> tuple[int, int]:
    """The shape of a (N, K) weight's FP8 scales: (ceil(N/128), ceil(K/128)) for ``"block"``, (N, 1)
    for ``"channel"``."""
    rows, columns = weight_shape
    if scheme == "block":
        return math.ceil(rows / BLOCK_SIZE), math.ceil(columns / BLOCK_SIZE)
    return rows, 1


@dataclass(frozen=True)
class CheckpointLayout:
    """How a checkpoint stores its weights, as its config.json declares them.

    ``scheme`` is ``"none"`` for unquantized floats, ``"block"`` for one scale per 128x128 block,
    ``"channel"`` for one scale per output row. ``scale_suffix`` is the name that replaces
    ``weight`` for a quantized weight's scale (``None`` when unquantized). ``not_converted`` lists
    the config's module names (or ``re:`` patterns) that stay unquantized. ``description`` is for
    messages.
    """

    scheme: Scheme
    description: str
    scale_suffix: str | None = None
    not_converted: tuple[str, ...] = ()

    def scale_name(self, weight_name: str) -> str:
        """The scale tensor's name for the quantized weight ``weight_name`` (``X.weight``)."""
        if self.scale_suffix is None:
            raise ValueError(f"{self.description} weights have no scales")
        return weight_name.removesuffix("weight") + self.scale_suffix

    def scale_shape(self, weight_shape: tuple[int, ...]) -> tuple[int, int]:
        """The shape a (N, K) weight's scale must have in this format (:func:`scale_shape`)."""
        return scale_shape("block" if self.scheme == "block" else "channel", weight_shape)

    def excludes(self, module_name: str) -> bool:
        """True when the config says the module ``module_name`` stays unquantized."""
        for entry in self.not_converted:
            if entry.startswith("re:"):
                if re.match(entry[3:], module_name):
                    return True
            elif module_name == entry or module_name.endswith("." + entry) or module_name.startswith(entry + "."):
                return True
        return False


UNQUANTIZED = CheckpointLayout("none", "unquantized (bf16, fp16 or fp32)")


@dataclass(frozen=True)
class TensorHeader:
    """A stored tensor's safetensors dtype (``"BF16"``, ``"F8_E4M3"``, ...) and shape."""

    dtype: str
    shape: tuple[int, ...]


def read_checkpoint_layout(config: Mapping[str, Any]) -> CheckpointLayout:
    """The weight layout a checkpoint's config.json (as a dict) declares.

    Raises QuantizationFormatError for a quantization Framewise cannot run.
    """
    quantization = config.get("quantization_config")
    if quantization is None:
        return UNQUANTIZED
    if not isinstance(quantization, Mapping):
        raise QuantizationFormatError(f"config.json's quantization_config is not an object. {_CHOOSE_INSTEAD}")
    if "quant_method" not in quantization:
        raise QuantizationFormatError(f"config.json's quantization_config names no quant_method. {_CHOOSE_INSTEAD}")
    method = str(quantization["quant_method"])
    if method == "fp8":
        return _block_fp8_format(quantization)
    if method == "compressed-tensors":
        return _compressed_tensors_format(quantization)
    raise QuantizationFormatError(f"The checkpoint is quantized with {method}, which Framewise does not run. {_CHOOSE_INSTEAD}")


def _block_fp8_format(quantization: Mapping[str, Any]) -> CheckpointLayout:
    block = quantization.get("weight_block_size")
    if block != [BLOCK_SIZE, BLOCK_SIZE]:
        raise QuantizationFormatError(
            f"The checkpoint holds FP8 weights with {_block_scales(block)}; Framewise runs FP8 with 128x128 blocks. "
            f"{_CHOOSE_INSTEAD}"
        )
    if quantization.get("activation_scheme", "dynamic") != "dynamic":
        raise QuantizationFormatError(
            "The checkpoint's FP8 weights come with static activation scales, which Framewise does not use. "
            f"{_CHOOSE_INSTEAD}"
        )
    fmt = str(quantization.get("fmt", "e4m3"))
    if fmt != "e4m3":
        raise QuantizationFormatError(f"The checkpoint holds FP8 weights in {fmt}; Framewise runs e4m3. {_CHOOSE_INSTEAD}")
    return CheckpointLayout(
        "block", "block-wise FP8 (128x128, weight_scale_inv)", "weight_scale_inv",
        tuple(quantization.get("modules_to_not_convert") or ()),
    )


def _block_scales(block: Any) -> str:
    """The scales a ``weight_block_size`` value from config.json gives, in words."""
    if not block:
        return "per-tensor scales"
    if isinstance(block, list) and len(block) == 2 and all(isinstance(side, int) for side in block):
        return f"{block[0]}x{block[1]}-block scales"
    return f"scales of weight_block_size {json.dumps(block)}"


def _compressed_tensors_format(quantization: Mapping[str, Any]) -> CheckpointLayout:
    storage = quantization.get("format", "unknown")
    if storage != "float-quantized":
        raise QuantizationFormatError(
            f"The checkpoint is a compressed-tensors {storage} export; Framewise runs its float-quantized (FP8) "
            f"format only. {_CHOOSE_INSTEAD}"
        )
    groups = quantization.get("config_groups") or {}
    if not isinstance(groups, Mapping) or not groups:
        raise QuantizationFormatError(f"The compressed-tensors config names no quantization groups. {_CHOOSE_INSTEAD}")
    schemes = {_compressed_tensors_group_scheme(name, group) for name, group in groups.items()}
    if len(schemes) > 1:
        raise QuantizationFormatError(
            f"The compressed-tensors checkpoint mixes block and per-channel FP8 groups. {_CHOOSE_INSTEAD}"
        )
    scheme = schemes.pop()
    description = "compressed-tensors FP8 (per-channel)" if scheme == "channel" else "compressed-tensors FP8 (128x128 blocks)"
    return CheckpointLayout(scheme, description, "weight_scale", tuple(quantization.get("ignore") or ()))


def _compressed_tensors_group_scheme(name: str, group: Any) -> Scheme:
    """``"channel"`` or ``"block"`` for one config group of FP8 weights with dynamic (or no)
    activation quantization; any other group raises QuantizationFormatError."""
    weights = group.get("weights") if isinstance(group, Mapping) else None
    if not isinstance(weights, Mapping) or weights.get("type") != "float" or weights.get("num_bits") != 8:
        kind = f"{weights.get('type')} {weights.get('num_bits')}-bit" if isinstance(weights, Mapping) else "unknown"
        raise QuantizationFormatError(
            f"The compressed-tensors group {name} stores {kind} weights; Framewise runs 8-bit float (FP8) weights. "
            f"{_CHOOSE_INSTEAD}"
        )
    strategy = weights.get("strategy")
    if strategy == "block" and list(weights.get("block_structure") or []) == [BLOCK_SIZE, BLOCK_SIZE]:
        scheme: Scheme = "block"
    elif strategy == "channel":
        scheme = "channel"
    else:
        per = f"block of {json.dumps(weights.get('block_structure'))}" if strategy == "block" else strategy
        raise QuantizationFormatError(
            f"The compressed-tensors group {name} scales its FP8 weights per {per}; Framewise runs per-channel "
            f"(FP8_DYNAMIC) or 128x128-block scales. {_CHOOSE_INSTEAD}"
        )
    activations = group.get("input_activations")
    if isinstance(activations, Mapping) and not activations.get("dynamic", False):
        raise QuantizationFormatError(
            f"The compressed-tensors group {name} has static activation scales (the FP8 scheme); Framewise runs "
            f"FP8_DYNAMIC. {_CHOOSE_INSTEAD}"
        )
    return scheme


def read_tensor_headers(files: Iterable[Path]) -> dict[str, TensorHeader]:
    """Every tensor's dtype and shape in the safetensors ``files``, read from their headers only."""
    headers: dict[str, TensorHeader] = {}
    for file in files:
        try:
            with safe_open(file, framework="pt") as handle:
                for name in handle.keys():
                    tensor = handle.get_slice(name)
                    headers[name] = TensorHeader(tensor.get_dtype(), tuple(tensor.get_shape()))
        except (OSError, SafetensorError) as error:
            raise ModelLoadError(
                f"The weights in {file} could not be read ({error}); the download may be damaged or incomplete."
            ) from error
    return headers


def quantized_weight_scales(headers: Mapping[str, TensorHeader], fmt: CheckpointLayout) -> dict[str, str]:
    """Check a checkpoint's quantized weights against its format; return weight name -> scale name.

    Every e4m3 tensor must be a 2-D ``.weight`` with its scale of the right shape, in a module the
    config does not exclude; every scale must belong to an e4m3 weight; every other tensor must be
    floating point. Raises QuantizationFormatError naming each kind of problem with its first few
    tensors.
    """
    quantized = sorted(name for name, header in headers.items() if header.dtype == E4M3_DTYPE)
    e5m2 = sorted(name for name, header in headers.items() if header.dtype == E5M2_DTYPE)
    problems: list[str] = []
    if e5m2:
        problems.append(f"{_problem(e5m2, '{} is stored in FP8 e5m2', 'tensors are stored in FP8 e5m2')}; Framewise runs e4m3")
    if fmt.scheme == "none":
        if quantized:
            problems.append(_problem(quantized, "{} is FP8 but config.json has no quantization_config",
                                     "tensors are FP8 but config.json has no quantization_config"))
        _check_floats(headers, set(e5m2), problems)
        _raise_if_any(problems)
        return {}
    if not quantized and not e5m2:
        problems.append(f"config.json declares {fmt.description} but no tensor is stored in FP8")
    scales: dict[str, str] = {}
    not_weights, excluded, missing, misshapen = [], [], [], []
    for name in quantized:
        header = headers[name]
        if not name.endswith(".weight") or len(header.shape) != 2:
            not_weights.append(name)
            continue
        if fmt.excludes(name.removesuffix(".weight")):
            excluded.append(name)
        scale = fmt.scale_name(name)
        expected = fmt.scale_shape(header.shape)
        found = headers.get(scale)
        if found is None:
            missing.append(name)
        elif found.shape not in ({expected, expected[:1]} if fmt.scheme == "channel" else {expected}):
            misshapen.append(f"{scale} has shape {list(found.shape)}, {list(expected)} expected for a {list(header.shape)} weight")
        scales[name] = scale
    if not_weights:
        problems.append(_problem(not_weights, "{} is FP8 but not a 2-D weight", "FP8 tensors are not 2-D weights"))
    if excluded:
        problems.append(_problem(excluded, "{} is FP8 although config.json keeps its module unquantized",
                                 "weights are FP8 although config.json keeps their modules unquantized"))
    if missing:
        problems.append(_problem(missing, f"{{}} has no {fmt.scale_suffix}", f"FP8 weights have no {fmt.scale_suffix}")
                        + _other_format_hint(headers, fmt))
    if misshapen:
        problems.append(_problem(misshapen, "{}", "scales have the wrong shape"))
    scaled_weights = set(scales) | set(e5m2)
    orphans = sorted(name for name in headers if name.endswith("." + fmt.scale_suffix) and
                     name.removesuffix(fmt.scale_suffix) + "weight" not in scaled_weights)
    if orphans:
        problems.append(_problem(orphans, "{} belongs to no FP8 weight", "scales belong to no FP8 weight"))
    _check_floats(headers, set(quantized) | set(e5m2), problems)
    _raise_if_any(problems)
    return scales


def _other_format_hint(headers: Mapping[str, TensorHeader], fmt: CheckpointLayout) -> str:
    """Where the checkpoint's scales carry the other FP8 format's name: which format they are."""
    other_suffix, other = (
        ("weight_scale", "compressed-tensors FP8") if fmt.scale_suffix == "weight_scale_inv"
        else ("weight_scale_inv", "Qwen's block-wise FP8")
    )
    if not any(name.endswith("." + other_suffix) for name in headers):
        return ""
    return f"; its scales are named {other_suffix}, as {other} names them, so config.json names the wrong format"


def _check_floats(headers: Mapping[str, TensorHeader], quantized: set[str], problems: list[str]) -> None:
    wrong = sorted(f"{name} ({header.dtype})" for name, header in headers.items()
                   if name not in quantized and header.dtype not in FLOAT_DTYPES)
    if wrong:
        problems.append(_problem(wrong, "{} is neither floating point nor FP8", "tensors are neither floating point nor FP8"))


def _problem(items: list[str], one: str, many: str) -> str:
    """A problem with one tensor (``one`` with ``{}`` for its name) or with several (their count,
    ``many`` and the first few)."""
    return one.format(items[0]) if len(items) == 1 else f"{len(items)} {many} ({_few(items)})"


def _raise_if_any(problems: list[str]) -> None:
    if problems:
        raise QuantizationFormatError(
            f"The checkpoint's weights do not match its quantization: {'; '.join(problems)}. Repeat the download, "
            "or choose a checkpoint whose config.json matches its weights."
        )


def _few(names: list[str], count: int = 3) -> str:
    return ", ".join(names[:count]) + (f", and {len(names) - count} more" if len(names) > count else "")
