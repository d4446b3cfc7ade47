"""Sampling long clips: Framewise's open-to-ready time against a plain decode of every frame.

Writes its own clips (PyAV, libx264 preset ultrafast) under ``--clips`` (outside the repository),
reusing any already there: 1080p30 with a scrolling texture, a little per-frame grain and a
moving box, so every frame differs from the last. Then, for each clip, each frame count and each
mode, one fresh process samples the clip as the app does (``sample_clip`` with the Qwen3-VL
sizing at a pixel budget of ``--video-tokens``, by default its released preprocessing's 12,288)
and reports the seconds from open to ready, the frames decoded
and its peak resident memory; in the same run, the reference: a plain decode of every frame
with FFmpeg's threads on (``thread_type = "AUTO"``), nothing converted. The load average is
recorded with each measurement: on a shared machine compare ratios within one run.
See benchmarks/README.md for the options.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

FPS = 30
SCROLL_PX = 8  # per frame, so motion is visible from one sampled frame to the next
GRAIN_PLANES = 7


def clip_name(minutes: int, height: int, keyframe_interval: int) -> str:
    return f"{minutes}min-{height}p{FPS}-kf{keyframe_interval}.mp4"


def write_bench_clip(path: Path, minutes: int, height: int, keyframe_interval: int) -> Path:
    """Encode ``minutes`` of 16:9 video at ``height`` lines, a keyframe exactly every
    ``keyframe_interval`` frames; written to a temporary name and renamed when complete."""
    width = height * 16 // 9 // 2 * 2
    rows, cols = np.mgrid[0:height, 0 : width + SCROLL_PX * 64].astype(np.float32)
    texture = (np.sin(cols / 37.0) * np.cos(rows / 23.0) * 70 + 128).astype(np.uint8)
    grains = [np.random.default_rng(k).integers(0, 12, (height, width), dtype=np.uint8) for k in range(GRAIN_PLANES)]
    chroma_rows = height // 2  # yuv420p: U then V, each (height/2, width/2), stored as height/4 rows of width
    partial = path.with_suffix(f".partial-{os.getpid()}.mp4")
    with av.open(str(partial), "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {
            "preset": "ultrafast",
            "crf": "23",
            "x264-params": f"keyint={keyframe_interval}:min-keyint={keyframe_interval}:scenecut=0",
        }
        planes = np.full((height + chroma_rows, width), 128, np.uint8)
        box = height // 10
        for index in range(minutes * 60 * FPS):
            offset = (index * SCROLL_PX) % (SCROLL_PX * 64)
            np.add(texture[:, offset : offset + width], grains[index % GRAIN_PLANES], out=planes[:height])
            left = (index * 5) % (width - box)
            planes[box : 2 * box, left : left + box] = 255
            frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            frame.pts, frame.time_base = index, Fraction(1, FPS)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    partial.rename(path)
    return path


def write_repeated(source: Path, path: Path, times: int) -> Path:
    """``source``'s packets ``times`` over, end to end, without re-encoding (each copy starts with
    a keyframe, so the copy is a valid stream with the same groups of pictures)."""
    partial = path.with_suffix(f".partial-{os.getpid()}.mp4")
    with av.open(str(source)) as reading, av.open(str(partial), "w") as writing:
        video = reading.streams.video[0]
        stream = writing.add_stream_from_template(video)
        span = video.duration or int(video.frames * (1 / (video.average_rate * video.time_base)))
        for copy in range(times):
            reading.seek(0, stream=video)
            for packet in reading.demux(video):
                if packet.dts is None:
                    continue
                packet.pts += copy * span
                packet.dts += copy * span
                packet.stream = stream
                writing.mux(packet)
    partial.rename(path)
    return path


def ensure_clip(folder: Path, minutes: int, height: int, keyframe_interval: int) -> Path:
    """The clip, written now unless it is there. A clip a whole number of times as long as one
    already written (60 minutes from 20) repeats that one's packets: encoding an hour of 1080p
    takes most of an hour on a shared 2-core machine."""
    path = folder / clip_name(minutes, height, keyframe_interval)
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    shorter = [
        folder / clip_name(part, height, keyframe_interval)
        for part in range(1, minutes)
        if minutes % part == 0 and (folder / clip_name(part, height, keyframe_interval)).exists()
    ]
    if shorter:
        print(f"writing {path} from {shorter[-1].name} ...", flush=True)
        return write_repeated(shorter[-1], path, minutes // int(shorter[-1].name.split("min")[0]))
    print(f"writing {path} ...", flush=True)
    return write_bench_clip(path, minutes, height, keyframe_interval)


# --- measuring, each in a fresh process ------------------------------------------------------------


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def budget_pixels(video_tokens: int | None) -> int:
    """Sampling max pixels for a clip of ``video_tokens`` (``None``: Qwen3-VL's released budget)."""
    from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS

    if video_tokens is None:
        return QWEN3_VL_LIMITS.released_clip_pixels
    return video_tokens * QWEN3_VL_LIMITS.pixels_per_video_token


def measure_sampling(path: Path, frames: int, fast_mode: str, workers: int | None, video_tokens: int | None) -> dict[str, object]:
    """Open-to-ready time of ``sample_clip`` as the app calls it, in this process."""
    from framewise.core.families.qwen3_vl.processor import video_frame_sizing
    from framewise.core.settings import SamplingSettings
    from framewise.core.video import pyav_reader, sample_clip

    if workers is not None:
        pyav_reader.default_workers = lambda: workers
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=frames, max_pixels=budget_pixels(video_tokens), fast_mode=fast_mode)
    started = time.perf_counter()
    sampled = sample_clip(path, sampling, video_frame_sizing(sampling))
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "frames": len(sampled.timestamps),
        "size": list(sampled.frames.shape[1:3]),
        "mode": sampled.mode,
        "frames_decoded": sampled.frames_decoded,
        "peak_rss_mib": peak_rss_mib(),
    }


