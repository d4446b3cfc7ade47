"""benchmarks/prefill_chunk_bench.py end to end on the CPU with the tiny shapes (the GPU runs the
8B at 64k tokens): Stops at random times answered from inside a pass, and the clip pruned."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import prefill_chunk_bench
from framewise.core.encoding.pruning import kept_token_count


def test_stops_land_inside_a_pass_and_the_pruned_clip_prefills_fewer_tokens(tmp_path: Path) -> None:
    # One pass (chunk 0; a KV cache is not cut at the clip's end): a Stop that waited for the pass
    # to end would leave the state holding the whole prompt; one answered inside it leaves it empty.
    arguments = ["--size", "tiny", "--device", "cpu", "--dtype", "float32", "--frames", "16", "--pixels", "2000000",
                 "--kv-cache", "fp8", "--chunks", "0", "--repeats", "1", "--stops", "2", "--seed", "4",
                 "--pruning", "0.75", "--out", str(tmp_path)]
    assert prefill_chunk_bench.main(arguments) == 0

    result = json.loads((tmp_path / "prefill_chunks.json").read_text())
    # tiny: 2 layers of 2 KV heads of 32, e4m3 entries and a float32 scale each, keys and values.
    assert result["kv_cache"] == "fp8"
    assert result["state_gib"] * 2**30 == result["context_tokens"] * 2 * 2 * 2 * (32 + 4)
    row = result["rows"][0]
    assert row["chunk"] == result["prompt_tokens"] and row["chunks"] == 1
    stops = row["stops"]
    assert [round(stop["share"], 2) for stop in stops] == [0.12, 0.25]  # the seed's times, ascending
    first, second = stops
    # An eighth into the pass, inside the clip's chunk: answered there, by a layer's cancel point.
    assert first["stopped"] and first["held_tokens"] == 0
    assert 0 <= first["to_return_ms"] <= first["to_idle_ms"]
    assert second["held_tokens"] >= first["held_tokens"]  # the second resumed from what the first left

    pruning = result["pruning"]
    grid = (8, 256 // 32, 448 // 32)  # 16 frames of 448x256 in merged tokens
    assert result["clip"] == "16 frames of 448x256"
    assert pruning["video_tokens_before"] == 8 * 8 * 14
    assert pruning["video_tokens_after"] == kept_token_count(grid, 0.75)
    dropped = pruning["video_tokens_before"] - pruning["video_tokens_after"]
    assert pruning["prompt_tokens"] == result["prompt_tokens"] - dropped
    assert pruning["ratio"] == pruning["prefill_ms"] / pruning["unpruned_ms"]
    table = (tmp_path / "prefill_chunks.md").read_text()
    assert f"12%, 0: {first['to_return_ms']:.1f} / {first['to_idle_ms']:.1f}" in table
    assert f"against {pruning['unpruned_ms']:.0f} ms unpruned: {pruning['ratio']:.2f}×" in table
