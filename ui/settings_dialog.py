"""The settings dialog: every field of ``core.settings.AppSettings``, validated by core.

Apply and OK build an ``AppSettings`` from the fields and validate it against the loaded model
family's limits (:meth:`SettingsDialog.set_limits`); a
``SettingsError`` is shown next to the field it names (``SettingsError.field``) and nothing is
applied. Valid settings are announced with ``settings_applied``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from framewise.core.backends import family_limits_for
from framewise.core.errors import SettingsError
from framewise.core.seam import FamilyLimits
from framewise.core.settings import (
    ATTENTION_BACKENDS,
    DEMO_MODEL,
    DEVICES,
    DTYPES,
    FAST_MODE_AUTO_ABOVE_S,
    FAST_MODES,
    AppSettings,
    BackendSettings,
)

GRAPH_ONLY_FIELDS = (
    "encoder.use_graphs", "encoder.fuse_kernels", "encoder.budgets", "encoder.min_budget", "encoder.max_budget",
    "encoder.budget_ratio",
)
SECTIONS = ("model", "sampling", "encoder", "generation", "backend")
SECTION_TITLES = {
    "model": "Model", "sampling": "Sampling", "encoder": "Encoder", "generation": "Generation", "backend": "Backend",
}
SESSION_ONLY_KEY_NOTE = (
    "No secret store (keyring) is available here, so the key is kept for this session only: "
    "it is never written to the settings file or the log, and you type it again after a restart."
)
_INT_MAX = 2**31 - 1
# How long typing in the model's folder or repo id field pauses before the memory estimate follows it.
ESTIMATE_AFTER_TYPING_MS = 400


class FieldError(QWidget):
    """A warning icon and message shown under a field; hidden while the field is fine."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        size = self.fontMetrics().height()
        self.icon = QLabel()
        self.icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning).pixmap(size, size))
        self.label = QLabel()
        self.label.setWordWrap(True)
        font = self.label.font()
        font.setBold(True)
        self.label.setFont(font)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.label, 1)
        self.hide()

    def show_message(self, message: str) -> None:
        self.label.setText(message)
        self.show()

    def clear(self) -> None:
        self.label.clear()
        self.hide()


