"""The input embedding kept in the host's memory on a CUDA device.

A token's embedding is one row of a table of vocabulary x hidden values (1.2 GiB in bf16 for
Qwen3-VL-8B, 1.9 GiB for Qwen3.5-9B), and a pass reads only the rows of its tokens: a decode step
one row, a prefill chunk a thousand. Where the table is not also the output head (whose product
reads all of it every step), it stays in pinned host memory: the rows are gathered on the host and
copied to the device, which the decoder's passes take as their input. A decode step already waits
for its token on the host, so the copy adds one small transfer to it.
"""

from __future__ import annotations

import torch
from torch import nn


class HostEmbedding(nn.Module):
    """An input embedding whose table (vocab, hidden) is held in host memory (pinned, for a CUDA
    ``device``); called on token ids (any shape, int64, on the host or the device) it returns their
    rows (ids' shape, hidden) on ``device``. Ids on the device are read back first, which waits for
    the device. Moving or casting the model around it leaves the table where and as it is."""

    def __init__(self, weight: torch.Tensor, device: torch.device) -> None:
        super().__init__()
        self.pinned = device.type == "cuda"
        table = weight.detach().to("cpu")
        self.weight = nn.Parameter(table.pin_memory() if self.pinned else table, requires_grad=False)
        self.num_embeddings, self.embedding_dim = self.weight.shape
        self.padding_idx = None
        self.device = device

    def _apply(self, fn, recurse: bool = True):  # noqa: ANN001, ANN202 (nn.Module's signature)
        """Keep the table where it is when the model around it is moved or cast (``.to``, ``.cuda``,
        ``.half``): it is held by the host in the dtype it was made with."""
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).cpu()
        if flat.numel() == 1:  # a decode step's token
            return self._to_device(self._rows(flat)).view(*ids.shape, self.embedding_dim)
        # A prompt repeats its ids (a video's tokens are one pad id): gather and send each row once.
        distinct, where = torch.unique(flat, return_inverse=True)
        table = self._to_device(self._rows(distinct))
        return table[self._to_device(where)].view(*ids.shape, self.embedding_dim)

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The table's rows (n, hidden) of host ``ids`` (n,), in (pinned) host memory."""
        rows = torch.empty(ids.numel(), self.embedding_dim, dtype=self.weight.dtype, pin_memory=self.pinned)
        return torch.index_select(self.weight, 0, ids, out=rows)

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on the device, copied without waiting for the device's queue (a copy from
        pageable memory would); its pinned buffer is reused only after the copy is done."""
        if self.pinned and not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)


def embedding_stays_on_host(device_type: str, tied_embeddings: bool) -> bool:
    """Whether a model on a ``device_type`` device keeps its input embedding on the host: on CUDA,
    where the embedding is not also the output head."""
    return device_type == "cuda" and not tied_embeddings


def move_input_embedding_to_host(model: nn.Module, device: torch.device) -> bool:
    """Replace ``model``'s input embedding (a transformers model's) by a :class:`HostEmbedding` and
    release its device memory, where :func:`embedding_stays_on_host` says so; whether it did."""
    if device.type != "cuda":
        return False
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == embedding.weight.data_ptr()
    if not embedding_stays_on_host(device.type, tied):
        return False
    model.set_input_embeddings(HostEmbedding(embedding.weight, device))
    del embedding
    torch.cuda.empty_cache()
    return True


def look_up(embedding: nn.Module, ids: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The rows of token ``ids`` (1, n) int64, on the host or ``device``: (1, n, hidden) on
    ``device``. Host ids go to a :class:`HostEmbedding` as they are (no wait for the device)."""
    if isinstance(embedding, HostEmbedding):
        return embedding(ids)
    return embedding(ids.to(device))
