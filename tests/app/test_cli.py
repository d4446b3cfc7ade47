"""``framewise`` CLI end to end on the demo model, on the CPU."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from framewise.app.cli import _result_json, main
from framewise.core.events import AnswerStats, Done, EncodeDone, EngineInfo
from framewise.core.timecodes import find_times
from tests.conftest import REPO_ROOT, SAMPLE_CLIPS
from tests.core.test_video import SVG_DRAWING, cut_short_mp4, write_animated_webp

FAST = ["--max-frames", "4", "--max-new-tokens", "8", "--device", "cpu"]


def framewise(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in this process (loading torch once for all tests); same result shape as a subprocess."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        returncode = main(list(args))
    return subprocess.CompletedProcess(args, returncode, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="module")
def sample_clip() -> Path:
    clips = sorted(SAMPLE_CLIPS.glob("*.mp4"))
    assert clips, "assets/clips holds the sample clips; run scripts/make_sample_clips.py"
    return clips[0]


def test_ask_streams_a_labelled_answer_then_the_stats(sample_clip: Path) -> None:
    result = framewise("ask", str(sample_clip), "What color is the square?", *FAST)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[Demo model")
    assert "frames 4, patches" in result.stdout
    # a rate from RATE_MIN_TOKENS tokens on, below it the count and the time (the demo answers in a word)
    assert re.search(r"first token \d+ ms, (\d+ tokens? in \d+ ms|\d+ tokens?$|[\d.]+ tokens/s \(\d+ tokens\))", result.stdout, re.M)
    assert "[load]" in result.stderr  # progress went to stderr, not into the answer


def test_ask_json_is_one_object_with_answer_and_stats(sample_clip: Path) -> None:
    result = framewise("ask", str(sample_clip), "How many shapes are there?", "--json", *FAST)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["clip"]["name"] == sample_clip.name and payload["clip"]["kind"] == "video"
    assert len(payload["clip"]["timestamps"]) == payload["clip"]["frames"] == 4
    assert payload["clip"]["sampling_mode"] == "exact"  # a short clip: fast mode is for long ones
    assert (payload["dtype"], payload["weight_dtype"]) == ("float32", None)
    assert payload["model_label"].startswith("Demo model")
    assert 0 < payload["stats"]["new_tokens"] <= 8
    assert payload["stats"]["time_to_first_token_ms"] > 0
    assert payload["times"] == [time.to_json() for time in find_times(payload["answer"])]


def test_ask_with_pruning_says_the_video_tokens_before_and_after_in_text_and_json(sample_clip: Path) -> None:
    fast = ["--max-frames", "8", "--max-new-tokens", "4", "--device", "cpu"]
    plain = json.loads(framewise("ask", str(sample_clip), "How many shapes are there?", "--json", *fast).stdout)
    pruned = framewise("ask", str(sample_clip), "How many shapes are there?", "--json", "--pruning", "0.5", *fast)
    assert pruned.returncode == 0, pruned.stderr
    before, after = (json.loads(pruned.stdout)["clip"][key] for key in ("video_tokens_before", "video_tokens_after"))
    assert plain["clip"]["video_tokens_before"] == plain["clip"]["video_tokens_after"] == before
    assert after == before // 2  # 4 frame pairs: half of them kept
    assert prompt_tokens_of(pruned.stdout) == prompt_tokens_of(json.dumps(plain)) - (before - after)
    text = framewise("ask", str(sample_clip), "How many shapes are there?", "--pruning", "0.5", *fast)
    assert f"{before:,} → {after:,} video tokens" in text.stdout


def prompt_tokens_of(stdout: str) -> int:
    return json.loads(stdout)["stats"]["decoder"]["prompt_tokens"]


def test_ask_json_lists_every_time_the_answer_mentions_in_seconds() -> None:
    info = EngineInfo("cpu", "float32", "demo", None, "eager", False, "CPU", ("sdpa",))
    encoded = EncodeDone("clip.mp4", 4, 64, (0.0, 1.0, 2.0, 3.0), 1.0, 1.0, 1.0, 0.5, False)
    done = Done("It appears at <1.5 seconds> and stays from 0:02 to 0:03.", AnswerStats(5.0, 12, 30.0, False), kept=True)
    payload = json.loads(json.dumps(_result_json(info, encoded, done)))
    assert payload["times"] == [
        {"text": "<1.5 seconds>", "start_s": 1.5, "end_s": None},
        {"text": "0:02 to 0:03", "start_s": 2.0, "end_s": 3.0},
    ]


def test_ask_about_a_missing_clip_says_so_and_exits_2(tmp_path: Path) -> None:
    result = framewise("ask", str(tmp_path / "nope.mp4"), "Anything?", *FAST)
    assert result.returncode == 2
    assert "nope.mp4" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_svg_drawing_is_refused_by_name_before_loading(tmp_path: Path) -> None:
    drawing = tmp_path / "drawing.svg"
    drawing.write_text(SVG_DRAWING)
    result = framewise("ask", str(drawing), "What is drawn?", *FAST)
    assert result.returncode == 2
    assert "drawing.svg is an SVG drawing" in result.stderr and "Export it as a PNG" in result.stderr
    assert "Unexpected" not in result.stderr and "[load]" not in result.stderr


def test_an_animated_webp_is_refused_by_name_before_loading(tmp_path: Path) -> None:
    result = framewise("ask", str(write_animated_webp(tmp_path / "animation.webp")), "What moves?", *FAST)
    assert result.returncode == 2
    assert "animation.webp is an animated WebP" in result.stderr and "[load]" not in result.stderr


def test_a_cut_short_clip_is_answered_with_a_warning_of_how_much_was_read(tmp_path: Path) -> None:
    _, cut = cut_short_mp4(tmp_path)
    result = framewise("ask", str(cut), "What is there?", "--json", *FAST)
    assert result.returncode == 0, result.stderr
    damage = json.loads(result.stdout)["clip"]["damage"]
    assert damage.startswith("Only the first ") and "of cut.mp4's 4.0 s could be read" in damage
    assert f"framewise: warning: {damage}" in result.stderr.splitlines()
    whole = framewise("ask", str(SAMPLE_CLIPS / "red_square_moves_right.mp4"), "What is there?", "--json", *FAST)
    assert json.loads(whole.stdout)["clip"]["damage"] is None and "warning" not in whole.stderr


def test_ask_about_random_bytes_exits_2_with_a_message(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(bytes(range(256)) * 64)
    result = framewise("ask", str(junk), "Anything?", *FAST)
    assert result.returncode == 2
    assert "junk.mp4" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--max-frames", "7", "--max-frames: use an even number"),
        ("--max-context", "-5", "--max-context: use 0"),
        ("--pruning", "1.5", "--pruning: use off, auto, or a rate"),
        ("--pruning", "most", "--pruning: use off, auto, or a rate"),
    ],
)
def test_invalid_setting_is_refused_before_loading_in_the_flags_words(flag: str, value: str, expected: str) -> None:
    result = framewise("info", flag, value)
    assert result.returncode == 2
    assert expected in result.stderr and "[load]" not in result.stderr


def test_info_says_the_encoder_runs_eager_on_the_cpu() -> None:
    result = framewise("info", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert "eager" in result.stdout and "CPU" in result.stdout
    assert "attention backends:" in result.stdout
    info = json.loads(framewise("info", "--device", "cpu", "--json").stdout)
    assert info["graphs_enabled"] is False and info["device"] == "cpu"


def test_the_demo_model_names_the_color_of_the_square_in_the_sample_clip() -> None:
    clip = SAMPLE_CLIPS / "red_square_moves_right.mp4"
    result = framewise("ask", str(clip), "What color is the square?", "--json", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["answer"] == "red"


# -- failures: a message a person can act on, the right exit status, never a traceback -----------

RED_SQUARE = SAMPLE_CLIPS / "red_square_moves_right.mp4"


def assert_answers_afterwards() -> None:
    """The next question about a good clip is answered (a failure left nothing broken behind)."""
    result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[Demo model")


def test_an_unexpected_engine_error_names_the_log_and_keeps_the_traceback_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from framewise.core.backends.local.engine import Engine

    def broken_ask(self, question: str):
        raise TypeError("cat(): argument 'tensors' (position 1) must be tuple of Tensors, not Tensor")

    with monkeypatch.context() as patch:
        patch.setattr(Engine, "ask", broken_ask)
        result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("framewise: Unexpected error (TypeError) — see the log at ")
    log_path = Path(message.split(" at ", 1)[1])
    logged = log_path.read_text(encoding="utf-8")
    assert "Traceback" in logged and "broken_ask" in logged and "must be tuple of Tensors" in logged
    assert_answers_afterwards()


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you tried to allocate 12000000000000 bytes."),
        MemoryError(),
    ],
)
def test_running_out_of_memory_says_which_settings_to_lower(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    from framewise.core.backends.local.engine import Engine

    def exhausted(self, path):
        raise error

    with monkeypatch.context() as patch:
        patch.setattr(Engine, "open_clip", exhausted)
        result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST)
    assert result.returncode == 2
    assert "Out of memory" in result.stderr and "--max-pixels" in result.stderr
    assert "Traceback" not in result.stderr
    assert_answers_afterwards()


def test_max_pixels_without_bound_is_refused_before_loading() -> None:
    result = framewise("ask", str(RED_SQUARE), "Anything?", "--max-pixels", str(10**12), *FAST)
    assert result.returncode == 2
    assert "--max-pixels: use at most 469,762,048" in result.stderr
    assert "[load]" not in result.stderr and "Traceback" not in result.stderr


def test_two_frames_are_enough_without_naming_a_flag_that_does_not_exist() -> None:
    result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST, "--max-frames", "2")
    assert result.returncode == 0, result.stderr
    assert "frames 2, patches" in result.stdout
    odd = framewise("ask", str(RED_SQUARE), "Anything?", "--max-frames", "3")
    assert odd.returncode == 2
    assert "--max-frames: use an even number" in odd.stderr and "min_frames" not in odd.stderr


def test_an_attention_backend_on_the_cpu_is_said_to_have_no_effect() -> None:
    result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST, "--attention", "varlen")
    assert result.returncode == 0, result.stderr
    assert "--attention varlen has no effect on the CPU" in result.stderr


def test_cpu_stats_say_there_are_no_cuda_graphs_instead_of_counting_misses() -> None:
    result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST)
    assert result.returncode == 0, result.stderr
    assert "no CUDA graphs on this machine" in result.stdout
    assert "graph hits" not in result.stdout and "misses" not in result.stdout


@pytest.mark.parametrize(
    ("clip", "question", "expected"),
    [
        ("missing.mp4", "What is it?", "No file at"),
        (str(RED_SQUARE), "   ", "Type a question first."),
    ],
)
def test_the_clip_and_the_question_are_checked_before_the_model_loads(
    tmp_path: Path, clip: str, question: str, expected: str
) -> None:
    path = clip if Path(clip).is_absolute() else str(tmp_path / clip)
    result = framewise("ask", path, question, *FAST)
    assert result.returncode == 2
    assert expected in result.stderr
    assert "[load]" not in result.stderr, "the model was loaded before the input was checked"
    assert "Traceback" not in result.stderr
    assert_answers_afterwards()


def test_a_question_too_long_for_the_context_is_refused_before_loading_with_the_flag_to_raise() -> None:
    question = "why " * 25_000  # 100 KB
    result = framewise("ask", str(RED_SQUARE), question, *FAST)
    assert result.returncode == 2
    message = result.stderr.strip().splitlines()[-1]
    assert re.match(r"framewise: --max-context: the question is [\d,]{6,} tokens", message), message
    assert re.search(r"shorten the question to at most [\d,]+ tokens, or raise the context \(now [\d,]+\) to at least", message)
    assert "new conversation" not in message and "decoding." not in message
    assert "[load]" not in result.stderr, "the model was loaded before the question was checked"
    assert result.stdout == ""


def test_a_context_too_short_for_any_question_names_the_flag_and_its_bound() -> None:
    result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST, "--max-context", "1")
    assert result.returncode == 2
    assert "--max-context: 1 tokens cannot hold one question" in result.stderr
    assert "lower --max-pixels or --max-new-tokens" in result.stderr, "the other settings named as flags too"
    assert "min_bucket" not in result.stderr and "[load]" not in result.stderr


def test_a_failed_question_prints_no_model_label_without_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from framewise.core.backends.local.engine import Engine
    from framewise.core.errors import FramewiseError

    def refused(self, question: str):
        raise FramewiseError("The conversation no longer fits the decoder's context.")

    with monkeypatch.context() as patch:
        patch.setattr(Engine, "ask", refused)
        result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "no longer fits" in result.stderr


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from framewise import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"framewise {__version__}"


class _FullDisk(io.StringIO):
    """A stdout whose writes fail as they do on a full disk."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_an_answer_that_cannot_be_written_is_a_clear_error_not_a_bug() -> None:
    stderr = io.StringIO()
    with contextlib.redirect_stdout(_FullDisk()), contextlib.redirect_stderr(stderr):
        returncode = main(["ask", str(RED_SQUARE), "What color is the square?", *FAST])
    assert returncode == 2
    message = stderr.getvalue().strip().splitlines()[-1]
    assert message.startswith("framewise: Cannot write the answer to standard output (No space left on device)")
    assert "Unexpected error" not in stderr.getvalue()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_output_to_a_full_device_exits_2_with_one_message() -> None:
    """The installed module run as a program (``python -m``), its output flushed at the interpreter's exit."""
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "framewise.app.cli", "info", "--device", "cpu", "--json"],
            cwd=REPO_ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=240,
        )
    assert result.returncode == 2, result.stderr
    assert "Cannot write the answer to standard output" in result.stderr
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr


