"""Model loading and the demo model: the bundled checkpoint, bad folders, the offline HF cache, MoE."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    Qwen3VLForConditionalGeneration,
    Qwen3VLMoeConfig,
    Qwen3VLMoeForConditionalGeneration,
)

from framewise.core.encoding.cpu_forms import cpu_multiplies_bf16
from framewise.core.encoding.defs import VisionItem
from framewise.core.errors import ModelLoadError, SettingsError
from framewise.core.events import Progress
from framewise.core.families.qwen3_vl.processor import VideoInputs
from framewise.core.families.qwen3_vl.prompt import build_chat_inputs
from framewise.core.loading import (
    DEMO_MODEL_DIR,
    LoadedModel,
    load_model,
    pick_device,
    pick_dtype,
    read_model_info,
    resolve_model_source,
)
from framewise.core.settings import ModelSettings
from training.demo_model import (
    CHAT_TEMPLATE,
    DEMO_WORDS,
    MODEL_INFO_FILE,
    SPECIAL_TOKENS,
    UNTRAINED_DEMO_LABEL,
    build_demo_config,
    build_demo_tokenizer,
    init_demo_model,
    mrope_section,
    special_token_ids,
)
from tests.conftest import make_random_demo_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="module")
def demo() -> LoadedModel:
    return load_model(ModelSettings(source="demo", device="cpu", dtype="auto"))


@pytest.fixture(scope="module")
def tokenizer():
    return build_demo_tokenizer(DEMO_WORDS)


def copy_demo(folder: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """A copy of the demo model's files in ``folder``, leaving out ``skip``."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in DEMO_MODEL_DIR.iterdir():
        if path.name not in skip:
            shutil.copy(path, folder / path.name)
    return folder


# --------------------------------------------------------------------------- the demo model


def test_demo_model_loads_on_the_cpu_with_its_label(demo: LoadedModel) -> None:
    assert type(demo.model) is Qwen3VLForConditionalGeneration
    assert not demo.model.training
    assert demo.is_demo and demo.name == "demo"
    assert demo.label == read_model_info(DEMO_MODEL_DIR)["label"] and demo.label.startswith("Demo model")
    assert demo.device == torch.device("cpu") and demo.dtype == torch.float32
    assert next(demo.model.model.language_model.parameters()).dtype == torch.float32
    tower = next(demo.family.vision_tower(demo.model).parameters()).dtype
    assert tower == (torch.bfloat16 if cpu_multiplies_bf16() else torch.float32)  # see test_cpu_forms.py
    assert (demo.limits.patch_size, demo.limits.frames_per_slice, demo.limits.merge_size) == (16, 2, 2)
    assert demo.model.config._attn_implementation == "sdpa"


def test_demo_model_is_small() -> None:
    total = sum(path.stat().st_size for path in DEMO_MODEL_DIR.iterdir())
    assert total < 20 * 2**20, f"the demo model takes {total / 2**20:.1f} MB; it must stay within 20 MB"


def test_load_reports_each_step_in_order() -> None:
    events: list[Progress] = []
    load_model(ModelSettings(source="demo", device="cpu"), progress=events.append)
    assert all(event.stage == "load" for event in events)
    assert [event.current for event in events] == [0, 1, 2, 3, 4]
    assert {event.total for event in events} == {4}
    messages = " ".join(event.message for event in events).lower()
    for step in ("configuration", "weights", "tokenizer", "moving"):
        assert step in messages


def test_demo_config_has_the_released_architecture(demo: LoadedModel) -> None:
    config = demo.model.config
    vision, text = config.vision_config, config.text_config
    assert config.model_type == "qwen3_vl"
    assert (vision.patch_size, vision.temporal_patch_size, vision.spatial_merge_size) == (16, 2, 2)
    assert round(vision.num_position_embeddings**0.5) ** 2 == vision.num_position_embeddings
    assert all(0 <= index < vision.depth for index in vision.deepstack_visual_indexes)
    assert vision.out_hidden_size == text.hidden_size
    section = text.rope_parameters["mrope_section"]
    assert sum(section) == text.head_dim // 2 and text.rope_parameters["mrope_interleaved"] is True
    assert config.tie_word_embeddings and demo.model.lm_head.weight is demo.model.get_input_embeddings().weight
    vocab = demo.tokenizer.get_vocab()
    assert config.image_token_id == vocab["<|image_pad|>"]
    assert config.video_token_id == vocab["<|video_pad|>"]
    assert config.vision_start_token_id == vocab["<|vision_start|>"]
    assert config.vision_end_token_id == vocab["<|vision_end|>"]
    assert text.vocab_size >= len(demo.tokenizer)


