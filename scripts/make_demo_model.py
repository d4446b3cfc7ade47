"""Make a demo-model folder with random weights: a tiny Qwen3-VL of the bundled model's family.

Run from the repository root: ``python scripts/make_demo_model.py --out DIR`` (``--seed N`` for
other weights). ``DIR`` must be new or empty; ``--replace`` overwrites an existing model there.
The shipped model in ``assets/demo_model`` is the trained one (``training/train_demo.py``), so
this script never writes there by default. The tokenizer, chat template and config come from
``training.demo_model``; the weights are drawn from the seed on the CPU, so every run writes the
same files. The folder loads with transformers' Qwen3VLForConditionalGeneration like any
Qwen3-VL checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from training.demo_model import (  # noqa: E402
    DEMO_SEED,
    DEMO_WORDS,
    UNTRAINED_DEMO_LABEL,
    build_demo_config,
    build_demo_tokenizer,
    init_demo_model,
    save_demo_model,
    special_token_ids,
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write (new or empty)")
    parser.add_argument("--replace", action="store_true", help="overwrite a model already in --out")
    parser.add_argument("--seed", type=int, default=DEMO_SEED, help="seed of the random weights")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()) and not args.replace:
        parser.error(f"{args.out} is not empty; pass --replace to overwrite the model in it")

    tokenizer = build_demo_tokenizer(DEMO_WORDS)
    config = build_demo_config(len(tokenizer), special_token_ids(tokenizer))
    model = init_demo_model(config, seed=args.seed)
    written = save_demo_model(
        args.out,
        model,
        tokenizer,
        label=UNTRAINED_DEMO_LABEL,
        description=(
            "A tiny Qwen3-VL (the released architecture at a small size) with random weights. "
            "Its answers are not meaningful."
        ),
        made_by=f"python scripts/make_demo_model.py --seed {args.seed}",
        extra={"seed": args.seed},
    )
    for path in written:
        print(f"{path.stat().st_size:>10,d}  {path}")
    print(f"{sum(p.numel() for p in model.parameters()):,d} parameters, vocabulary of {len(tokenizer)} tokens")


if __name__ == "__main__":
    main()