def test_help_lists_the_settings_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    for flag in ("--model", "--device", "--dtype", "--attention", "--no-graphs", "--fps", "--max-frames",
                 "--max-pixels", "--fast-mode", "--pruning", "--max-new-tokens", "--temperature", "--kv-cache", "--json"):
        assert flag in shown, f"{flag} missing from framewise --help"


@pytest.mark.parametrize(
    ("break_checkpoint", "expected"),
    [
        ("one_tensor", "weights the architecture needs are missing"),
        ("no_chat_template", "has no chat template"),
    ],
)
def test_an_incomplete_checkpoint_is_refused_with_what_is_missing(
    tmp_path: Path, break_checkpoint: str, expected: str
) -> None:
    from tests.core.test_loading import _one_tensor_only, copy_demo

    if break_checkpoint == "one_tensor":
        folder = copy_demo(tmp_path / "checkpoint")
        _one_tensor_only(folder)
    else:
        folder = copy_demo(tmp_path / "checkpoint", skip=("chat_template.jinja",))
    result = framewise("ask", str(RED_SQUARE), "What color is the square?", *FAST, "--model", str(folder))
    assert result.returncode == 2
    assert expected in result.stderr and str(folder) in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert_answers_afterwards()


def test_info_shows_the_memory_estimate_of_the_chosen_dtype() -> None:
    """fp8 quantizes the demo's decoder layers: its estimate holds fewer weight bytes than float32's."""
    payloads = {}
    for dtype in ("float32", "fp8"):
        result = framewise("info", "--device", "cpu", "--dtype", dtype, "--json")
        assert result.returncode == 0, result.stderr
        payloads[dtype] = json.loads(result.stdout)
    estimates = {dtype: payload["memory_estimate"] for dtype, payload in payloads.items()}
    assert 0 < estimates["fp8"]["weights"] < estimates["float32"]["weights"]
    assert estimates["fp8"]["total"] == sum(estimates["fp8"][part] for part in
                                            ("weights", "kv_cache", "encoder_graphs", "decode_graphs", "clip_features"))
    assert [(payload["dtype"], payload["weight_dtype"]) for payload in payloads.values()] == [("float32", None), ("float32", "fp8")]
    text = framewise("info", "--device", "cpu", "--dtype", "fp8").stdout
    assert "memory estimate:    about" in text
    assert "dtype:              fp8 weights, float32 activations" in text.splitlines()


