"""The input embedding held by the host: the rows it returns, and where loading and the estimate
keep it (on the CPU the host's table is the model's device; CUDA's pinned copies are the GPU
suite's)."""

from __future__ import annotations

import pytest
import torch

from framewise.core.decoding.host_embedding import HostEmbedding, embedding_stays_on_host, move_input_embedding_to_host
from framewise.core.loading import load_model
from framewise.core.settings import ModelSettings


@pytest.mark.parametrize("ids", [
    torch.tensor([[7]]),
    torch.tensor([[5, 9, 9, 9, 9, 2, 5, 0]]),  # repeats, as a video's pad tokens repeat
    torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]]).view(1, 1, 11),
    torch.zeros(1, 0, dtype=torch.long),
])
def test_the_rows_are_the_tables_in_the_ids_order(ids: torch.Tensor) -> None:
    table = torch.nn.Embedding(12, 16)
    held = HostEmbedding(table.weight, torch.device("cpu"))
    with torch.no_grad():
        assert torch.equal(held(ids), table(ids))


def test_only_an_untied_embedding_on_cuda_is_the_hosts() -> None:
    assert embedding_stays_on_host("cuda", tied_embeddings=False)
    assert not embedding_stays_on_host("cuda", tied_embeddings=True)
    assert not embedding_stays_on_host("cpu", tied_embeddings=False)


def test_a_model_on_the_cpu_keeps_its_embedding() -> None:
    model = load_model(ModelSettings(source="demo", device="cpu", dtype="float32")).model
    embedding = model.get_input_embeddings()
    assert not move_input_embedding_to_host(model, torch.device("cpu"))
    assert model.get_input_embeddings() is embedding and not isinstance(embedding, HostEmbedding)


def test_moving_or_casting_the_model_leaves_the_table_where_and_as_it_is() -> None:
    """The loader builds the host's table before the model goes to its device: the move must not
    take the table along (nor a cast change its dtype)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    table = torch.randn(10, 4, dtype=torch.bfloat16)
    model.append(HostEmbedding(table, torch.device("cpu")))
    model.to(torch.float64)
    assert model[0].weight.dtype == torch.float64
    assert model[1].weight.dtype == torch.bfloat16 and torch.equal(model[1].weight, table)
