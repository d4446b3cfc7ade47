"""Runs a benchmark the way ``benchmarks/targets.sh`` asks for it, at CPU-sized shapes: the GPU
sizes in its arguments become the tiny ones, and options appended after them (argparse keeps an
option's last value) put it on the CPU with a few small frames. The script's own options are all
still parsed, so an option it does not know fails here as it would on the GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIZES = {"8B": "tiny", "3.5-9B": "3.5-tiny", "8B,3.5-9B": "tiny,3.5-tiny"}
SMALL = {
    "decode_bench.py": ["--device", "cpu", "--dtypes", "float32", "--new-tokens", "2", "--first-repeats", "1",
                        "--frames", "4", "--height", "64", "--width", "64", "--long-frames", "8",
                        "--long-pixels", "491520"],
    "prefill_chunk_bench.py": ["--device", "cpu", "--dtype", "float32", "--frames", "16", "--pixels", "2000000",
                               "--chunks", "64"],
    "memory_bench.py": ["--device", "cpu", "--long-frames", "8", "--long-pixels", "491520"],
}


def main() -> None:
    script, *arguments = sys.argv[1:]
    arguments = [SIZES.get(argument, argument) for argument in arguments]
    if "--prepare" not in arguments:
        arguments += SMALL.get(Path(script).name, [])
    os.execv(sys.executable, [sys.executable, script, *arguments])


if __name__ == "__main__":
    main()