def test_info_shows_the_kv_cache_chosen_in_its_estimate_and_its_decoder() -> None:
    """--kv-cache fp8: e4m3 keys and values with a scale per token and head, in the estimate, in what
    the decoder holds (--json) and in the KV cache line."""
    payloads = {}
    for layout in ("auto", "fp8"):
        result = framewise("info", "--device", "cpu", "--kv-cache", layout, "--max-context", "4096", "--json")
        assert result.returncode == 0, result.stderr
        payloads[layout] = json.loads(result.stdout)
    decoders = {layout: payload["decoder"] for layout, payload in payloads.items()}
    assert decoders["auto"]["kv_cache_dtype"] == "float32" and decoders["auto"]["kv_bytes_per_token"] == 2 * 6 * 2 * 64 * 4
    assert decoders["fp8"]["kv_cache_dtype"] == "fp8 e4m3, a scale per token and head"
    assert decoders["fp8"]["kv_bytes_per_token"] == 2 * 6 * 2 * (64 + 4)
    estimates = {layout: payload["memory_estimate"]["kv_cache"] for layout, payload in payloads.items()}
    assert estimates["fp8"] == 4096 * decoders["fp8"]["kv_bytes_per_token"] < estimates["auto"]
    text = framewise("info", "--device", "cpu", "--kv-cache", "fp8", "--max-context", "4096").stdout
    assert "KV cache:           4096 tokens, 6.4 MiB (fp8 e4m3, a scale per token and head, 1.594 KiB a token)" in text


