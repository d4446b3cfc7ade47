"""``framewise``: ask about a clip from a terminal, or show what Framewise runs on.

    framewise ask CLIP "QUESTION" [--json] [settings flags]
    framewise ask CLIP_OR_PICTURE ... "QUESTION"                 # several clips or pictures, one conversation
    framewise ask CLIP "QUESTION" --start 12 --end 14            # also a closer look at 12-14 s of the first clip
    framewise info [--json]
    framewise ask CLIP "QUESTION" --server http://HOST:8000 [--server-model NAME]   # a vLLM server answers

With ``--server`` the clip is sampled here and a vLLM server answers (its API key, if it needs
one, comes from the ``FRAMEWISE_SERVER_API_KEY`` environment variable, never from a flag, so it
stays out of shell histories and process lists).

The answer streams to stdout, followed by the stats; ``--json`` prints one JSON object instead.
Progress goes to stderr. The clip and the question are checked before the model loads. Exit
status: 0 on success, 2 for a problem with the input (a bad clip, model or setting, too little
memory for the settings, or a stdout that cannot be written; said on stderr), 1 for an unexpected
error (its traceback goes to the log, whose path is printed), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from typing import TYPE_CHECKING, Any, Sequence, TextIO

from framewise import __version__
from framewise.app.logs import setup_logging
from framewise.core.clip_times import ConversationItem, place_times
from framewise.core.errors import EmptyQuestionError, OutputWriteError, SettingsError, describe_error
from framewise.core.events import AnswerStats, Done, EncodeDone, EngineInfo, Event, Progress, ServerInfo, Token
from framewise.core.memory_plan import size_text
from framewise.core.seam import FamilyLimits
from framewise.core.settings import (
    ATTENTION_BACKENDS,
    AUTO_PRUNING_ABOVE_TOKENS,
    AUTO_PRUNING_RATE,
    DEVICES,
    DTYPES,
    FAST_MODES,
    FIELD_WORDS,
    KV_CACHE_DTYPES,
    AppSettings,
)
from framewise.core.timecodes import find_times

if TYPE_CHECKING:
    from framewise.core.video import ClipInfo

# The flag that sets each settings field, so messages name what a person can type.
FLAGS = {
    "model.source": "--model",
    "model.device": "--device",
    "model.dtype": "--dtype",
    "encoder.attention_backend": "--attention",
    "encoder.use_graphs": "--no-graphs",
    "encoder.fuse_kernels": "--no-fuse",
    "sampling.fps": "--fps",
    "sampling.min_frames": "--min-frames",
    "sampling.max_frames": "--max-frames",
    "sampling.max_pixels": "--max-pixels",
    "sampling.fast_mode": "--fast-mode",
    "sampling.pruning": "--pruning",
    "generation.max_new_tokens": "--max-new-tokens",
    "generation.temperature": "--temperature",
    "decoding.use_graphs": "--no-decode-graphs",
    "decoding.max_context_tokens": "--max-context",
    "decoding.kv_cache_dtype": "--kv-cache",
    "backend.server_url": "--server",
    "backend.server_model": "--server-model",
    "backend.timeout_s": "--server-timeout",
    "backend.answer_timeout_s": "--answer-timeout",
    "backend.api_key": "FRAMEWISE_SERVER_API_KEY",
}
API_KEY_VARIABLE = "FRAMEWISE_SERVER_API_KEY"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(arguments)
    except SystemExit as exit_:
        if exit_.code == 2:  # argparse refused them: a file name that starts with a dash read as a flag?
            _explain_dashed_names(arguments)
        raise
    setup_logging()
    try:
        _stdout()  # a closed stdout is found before the model loads, not when the answer comes
        settings = _settings_from_args(args)
        settings.validate(_family_limits(settings))
        if args.command == "info":
            return _info(settings, args.json)
        return _ask(settings, args.clips, args.question, args.json, _span(args.start, args.end))
    except KeyboardInterrupt:
        print("framewise: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - every failure becomes a message, never a traceback
        if isinstance(error, OutputWriteError):
            _discard_stdout()
        report = describe_error(error)
        print(f"framewise: {_in_flag_words(error, report.message)}", file=sys.stderr)
        return report.exit_code


def _family_limits(settings: AppSettings) -> FamilyLimits | None:
    """The limits of the model family that will answer, read before anything heavy is imported."""
    from framewise.core.backends import family_limits_for  # imported late so `--help` stays instant

    return family_limits_for(settings)


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout at once; a failed write (``>/dev/full``, a closed pipe) is an OutputWriteError."""
    stdout = _stdout()
    try:
        stdout.write(text)
        stdout.flush()
    except OSError as error:
        raise OutputWriteError(
            f"Cannot write the answer to standard output ({error.strerror or error}); send the output to a disk "
            "with room, or to a program that reads all of it."
        ) from error