def test_demo_generation_stops_at_im_end(demo: LoadedModel) -> None:
    generation = demo.model.generation_config
    im_end = demo.tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos = generation.eos_token_id if isinstance(generation.eos_token_id, list) else [generation.eos_token_id]
    assert eos[0] == im_end == demo.tokenizer.eos_token_id
    endoftext = demo.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert generation.pad_token_id == demo.tokenizer.pad_token_id == endoftext


@pytest.mark.parametrize(
    "text",
    [
        "What color is the square?",
        "Which way does the circle move? It moves left, then right.",
        "<3.5 seconds><12.0 seconds> about 4 seconds",
        "How many shapes are there? 0123456789 1,234.5% (yes) [no] {x}: a-b_c/d'e\"f",
        "  Tabs\tand\nnew lines  \n\n",
        "Ünïcödé — naïve café 日本語 🙂",
        "",
    ],
)
def test_tokenizer_round_trips_text(tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_tokenizer_keeps_special_tokens_whole(tokenizer) -> None:
    ids = [tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS]
    assert len(set(ids)) == len(SPECIAL_TOKENS)
    text = "".join(SPECIAL_TOKENS) + "hello" + "<|video_pad|>" * 3
    encoded = tokenizer.encode(text, add_special_tokens=False)
    assert encoded[: len(ids)] == ids
    assert encoded[-3:] == [tokenizer.convert_tokens_to_ids("<|video_pad|>")] * 3
    assert tokenizer.decode(encoded, skip_special_tokens=True) == "hello"
    assert tokenizer.image_token == "<|image_pad|>" and tokenizer.video_token == "<|video_pad|>"


def test_tokenizer_has_the_question_words_as_single_tokens(tokenizer) -> None:
    ids = tokenizer.encode("What color is the square? About 3 seconds", add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(ids) == [
        "What", "Ġcolor", "Ġis", "Ġthe", "Ġsquare", "?", "ĠAbout", "Ġ3", "Ġseconds",
    ]


def test_every_synthetic_question_and_answer_word_is_one_token(tokenizer) -> None:
    synthetic = pytest.importorskip("training.synthetic", reason="training.synthetic needs OpenCV")
    for word in synthetic.answer_words():
        for spelling in (word, " " + word, word.capitalize()):
            assert len(tokenizer.encode(spelling, add_special_tokens=False)) == 1, spelling


def test_chat_template_writes_the_qwen_format(tokenizer) -> None:
    messages = [
        {"role": "user", "content": [{"type": "video"}, {"type": "image"}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": "a red square"},
        {"role": "user", "content": "Which way does it move?"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>user\n"
        "<|vision_start|><|video_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>What is it?<|im_end|>\n"
        "<|im_start|>assistant\na red square<|im_end|>\n"
        "<|im_start|>user\nWhich way does it move?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without_prompt = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=False)
    assert without_prompt.endswith("a red square<|im_end|>\n")


def test_saved_tokenizer_keeps_the_template(demo: LoadedModel) -> None:
    assert demo.tokenizer.chat_template == CHAT_TEMPLATE
    assert demo.tokenizer.encode("<|im_start|>user\nWhat?", add_special_tokens=False)[0] == (
        demo.tokenizer.convert_tokens_to_ids("<|im_start|>")
    )


def test_demo_model_generates_from_a_small_video(demo: LoadedModel) -> None:
    grid = (2, 4, 4)  # two frame pairs of 64x64 pixels: 8 merged tokens in all
    pixels = torch.randn(grid[0] * grid[1] * grid[2], 3 * 2 * 16 * 16, generator=torch.Generator().manual_seed(0))
    video = VideoInputs(item=VisionItem(pixels, grid, "video"), pair_timestamps=(0.5, 1.5))
    question = "What color is the square?"
    inputs = build_chat_inputs(demo.tokenizer, question, videos=[video], geometry=demo.adapter.geometry)
    assert int((inputs.mm_token_type_ids == 2).sum()) == 8
    model_inputs = dict(
        input_ids=inputs.input_ids,
        attention_mask=inputs.attention_mask,
        mm_token_type_ids=inputs.mm_token_type_ids,
        pixel_values_videos=pixels,
        video_grid_thw=torch.tensor([grid]),
    )
    with torch.no_grad():
        logits = demo.model(**model_inputs).logits
        output = demo.model.generate(**model_inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert logits.shape == (1, inputs.input_ids.shape[1], demo.model.config.text_config.vocab_size)
    assert torch.isfinite(logits).all()
    assert output.shape == (1, inputs.input_ids.shape[1] + 6)
    assert torch.equal(output[:, : inputs.input_ids.shape[1]], inputs.input_ids)


# --------------------------------------------------------------------------- reproducibility


def test_same_seed_gives_identical_weights_and_another_seed_does_not(tokenizer) -> None:
    config = build_demo_config(
        len(tokenizer), special_token_ids(tokenizer), depth=2, deepstack_visual_indexes=(0, 1), text_layers=2
    )
    first = init_demo_model(config, seed=7).state_dict()
    second = init_demo_model(config, seed=7).state_dict()
    other = init_demo_model(config, seed=8).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert any(not torch.equal(first[name], other[name]) for name in first if first[name].is_floating_point())


def test_building_leaves_the_global_random_state_alone(tokenizer) -> None:
    config = build_demo_config(
        len(tokenizer), special_token_ids(tokenizer), depth=1, deepstack_visual_indexes=(0,), text_layers=1
    )
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    init_demo_model(config, seed=1)
    assert torch.equal(torch.rand(3), expected)


def test_tokenizer_and_config_are_the_same_every_time() -> None:
    first, second = build_demo_tokenizer(DEMO_WORDS), build_demo_tokenizer(reversed(DEMO_WORDS))
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    configs = [build_demo_config(len(first), special_token_ids(first)).to_dict() for _ in range(2)]
    assert configs[0] == configs[1]


def test_make_demo_model_writes_the_seeded_random_model_into_a_new_folder(tmp_path: Path) -> None:
    out = tmp_path / "random"
    make_random_demo_model("--out", str(out), "--seed", "7")
    info = json.loads((out / MODEL_INFO_FILE).read_text(encoding="utf-8"))
    assert info["label"] == UNTRAINED_DEMO_LABEL and info["made_by"] == "python scripts/make_demo_model.py --seed 7"
    tokenizer = build_demo_tokenizer(DEMO_WORDS)
    assert json.loads((out / "tokenizer.json").read_text(encoding="utf-8")) == json.loads(
        tokenizer.backend_tokenizer.to_str()
    )
    expected = init_demo_model(build_demo_config(len(tokenizer), special_token_ids(tokenizer)), seed=7).state_dict()
    written = load_file(out / "model.safetensors")
    assert written.keys() <= expected.keys()
    assert all(torch.equal(written[name], expected[name]) for name in written)


def test_make_demo_model_replaces_a_model_only_when_told(tmp_path: Path) -> None:
    out = tmp_path / "random"
    make_random_demo_model("--out", str(out), "--seed", "7")
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as stderr:
        make_random_demo_model("--out", str(out), "--seed", "8")
    assert "--replace" in stderr.getvalue()
    assert (out / "model.safetensors").read_bytes() == before
    make_random_demo_model("--out", str(out), "--seed", "8", "--replace")
    assert (out / "model.safetensors").read_bytes() != before


def test_mrope_section_matches_the_released_split() -> None:
    assert mrope_section(128) == [24, 20, 20]
    assert mrope_section(32) == [6, 5, 5]
    assert sum(mrope_section(64)) == 32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_position_embeddings": 2300}, "perfect square"),
        ({"depth": 2, "deepstack_visual_indexes": (0, 2)}, "deepstack"),
        ({"vision_hidden": 65, "vision_heads": 2}, "multiple"),
    ],
)
def test_build_demo_config_refuses_inconsistent_sizes(tokenizer, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_demo_config(len(tokenizer), special_token_ids(tokenizer), **kwargs)


# --------------------------------------------------------------------------- bad folders


def _llama_config(folder: Path) -> None:
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))


def _bin_only(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not really a pickle")


def _missing_shard(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.rename(folder / "model-00001-of-00002.safetensors")
    names = list(load_file(folder / "model-00001-of-00002.safetensors"))
    weight_map = {name: f"model-0000{1 + i % 2}-of-00002.safetensors" for i, name in enumerate(names)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def _broken_config(folder: Path) -> None:
    (folder / "config.json").write_text("{ not json")


def _one_tensor_only(folder: Path) -> None:
    weights = load_file(folder / "model.safetensors")
    name = sorted(weights)[0]
    save_file({name: weights[name]}, folder / "model.safetensors")


def _one_tensor_reshaped(folder: Path) -> None:
    weights = load_file(folder / "model.safetensors")
    name = next(name for name in sorted(weights) if name.endswith("q_proj.weight"))
    weights[name] = weights[name][:-1].contiguous()
    save_file(weights, folder / "model.safetensors")


def _one_tensor_in_integers(folder: Path) -> None:
    weights = load_file(folder / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].to(torch.int8)
    save_file(weights, folder / "model.safetensors")


def _template_that_does_not_render(folder: Path) -> None:
    (folder / "chat_template.jinja").write_text("{{ raise_exception('this template is broken') }}")


@pytest.mark.parametrize(
    ("break_folder", "skip", "expected"),
    [
        (None, ("config.json",), "no config.json"),
        (_broken_config, (), "cannot be read as JSON"),
        (_llama_config, (), "holds a llama checkpoint.*qwen3_vl or qwen3_vl_moe"),
        (_bin_only, (), "pickle format \\(pytorch_model.bin\\).*safetensors"),
        (_no_weights, (), "no weights"),
        (_missing_shard, (), "incomplete: 1 of 2 weight shards are missing \\(model-00002-of-00002.safetensors\\)"),
        (None, ("tokenizer.json",), "no tokenizer"),
        (_one_tensor_only, (), r"incomplete: \d+ weights the architecture needs are missing \(model\.[a-z_.0-9]+, "),
        (_one_tensor_reshaped, (), r"another shape than config.json gives them \(.*q_proj\.weight\)"),
        (_one_tensor_in_integers, (), r"1 tensors that are not floating point \(.* \(I8\)\)"),
        (None, ("chat_template.jinja",), "has no chat template"),
        (_template_that_does_not_render, (), "does not render a question about a video: this template is broken"),
    ],
    ids=[
        "no-config", "broken-config", "llama", "bin-only", "no-weights", "missing-shard", "no-tokenizer",
        "one-tensor-of-all", "wrong-shape", "integer-tensor", "no-chat-template", "broken-chat-template",
    ],
)
def test_bad_folder_gives_a_clear_error(tmp_path: Path, break_folder, skip: tuple[str, ...], expected: str) -> None:
    folder = copy_demo(tmp_path / "checkpoint", skip=skip)
    if break_folder is not None:
        break_folder(folder)
    with pytest.raises(ModelLoadError, match=expected) as error:
        load_model(ModelSettings(source=str(folder), device="cpu"))
    assert str(folder) in str(error.value)


def test_missing_folder_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "model"
    with pytest.raises(ModelLoadError, match="does not exist") as error:
        load_model(ModelSettings(source=str(missing), device="cpu"))
    assert str(missing) in str(error.value)


def test_a_file_is_not_a_model_folder(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="is a file"):
        resolve_model_source(str(weights))


def test_damaged_weights_give_a_model_load_error(tmp_path: Path) -> None:
    folder = copy_demo(tmp_path / "checkpoint")
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(ModelSettings(source=str(folder), device="cpu"))


def test_a_copied_demo_folder_loads_with_its_label_but_is_not_the_bundled_one(tmp_path: Path) -> None:
    loaded = load_model(ModelSettings(source=str(copy_demo(tmp_path / "my-model")), device="cpu"))
    assert loaded.name == "my-model"
    assert loaded.label == read_model_info(DEMO_MODEL_DIR)["label"]
    assert not loaded.is_demo


# --------------------------------------------------------------------------- the Hugging Face cache


def test_repo_id_not_in_the_cache_says_how_to_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError) as error:
        load_model(ModelSettings(source="Qwen/Qwen3-VL-2B-Instruct", device="cpu"))
    message = str(error.value)
    assert "hf download Qwen/Qwen3-VL-2B-Instruct" in message
    assert "not in the local Hugging Face cache" in message
    assert str(tmp_path / "empty-cache") in message


def test_cached_repo_id_loads_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hub"
    repo = cache / "models--someone--tiny-qwen3-vl"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snapshot.mkdir(parents=True)
    for path in DEMO_MODEL_DIR.iterdir():
        if path.name != MODEL_INFO_FILE:
            (snapshot / path.name).symlink_to(path)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    assert resolve_model_source("someone/tiny-qwen3-vl") == snapshot
    loaded = load_model(ModelSettings(source="someone/tiny-qwen3-vl", device="cpu"))
    assert loaded.name == "someone/tiny-qwen3-vl"
    assert loaded.label is None and not loaded.is_demo
    assert type(loaded.model) is Qwen3VLForConditionalGeneration


def test_invalid_repo_id_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelLoadError, match="neither an existing folder nor a Hugging Face repo id"):
        resolve_model_source("not a repo id!")


# --------------------------------------------------------------------------- MoE


def test_qwen3_vl_moe_checkpoint_loads(tmp_path: Path, tokenizer) -> None:
    dense = build_demo_config(
        len(tokenizer), special_token_ids(tokenizer), depth=1, deepstack_visual_indexes=(0,), text_layers=2
    ).to_dict()
    text = dense["text_config"] | {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    for key in ("model_type", "intermediate_size"):
        text.pop(key)
    vision = {key: value for key, value in dense["vision_config"].items() if key != "model_type"}
    config = Qwen3VLMoeConfig(
        text_config=text | {"intermediate_size": 64},
        vision_config=vision,
        image_token_id=dense["image_token_id"],
        video_token_id=dense["video_token_id"],
        vision_start_token_id=dense["vision_start_token_id"],
        vision_end_token_id=dense["vision_end_token_id"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    folder = tmp_path / "tiny-moe"
    Qwen3VLMoeForConditionalGeneration(config).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(DEMO_MODEL_DIR / name, folder / name)

    loaded = load_model(ModelSettings(source=str(folder), device="cpu"))
    assert type(loaded.model) is Qwen3VLMoeForConditionalGeneration
    assert loaded.label is None
    ids = loaded.tokenizer("How many shapes are there?", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits
    assert logits.shape[:2] == ids.shape and torch.isfinite(logits).all()


# --------------------------------------------------------------------------- device and dtype


def test_auto_device_and_dtype_on_this_machine() -> None:
    device = pick_device("auto")
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_dtype("auto", torch.device("cpu")) == torch.float32
    assert pick_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    assert pick_dtype("float16", torch.device("cpu")) == torch.float16


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA, so asking for it is valid")
def test_cuda_without_cuda_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="CUDA is not available") as error:
        pick_device("cuda")
    assert error.value.field == "model.device"


@pytest.mark.gpu
def test_auto_dtype_on_a_gpu_is_bfloat16_where_supported() -> None:
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    assert pick_dtype("auto", torch.device("cuda")) == expected


def test_unknown_dtype_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="unknown dtype"):
        pick_dtype("int8", torch.device("cpu"))