def test_ask_json_says_a_picture_is_an_image(tmp_path: Path) -> None:
    from tests.core.test_images import red_square_picture

    result = framewise("ask", str(red_square_picture(tmp_path)), "What color is the square?", "--json", *FAST)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["clip"]["kind"] == "image" and payload["clip"]["frames"] == 1
    assert payload["answer"].split()[0] == "red"


def test_ask_about_a_clip_and_a_picture_together(sample_clip: Path, tmp_path: Path) -> None:
    from tests.core.test_images import red_square_picture

    picture = red_square_picture(tmp_path)
    result = framewise("ask", str(sample_clip), str(picture), "What color is the square?", "--json", *FAST)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert [(clip["name"], clip["kind"]) for clip in payload["clips"]] == [(sample_clip.name, "video"), (picture.name, "image")]
    assert payload["clip"]["name"] == sample_clip.name and payload["answer"]

    text = framewise("ask", str(sample_clip), str(picture), "What color is the square?", *FAST)
    assert text.returncode == 0 and f"also asked about {picture.name} (320×224): a picture" in text.stdout


def test_ask_refuses_a_missing_second_file_before_loading(sample_clip: Path, tmp_path: Path) -> None:
    result = framewise("ask", str(sample_clip), str(tmp_path / "missing.png"), "What?", *FAST)
    assert result.returncode == 2 and "missing.png" in result.stderr and "[load]" not in result.stderr


