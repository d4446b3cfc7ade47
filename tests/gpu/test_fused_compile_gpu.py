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

from framewise.core.families.qwen3_vl.fused import FusedVisionForward  # noqa: E402
from tests.core.families.qwen3_vl.references import run_both, tiny_tower  # noqa: E402


def test_compiled_fused_forward_serves_two_row_counts_with_one_compile(monkeypatch) -> None:
    # float32 means float32 here: no TF32 in the tower's patch convolution or in the products
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    torch.manual_seed(0)
    tower = tiny_tower().cuda()
    torch._dynamo.reset()  # forgets compiled code, not the counters: count from here
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    fused = FusedVisionForward(tower, "sdpa_masked", compiled=True)
    for rows, grids in ((64, [(2, 4, 4)]), (96, [(1, 4, 6), (2, 4, 4)])):
        reference, embeds, _ = run_both(tower, fused, grids, padded_rows=rows)
        error = torch.linalg.vector_norm((embeds - reference.pooler_output).double()) / torch.linalg.vector_norm(
            reference.pooler_output.double()
        )
        assert error.item() <= 1e-4, f"{rows} rows: relative error {error.item():.2e}"
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before
    assert 0 < frames <= 4, f"{frames} graphs compiled: the row count should be dynamic (stem, block, two mergers)"