class SettingsDialog(QDialog):
    """Edit Framewise's settings; ``settings_applied(AppSettings)`` fires for valid ones only."""

    settings_applied = Signal(object)

    def __init__(
        self,
        settings: AppSettings,
        parent: QWidget | None = None,
        *,
        api_key_note: str = SESSION_ONLY_KEY_NOTE,
        memory_estimate: Callable[[AppSettings], str] | None = None,
    ) -> None:
        """``api_key_note`` says where the API key is kept (the secret store, or this session only);
        ``memory_estimate(settings)`` words what the chosen model will take, shown under its dtype."""
        super().__init__(parent)
        self._api_key_note = api_key_note
        self._memory_estimate = memory_estimate
        self.setWindowTitle("Settings")
        self._fields: dict[str, QWidget] = {}
        self._errors: dict[str, FieldError] = {}
        self._field_tabs: dict[str, int] = {}
        self._hints: dict[str, QLabel] = {}
        self._loaded_limits: FamilyLimits | None = None
        self.limits: FamilyLimits | None = None
        self.tabs = QTabWidget()
        self._build_model_tab()
        self._build_sampling_tab()
        self._build_encoder_tab()
        self._build_generation_tab()
        self._build_backend_tab()
        self.general_error = FieldError()

        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Apply
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        buttons.accepted.connect(self._accept_if_valid)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.StandardButton.Apply).clicked.connect(self.apply)
        buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).clicked.connect(
            lambda: self.set_settings(AppSettings())
        )
        buttons.button(QDialogButtonBox.StandardButton.Apply).setToolTip(
            "Apply now: the engine re-captures its graphs or reloads the model if needed"
        )
        self.buttons = buttons
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.general_error)
        layout.addWidget(buttons)
        self.set_settings(settings)
        self.set_limits(None)
        line = self.fontMetrics().height()
        self.resize(line * 40, line * 38)

    # -- building ---------------------------------------------------------------------------

    def _add_tab(self, section: str) -> QFormLayout:
        page = QWidget()
        form = QFormLayout(page)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(page)
        self.tabs.addTab(scroll, SECTION_TITLES[section])
        return form

    def _add_field(self, form: QFormLayout, name: str, label: str, widget: QWidget, help_text: str = "") -> None:
        """Add a row holding ``widget`` above its (hidden) error; ``name`` is the settings field."""
        error = FieldError()
        cell = QWidget()
        cell.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        column = QVBoxLayout(cell)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        if isinstance(widget, (QLineEdit, QCheckBox)) or type(widget) is QWidget:
            column.addWidget(widget)
        else:
            column.addWidget(widget, 0, Qt.AlignmentFlag.AlignLeft)
        if help_text:
            hint = QLabel(help_text)
            hint.setWordWrap(True)
            hint.setForegroundRole(QPalette.ColorRole.PlaceholderText)
            column.addWidget(hint)
            self._hints[name] = hint
        column.addWidget(error)
        for edited in _edited_signals(widget):
            edited.connect(error.clear)
        form.addRow(label, cell)
        self._fields[name] = widget
        self._errors[name] = error
        self._field_tabs[name] = self.tabs.count() - 1

    def _build_model_tab(self) -> None:
        form = self._add_tab("model")
        # Radio texts cannot wrap: they stay short and the explanation wraps under them.
        self.demo_radio = QRadioButton("The bundled demo model")
        self.folder_radio = QRadioButton("Checkpoint folder:")
        self.repo_radio = QRadioButton("Hugging Face repo id:")
        self.source_group = QButtonGroup(self)
        for button in (self.demo_radio, self.folder_radio, self.repo_radio):
            self.source_group.addButton(button)
        self.folder_edit = QLineEdit()
        self.folder_edit.setPlaceholderText("a folder with config.json and *.safetensors of a Qwen3-VL model")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._choose_folder)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("e.g. Qwen/Qwen3-VL-2B-Instruct")
        source = QWidget()
        column = QVBoxLayout(source)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.demo_radio)
        column.addWidget(self._choice_hint(self.demo_radio, "Tiny: runs anywhere, for trying Framewise out."))
        column.addWidget(self.folder_radio)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder_edit, 1)
        folder_row.addWidget(browse)
        column.addLayout(folder_row)
        column.addWidget(self.repo_radio)
        column.addWidget(self._choice_hint(self.repo_radio, "A model already in the local Hugging Face cache."))
        column.addWidget(self.repo_edit)
        self.folder_edit.textEdited.connect(lambda: self.folder_radio.setChecked(True))
        self.repo_edit.textEdited.connect(lambda: self.repo_radio.setChecked(True))
        self._add_field(form, "model.source", "Model", source)
        for button in (self.demo_radio, self.folder_radio, self.repo_radio):
            button.clicked.connect(self._errors["model.source"].clear)
        for edit in (self.folder_edit, self.repo_edit):
            edit.textEdited.connect(self._errors["model.source"].clear)
        self._add_field(form, "model.device", "Device", _combo(DEVICES))
        self._add_field(
            form, "model.dtype", "Data type", _combo(DTYPES),
            "fp8 keeps the language model's linear layers in 8 bits: about half their memory, and faster answers on a GPU. "
            "An FP8 checkpoint keeps them in 8 bits whatever is chosen here.",
        )
        self.memory_estimate = QLabel()
        self.memory_estimate.setWordWrap(True)
        form.addRow(self.memory_estimate)
        self.held_memory = QLabel()
        self.held_memory.setWordWrap(True)
        self.held_memory.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.held_memory.hide()
        form.addRow(self.held_memory)
        for field in ("model.dtype", "model.device"):
            self._fields[field].currentIndexChanged.connect(self.update_memory_estimate)
        for button in (self.demo_radio, self.folder_radio, self.repo_radio):
            button.toggled.connect(self.update_memory_estimate)
        # While a path or repo id is typed, the estimate follows once the typing pauses.
        self._estimate_after_typing = QTimer(self)
        self._estimate_after_typing.setSingleShot(True)
        self._estimate_after_typing.setInterval(ESTIMATE_AFTER_TYPING_MS)
        self._estimate_after_typing.timeout.connect(self.update_memory_estimate)
        for edit in (self.folder_edit, self.repo_edit):
            edit.textEdited.connect(self._estimate_after_typing.start)
            edit.editingFinished.connect(self.update_memory_estimate)

    def update_memory_estimate(self) -> None:
        """Show what the model in the fields will take (hidden without an estimator or a valid model)."""
        text = ""
        if self._memory_estimate is not None and self.model_source():
            try:
                text = self._memory_estimate(AppSettings.from_dict(self.values()))
            except SettingsError:
                text = ""
        self.memory_estimate.setText(text)
        self.memory_estimate.setVisible(bool(text))

    def set_held_memory(self, text: str) -> None:
        """Show what the loaded model holds (``text``, already worded), under the estimate; hidden when empty."""
        self.held_memory.setText(text)
        self.held_memory.setVisible(bool(text))

    def _choice_hint(self, button: QRadioButton, text: str) -> QLabel:
        """A dim, wrapping explanation of ``button``, indented to line up with its text."""
        hint = QLabel(text)
        hint.setWordWrap(True)
        hint.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        style = button.style()
        indent = style.pixelMetric(QStyle.PixelMetric.PM_ExclusiveIndicatorWidth, None, button) + style.pixelMetric(
            QStyle.PixelMetric.PM_RadioButtonLabelSpacing, None, button
        )
        hint.setContentsMargins(indent, 0, 0, 0)
        return hint

    def _build_sampling_tab(self) -> None:
        form = self._add_tab("sampling")
        self._add_field(form, "sampling.fps", "Frames per second", _double_spin(0.0, 1000.0, 2, 0.5))
        self._add_field(form, "sampling.min_frames", "Min frames", _spin(0, 100_000, 2))
        self._add_field(form, "sampling.max_frames", "Max frames", _spin(0, 100_000, 2), _frames_hint(self.limits))
        self._add_field(
            form,
            "sampling.max_pixels",
            "Max pixels",
            _spin(0, _INT_MAX, 65536),
            "For the whole sampled clip (frames × height × width): longer clips get smaller frames.",
        )
        self._add_field(
            form,
            "sampling.fast_mode",
            "Fast mode",
            _combo(FAST_MODES),
            "Takes, for each time, the frame within half the sampling interval that needs the least "
            "decoding (a keyframe where one is that near), with its true timestamp; "
            f"auto: for clips longer than {FAST_MODE_AUTO_ABOVE_S / 60:g} minutes.",
        )

    def _build_encoder_tab(self) -> None:
        form = self._add_tab("encoder")
        self._graphs_available = True
        self.graphs_note = QLabel()
        self.graphs_note.setWordWrap(True)
        self.graphs_note.hide()
        form.addRow(self.graphs_note)
        self._add_field(
            form,
            "encoder.use_graphs",
            "CUDA graphs",
            QCheckBox("Capture the vision encoder as CUDA graphs (GPU only)"),
        )
        self._add_field(
            form,
            "encoder.fuse_kernels",
            "Fused kernels",
            QCheckBox("Fuse the encoder's elementwise work inside the graphs"),
            "Compiled on the first start (about 20 s on an H200), then loaded from the cache.",
        )
        self._add_field(
            form,
            "encoder.attention_backend",
            "Attention backend",
            _combo(ATTENTION_BACKENDS),
            "auto: Framewise's Triton kernel on a GPU, else torch's varlen, else masked SDPA; "
            "one that fails to capture gives way to the next.",
        )
        self.budget_mode = QComboBox()
        self.budget_mode.addItems(["Geometric series (min, max, ratio)", "Explicit list"])
        self.budget_mode.currentIndexChanged.connect(self._update_budget_mode)
        form.addRow("Token budgets", self.budget_mode)
        self._add_field(form, "encoder.budgets", "Budget list", QLineEdit(), _budgets_hint(self.limits))
        self._add_field(form, "encoder.min_budget", "Min budget", _spin(0, _INT_MAX, 4))
        self._add_field(form, "encoder.max_budget", "Max budget", _spin(0, _INT_MAX, 4))
        self._add_field(form, "encoder.budget_ratio", "Budget ratio", _double_spin(0.0, 100.0, 3, 0.05))
        self.budget_preview = QLabel()
        self.budget_preview.setWordWrap(True)
        self.budget_preview.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        form.addRow("", self.budget_preview)
        self._add_field(form, "encoder.max_items_per_batch", "Max items per batch", _spin(0, _INT_MAX, 1))
        self._add_field(
            form,
            "encoder.max_frame_pairs_per_batch",
            "Max frame pairs",
            _spin(0, _INT_MAX, 1),
            "Frame pairs per graph replay, an image counting as one: each is one attention sequence.",
        )
        for name in ("encoder.min_budget", "encoder.max_budget", "encoder.budget_ratio"):
            self._fields[name].valueChanged.connect(self._update_budget_preview)
        self._fields["encoder.budgets"].textChanged.connect(self._update_budget_preview)

    def _build_generation_tab(self) -> None:
        form = self._add_tab("generation")
        self._add_field(form, "generation.max_new_tokens", "Max new tokens", _spin(0, 1_000_000, 16))
        self._add_field(
            form, "generation.temperature", "Temperature", _double_spin(0.0, 100.0, 2, 0.1), "0 picks the likeliest token (greedy)."
        )

    def _build_backend_tab(self) -> None:
        form = self._add_tab("backend")
        self.local_radio = QRadioButton("This machine")
        self.server_radio = QRadioButton("vLLM server")
        self.backend_group = QButtonGroup(self)
        for button in (self.local_radio, self.server_radio):
            self.backend_group.addButton(button)
        where = QWidget()
        where.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)  # the hints wrap at full width
        column = QVBoxLayout(where)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.local_radio)
        column.addWidget(self._choice_hint(self.local_radio, "The model runs inside Framewise."))
        column.addWidget(self.server_radio)
        column.addWidget(self._choice_hint(self.server_radio, "For models or GPU counts this machine cannot hold."))
        form.addRow("Answer on", where)
        url = QLineEdit()
        url.setPlaceholderText("e.g. http://127.0.0.1:8000 or https://gpu-box.example.org")
        self._add_field(
            form, "backend.server_url", "Server address", url,
            "The server's root; Framewise checks /health and /v1/models when you apply.",
        )
        self.http_warning = QLabel()
        self.http_warning.setWordWrap(True)
        self.http_warning.hide()
        form.addRow("", self.http_warning)
        model = QLineEdit()
        model.setPlaceholderText("empty: the one model the server serves")
        self._add_field(form, "backend.server_model", "Server model", model, "vLLM's --served-model-name.")
        key = QLineEdit()
        key.setEchoMode(QLineEdit.EchoMode.Password)
        key.setPlaceholderText("empty: the server needs none")
        self._add_field(form, "backend.api_key", "API key", key, self._api_key_note)
        self._add_field(form, "backend.timeout_s", "Connect timeout (s)", _double_spin(0.0, 10_000.0, 1, 1.0))
        self._add_field(
            form, "backend.answer_timeout_s", "Answer timeout (s)", _double_spin(0.0, 100_000.0, 0, 10.0),
            "The longest a whole answer may take, from sending the question to its last word (the server's "
            "encoding included); the server then drops it.",
        )
        url.textChanged.connect(self._update_http_warning)
        for button in (self.local_radio, self.server_radio):
            button.toggled.connect(self._update_backend_fields)

    # -- values -----------------------------------------------------------------------------

    def set_settings(self, settings: AppSettings) -> None:
        """Fill every field from ``settings`` and clear the errors."""
        self.clear_errors()
        self._base_values = settings.to_dict()
        source = settings.model.source
        if source == DEMO_MODEL:
            self.demo_radio.setChecked(True)
        elif _looks_like_folder(source):
            self.folder_radio.setChecked(True)
            self.folder_edit.setText(source)
        else:
            self.repo_radio.setChecked(True)
            self.repo_edit.setText(source)
        for section, values in settings.to_dict().items():
            for key, value in values.items():
                widget = self._fields.get(f"{section}.{key}")
                if widget is None or f"{section}.{key}" == "model.source":
                    continue
                _set_value(widget, value)
        self.budget_mode.setCurrentIndex(1 if settings.encoder.budgets else 0)
        self._update_budget_mode()
        self.update_memory_estimate()
        (self.server_radio if settings.backend.kind == "vllm" else self.local_radio).setChecked(True)
        self._fields["backend.api_key"].setText(settings.backend.api_key)
        self._update_backend_fields()

    def values(self) -> dict[str, dict[str, Any]]:
        """The fields in ``AppSettings.to_dict()``'s form (not yet validated).

        Fields the dialog has no widget for keep the value of the settings it was filled with.
        """
        # Fields without a widget (min pixels per frame) keep the value the dialog was filled with.
        data = {section: dict(values) for section, values in self._base_values.items()}
        for name, widget in self._fields.items():
            section, key = name.split(".")
            data[section][key] = _get_value(widget)
        data["model"]["source"] = self.model_source()
        data["backend"]["kind"] = "vllm" if self.server_radio.isChecked() else "local"
        if self.budget_mode.currentIndex() == 0:
            data["encoder"]["budgets"] = []
        return data

    def model_source(self) -> str:
        if self.demo_radio.isChecked():
            return DEMO_MODEL
        if self.folder_radio.isChecked():
            return self.folder_edit.text().strip()
        return self.repo_edit.text().strip()

    def validated_settings(self) -> AppSettings | None:
        """The settings in the fields if core accepts them; otherwise show the error and return ``None``."""
        self.clear_errors()
        try:
            settings = AppSettings.from_dict(self.values())  # leaves the API key out, as files never hold it
            key = self._fields["backend.api_key"].text().strip()
            return settings.replace("backend", api_key=key).validate(self._loaded_limits or family_limits_for(settings))
        except SettingsError as error:
            self.show_error(error)
            return None

    def apply(self) -> bool:
        settings = self.validated_settings()
        if settings is None:
            return False
        self.settings_applied.emit(settings)
        return True

    def show_error(self, error: SettingsError) -> None:
        """Show ``error.message`` under the field it names, on its tab, and focus that field."""
        target = self._errors.get(error.field)
        if target is None:
            self.general_error.show_message(f"{error.field}: {error.message}" if error.field else error.message)
            return
        self.tabs.setCurrentIndex(self._field_tabs[error.field])
        target.show_message(error.message)
        self._fields[error.field].setFocus()

    def error_text(self, field: str) -> str:
        """The error shown next to ``field`` ("" when none)."""
        error = self._errors.get(field)
        return error.label.text() if error is not None and not error.isHidden() else ""

    def field_widget(self, field: str) -> QWidget:
        return self._fields[field]

    def clear_errors(self) -> None:
        for error in self._errors.values():
            error.clear()
        self.general_error.clear()

    def show_section(self, section: str) -> None:
        self.tabs.setCurrentIndex(SECTIONS.index(section))

    # -- helpers ----------------------------------------------------------------------------

    def _accept_if_valid(self) -> None:
        if self.apply():
            self.accept()

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a Qwen3-VL checkpoint folder", self.folder_edit.text())
        if folder:
            self.folder_edit.setText(folder)
            self.folder_radio.setChecked(True)
            self._errors["model.source"].clear()
            self.update_memory_estimate()

    def _update_backend_fields(self) -> None:
        remote = self.server_radio.isChecked()
        for name, widget in self._fields.items():
            if name.startswith("backend."):
                widget.setEnabled(remote)
        self._update_http_warning()

    def _update_http_warning(self) -> None:
        """Warn, before any request is made, when the address is plain http to another machine."""
        url = self._fields["backend.server_url"].text()
        warning = BackendSettings(kind="vllm", server_url=url).plain_http_warning() if self.server_radio.isChecked() else None
        self.http_warning.setText(f"⚠ {warning}" if warning else "")
        self.http_warning.setVisible(bool(warning))

    def set_limits(self, limits: FamilyLimits | None) -> None:
        """Size the frame and budget steps, and word their hints, by the loaded model family's
        ``limits``; settings are then checked against them. ``None`` (no model loaded yet): by the
        limits of the family the chosen checkpoint's config.json names, and where that cannot be
        read by none: steps of one, hints that say the family's bounds are checked once a model is
        loaded, and only the checks that need no family."""
        self._loaded_limits = limits
        self.limits = limits or self._chosen_family_limits()
        limits = self.limits
        per_slice, multiple = (limits.frames_per_slice, limits.budget_multiple) if limits else (1, 1)
        for name in ("sampling.min_frames", "sampling.max_frames"):
            self._fields[name].setSingleStep(per_slice)
        for name in ("encoder.min_budget", "encoder.max_budget"):
            self._fields[name].setSingleStep(multiple)
        self._hints["sampling.max_frames"].setText(_frames_hint(self.limits))
        self._hints["encoder.budgets"].setText(_budgets_hint(self.limits))
        self._update_budget_preview()

    def _chosen_family_limits(self) -> FamilyLimits | None:
        """The limits of the family the model in the fields names (``None`` where it cannot be read)."""
        try:
            return family_limits_for(AppSettings.from_dict(self.values()))
        except SettingsError:
            return None

    def set_graphs_available(self, available: bool, reason: str) -> None:
        """Disable the settings that only CUDA graphs use where there are none, saying why on the Encoder tab."""
        self._graphs_available = available
        self.graphs_note.setText(
            f"No CUDA graphs here ({reason}), so the graph settings below are off; they apply on a machine with an NVIDIA GPU."
        )
        self.graphs_note.setVisible(not available)
        for name in GRAPH_ONLY_FIELDS:
            self._fields[name].setToolTip("" if available else f"Only used with CUDA graphs, which this machine has not: {reason}")
        self.budget_mode.setEnabled(available)
        self._update_budget_mode()

    def _update_budget_mode(self) -> None:
        explicit = self.budget_mode.currentIndex() == 1
        available = self._graphs_available
        self._fields["encoder.budgets"].setEnabled(explicit and available)
        for name in ("encoder.min_budget", "encoder.max_budget", "encoder.budget_ratio"):
            self._fields[name].setEnabled(not explicit and available)
        for name in ("encoder.use_graphs", "encoder.fuse_kernels"):
            self._fields[name].setEnabled(available)
        self._update_budget_preview()

    def _update_budget_preview(self) -> None:
        """The graphs the budget fields make, for the loaded model family (none shown before one is
        loaded: the budgets are whole merge blocks of the family)."""
        if self.limits is None:
            self.budget_preview.setText("")
            return
        try:
            encoder = AppSettings.from_dict(self.values()).encoder
            # Validate the budget fields alone (batch limits of 1 always fit) before expanding the series.
            encoder = dataclasses.replace(encoder, max_items_per_batch=1, max_frame_pairs_per_batch=1)
            encoder.validate(self.limits)
            budgets = encoder.token_budgets(self.limits)
        except SettingsError:
            self.budget_preview.setText("")
            return
        shown = ", ".join(map(str, budgets)) if len(budgets) <= 8 else (
            ", ".join(map(str, budgets[:4])) + ", …, " + ", ".join(map(str, budgets[-2:]))
        )
        self.budget_preview.setText(f"{len(budgets)} graphs: {shown}")