def measure_open_to_ready(path: Path, frames: int, fast_mode: str, video_tokens: int | None) -> dict[str, object]:
    """Open-to-ready time of the engine (reading, preprocessing and encoding while reading) on
    the bundled demo model, on a GPU where there is one, else the CPU, in this process."""
    import torch

    from framewise.core.backends.local.engine import Engine
    from framewise.core.settings import AppSettings

    settings = AppSettings().replace(
        "sampling", fps=2.0, min_frames=4, max_frames=frames, max_pixels=budget_pixels(video_tokens), fast_mode=fast_mode
    ).replace("model", source=str(demo_holding(video_tokens)), device="cuda" if torch.cuda.is_available() else "cpu")
    engine = Engine(settings)
    engine.load()
    rss_loaded = peak_rss_mib()
    started = time.perf_counter()
    done = engine.open_clip(path)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "frames": done.frames,
        "mode": done.sampling_mode,
        "encode_ms": done.encode_ms,
        "passes": len(done.chunks),
        "device": settings.model.device,
        "peak_rss_mib": peak_rss_mib(),
        "peak_rss_loaded_mib": rss_loaded,
    }


def demo_holding(video_tokens: int | None) -> Path:
    """The bundled demo model's folder, or, for a clip of more ``video_tokens`` than half its context,
    a copy of it (in a temporary folder) whose context is raised to a power of two at least twice
    that: the demo model's own 32,768 positions cannot hold an hour at 64k tokens."""
    from framewise.core.model_source import DEMO_MODEL_DIR

    config = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    positions = config["text_config"]["max_position_embeddings"]
    if video_tokens is None or 2 * video_tokens <= positions:
        return DEMO_MODEL_DIR
    folder = Path(tempfile.mkdtemp(prefix="framewise-demo-"))
    atexit.register(shutil.rmtree, folder, True)
    copy = folder / "demo"
    shutil.copytree(DEMO_MODEL_DIR, copy)
    config["text_config"]["max_position_embeddings"] = 1 << (2 * video_tokens - 1).bit_length()
    (copy / "config.json").write_text(json.dumps(config, indent=1))
    return copy


def measure_full_decode(path: Path) -> dict[str, object]:
    """A plain threaded decode of every frame, nothing converted: the reference."""
    started = time.perf_counter()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        decoded = sum(1 for _ in container.decode(stream))
    return {"seconds": time.perf_counter() - started, "frames_decoded": decoded, "peak_rss_mib": peak_rss_mib()}


def run_child(arguments: list[str]) -> dict[str, object]:
    """Run this script on one measurement in a fresh process; its JSON result with the load average."""
    load = os.getloadavg()[0]
    output = subprocess.run(
        [sys.executable, __file__, *arguments], check=True, capture_output=True, text=True
    ).stdout
    return {**json.loads(output.strip().splitlines()[-1]), "load_before": load, "load_after": os.getloadavg()[0]}


