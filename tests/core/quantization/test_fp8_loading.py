"""Loading checkpoints in each weight format into a module tree, tensor by tensor, with FP8 linears."""

from __future__ import annotations

import re
import weakref
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from framewise.core.errors import QuantizationFormatError
from framewise.core.quantization import loading
from framewise.core.quantization.formats import read_tensor_headers
from framewise.core.quantization.fp8 import dequantize
from framewise.core.quantization.registry import choose_weight_format, declared_weight_format
from framewise.core.quantization.linear import Fp8Linear
from tests.core.quantization.fp8_checkpoints import (
    TinyModel,
    is_language_linear,
    language_linear_names,
    random_state,
    read_config,
    reference_e4m3,
    write_checkpoint,
)

CPU = torch.device("cpu")
# e4m3's rounding of each weight (about 2.6 % relative), through two layers and the head
LOGIT_BOUND = 0.08


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.detach().double(), expected.detach().double()
    return float((actual - expected).norm() / expected.norm())


def meta_model() -> TinyModel:
    with torch.device("meta"):
        return TinyModel()


def bf16_model(state: dict[str, torch.Tensor]) -> TinyModel:
    model = TinyModel().to(torch.bfloat16)
    model.load_state_dict(state)
    return model


def load(
    folder: Path, files: list[Path], quantize: bool = False, stacked_with=lambda name: None
) -> tuple[TinyModel, loading.LoadReport]:
    """Load the checkpoint in ``folder`` into a :class:`TinyModel`: in the format its config
    declares, quantized on load with ``quantize`` (its language linear layers only), else as floats."""
    model = meta_model()
    fmt = choose_weight_format(read_config(folder), "fp8" if quantize else "bfloat16", CPU)
    report = loading.load_checkpoint(
        model, files, fmt, CPU, torch.bfloat16, keep_float=lambda name: not is_language_linear(name),
        stacked_with=stacked_with,
    )
    return model, report


def stacks_of(*groups: tuple[str, ...]):
    """A ``stacked_with`` over each layer of :class:`TinyModel`: ``groups`` of its linear names."""

    def stacked_with(module_name: str) -> tuple[str, ...] | None:
        layer, _, leaf = module_name.rpartition(".")
        layer, _, block = layer.rpartition(".")
        for group in groups:
            if f"{block}.{leaf}" in group:
                return tuple(f"{layer}.{member}" for member in group)
        return None

    return stacked_with


