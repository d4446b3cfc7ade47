"""GraphCapture on CUDA: the memory a capture leaves behind does not grow with its graph count,
and a captured graph replays its forward on new inputs."""

from __future__ import annotations

import pytest
import torch

from framewise.core.graph_capture import GraphCapture, memory_reserved

pytestmark = pytest.mark.gpu

DEVICE = torch.device("cuda")


@pytest.fixture()
def matmul() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Static (512, 1024) input, (1024, 1024) weight and (512, 1024) output, bf16."""
    generator = torch.Generator(device=DEVICE).manual_seed(0)
    options = {"device": DEVICE, "dtype": torch.bfloat16}
    inputs = torch.randn(512, 1024, generator=generator, **options)
    weight = torch.randn(1024, 1024, generator=generator, **options)
    return inputs, weight, torch.empty(512, 1024, **options)


def test_capture_memory_does_not_grow_with_the_number_of_graphs(matmul) -> None:
    inputs, weight, output = matmul

    def forward() -> None:
        torch.matmul(inputs, weight, out=output)  # cuBLAS: takes a workspace on its stream

    def memory_left_by(graphs: int) -> int:
        torch._C._cuda_clearCublasWorkspaces()
        before = memory_reserved(DEVICE)
        capture = GraphCapture(DEVICE)
        captured = [capture.capture(forward) for _ in range(graphs)]
        left = memory_reserved(DEVICE) - before
        del captured
        return left

    one = memory_left_by(1)
    assert memory_left_by(12) == one, "every graph's warm-up should share one stream and its one workspace"


def test_a_captured_graph_replays_on_new_inputs(matmul) -> None:
    inputs, weight, output = matmul
    graph = GraphCapture(DEVICE).capture(lambda: torch.matmul(inputs, weight, out=output))
    inputs.copy_(torch.randn_like(inputs))
    graph.replay()
    torch.testing.assert_close(output, inputs @ weight)
