"""The failed-model flow end to end on the real engine (demo model, CPU): a model that cannot load
leaves the old one answering, shows the error next to the field, saves nothing; a saved setting
that fails at the next start comes up on the demo model with a banner naming it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QDialogButtonBox

from framewise.core.settings import AppSettings
from framewise.ui.settings_store import SettingsStore
from tests.ui.test_end_to_end import FAST, real_engine
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, ask_and_wait, open_and_wait
from tests.ui import probes

REAL_LOAD_TIMEOUT_MS = LOAD_TIMEOUT_MS * 6  # the real engine on a busy CPU


def wait_ready(qtbot, window) -> None:
    qtbot.waitUntil(lambda: window.session.info is not None and window.session.operation is None, timeout=REAL_LOAD_TIMEOUT_MS)


def test_a_model_that_fails_to_load_changes_nothing_and_a_restart_comes_up_on_the_demo_model(
    qtbot, make_window, store: SettingsStore, sample_clip: Path, tmp_path: Path
) -> None:
    store.save_settings(FAST)
    window = make_window(real_engine)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What color is the square?")
    saved_file = Path(store.location).read_bytes()
    model_before = window.session.info.model_name

    missing = tmp_path / "no-such-checkpoint"
    dialog = window.settings_flow.open("model")
    dialog.model_choice.folder_radio.setChecked(True)
    dialog.model_choice.folder_edit.setText(str(missing))
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: dialog.isVisible() and bool(probes.error_text(dialog, "model.source")), timeout=REAL_LOAD_TIMEOUT_MS)

    assert "does not exist" in probes.error_text(dialog, "model.source")
    assert dialog.model_choice.folder_edit.text() == str(missing), "the person's choice stays in the field to be corrected"
    assert window.session.settings == FAST and window.session.info.model_name == model_before
    assert Path(store.location).read_bytes() == saved_file, "nothing is saved until the engine accepted it"
    dialog.reject()

    ask_and_wait(qtbot, window, "How many shapes are there?")  # the old model, clip and conversation still work
    turn = window.session.conversation.turns[-1]
    assert turn.status == "done" and turn.answer and len(window.session.conversation.turns) == 2
    window.close()

    restarted = make_window(real_engine, window_store=SettingsStore(store.location))
    wait_ready(qtbot, restarted)
    assert restarted.session.info.model_label and restarted.session.info.model_label.startswith("Demo model")
    assert not restarted.banners.fallback_banner.isVisible()


def test_a_saved_model_that_fails_at_start_runs_the_demo_model_and_says_which_setting(
    qtbot, make_window, store: SettingsStore, sample_clip: Path, tmp_path: Path
) -> None:
    saved = FAST.replace("model", source=str(tmp_path / "moved-away"))
    store.save_settings(saved)
    window = make_window(real_engine)
    wait_ready(qtbot, window)

    assert window.banners.fallback_banner.isVisible()
    text = window.banners.fallback_banner.text()
    assert f"The saved setting model.source ({tmp_path / 'moved-away'}) could not be used" in text
    assert "demo model" in text and "Traceback" not in text
    assert window.session.info.model_label.startswith("Demo model")
    assert store.load_settings() == saved
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What color is the square?")
    assert window.session.conversation.turns[-1].status == "done"
    assert window.session.settings == AppSettings()
