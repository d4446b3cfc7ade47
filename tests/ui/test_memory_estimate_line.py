"""Settings ▸ Model shows what the chosen model will take, and follows the dtype chosen."""

from __future__ import annotations

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
