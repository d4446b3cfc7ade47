"""benchmarks/peak_owners.py: what held the memory at a trace's peak, on hand-made traces."""

from __future__ import annotations

from benchmarks.peak_owners import RESERVED, owner, peak_owners


def event(action: str, address: int, size: int, where: str = "/repo/core/decoding/decoder.py") -> dict:
    frames = [{"filename": "/usr/lib/torch/nn/functional.py", "line": 9, "name": "linear"},
              {"filename": where, "line": 42, "name": "prefill"}]
    return {"action": action, "addr": address, "size": size, "frames": frames}


def test_the_owners_are_those_live_at_the_highest_moment_not_at_the_end() -> None:
    trace = [
        event("alloc", 1, 100, "/repo/core/encoding/manager.py"),
        event("alloc", 2, 300),
        event("alloc", 3, 50, "/repo/core/encoding/manager.py"),
        event("free_requested", 2, 300),  # not given back until completed
        event("alloc", 4, 10),
        event("free_completed", 2, 300),
        event("alloc", 5, 200),  # 360 live: under the 460 before
    ]
    found = peak_owners(trace, top=5)
    assert found["peak_bytes"] == 460
    assert found["owners"] == [
        {"where": "core/decoding/decoder.py:42 prefill", "bytes": 310, "blocks": 2},
        {"where": "core/encoding/manager.py:42 prefill", "bytes": 150, "blocks": 2},
    ]
    assert len(peak_owners(trace, top=1)["owners"]) == 1


def test_segments_count_what_was_reserved_and_frees_before_the_stretch_lower_the_total() -> None:
    trace = [
        event("segment_free", 9, 1000),  # reserved before the stretch began
        event("segment_alloc", 1, 400),
        event("alloc", 1, 400),
        event("segment_map", 2, 200, "/repo/benchmarks/memory_bench.py"),  # an expandable segment grown
    ]
    found = peak_owners(trace, top=3, actions=RESERVED)
    assert found["peak_bytes"] == 0  # the freed segment outweighs what was reserved after it
    assert found["owners"] == []
    found = peak_owners(trace[1:], top=3, actions=RESERVED)
    assert found["peak_bytes"] == 600
    assert [item["bytes"] for item in found["owners"]] == [400, 200]


def test_a_stack_without_the_projects_code_has_no_named_owner() -> None:
    assert owner([{"filename": "/usr/lib/python3/threading.py", "line": 1, "name": "run"}]) == "elsewhere"
    assert owner([]) == "elsewhere"