def measure_all(args: argparse.Namespace, clips: list[Path]) -> list[dict[str, object]]:
    results = []
    for path in clips:
        cases: list[tuple[str, list[str]]] = [] if args.no_full_decode else [("full decode", ["--full-decode", str(path)])]
        for frames in args.frames:
            for mode in args.modes:
                fast_mode = "on" if mode == "fast" else "off"
                budget = ["--video-tokens", str(args.video_tokens)] if args.video_tokens else []
                cases.append((mode, ["--sample", str(path), "--frames", str(frames), "--fast-mode", fast_mode, *budget]))
                if args.encode:
                    cases.append((f"{mode}, encoded", [*cases[-1][1], "--encode-child"]))
                if mode == "exact" and frames in args.one_decoder_at:
                    cases.append(("exact, 1 decoder", [*cases[-1][1], "--workers", "1"]))
        for label, arguments in cases:
            result = {"clip": path.name, "case": label, **run_child(arguments)}
            print(json.dumps(result), flush=True)
            results.append(result)
            if args.out is not None:
                with args.out.open("a") as out:
                    out.write(json.dumps(result) + "\n")
    return results


def markdown_table(results: list[dict[str, object]]) -> str:
    """One row per measurement; ``× full`` is the time over the same clip's full decode in that run."""
    full = {row["clip"]: row["seconds"] for row in results if row["case"] == "full decode"}
    lines = [
        "| clip | case | frames | frame size | seconds | × full decode | frames decoded | peak RSS MiB | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        ratio = f"{row['seconds'] / full[row['clip']]:.2f}" if row["clip"] in full else "–"
        size = "×".join(str(side) for side in row.get("size", [])) or "–"
        lines.append(
            f"| {row['clip']} | {row['case']} | {row.get('frames', '–')} | {size} | {row['seconds']:.1f} | {ratio} "
            f"| {_count(row.get('frames_decoded'))} | {row['peak_rss_mib']:.0f} | {row['load_before']:.1f} |"
        )
    return "\n".join(lines)


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=Path, default=Path("/work/bench-clips"), help="where the clips are kept")
    parser.add_argument("--minutes", type=int, nargs="+", default=[20, 60])
    parser.add_argument("--keyframes", type=int, nargs="+", default=[250, 30], help="frames between keyframes")
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--frames", type=int, nargs="+", default=[32, 256, 768, 2048], help="frames sampled")
    parser.add_argument("--video-tokens", type=int, help="the clip's video tokens (default: Qwen3-VL's released 12,288)")
    parser.add_argument("--modes", nargs="+", choices=("exact", "fast"), default=["exact", "fast"])
    parser.add_argument("--one-decoder-at", type=int, nargs="*", default=[768],
                        help="frame counts at which exact mode also runs with a single decoder")
    parser.add_argument("--no-full-decode", action="store_true", help="leave out the reference decode")
    parser.add_argument("--out", type=Path, help="append each result to this JSON-lines file")
    parser.add_argument("--make-clips", action="store_true", help="only write the clips, then stop")
    parser.add_argument("--table", type=Path, help="print a JSON-lines results file as a Markdown table, then stop")
    parser.add_argument("--sample", type=Path, help=argparse.SUPPRESS)  # one measurement (a child process)
    parser.add_argument("--fast-mode", default="off", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--full-decode", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--encode", action="store_true",
                        help="also measure open to ready through the engine (demo model: reading, preprocessing, encoding)")
    parser.add_argument("--encode-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample is not None and args.encode_child:
        print(json.dumps(measure_open_to_ready(args.sample, args.frames[0], args.fast_mode, args.video_tokens)))
        return
    if args.sample is not None:
        print(json.dumps(measure_sampling(args.sample, args.frames[0], args.fast_mode, args.workers, args.video_tokens)))
        return
    if args.full_decode is not None:
        print(json.dumps(measure_full_decode(args.full_decode)))
        return
    if args.table is not None:
        print(markdown_table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return
    clips = [
        ensure_clip(args.clips, minutes, args.height, keyframe_interval)
        for minutes in args.minutes
        for keyframe_interval in args.keyframes
    ]
    if not args.make_clips:
        measure_all(args, clips)


if __name__ == "__main__":
    main()
