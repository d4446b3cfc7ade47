"""The compiled fused vision forward on CUDA, through inductor as the product runs it: one compile
serves every row count, and the compiled code computes what the tower computes.

The CPU suite checks the same compile request traced by ``aot_eager``
(tests/core/families/qwen3_vl/test_fused.py); here inductor's own guards and Triton code count too.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # pragma: no cover - the conftest marks these skipped as well
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from tests.core.families.qwen3_vl.references import graphs_compiled_at_two_row_counts, tiny_tower  # noqa: E402
from tests.gpu.test_encoder_graphs import relative_error  # noqa: E402


def assert_near(got: torch.Tensor, expected: torch.Tensor) -> None:
    error = relative_error(got, expected)
    assert error <= 1e-4, f"relative error {error:.2e}"


def test_compiled_fused_forward_serves_two_row_counts_with_one_compile(monkeypatch) -> None:
    # float32 means float32 here: no TF32 in the tower's patch convolution or in the products
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    torch.manual_seed(0)
    frames = graphs_compiled_at_two_row_counts(tiny_tower().cuda(), assert_near)
    assert 0 < frames <= 4, f"{frames} graphs compiled: the row count should be dynamic (stem, block, two mergers)"
