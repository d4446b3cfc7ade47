"""Programmatic dependent launch for the decode step's Triton kernels.

A decode step is a chain of short kernels, each waiting for the one before. On compute capability
9.0 and newer a kernel launched as a dependent may start while the kernel before it drains its
last programs: it is scheduled early and blocks in :func:`wait_for_previous` until the previous
kernel's writes are visible, instead of waiting for the launch after the previous kernel ends.
CUDA graphs keep the dependency, so captured steps gain it too.

Every kernel launched with :func:`launch_options` must call :func:`wait_for_previous` before it
reads or writes anything another kernel touches; since each such kernel waits for the one before
it, the chain stays ordered. ``FRAMEWISE_PDL=0`` in the environment turns dependent launches off
(the tests compare both). This module needs Triton.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl


def dependent_launches(device: torch.device) -> bool:
    """Whether kernels on ``device`` launch as dependents: a CUDA card of compute capability 9.0 or
    newer, and not turned off by ``FRAMEWISE_PDL=0`` (never elsewhere: Triton's interpreter runs
    kernels on the CPU one after another)."""
    return device.type == "cuda" and os.environ.get("FRAMEWISE_PDL") != "0" and _capability(device.index) >= (9, 0)


@functools.cache
def _capability(device_index: int | None) -> tuple[int, int]:
    """CUDA device ``device_index``'s compute capability (None: the current device), asked once
    per device rather than once per launch."""
    return torch.cuda.get_device_capability(device_index)


def launch_options(device: torch.device) -> dict[str, bool]:
    """The keyword arguments of a kernel launch that takes part: the kernel's ``PDL`` flag and
    Triton's ``launch_pdl``, both on or both off."""
    enabled = dependent_launches(device)
    return {"PDL": enabled, "launch_pdl": enabled}


@triton.jit
def wait_for_previous(PDL: tl.constexpr):
    """Block until the kernel before has finished and its writes are visible, then let the kernel
    after this one be scheduled (no-op without ``PDL``)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
