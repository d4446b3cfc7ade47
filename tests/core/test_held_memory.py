"""What a loaded model holds: the engine measures its weights by part and dtype, its KV cache and
its graphs as it builds them, and ``framewise info`` words it."""

from __future__ import annotations

import json

import pytest
import torch

from framewise.core.backends.local.engine import Engine
from framewise.core.decoding.host_embedding import HostEmbedding
from framewise.core.encoding.cpu_forms import cpu_multiplies_bf16
from framewise.core.held_memory import LANGUAGE_PART, VISION_PART, host_weight_bytes, recording_growth, weight_shares
from framewise.core.memory_plan import HeldMemory, WeightBytes
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.settings import AppSettings
from tests.app.test_cli import framewise

CPU = AppSettings().replace("model", device="cpu")


def tensor_bytes(tensors) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = Engine(CPU)
    engine.load()
    return engine


def test_the_weights_are_the_sum_of_the_parameters_bytes_split_into_language_and_vision(engine: Engine) -> None:
    held = engine.info().held_memory
    model = engine.loaded.model
    assert held is not None
    # The demo ties its output head to its embeddings: the state dict names that tensor twice.
    assert held.weight_total == tensor_bytes(model.parameters())
    tower = engine.loaded.family.vision_tower(model)
    assert held.weights == (
        WeightBytes(LANGUAGE_PART, "float32", tensor_bytes(model.parameters()) - tensor_bytes(tower.parameters())),
        WeightBytes(VISION_PART, "bfloat16" if cpu_multiplies_bf16() else "float32", tensor_bytes(tower.parameters())),
    )


def test_on_the_cpu_the_cache_is_counted_and_nothing_is_reserved(engine: Engine) -> None:
    held = engine.info().held_memory
    assert held.kv_cache == engine.parts.decoder.cache.nbytes > 0
    assert held.encoder_graphs == held.decode_graphs == 0
    assert held.reserved is None and held.beyond is None
    assert held.total == held.weight_total + held.kv_cache
    assert held.describe().startswith(f"{held.total / 2**20:.1f} MiB of memory: weights ")


def test_a_shorter_context_holds_a_smaller_cache(engine: Engine) -> None:
    before = engine.info().held_memory
    info = engine.apply_settings(CPU.replace("decoding", max_context_tokens=2400))
    assert info is not None and info.held_memory.kv_cache < before.kv_cache
    assert info.held_memory.weights == before.weights
    engine.apply_settings(CPU)


def test_fp8_on_the_cpu_holds_e4m3_weights_with_float32_scales(engine: Engine) -> None:
    fp8 = Engine(CPU.replace("model", dtype="fp8"))
    held = fp8.load().held_memory
    layers = [module for module in fp8.loaded.model.modules() if isinstance(module, Fp8Linear)]
    assert layers
    shares = {(share.part, share.dtype): share.size for share in held.weights}
    assert shares[(LANGUAGE_PART, "float8_e4m3fn")] == tensor_bytes(layer.weight for layer in layers)
    assert shares[(LANGUAGE_PART, "float32")] >= tensor_bytes(layer.weight_scale for layer in layers)
    float32_language = sum(share.size for share in engine.info().held_memory.weights if share.part == LANGUAGE_PART)
    assert sum(size for (part, _), size in shares.items() if part == LANGUAGE_PART) < float32_language / 2
    assert "language model " in held.weights_text() and " fp8 + " in held.weights_text()


def test_weight_shares_count_each_tensor_once_and_views_of_one_matrix_apart() -> None:
    model = torch.nn.Module()
    model.tower = torch.nn.Linear(4, 2, bias=False)
    stacked = torch.zeros(6, 4, dtype=torch.bfloat16)
    model.first = torch.nn.Linear(4, 3, bias=False)
    model.second = torch.nn.Linear(4, 3, bias=False)
    model.first.weight = torch.nn.Parameter(stacked[:3])
    model.second.weight = torch.nn.Parameter(stacked[3:])
    model.head = torch.nn.Linear(4, 3, bias=False)
    model.head.weight = model.first.weight  # tied
    assert weight_shares(model, model.tower) == (
        WeightBytes(LANGUAGE_PART, "bfloat16", 6 * 4 * 2),
        WeightBytes(VISION_PART, "float32", 2 * 4 * 4),
    )


def test_an_embedding_held_by_the_host_is_not_the_devices_and_is_counted_apart() -> None:
    model = torch.nn.Module()
    model.tower = torch.nn.Linear(4, 2, bias=False)
    model.embedding = HostEmbedding(torch.zeros(10, 4, dtype=torch.bfloat16), torch.device("cpu"))
    model.head = torch.nn.Linear(4, 10, bias=False, dtype=torch.bfloat16)
    assert weight_shares(model, model.tower) == (
        WeightBytes(LANGUAGE_PART, "bfloat16", 10 * 4 * 2),
        WeightBytes(VISION_PART, "float32", 2 * 4 * 4),
    )
    assert host_weight_bytes(model) == 10 * 4 * 2
    assert host_weight_bytes(model.tower) == 0


def test_the_wording_says_what_the_host_holds_apart_from_the_device() -> None:
    held = HeldMemory(weights=(WeightBytes(LANGUAGE_PART, "bfloat16", 2**30),), kv_cache=0, encoder_graphs=0,
                      decode_graphs=0, reserved=2**30, host_weights=2**29)
    assert held.total == 2**30 and held.beyond == 0
    assert held.describe().endswith(", and in host memory the input embedding, 512.0 MiB")


def test_growth_is_recorded_on_cuda_only_and_not_for_a_step_that_fails() -> None:
    steps = {"weights": 5}
    with recording_growth(torch.device("cpu"), steps, "weights"):
        pass
    assert steps == {}
    with pytest.raises(RuntimeError), recording_growth(torch.device("cpu"), steps, "encoder"):
        raise RuntimeError("capture failed")
    assert steps == {}


def test_the_wording_names_every_part_and_what_is_reserved_beyond_them() -> None:
    held = HeldMemory(
        weights=(WeightBytes(LANGUAGE_PART, "float8_e4m3fn", 7 * 2**30), WeightBytes(LANGUAGE_PART, "bfloat16", 2**30),
                 WeightBytes(VISION_PART, "bfloat16", 2**29)),
        kv_cache=2**30, encoder_graphs=300 * 2**20, decode_graphs=100 * 2**20, reserved=10 * 2**30,
    )
    assert held.beyond == 10 * 2**30 - (8 * 2**30 + 2**29 + 2**30 + 400 * 2**20)
    assert held.describe() == (
        "10.0 GiB of device memory: weights 8.5 GiB (language model 7.0 GiB fp8 + 1.0 GiB bf16; "
        "vision tower 512.0 MiB bf16), KV cache 1.0 GiB, encoder graphs 300.0 MiB, decode graphs 100.0 MiB, "
        "reserved beyond them 112.0 MiB"
    )


def test_framewise_info_prints_what_the_model_holds() -> None:
    payload = json.loads(framewise("info", "--device", "cpu", "--json").stdout)
    held = payload["held_memory"]
    assert held["total"] == sum(share["size"] for share in held["weights"]) + held["kv_cache"]
    assert {share["part"] for share in held["weights"]} == {LANGUAGE_PART, VISION_PART}
    assert held["reserved"] is None and held["beyond"] is None
    text = framewise("info", "--device", "cpu").stdout
    assert f"memory held:        {held['total'] / 2**20:.1f} MiB of memory: weights " in text