def _frames_hint(limits: FamilyLimits | None) -> str:
    if limits is None:
        return "The model family's most frames and frame-count multiple are checked once a model is loaded."
    return (
        f"{limits.name} takes at most {limits.max_frames:,} frames; {limits.frames_rule()}, "
        f"so frame counts are multiples of {limits.frames_per_slice}."
    )


def _budgets_hint(limits: FamilyLimits | None) -> str:
    if limits is None:
        return "Comma-separated token budgets; the model family's multiple is checked once a model is loaded."
    examples = ", ".join(str(limits.budget_multiple * 64 * 4**power) for power in range(3))
    return f"Comma-separated multiples of {limits.budget_multiple}, e.g. {examples}"


def _looks_like_folder(source: str) -> bool:
    path = Path(source).expanduser()
    return path.is_absolute() or source.startswith((".", "~")) or path.is_dir()


def _edited_signals(widget: QWidget) -> list[Any]:
    """The signals by which a person changes ``widget``'s value (a composite field wires its own)."""
    if isinstance(widget, QLineEdit):
        return [widget.textEdited]
    if isinstance(widget, QComboBox):
        return [widget.activated]
    if isinstance(widget, QCheckBox):
        return [widget.clicked]
    if isinstance(widget, QAbstractSpinBox):
        return [widget.valueChanged]
    return []


def _combo(choices: tuple[str, ...]) -> QComboBox:
    combo = QComboBox()
    combo.addItems(list(choices))
    return combo


def _spin(minimum: int, maximum: int, step: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(minimum, maximum)
    spin.setSingleStep(step)
    spin.setGroupSeparatorShown(True)
    spin.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToNearestValue)
    return spin


def _double_spin(minimum: float, maximum: float, decimals: int, step: float) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setRange(minimum, maximum)
    spin.setDecimals(decimals)
    spin.setSingleStep(step)
    return spin


def _set_value(widget: QWidget, value: Any) -> None:
    if isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    elif isinstance(widget, QComboBox):
        widget.setCurrentText(str(value))
    elif isinstance(widget, QSpinBox):
        widget.setValue(int(value))
    elif isinstance(widget, QDoubleSpinBox):
        widget.setValue(float(value))
    elif isinstance(widget, QLineEdit):
        widget.setText(", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value))


def _get_value(widget: QWidget) -> Any:
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, QComboBox):
        return widget.currentText()
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        return widget.value()
    if isinstance(widget, QLineEdit):
        return widget.text()
    return None
