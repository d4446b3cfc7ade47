"""Settings ▸ Model shows what the chosen model will take, and follows the dtype chosen. The estimate
(and the chosen family's limits before a model is loaded) is asked off the GUI thread: "Estimating…"
shows until the answer for the fields as they are now comes back, and an older answer is dropped."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

from framewise.core.errors import SettingsError
from framewise.core.settings import AppSettings
from framewise.ui.main_window import MainWindow
from framewise.ui.services import AppServices
from framewise.ui.settings_dialog import SettingsDialog
from framewise.ui.settings_model import ESTIMATING_TEXT
from framewise.ui.worker import EngineHost
from tests.core.families.test_toy_family import TOY_LIMITS
from tests.ui import probes
from tests.ui.fake_engine import FakeEngine
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, wait_ready


def test_the_model_page_shows_the_estimate_of_the_chosen_dtype(qtbot) -> None:
    asked: list[AppSettings] = []

    def estimate(settings: AppSettings) -> str:
        asked.append(settings)
        return f"Needs about {'9.1' if settings.model.dtype == 'fp8' else '17.5'} GiB on the GPU."

    dialog = SettingsDialog(AppSettings().replace("model", dtype="bfloat16"), probes.run_now, memory_estimate=estimate)
    qtbot.addWidget(dialog)
    assert dialog.memory_estimate.text() == "Needs about 17.5 GiB on the GPU."
    probes.field(dialog, "model.dtype").setCurrentText("fp8")
    assert asked[-1].model.dtype == "fp8"
    assert dialog.memory_estimate.text() == "Needs about 9.1 GiB on the GPU."


def test_the_model_page_estimates_the_kv_cache_chosen_and_applies_it(qtbot) -> None:
    asked: list[AppSettings] = []

    def estimate(settings: AppSettings) -> str:
        asked.append(settings)
        return f"Needs what a {settings.decoding.kv_cache_dtype} cache takes."

    dialog = SettingsDialog(AppSettings(), probes.run_now, memory_estimate=estimate)
    qtbot.addWidget(dialog)
    applied: list[AppSettings] = []
    dialog.settings_applied.connect(applied.append)
    probes.field(dialog, "decoding.kv_cache_dtype").setCurrentText("fp8")
    assert dialog.memory_estimate.text() == "Needs what a fp8 cache takes." and asked[-1].decoding.kv_cache_dtype == "fp8"
    assert dialog.apply() and applied[-1].decoding.kv_cache_dtype == "fp8"


def test_without_an_estimator_the_line_stays_hidden(qtbot) -> None:
    dialog = SettingsDialog(AppSettings(), probes.run_now)
    qtbot.addWidget(dialog)
    assert dialog.memory_estimate.text() == "" and dialog.memory_estimate.isHidden()


def estimate_of_source(settings: AppSettings) -> str:
    return f"Needs what {settings.model.source} takes."


def estimate_of_dtype(settings: AppSettings) -> str:
    return f"Needs what {settings.model.dtype} takes."


def test_the_estimate_follows_a_path_as_it_is_typed(qtbot) -> None:
    dialog = SettingsDialog(AppSettings(), probes.run_now, memory_estimate=estimate_of_source)
    qtbot.addWidget(dialog)
    qtbot.keyClicks(dialog.model_choice.folder_edit, "/models/qwen")
    assert dialog.model_choice.folder_radio.isChecked()
    qtbot.waitUntil(lambda: dialog.memory_estimate.text() == "Needs what /models/qwen takes.", timeout=2000)


def test_a_folder_chosen_with_browse_is_estimated(qtbot, monkeypatch) -> None:
    dialog = SettingsDialog(
        AppSettings().replace("model", source="/models/first"), probes.run_now, memory_estimate=estimate_of_source
    )
    qtbot.addWidget(dialog)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *args: "/models/second")
    dialog.model_choice.browse_button.click()
    assert dialog.memory_estimate.text() == "Needs what /models/second takes."


def test_the_line_says_estimating_until_the_estimate_of_the_fields_as_they_are_now_comes_back(qtbot) -> None:
    queries = probes.HeldQueries()
    asked: list[AppSettings] = []

    def estimate(settings: AppSettings) -> str:
        asked.append(settings)
        return estimate_of_dtype(settings)

    dialog = SettingsDialog(AppSettings().replace("model", dtype="bfloat16"), queries, memory_estimate=estimate)
    qtbot.addWidget(dialog)
    assert dialog.memory_estimate.text() == ESTIMATING_TEXT and not dialog.memory_estimate.isHidden()
    queries.answer_all()
    assert dialog.memory_estimate.text() == "Needs what bfloat16 takes."
    assert len(asked) == 1, "the settings the dialog opened with are estimated once"

    dtype = probes.field(dialog, "model.dtype")
    dtype.setCurrentText("fp8")
    dtype.setCurrentText("float32")
    assert dialog.memory_estimate.text() == ESTIMATING_TEXT
    queries.answer_all()  # fp8's answer comes back first: the fields have changed since, so it is dropped
    assert dialog.memory_estimate.text() == "Needs what float32 takes."

    dtype.setCurrentText("fp8")
    dtype.setCurrentText("bfloat16")
    queries.answer(-1)  # the latest answers first; the older one, coming back after it, is dropped
    queries.answer_all()
    assert dialog.memory_estimate.text() == "Needs what bfloat16 takes."


def test_before_a_model_is_loaded_the_chosen_familys_limits_arrive_from_a_query(qtbot) -> None:
    queries = probes.HeldQueries()
    dialog = SettingsDialog(AppSettings(), queries)  # the demo model: a Qwen3-VL checkpoint
    qtbot.addWidget(dialog)
    assert "checked once a model is loaded" in probes.hint_text(dialog, "sampling.max_frames")
    assert probes.field(dialog, "sampling.max_frames").singleStep() == 1
    queries.answer_all()
    assert "Qwen3-VL takes at most" in probes.hint_text(dialog, "sampling.max_frames")
    assert probes.field(dialog, "sampling.max_frames").singleStep() == 2

    dialog.set_limits(None)
    dialog.set_limits(TOY_LIMITS)  # a model loaded meanwhile: its limits win over the chosen family's
    queries.answer_all()
    assert "Toy-VL takes at most" in probes.hint_text(dialog, "sampling.max_frames")


def test_the_window_estimates_off_the_gui_thread(qtbot, store, services: AppServices, tmp_path: Path) -> None:
    threads: list[threading.Thread] = []

    def estimate(settings: AppSettings) -> str:
        threads.append(threading.current_thread())
        return f"Needs what {settings.model.dtype} takes."

    estimating = AppServices(services.collect_versions, services.log_file_path, memory_estimate=estimate)
    window = MainWindow(EngineHost(FakeEngine, AppSettings()), store, estimating, AppSettings())
    qtbot.addWidget(window)
    try:
        window.show()
        window.start()
        wait_ready(qtbot, window)
        dialog = window.settings_flow.open("model")
        expected = f"Needs what {window.session.settings.model.dtype} takes."
        qtbot.waitUntil(lambda: dialog.memory_estimate.text() == expected, timeout=LOAD_TIMEOUT_MS)
        assert threads and all(thread is not threading.main_thread() for thread in threads)
        dialog.reject()
    finally:
        window.shutdown()


CHANGES = {
    "typing a path": ("model.source", lambda qtbot, dialog: qtbot.keyClicks(dialog.model_choice.folder_edit, "x")),
    "choosing the demo": ("model.source", lambda qtbot, dialog: dialog.model_choice.demo_radio.click()),
    "choosing a dtype": ("model.dtype", lambda qtbot, dialog: probes.field(dialog, "model.dtype").activated.emit(1)),
}


@pytest.mark.parametrize("change", CHANGES)
def test_an_error_under_a_field_goes_once_a_person_changes_it(qtbot, change: str) -> None:
    field, make_change = CHANGES[change]
    dialog = SettingsDialog(
        AppSettings().replace("model", source="/models/broken"), probes.run_now, memory_estimate=estimate_of_source
    )
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.show_error(SettingsError(field, "The checkpoint's weights do not match its quantization"))
    assert probes.error_text(dialog, field)
    make_change(qtbot, dialog)
    assert probes.error_text(dialog, field) == ""
