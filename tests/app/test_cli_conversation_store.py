"""`framewise info` says, in one line on stderr and before the model loads, when the window could not
keep conversations; it says nothing when they will be kept, and creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewise.app import cli


class _Loaded(Exception):
    """Raised in place of loading the model: what was printed before it is what the test reads."""


@pytest.fixture
def info_until_load(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    def load(settings, sink):
        raise _Loaded

    monkeypatch.setattr(cli, "_load_engine", load)

    def run() -> str:
        with pytest.raises(_Loaded):
            cli._info(cli.AppSettings(), as_json=False)
        return capsys.readouterr().err

    return run


def test_info_says_in_one_line_that_a_data_folder_which_is_a_file_keeps_nothing(tmp_path: Path, monkeypatch, info_until_load):
    not_a_folder = tmp_path / "data"
    not_a_folder.write_text("notes", encoding="utf-8")
    monkeypatch.setenv("FRAMEWISE_DATA_DIR", str(not_a_folder))
    lines = info_until_load().splitlines()
    assert lines == [f"framewise: Conversations will not be kept: {not_a_folder} is a file, not a folder. "
                     "Set FRAMEWISE_DATA_DIR to a folder."]


def test_info_is_silent_about_a_store_that_works_and_creates_none(tmp_path: Path, monkeypatch, info_until_load):
    monkeypatch.setenv("FRAMEWISE_DATA_DIR", str(tmp_path / "data"))
    assert info_until_load() == ""
    assert not (tmp_path / "data").exists()


def test_info_says_in_one_line_that_a_damaged_store_keeps_nothing(tmp_path: Path, monkeypatch, info_until_load):
    (tmp_path / "conversations.sqlite3").write_bytes(b"\x00garbage" * 512)
    monkeypatch.setenv("FRAMEWISE_DATA_DIR", str(tmp_path))
    lines = info_until_load().splitlines()
    assert len(lines) == 1 and lines[0].startswith("framewise: Past conversations cannot be kept: ")
    assert "could not be opened" in lines[0] and str(tmp_path / "conversations.sqlite3") in lines[0]