def _stdout() -> TextIO:
    """``sys.stdout``, or an OutputWriteError when the program was started with it closed (``>&-``)."""
    if sys.stdout is None:
        raise OutputWriteError(
            "Standard output is closed, so the answer has nowhere to go; send it to a file (> answer.txt), "
            "or to /dev/null to discard it."
        )
    return sys.stdout


def _explain_dashed_names(arguments: Sequence[str]) -> None:
    """Say on stderr how to give the files among ``arguments`` whose names start with a dash, which
    argparse reads as flags (those before a ``--``)."""
    before_files = arguments[: arguments.index("--")] if "--" in arguments else arguments
    for name in before_files:
        if name.startswith("-") and name != "-" and os.path.lexists(name):
            print(
                f"framewise: {name} starts with a dash, so it was read as a flag; put -- before the files "
                f'(framewise ask [flags] -- {name} "question"), or write it as ./{name}',
                file=sys.stderr,
            )


def _seconds(text: str) -> float:
    """``--start``/``--end``'s value: a finite number of seconds; argparse prints the refusal and exits 2."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"{text} is not a time in seconds; give a number such as 12 or 12.5")
    return seconds


def _discard_stdout() -> None:
    """Point stdout at the null device, so that the text still buffered for it cannot fail again at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured in tests)
        pass