def follows(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Whether ``second`` starts where ``first`` ends, in one storage."""
    return (first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
            and second.storage_offset() == first.storage_offset() + first.numel())


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("fmt", ["block", "channel"])
def test_fp8_checkpoint_loads_as_written(tmp_path: Path, fmt: str, shards: int) -> None:
    state = random_state()
    files = write_checkpoint(tmp_path, state, fmt, shards)
    model, report = load(tmp_path, files)
    assert sorted(report.quantized_from_checkpoint) == sorted(language_linear_names())
    assert report.quantized_on_load == [] and report.unexpected == [] and report.mismatched == [] and report.missing == []
    stored = {name: tensor for file in files for name, tensor in load_file(file).items()}
    scale_suffix = "weight_scale_inv" if fmt == "block" else "weight_scale"
    for name in language_linear_names():
        layer = model.get_submodule(name)
        assert isinstance(layer, Fp8Linear) and layer.scheme == fmt
        assert torch.equal(layer.weight.view(torch.uint8), stored[f"{name}.weight"].view(torch.uint8))
        expected = stored[f"{name}.weight"].float() * _expanded(stored[f"{name}.{scale_suffix}"].float(), fmt, layer.weight.shape)
        assert torch.equal(dequantize(layer.weight, layer.weight_scale, fmt, torch.float32), expected)
        assert relative_error(expected, state[f"{name}.weight"]) < 0.03
    # the vision tower, embeddings, norms and head stay in the model's dtype, unquantized
    assert type(model.model.visual.proj) is nn.Linear and model.model.visual.proj.bias.dtype == torch.bfloat16
    assert type(model.lm_head) is nn.Linear
    assert torch.equal(model.model.language_model.norm.weight, state["model.language_model.norm.weight"])
    tokens = torch.arange(20) % 50
    assert relative_error(model(tokens), bf16_model(state)(tokens)) < LOGIT_BOUND


def _expanded(scales: torch.Tensor, fmt: str, shape: torch.Size) -> torch.Tensor:
    if fmt == "channel":
        return scales.reshape(-1, 1)
    return scales.repeat_interleave(128, 0).repeat_interleave(128, 1)[: shape[0], : shape[1]]


def test_bf16_checkpoint_quantized_on_load(tmp_path: Path) -> None:
    state = random_state(1)
    files = write_checkpoint(tmp_path, state, "bf16")
    model, report = load(tmp_path, files, quantize=True)
    assert sorted(report.quantized_on_load) == sorted(language_linear_names()) and report.quantized_from_checkpoint == []
    assert report.missing == [] and report.unexpected == []
    for name in language_linear_names():
        layer = model.get_submodule(name)
        assert isinstance(layer, Fp8Linear) and layer.weight.dtype == torch.float8_e4m3fn
        assert relative_error(dequantize(layer.weight, layer.weight_scale, layer.scheme), state[f"{name}.weight"]) < 0.03
    assert type(model.model.visual.proj) is nn.Linear and type(model.lm_head) is nn.Linear
    tokens = torch.arange(20) % 50
    assert relative_error(model(tokens), bf16_model(state)(tokens)) < LOGIT_BOUND


def test_bf16_checkpoint_without_quantizing_is_exact(tmp_path: Path) -> None:
    state = random_state(2)
    files = write_checkpoint(tmp_path, state, "bf16")
    model, report = load(tmp_path, files)
    assert report.quantized_on_load == [] and report.missing == []
    assert not any(isinstance(module, Fp8Linear) for module in model.modules())
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in state.items())


@pytest.mark.parametrize("fmt", ["block", "channel", "bf16"])
def test_stacked_layers_share_one_tensor_and_hold_what_they_would_alone(tmp_path: Path, fmt: str) -> None:
    """q/o (256 columns each) share one weight and one scale tensor, as stored in FP8 or quantized on
    load; up/down (256 and 300 columns) cannot and stay apart; every layer holds the same bytes as
    when loaded without stacks."""
    files = write_checkpoint(tmp_path, random_state(3), fmt)
    quantize = fmt == "bf16"
    alone, _ = load(tmp_path, files, quantize)
    stacked, report = load(tmp_path, files, quantize, stacks_of(("self_attn.q_proj", "self_attn.o_proj"),
                                                                 ("mlp.up_proj", "mlp.down_proj")))
    assert report.missing == [] and report.mismatched == []
    for name in language_linear_names():
        expected, actual = alone.get_submodule(name), stacked.get_submodule(name)
        assert torch.equal(actual.weight.view(torch.uint8), expected.weight.view(torch.uint8))
        assert torch.equal(actual.weight_scale, expected.weight_scale)
    for layer in stacked.model.language_model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        assert follows(attention.q_proj.weight, attention.o_proj.weight)
        assert follows(attention.q_proj.weight_scale, attention.o_proj.weight_scale)
        assert not follows(mlp.up_proj.weight, mlp.down_proj.weight)
    tokens = torch.arange(20) % 50
    assert torch.equal(stacked(tokens), alone(tokens))


@pytest.mark.parametrize(("fmt", "shared"), [("block", False), ("channel", True)])
def test_a_block_row_never_spans_two_stacked_layers(tmp_path: Path, fmt: str, shared: bool) -> None:
    """up (300 rows) before q: per channel they stack; in 128x128 blocks its last block row is
    partial, so they load apart."""
    files = write_checkpoint(tmp_path, random_state(4), fmt)
    model, report = load(tmp_path, files, stacked_with=stacks_of(("mlp.up_proj", "self_attn.q_proj")))
    assert report.missing == []
    layer = model.model.language_model.layers[0]
    assert follows(layer.mlp.up_proj.weight, layer.self_attn.q_proj.weight) is shared
    tokens = torch.arange(20) % 50
    assert torch.equal(model(tokens), load(tmp_path, files)[0](tokens))


def test_quantize_on_load_holds_one_full_precision_weight_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Count, at every read, the weights read for quantizing that are still alive: never more than
    the one just read (the loader drops each full-precision weight once it is quantized)."""
    files = write_checkpoint(tmp_path, random_state(3), "bf16")
    targets = {f"{name}.weight" for name in language_linear_names()}
    alive: set[str] = set()
    most_alive = 0
    real_safe_open = loading.safe_open

    class CountingHandle:
        def __init__(self, handle) -> None:
            self.handle = handle

        def keys(self):
            return self.handle.keys()

        def get_tensor(self, name: str) -> torch.Tensor:
            nonlocal most_alive
            tensor = self.handle.get_tensor(name)
            if name in targets:
                alive.add(name)
                weakref.finalize(tensor, alive.discard, name)
                most_alive = max(most_alive, len(alive))
            return tensor

    class CountingOpen:
        def __init__(self, *args, **kwargs) -> None:
            self.opened = real_safe_open(*args, **kwargs)

        def __enter__(self) -> CountingHandle:
            return CountingHandle(self.opened.__enter__())

        def __exit__(self, *exc) -> None:
            self.opened.__exit__(*exc)

    monkeypatch.setattr(loading, "safe_open", CountingOpen)
    _, report = load(tmp_path, files, quantize=True)
    assert len(report.quantized_on_load) == len(targets)
    assert most_alive == 1 and not alive


def test_mismatched_scales_are_refused_before_loading(tmp_path: Path) -> None:
    state = random_state()
    files = write_checkpoint(tmp_path, state, "block")
    tensors = load_file(files[0])
    name = "model.language_model.layers.0.mlp.up_proj.weight_scale_inv"
    tensors[name] = torch.ones(1, 1)
    save_file(tensors, files[0])
    model = meta_model()
    with pytest.raises(QuantizationFormatError, match=r"up_proj.weight_scale_inv has shape \[1, 1\], \[3, 2\] expected"):
        loading.load_checkpoint(model, files, declared_weight_format(read_config(tmp_path)), CPU, torch.bfloat16)
    assert loading.meta_tensors(model)  # nothing was read


def test_unexpected_mismatched_and_missing_tensors_are_reported(tmp_path: Path) -> None:
    state = random_state()
    state["model.language_model.extra.weight"] = torch.ones(3)
    state["lm_head.weight"] = torch.ones(7, 7, dtype=torch.bfloat16)
    del state["model.language_model.norm.weight"]
    files = write_checkpoint(tmp_path, state, "bf16")
    _, report = load(tmp_path, files)
    assert report.unexpected == ["model.language_model.extra.weight"]
    assert report.mismatched == ["lm_head.weight"]
    assert report.missing == ["lm_head.weight", "model.language_model.norm.weight"]


@pytest.mark.parametrize(("fmt", "scheme", "suffix"), [("bf16", None, None), ("block", "block", "weight_scale_inv"),
                                                        ("channel", "channel", "weight_scale")])
def test_the_format_a_checkpoint_declares_pairs_its_weights_with_their_scales(
    tmp_path: Path, fmt: str, scheme: str | None, suffix: str | None
) -> None:
    files = write_checkpoint(tmp_path, random_state(), fmt, shards=2)
    declared = declared_weight_format(read_config(tmp_path))
    assert (declared and declared.scheme) == scheme
    if declared is not None:
        scales = declared.checked_scales(read_tensor_headers(files))
        assert scales == {f"{name}.weight": f"{name}.{suffix}" for name in language_linear_names()}


def test_a_checkpoint_stored_in_fp8_turns_the_layers_kept_float_back_into_floats(tmp_path: Path) -> None:
    """The family keeps the vision tower in floating point: a layer the checkpoint stores in FP8
    there loads as an ``nn.Linear`` holding the dequantized weight."""
    state = random_state()
    files = write_checkpoint(tmp_path, state, "channel")
    fmt = declared_weight_format(read_config(tmp_path))
    quantized_everywhere = meta_model()
    loading.load_checkpoint(quantized_everywhere, files, fmt, CPU, torch.bfloat16)
    model = meta_model()
    report = loading.load_checkpoint(model, files, fmt, CPU, torch.bfloat16, keep_float=lambda name: name.endswith("o_proj"))
    kept = [name for name in language_linear_names() if name.endswith("o_proj")]
    assert kept and not set(kept) & set(report.quantized_from_checkpoint)
    for name in kept:
        layer, stored = model.get_submodule(name), quantized_everywhere.get_submodule(name)
        assert type(layer) is nn.Linear and layer.weight.dtype == torch.bfloat16
        assert torch.equal(layer.weight, dequantize(stored.weight, stored.weight_scale, "channel"))


def test_fp8_weight_of_a_module_that_is_not_linear_is_refused(tmp_path: Path) -> None:
    """An FP8 embedding would otherwise be cast to bf16 code by code: wrong values, silently."""
    state = random_state()
    files = write_checkpoint(tmp_path, state, "channel")
    tensors = load_file(files[0])
    tensors["model.language_model.embed_tokens.weight"] = state["model.language_model.embed_tokens.weight"].to(torch.float8_e4m3fn)
    tensors["model.language_model.embed_tokens.weight_scale"] = torch.ones(50, 1)
    save_file(tensors, files[0])
    with pytest.raises(QuantizationFormatError, match=r"embed_tokens \(Embedding\) is not a linear layer"):
        load(tmp_path, files)


@pytest.mark.parametrize("fmt", ["block", "channel"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_scale_that_is_not_finite_is_refused(tmp_path: Path, fmt: str, bad: float) -> None:
    """A NaN scale would load, and every answer would be nonsense."""
    files = write_checkpoint(tmp_path, random_state(), fmt)
    tensors = load_file(files[0])
    name = next(name for name in tensors if name.endswith("_proj.weight_scale" + ("_inv" if fmt == "block" else "")))
    tensors[name].view(-1)[0] = bad
    save_file(tensors, files[0])
    with pytest.raises(QuantizationFormatError, match=rf"{re.escape(name)} holds 1 of \d+ scales that are not finite"):
        load(tmp_path, files)


def test_the_writers_own_e4m3_rounding_is_torchs() -> None:
    """The checkpoint writers round with a quantizer of their own; it agrees with torch's cast."""
    values = torch.cat([torch.randn(10000) * scale for scale in (1e-3, 0.1, 10, 100)]).clamp(-448, 448)
    assert torch.equal(reference_e4m3(values).view(torch.uint8), values.to(torch.float8_e4m3fn).view(torch.uint8))
