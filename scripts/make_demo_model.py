"""Make the bundled demo model in assets/demo_model: a tiny Qwen3-VL with random weights.

Run from the repository root: ``python scripts/make_demo_model.py`` (``--out DIR`` to write
elsewhere, ``--seed N`` for other weights). The tokenizer, chat template and config come from
``core.demo_model``; the weights are drawn from the seed on the CPU, so every run writes the
same files. The folder loads with transformers' Qwen3VLForConditionalGeneration like any
Qwen3-VL checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from framewise.core.demo_model import (  # noqa: E402
    DEMO_SEED,
    DEMO_WORDS,
    build_demo_config,
    build_demo_tokenizer,
    init_demo_model,
    save_demo_model,
    special_token_ids,
)

DEMO_LABEL = "Demo model — random weights"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "assets" / "demo_model", help="folder to write")
    parser.add_argument("--seed", type=int, default=DEMO_SEED, help="seed of the random weights")
    args = parser.parse_args(argv)

    tokenizer = build_demo_tokenizer(DEMO_WORDS)
    config = build_demo_config(len(tokenizer), special_token_ids(tokenizer))
    model = init_demo_model(config, seed=args.seed)
    parameters = sum(p.numel() for p in model.parameters())
    info = {
        "name": "demo",
        "label": DEMO_LABEL,
        "description": (
            "A tiny Qwen3-VL (the released architecture at a small size) with random weights, so Framewise "
            "runs on any machine without a download. Its answers are not meaningful."
        ),
        "made_by": f"python scripts/make_demo_model.py --seed {args.seed}",
        "seed": args.seed,
        "parameters": parameters,
        "vocabulary": len(tokenizer),
        "weights_dtype": "float32",
    }
    for path in save_demo_model(args.out, model, tokenizer, info):
        print(f"{path.stat().st_size:>10,d}  {path}")
    print(f"{parameters:,d} parameters, vocabulary of {len(tokenizer)} tokens")


if __name__ == "__main__":
    main()
