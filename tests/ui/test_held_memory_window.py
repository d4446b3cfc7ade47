"""The window shows what the loaded model holds: in the status bar's model tooltip and in
Settings ▸ Model under the estimate (the real engine, the demo model on the CPU)."""

from __future__ import annotations

from framewise.core.loading import load_model
from framewise.core.settings import AppSettings
from tests.ui.test_end_to_end import real_engine
from tests.ui.test_main_window import wait_ready

CPU = AppSettings().replace("model", device="cpu")


def test_the_status_bar_and_the_model_page_show_what_the_model_holds(qtbot, make_window) -> None:
    window = make_window(real_engine, CPU)
    wait_ready(qtbot, window)
    held = window.session.info.held_memory
    parameters = load_model(CPU.model).model.parameters()
    assert held is not None and held.weight_total == sum(p.numel() * p.element_size() for p in parameters)

    assert window.status_bar.engine_label.text() == f"{window.session.info.model_name} · cpu · float32 · eager (no CUDA graphs)"
    tooltip = window.status_bar.engine_label.toolTip().splitlines()
    assert tooltip[1:] == [f"Holds {held.amount_text()}:", *held.lines()]
    assert tooltip[2].startswith("weights ") and "language model " in tooltip[2] and "vision tower " in tooltip[2]

    dialog = window.settings_flow.open("model")
    assert dialog.held_memory.isVisible()
    assert dialog.held_memory.text() == f"Loaded now, {window.session.info.model_name} holds {held.describe()}."
    dialog.reject()


def test_the_status_bar_names_the_weights_dtype(qtbot, make_window) -> None:
    window = make_window(real_engine, CPU.replace("model", dtype="fp8"))
    wait_ready(qtbot, window)
    assert (window.session.info.weight_dtype, window.session.info.dtype) == ("fp8", "float32")
    assert window.status_bar.engine_label.text() == f"{window.session.info.model_name} · cpu · fp8 · eager (no CUDA graphs)"
    assert window.status_bar.engine_label.toolTip().splitlines()[0].endswith(" · cpu · fp8 · eager (no CUDA graphs)")


def test_without_a_loaded_model_the_model_page_says_nothing_held(qtbot, make_window) -> None:
    window = make_window()  # the fake engine reports no held memory
    wait_ready(qtbot, window)
    dialog = window.settings_flow.open("model")
    assert dialog.held_memory.isHidden() and dialog.held_memory.text() == ""
    dialog.reject()