def test_ask_with_start_and_end_looks_closer_at_that_span(sample_clip: Path) -> None:
    result = framewise("ask", str(sample_clip), "What color is the square?", "--start", "1", "--end", "2", "--json", *FAST)
    assert result.returncode == 0, result.stderr
    clips = json.loads(result.stdout)["clips"]
    assert clips[0]["span"] is None and clips[1]["span"] == [1.0, 2.0]
    assert all(1.0 - 1e-6 <= t <= 2.0 for t in clips[1]["timestamps"])

    only_start = framewise("ask", str(sample_clip), "What color is the square?", "--start", "3", *FAST)
    assert only_start.returncode == 0 and "a closer look, frames" in only_start.stdout and "to 4.0 s" in only_start.stdout


def test_ask_json_says_which_clip_each_time_belongs_to_when_there_are_several() -> None:
    info = EngineInfo("cpu", "float32", "demo", None, "eager", False, "CPU", ("sdpa",))
    short = EncodeDone("short.mp4", 4, 64, (0.0, 1.0, 2.0, 3.0), 1.0, 1.0, 1.0, 0.5, False, duration_s=4.0)
    long = EncodeDone("long.mp4", 4, 64, (0.0, 10.0, 20.0, 30.0), 1.0, 1.0, 1.0, 0.5, False, duration_s=40.0)
    done = Done("In the first clip at 0:02. At 0:25 it turns. At 0:03 both are dark.", AnswerStats(5.0, 12, 30.0, False), kept=True)
    payload = json.loads(json.dumps(_result_json(info, short, done, [long])))
    assert [(time["text"], time["clip"]) for time in payload["times"]] == [
        ("0:02", "short.mp4"), ("0:25", "long.mp4"), ("0:03", None),
    ]


