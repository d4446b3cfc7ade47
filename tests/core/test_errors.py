"""The one mapping from exceptions to what a person reads (used by the CLI and the window)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from framewise.core import errors
from framewise.core.errors import ClipNotFoundError, ModelLoadError, SettingsError, describe_error


def test_framewise_errors_keep_their_message_and_name_their_field() -> None:
    report = describe_error(SettingsError("sampling.max_frames", "use an even number"))
    assert (report.kind, report.message, report.field, report.exit_code) == (
        "SettingsError", "sampling.max_frames: use an even number", "sampling.max_frames", 2
    )
    assert describe_error(ModelLoadError("no config.json")).field == "model.source"
    assert describe_error(ClipNotFoundError("No file at x")).field is None


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8000000000000 bytes"),
        MemoryError(),
    ],
)
def test_every_kind_of_out_of_memory_says_what_to_lower(error: BaseException) -> None:
    report = describe_error(error)
    assert report.kind == "OutOfMemoryError" and report.exit_code == 2
    assert report.message.startswith("Out of memory. Lower Sampling ▸ max frames or max pixels")


def test_an_unexpected_error_points_at_the_log_which_holds_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(errors, "_log_file", tmp_path / "framewise.log")
    error = KeyError("deepstack_features")
    try:
        raise error
    except KeyError:
        with caplog.at_level(logging.ERROR, logger="framewise.core.errors"):
            report = describe_error(error)
    assert report.kind == "UnexpectedError" and report.exit_code == 1
    assert report.message == f"Unexpected error (KeyError) — see the log at {tmp_path / 'framewise.log'}"
    (record,) = caplog.records
    assert record.exc_info is not None and record.exc_info[1] is error
