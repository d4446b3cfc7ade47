"""Settings ▸ Model shows what the chosen model will take, and follows the dtype chosen."""

from __future__ import annotations

import pytest

from framewise.core.errors import SettingsError
from framewise.core.settings import AppSettings
from framewise.ui.settings_dialog import SettingsDialog


def test_the_model_page_shows_the_estimate_of_the_chosen_dtype(qtbot) -> None:
    asked: list[AppSettings] = []

    def estimate(settings: AppSettings) -> str:
        asked.append(settings)
        return f"Needs about {'9.1' if settings.model.dtype == 'fp8' else '17.5'} GiB on the GPU."

    dialog = SettingsDialog(AppSettings().replace("model", dtype="bfloat16"), memory_estimate=estimate)
    qtbot.addWidget(dialog)
    assert dialog.memory_estimate.text() == "Needs about 17.5 GiB on the GPU."
    dialog.field_widget("model.dtype").setCurrentText("fp8")
    assert asked[-1].model.dtype == "fp8"
    assert dialog.memory_estimate.text() == "Needs about 9.1 GiB on the GPU."


def test_without_an_estimator_the_line_stays_hidden(qtbot) -> None:
    dialog = SettingsDialog(AppSettings())
    qtbot.addWidget(dialog)
    assert dialog.memory_estimate.text() == "" and dialog.memory_estimate.isHidden()


def estimate_of_source(settings: AppSettings) -> str:
    return f"Needs what {settings.model.source} takes."


def test_the_estimate_follows_a_path_as_it_is_typed(qtbot) -> None:
    dialog = SettingsDialog(AppSettings(), memory_estimate=estimate_of_source)
    qtbot.addWidget(dialog)
    qtbot.keyClicks(dialog.folder_edit, "/models/qwen")
    assert dialog.folder_radio.isChecked()
    qtbot.waitUntil(lambda: dialog.memory_estimate.text() == "Needs what /models/qwen takes.", timeout=2000)


def test_a_folder_chosen_with_browse_is_estimated(qtbot, monkeypatch) -> None:
    from framewise.ui import settings_dialog

    dialog = SettingsDialog(AppSettings().replace("model", source="/models/first"), memory_estimate=estimate_of_source)
    qtbot.addWidget(dialog)
    monkeypatch.setattr(settings_dialog.QFileDialog, "getExistingDirectory", lambda *args: "/models/second")
    dialog._choose_folder()
    assert dialog.memory_estimate.text() == "Needs what /models/second takes."


CHANGES = {
    "typing a path": ("model.source", lambda qtbot, dialog: qtbot.keyClicks(dialog.folder_edit, "x")),
    "choosing the demo": ("model.source", lambda qtbot, dialog: dialog.demo_radio.click()),
    "choosing a dtype": ("model.dtype", lambda qtbot, dialog: dialog.field_widget("model.dtype").activated.emit(1)),
}


@pytest.mark.parametrize("change", CHANGES)
def test_an_error_under_a_field_goes_once_a_person_changes_it(qtbot, change: str) -> None:
    field, make_change = CHANGES[change]
    dialog = SettingsDialog(AppSettings().replace("model", source="/models/broken"), memory_estimate=estimate_of_source)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.show_error(SettingsError(field, "The checkpoint's weights do not match its quantization"))
    assert dialog.error_text(field)
    make_change(qtbot, dialog)
    assert dialog.error_text(field) == ""