@pytest.mark.parametrize(("flag", "value"), [("--start", "nan"), ("--end", "nan"), ("--start", "inf")])
def test_a_start_or_end_that_is_not_a_time_is_refused_before_loading(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["ask", str(RED_SQUARE), "What color is the square?", *FAST, flag, value])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert f"argument {flag}: {value} is not a time in seconds" in stderr, stderr
    assert "[load]" not in stderr and "Unexpected error" not in stderr


def test_a_closed_stdout_is_refused_before_loading_with_exit_2() -> None:
    script = 'exec "$0" -m framewise.app.cli ask "$1" "What color is the square?" --device cpu >&-'
    result = subprocess.run(
        ["sh", "-c", script, sys.executable, str(RED_SQUARE)],
        cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True, timeout=240,
    )
    assert result.returncode == 2, result.stderr
    assert "framewise: Standard output is closed" in result.stderr
    assert "[load]" not in result.stderr and "Unexpected error" not in result.stderr


def test_ask_states_each_files_length_size_and_frame_rate(tmp_path: Path) -> None:
    import av

    from tests.core.test_images import red_square_picture

    with av.open(str(RED_SQUARE)) as container:
        stream = container.streams.video[0]
        width, height, fps = stream.width, stream.height, float(stream.average_rate)
        duration = container.duration / av.time_base
    picture = red_square_picture(tmp_path)
    files = (str(RED_SQUARE), str(picture), "What color is the square?", *FAST)
    text = framewise("ask", *files, "--start", "1").stdout
    assert f"clip {RED_SQUARE.name}: {duration:.1f} s, {width}×{height}, {fps:.4g} fps, h264\n" in text
    assert f"also asked about {picture.name} (320×224): a picture" in text
    assert f"also asked about {RED_SQUARE.name} 1.0–4.0 s: a closer look" in text, "a part of a file said once"
    clips = json.loads(framewise("ask", *files, "--json").stdout)["clips"]
    assert clips[0]["file"] == {
        "width": width, "height": height, "duration_s": pytest.approx(duration), "fps": pytest.approx(fps), "codec": "h264"
    }
    assert clips[1]["file"] == {"width": 320, "height": 224, "duration_s": None, "fps": None, "codec": "png"}


def test_a_file_name_that_starts_with_a_dash_is_explained_and_works_after_double_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "-clip.mp4").write_bytes(RED_SQUARE.read_bytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["ask", "-clip.mp4", "What color is the square?", *FAST])
    assert exit_info.value.code == 2
    hint = capsys.readouterr().err.strip().splitlines()[-1]
    assert hint == (
        "framewise: -clip.mp4 starts with a dash, so it was read as a flag; put -- before the files "
        '(framewise ask [flags] -- -clip.mp4 "question"), or write it as ./-clip.mp4'
    )
    assert framewise("ask", *FAST, "--", "-clip.mp4", "What color is the square?").returncode == 0
    assert framewise("ask", "./-clip.mp4", "What color is the square?", *FAST).returncode == 0