def _in_flag_words(error: BaseException, message: str) -> str:
    """A settings error as the flag that sets the field (``--max-frames: ...``), with the other fields
    it names as their flags too; other messages as they are."""
    if isinstance(error, SettingsError) and error.field in FLAGS:
        text = error.message
        for field, words in FIELD_WORDS.items():
            text = text.replace(words, FLAGS[field])
        return f"{FLAGS[error.field]}: {text}"
    return message


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="framewise",
        description="Ask Qwen3-VL questions about video clips.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"framewise {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    ask = commands.add_parser("ask", help="answer a question about a clip")
    ask.add_argument(
        "clips", nargs="+", metavar="CLIP", help="path of a video file or a picture; give several to ask about them together"
    )
    ask.add_argument("question", help="the question, in quotes")
    ask.add_argument("--start", type=_seconds, metavar="S", help="look closer at the first clip from S seconds (default 0)")
    ask.add_argument("--end", type=_seconds, metavar="S", help="look closer at the first clip up to S seconds (default its end)")
    info = commands.add_parser("info", help="show the device, attention backends and model in use")
    for command in (ask, info):
        _add_settings_flags(command)
        command.add_argument("--json", action="store_true", help="print one JSON object")
    parser.epilog = "The flags of `framewise ask` (`framewise info` takes the same settings flags):\n\n" + ask.format_help()
    return parser


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    defaults = AppSettings()
    parser.add_argument("--model", default=defaults.model.source, help="'demo', a checkpoint folder, or a cached repo id")
    parser.add_argument("--device", choices=DEVICES, default=defaults.model.device)
    parser.add_argument("--dtype", choices=DTYPES, default=defaults.model.dtype)
    parser.add_argument("--attention", choices=ATTENTION_BACKENDS, default=defaults.encoder.attention_backend)
    parser.add_argument("--no-graphs", action="store_true", help="run the vision encoder eagerly")
    parser.add_argument(
        "--no-fuse", action="store_true", help="capture the vision tower's own kernels instead of fused ones"
    )
    parser.add_argument("--fps", type=float, default=defaults.sampling.fps, help="frames sampled per second")
    parser.add_argument(
        "--min-frames",
        type=int,
        help=f"fewest frames sampled (even; default {defaults.sampling.min_frames}, or --max-frames when lower)",
    )
    parser.add_argument("--max-frames", type=int, default=defaults.sampling.max_frames, help="most frames sampled (even)")
    parser.add_argument("--max-pixels", type=int, default=defaults.sampling.max_pixels, help="pixel budget of the whole clip")
    parser.add_argument(
        "--fast-mode",
        choices=FAST_MODES,
        default=defaults.sampling.fast_mode,
        help="take the frame quickest to decode within half an interval of each sampled time, "
        "a keyframe where one is that near (auto: for clips over 10 minutes)",
    )
    parser.add_argument(
        "--pruning",
        metavar="off|auto|RATE",
        default=defaults.sampling.pruning,
        help="after the vision encoder, drop this share of a clip's video tokens where nothing moves (a RATE "
        f"at least 0 and below 1; auto: {AUTO_PRUNING_RATE} for clips over {AUTO_PRUNING_ABOVE_TOKENS:,} video tokens)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=defaults.generation.max_new_tokens)
    parser.add_argument("--temperature", type=float, default=defaults.generation.temperature)
    parser.add_argument("--no-decode-graphs", action="store_true", help="run the answer's decode steps eagerly")
    parser.add_argument(
        "--max-context",
        type=int,
        default=defaults.decoding.max_context_tokens,
        help="tokens the KV cache holds (0: what the clip budget and max new tokens need)",
    )
    parser.add_argument(
        "--kv-cache",
        choices=KV_CACHE_DTYPES,
        default=defaults.decoding.kv_cache_dtype,
        help="how the KV cache holds keys and values: auto, the activations' dtype; fp8, e4m3 with a scale "
        "per token and head (about half the memory, so about twice the context in the same memory)",
    )
    parser.add_argument(
        "--server",
        metavar="URL",
        help="answer on a vLLM server at URL (e.g. http://127.0.0.1:8000) instead of this machine; "
        f"its API key, if any, from ${API_KEY_VARIABLE}",
    )
    parser.add_argument(
        "--server-model", metavar="NAME", default="", help="the server's model name (default: the one it serves)"
    )
    timeouts = [
        ("--server-timeout", defaults.backend.timeout_s, "to connect and answer its checks (the answer: --answer-timeout)"),
        ("--answer-timeout", defaults.backend.answer_timeout_s, "for its whole answer, from the question to the last word"),
    ]
    for flag, default, what in timeouts:
        parser.add_argument(flag, type=float, default=default, metavar="S", help=f"seconds the server may take {what}")


def _settings_from_args(args: argparse.Namespace) -> AppSettings:
    defaults = AppSettings()
    min_frames = args.min_frames
    if min_frames is None:  # follow --max-frames down, so `--max-frames 2` needs no second flag
        min_frames = max(2, min(defaults.sampling.min_frames, args.max_frames - args.max_frames % 2))
    return (
        defaults.replace("model", source=args.model, device=args.device, dtype=args.dtype)
        .replace("encoder", attention_backend=args.attention, use_graphs=not args.no_graphs, fuse_kernels=not args.no_fuse)
        .replace("sampling", fps=args.fps, min_frames=min_frames, max_frames=args.max_frames, max_pixels=args.max_pixels,
                 fast_mode=args.fast_mode, pruning=args.pruning)
        .replace("generation", max_new_tokens=args.max_new_tokens, temperature=args.temperature)
        .replace("decoding", use_graphs=not args.no_decode_graphs, max_context_tokens=args.max_context,
                 kv_cache_dtype=args.kv_cache)
        .replace(
            "backend",
            kind="vllm" if args.server else "local",
            server_url=args.server or "",
            server_model=args.server_model,
            api_key=os.environ.get(API_KEY_VARIABLE, ""),
            timeout_s=args.server_timeout,
            answer_timeout_s=args.answer_timeout,
        )
    )


def _load_engine(settings: AppSettings, sink: Any) -> Any:
    from framewise.core.backends import create_engine  # imported late so `--help` stays instant

    engine = create_engine(settings, sink)
    engine.load()
    return engine


def _info(settings: AppSettings, as_json: bool) -> int:
    from framewise.core.conversation_store import default_store_path, store_note
    from framewise.core.loading import estimate_memory

    note = store_note(default_store_path())  # the window keeps conversations there: say when it cannot
    if note:
        print(f"framewise: {note}", file=sys.stderr)
    engine = _load_engine(settings, _ProgressPrinter(sys.stderr, quiet=as_json))
    info = engine.info()
    estimate = None if info.server is not None else estimate_memory(settings)
    if as_json:
        payload = dataclasses.asdict(info)
        if estimate is not None:
            payload["memory_estimate"] = {**dataclasses.asdict(estimate), "total": estimate.total}
        held = info.held_memory
        if held is not None:
            payload["held_memory"] |= {"total": held.total, "beyond": held.beyond}
        write_stdout(json.dumps(payload) + "\n")
    else:
        text = format_info(info)
        if estimate is not None:
            text += f"\nmemory estimate:    {estimate.describe()}"
        if info.held_memory is not None:
            text += f"\nmemory held:        {info.held_memory.describe()}"
        write_stdout(text + "\n")
    return 0


def _span(start: float | None, end: float | None) -> tuple[float, float] | None:
    """The span ``--start``/``--end`` name (``None`` when neither is given)."""
    if start is None and end is None:
        return None
    return (start or 0.0, math.inf if end is None else end)


def _ask(
    settings: AppSettings, clips: Sequence[str], question: str, as_json: bool, span: tuple[float, float] | None = None
) -> int:
    if not question.strip():
        raise EmptyQuestionError()
    from framewise.core.video import probe_clip  # no torch: a bad path is found before the model loads

    files = [probe_clip(clip) for clip in clips]
    if settings.backend.kind == "local":  # a server has its own tokenizer and context
        from framewise.core.loading import count_question_tokens  # the tokenizer only, no weights

        settings.check_question_fits(count_question_tokens(settings.model.source, question), _family_limits(settings))
    printer = _ProgressPrinter(sys.stderr, quiet=as_json)
    engine = _load_engine(settings, printer)
    info = engine.info()
    if not as_json:
        _note_unused_settings(settings, info)
    encoded = engine.open_clip(clips[0])
    added = [engine.add_clip(clip) for clip in clips[1:]]
    if span is not None:
        added.append(engine.look_closer(*span))
        files.append(files[0])  # a closer look is a part of the first file
    for item in (encoded, *added):
        if item.damage:
            print(f"framewise: warning: {item.damage}", file=sys.stderr)
    if not as_json:
        printer.stream_answer(f"[{info.model_label}]\n" if info.model_label else "")
    done = engine.ask(question)
    if as_json:
        write_stdout(json.dumps(_result_json(info, encoded, done, added, files)) + "\n")
    else:
        printer.start_answer()  # the label, when an answer came without a token
        write_stdout("\n" + format_stats(done.stats, encoded, info) + "\n" + _items_text(encoded, added, files))
    return 0


def _items_text(encoded: EncodeDone, added: Sequence[EncodeDone], files: Sequence[ClipInfo]) -> str:
    """A line for the first item's file, then one for each item added to the question."""
    kind = "picture" if encoded.kind == "image" else "clip"
    lines = [f"{kind} {encoded.clip_name}: {_file_words(files[0], encoded)}"]
    for other, file in zip(added, files[1:]):
        about = "" if other.span else f" ({_file_words(file, other)})"
        lines.append(f"also asked about {other.clip_name}{about}: {_item_words(other)}")
    return "".join(line + "\n" for line in lines)


def _note_unused_settings(settings: AppSettings, info: EngineInfo) -> None:
    """Say on stderr when a flag was accepted but cannot change anything on this machine."""
    backend = settings.encoder.attention_backend
    if backend != "auto" and info.server is not None:
        print(f"framewise: --attention {backend} has no effect: the vision encoder runs on the server", file=sys.stderr)
    elif backend != "auto" and not info.graphs_enabled:
        where = "on the CPU" if info.on_cpu else "without CUDA graphs"
        print(
            f"framewise: --attention {backend} has no effect {where}: the vision encoder runs eager, "
            "with transformers' own attention",
            file=sys.stderr,
        )


class _ProgressPrinter:
    """An event sink for the terminal: progress on stderr, answer tokens on stdout."""

    def __init__(self, stream: TextIO, quiet: bool) -> None:
        self.stream = stream
        self.quiet = quiet
        self.stream_tokens = False
        self._header: str | None = None

    def stream_answer(self, header: str) -> None:
        """Write answer tokens to stdout from now on, preceded by ``header`` (the model's label line)
        once the first token comes, so that a failed question leaves no label without an answer."""
        self.stream_tokens = True
        self._header = header

    def start_answer(self) -> None:
        """Write the header now, unless the first token already did."""
        if self._header is not None:
            header, self._header = self._header, None
            write_stdout(header)

    def __call__(self, event: Event) -> None:
        if isinstance(event, Token) and self.stream_tokens:
            self.start_answer()
            write_stdout(event.text)
        elif isinstance(event, Progress) and (not self.quiet or event.message.startswith("Warning:")):
            print(f"[{event.stage}] {event.message}", file=self.stream, flush=True)


def format_info(info: EngineInfo) -> str:
    """``framewise info``'s text: one ``name: value`` line per fact."""
    if info.server is not None:
        return format_server_info(info, info.server)
    encoder = "CUDA graphs" if info.graphs_enabled else f"eager ({info.graphs_reason})"
    lines = [
        f"model:              {info.model_name}" + (f"  [{info.model_label}]" if info.model_label else ""),
        f"device:             {info.device}",
        f"dtype:              {info.precision}",
        f"vision encoder:     {encoder}",
        f"attention backends: {', '.join(info.attention_backends)}",
    ]
    if info.graphs_enabled:
        lines.append(f"graph budgets:      {', '.join(map(str, info.graph_budgets))}")
        lines.append(f"capture:            {info.capture_seconds:.1f} s, {info.graph_memory_mb:.0f} MiB")
    if info.decoder is not None:
        decoder = info.decoder
        lines.append(f"decode graphs:      {'on' if decoder.graphs_enabled else 'off'} ({decoder.graphs_reason})")
        lines.append(
            f"KV cache:           {decoder.context_tokens} tokens, {size_text(round(decoder.kv_cache_mb * 2**20))} "
            f"({decoder.kv_cache_words()}), buckets {', '.join(map(str, decoder.buckets))}"
        )
    return "\n".join(lines)


def format_server_info(info: EngineInfo, server: ServerInfo) -> str:
    """``framewise info --server``'s text: the server, its models, and how to turn on its encoder graphs."""
    lines = [
        f"backend:            vLLM server {server.url}" + (f" (vLLM {server.version})" if server.version else ""),
        f"model:              {server.model}" + (f"  [{info.model_label}]" if info.model_label else ""),
        f"served models:      {', '.join(server.served_models)}",
        f"context:            {server.max_model_len if server.max_model_len else 'not said'} tokens",
        "vision encoder:     runs on the server",
        "server command with encoder CUDA graphs sized like Framewise's encoder settings:",
        f"  {server.serve_command}",
    ]
    if server.pruning_note:
        lines.append(f"pruning:            {server.pruning_note}")
    if server.plain_http_warning:
        lines.append(f"warning:            {server.plain_http_warning}")
    return "\n".join(lines)


def format_stats(stats: AnswerStats, encoded: EncodeDone, info: EngineInfo) -> str:
    """The stats printed after an answer."""
    if stats.server is not None:
        return (
            f"--\nframes {encoded.frames} sent to {stats.server.url} (encoded there), "
            f"decode {encoded.decode_ms:.0f} ms, packing {encoded.preprocess_ms:.0f} ms\n"
            f"first token {stats.time_to_first_token_ms:.0f} ms, {stats.speed_text()}"
            + (", cancelled" if stats.cancelled else "")
            + f"\nserver: {stats.server.summary()}"
        )
    return (
        f"--\nframes {encoded.frames}, patches {encoded.patches}, {encoded.tokens_text()}, "
        f"decode {encoded.decode_ms:.0f} ms, preprocess {encoded.preprocess_ms:.0f} ms, "
        f"encode {encoded.encode_ms:.1f} ms ({encoded.ms_per_frame:.2f} ms/frame, {_graph_words(encoded, info)})\n"
        f"first token {stats.time_to_first_token_ms:.0f} ms, {stats.speed_text()}"
        + (", cancelled" if stats.cancelled else "")
        + (f"\ndecoder: {stats.decoder.summary()}" if stats.decoder else "")
    )


def _graph_words(encoded: EncodeDone, info: EngineInfo) -> str:
    if info.graphs_enabled:
        verdict = "graph hit" if encoded.graph_hit else "graph miss"
        return f"{verdict}, {len(encoded.chunks)} encoder passes"
    if info.on_cpu:
        return "no CUDA graphs on this machine"
    return f"eager: {info.graphs_reason}"


def _item_words(encoded: EncodeDone) -> str:
    """One item added to the question, in a few words."""
    if encoded.span is not None:
        return f"a closer look, frames {encoded.frames} from {encoded.span[0]:.1f} to {encoded.span[1]:.1f} s"
    if encoded.kind == "image":
        return f"a picture, {encoded.patches} patches"
    return f"frames {encoded.frames}, patches {encoded.patches}"


def _file_words(file: ClipInfo, encoded: EncodeDone) -> str:
    """What the file an item came from is: a clip's length, size, frame rate and codec; a picture's size."""
    size = f"{file.width}×{file.height}"
    if encoded.kind == "image":
        return size
    return f"{file.duration_s:,.1f} s, {size}, {file.fps:.4g} fps, {file.codec}"


def _file_json(file: ClipInfo | None, encoded: EncodeDone) -> dict[str, Any] | None:
    """The file's facts as :func:`_file_words` says them (a picture has no length nor frame rate)."""
    if file is None:
        return None
    video = encoded.kind != "image"
    return {
        "width": file.width,
        "height": file.height,
        "duration_s": file.duration_s if video else None,
        "fps": file.fps if video else None,
        "codec": file.codec,
    }


def _clip_json(encoded: EncodeDone, file: ClipInfo | None = None) -> dict[str, Any]:
    return {
        "name": encoded.clip_name,
        "kind": encoded.kind,
        "frames": encoded.frames,
        "timestamps": list(encoded.timestamps),
        "decode_ms": encoded.decode_ms,
        "preprocess_ms": encoded.preprocess_ms,
        "encode_ms": encoded.encode_ms,
        "ms_per_frame": encoded.ms_per_frame,
        "graph_hit": encoded.graph_hit,
        "passes": len(encoded.chunks),
        "video_tokens_before": encoded.video_tokens_before,
        "video_tokens_after": encoded.video_tokens_after,
        "sampling_mode": encoded.sampling_mode,
        "span": list(encoded.span) if encoded.span else None,
        "damage": encoded.damage,
        "file": _file_json(file, encoded),
    }


def _result_json(
    info: EngineInfo,
    encoded: EncodeDone,
    done: Done,
    added: Sequence[EncodeDone] = (),
    files: Sequence[ClipInfo] = (),
) -> dict[str, Any]:
    """``ask --json``'s object: ``clip`` is the first file, ``clips`` every file in order, each with
    ``file``: the size, length, frame rate and codec of the file it was read from (``files``, in the
    same order; ``None`` where not given). Each of ``times`` has its text and seconds and, when the
    question was about several items, ``clip``: the name of the one it belongs to (``None`` where
    the answer does not say). ``dtype`` is the activations'; ``weight_dtype`` that of the language
    model's linear weights where it differs (``"fp8"``), else ``None``."""
    items = (encoded, *added)
    item_files: Sequence[ClipInfo | None] = files or [None] * len(items)
    return {
        "answer": done.text,
        "times": _times_json(done.text, items),
        "model": info.model_name,
        "model_label": info.model_label,
        "device": info.device,
        "dtype": info.dtype,
        "weight_dtype": info.weight_dtype,
        "encoder": info.encoder_name,
        "clip": _clip_json(encoded, item_files[0]),
        "clips": [_clip_json(item, file) for item, file in zip(items, item_files)],
        "stats": dataclasses.asdict(done.stats),
        "server": dataclasses.asdict(info.server) if info.server else None,
    }


def _times_json(answer: str, items: Sequence[EncodeDone]) -> list[dict[str, Any]]:
    if len(items) < 2:
        return [time.to_json() for time in find_times(answer)]
    conversation_items = [ConversationItem.encoded(item) for item in items]
    return [placed.to_json(conversation_items) for placed in place_times(answer, conversation_items)]


if __name__ == "__main__":
    sys.exit(main())
