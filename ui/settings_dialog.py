"""The settings dialog: every field of ``core.settings.AppSettings``, validated by core.

Apply and OK build an ``AppSettings`` from the fields and validate it against the loaded model
family's limits (:meth:`SettingsDialog.set_limits`); a
``SettingsError`` is shown next to the field it names (``SettingsError.field``) and nothing is
applied. Valid settings are announced with ``settings_applied``. What needs a file read or a heavy
import (the memory estimate, the limits of the family the chosen checkpoint names before one is
loaded) is asked off the GUI thread through the ``run_query`` it is given.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QRadioButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from framewise.core.backends import family_limits_for
from framewise.core.errors import SettingsError
from framewise.core.seam import FamilyLimits
from framewise.core.settings import (
    ATTENTION_BACKENDS,
    AUTO_PRUNING_ABOVE_TOKENS,
    AUTO_PRUNING_RATE,
    DEVICES,
    DTYPES,
    FAST_MODE_AUTO_ABOVE_S,
    FAST_MODES,
    PRUNING_WORDS,
    KV_CACHE_DTYPES,
    AppSettings,
    BackendSettings,
    EncoderSettings,
)
from framewise.ui.queries import LatestQuery, RunQuery
from framewise.ui.settings_fields import INT_MAX, FieldError, FieldTabs, combo, dim_label, double_spin, spin
from framewise.ui.settings_model import MemoryEstimateLine, ModelSourceChoice, choice_hint

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


class SettingsDialog(QDialog):
    """Edit Framewise's settings; ``settings_applied(AppSettings)`` fires for valid ones only."""

    settings_applied = Signal(object)

    def __init__(
        self,
        settings: AppSettings,
        run_query: RunQuery,
        parent: QWidget | None = None,
        *,
        api_key_note: str = SESSION_ONLY_KEY_NOTE,
        memory_estimate: Callable[[AppSettings], str] | None = None,
    ) -> None:
        """``run_query`` runs what the dialog asks off the GUI thread; ``api_key_note`` says where the
        API key is kept (the secret store, or this session only); ``memory_estimate(settings)`` words
        what the chosen model will take, shown under its dtype."""
        super().__init__(parent)
        self._api_key_note = api_key_note
        self.setWindowTitle("Settings")
        self._loaded_limits: FamilyLimits | None = None
        self._chosen_limits = LatestQuery(run_query)
        self.limits: FamilyLimits | None = None
        self._filling = False
        self.model_choice = ModelSourceChoice()
        self.memory_estimate = MemoryEstimateLine(memory_estimate, run_query)
        self.tabs = FieldTabs()
        self._build_model_tab()
        self._build_sampling_tab()
        self._build_encoder_tab()
        self._build_generation_tab()
        self._build_backend_tab()
        self.general_error = FieldError()
        self.buttons = self._build_buttons()
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.general_error)
        layout.addWidget(self.buttons)
        self.set_settings(settings)
        self.set_limits(None)
        line = self.fontMetrics().height()
        self.resize(line * 40, line * 38)

    # -- building ---------------------------------------------------------------------------

    def _build_buttons(self) -> QDialogButtonBox:
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
        return buttons

    def _build_model_tab(self) -> None:
        tabs = self.tabs
        form = tabs.add_tab(SECTION_TITLES["model"])
        tabs.add_field(form, "model.source", "Model", self.model_choice)
        self.model_choice.edited.connect(lambda: tabs.clear_error("model.source"))
        tabs.add_field(form, "model.device", "Device", combo(DEVICES))
        tabs.add_field(
            form, "model.dtype", "Data type", combo(DTYPES),
            "fp8 keeps the language model's linear layers in 8 bits: about half their memory, and faster answers on a GPU. "
            "An FP8 checkpoint keeps them in 8 bits whatever is chosen here.",
        )
        tabs.add_field(
            form, "decoding.kv_cache_dtype", "KV cache", combo(KV_CACHE_DTYPES),
            "fp8 keeps the answer decoder's keys and values in 8 bits with a scale per token: about half "
            "the cache's memory, so about twice the context fits.",
        )
        form.addRow(self.memory_estimate)
        self.held_memory = dim_label()
        self.held_memory.hide()
        form.addRow(self.held_memory)
        for field in ("model.dtype", "model.device", "decoding.kv_cache_dtype"):
            tabs.field(field).currentIndexChanged.connect(self.update_memory_estimate)
        self.model_choice.changed.connect(self.update_memory_estimate)

    def _build_sampling_tab(self) -> None:
        tabs = self.tabs
        form = tabs.add_tab(SECTION_TITLES["sampling"])
        tabs.add_field(form, "sampling.fps", "Frames per second", double_spin(0.0, 1000.0, 2, 0.5))
        tabs.add_field(form, "sampling.min_frames", "Min frames", spin(0, 100_000, 2))
        tabs.add_field(form, "sampling.max_frames", "Max frames", spin(0, 100_000, 2), _frames_hint(self.limits))
        tabs.add_field(
            form,
            "sampling.max_pixels",
            "Max pixels",
            spin(0, INT_MAX, 65536),
            _pixels_hint(self.limits),
        )
        tabs.add_field(
            form,
            "sampling.fast_mode",
            "Fast mode",
            combo(FAST_MODES),
            "Takes, for each time, the frame within half the sampling interval that needs the least "
            "decoding (a keyframe where one is that near), with its true timestamp; "
            f"auto: for clips longer than {FAST_MODE_AUTO_ABOVE_S / 60:g} minutes.",
        )
        _add_pruning_field(tabs, form)

    def _build_encoder_tab(self) -> None:
        tabs = self.tabs
        form = tabs.add_tab(SECTION_TITLES["encoder"])
        self._graphs_available = True
        self.graphs_note = QLabel()
        self.graphs_note.setWordWrap(True)
        self.graphs_note.hide()
        form.addRow(self.graphs_note)
        tabs.add_field(
            form, "encoder.use_graphs", "CUDA graphs", QCheckBox("Capture the vision encoder as CUDA graphs (GPU only)")
        )
        tabs.add_field(
            form,
            "encoder.fuse_kernels",
            "Fused kernels",
            QCheckBox("Fuse the encoder's elementwise work inside the graphs"),
            "Compiled on the first start (about 20 s on an H200), then loaded from the cache.",
        )
        tabs.add_field(
            form,
            "encoder.attention_backend",
            "Attention backend",
            combo(ATTENTION_BACKENDS),
            "auto: Framewise's Triton kernel on a GPU, else torch's varlen, else masked SDPA; "
            "one that fails to capture gives way to the next.",
        )
        self.budget_mode = QComboBox()
        self.budget_mode.addItems(["Geometric series (min, max, ratio)", "Explicit list"])
        self.budget_mode.currentIndexChanged.connect(self._update_budget_mode)
        form.addRow("Token budgets", self.budget_mode)
        tabs.add_field(form, "encoder.budgets", "Budget list", QLineEdit(), _budgets_hint(self.limits))
        tabs.add_field(form, "encoder.min_budget", "Min budget", spin(0, INT_MAX, 4))
        tabs.add_field(form, "encoder.max_budget", "Max budget", spin(0, INT_MAX, 4))
        tabs.add_field(form, "encoder.budget_ratio", "Budget ratio", double_spin(0.0, 100.0, 3, 0.05))
        self.budget_preview = dim_label()
        form.addRow("", self.budget_preview)
        tabs.add_field(form, "encoder.max_items_per_batch", "Max items per batch", spin(0, INT_MAX, 1))
        tabs.add_field(
            form,
            "encoder.max_frame_pairs_per_batch",
            "Max frame pairs",
            spin(0, INT_MAX, 1),
            "Frame pairs per graph replay, an image counting as one: each is one attention sequence.",
        )
        for name in ("encoder.min_budget", "encoder.max_budget", "encoder.budget_ratio"):
            tabs.field(name).valueChanged.connect(self._update_budget_preview)
        tabs.field("encoder.budgets").textChanged.connect(self._update_budget_preview)

    def _build_generation_tab(self) -> None:
        tabs = self.tabs
        form = tabs.add_tab(SECTION_TITLES["generation"])
        tabs.add_field(form, "generation.max_new_tokens", "Max new tokens", spin(0, 1_000_000, 16))
        tabs.add_field(
            form, "generation.temperature", "Temperature", double_spin(0.0, 100.0, 2, 0.1), "0 picks the likeliest token (greedy)."
        )
        _add_context_field(tabs, form)

    def _build_backend_tab(self) -> None:
        tabs = self.tabs
        form = tabs.add_tab(SECTION_TITLES["backend"])
        self.local_radio = QRadioButton("This machine")
        self.server_radio = QRadioButton("vLLM server")
        self.backend_group = QButtonGroup(self)
        for button in (self.local_radio, self.server_radio):
            self.backend_group.addButton(button)
        form.addRow("Answer on", _backend_choice(self.local_radio, self.server_radio))
        url = QLineEdit()
        url.setPlaceholderText("e.g. http://127.0.0.1:8000 or https://gpu-box.example.org")
        tabs.add_field(
            form, "backend.server_url", "Server address", url,
            "The server's root; Framewise checks /health and /v1/models when you apply.",
        )
        self.http_warning = QLabel()
        self.http_warning.setWordWrap(True)
        self.http_warning.hide()
        form.addRow("", self.http_warning)
        _add_server_fields(self.tabs, form, self._api_key_note)
        url.textChanged.connect(self._update_http_warning)
        for button in (self.local_radio, self.server_radio):
            button.toggled.connect(self._update_backend_fields)

    # -- values -----------------------------------------------------------------------------

    def set_settings(self, settings: AppSettings) -> None:
        """Fill every field from ``settings`` and clear the errors."""
        self.clear_errors()
        self._base_values = settings.to_dict()
        self._filling = True  # the fields half filled make no settings worth estimating
        self.model_choice.set_source(settings.model.source)
        self.tabs.fill(settings.to_dict())
        self._filling = False
        self.budget_mode.setCurrentIndex(1 if settings.encoder.budgets else 0)
        self._update_budget_mode()
        self.update_memory_estimate()
        (self.server_radio if settings.backend.kind == "vllm" else self.local_radio).setChecked(True)
        self.tabs.field("backend.api_key").setText(settings.backend.api_key)
        self._update_backend_fields()

    def values(self) -> dict[str, dict[str, Any]]:
        """The fields in ``AppSettings.to_dict()``'s form (not yet validated).

        Fields the dialog has no widget for (min pixels per frame) keep the value of the settings it was filled with.
        """
        data = self.tabs.read(self._base_values)
        data["model"]["source"] = self.model_choice.source()
        data["backend"]["kind"] = "vllm" if self.server_radio.isChecked() else "local"
        if self.budget_mode.currentIndex() == 0:
            data["encoder"]["budgets"] = []
        return data

    def update_memory_estimate(self) -> None:
        """Estimate what the model in the fields will take (the line hides without a valid model)."""
        if self._filling:
            return
        self.memory_estimate.estimate(self._settings_in_fields() if self.model_choice.source() else None)

    def set_held_memory(self, text: str) -> None:
        """Show what the loaded model holds (``text``, already worded), under the estimate; hidden when empty."""
        self.held_memory.setText(text)
        self.held_memory.setVisible(bool(text))

    def validated_settings(self) -> AppSettings | None:
        """The settings in the fields if core accepts them; otherwise show the error and return ``None``."""
        self.clear_errors()
        try:
            settings = AppSettings.from_dict(self.values())  # leaves the API key out, as files never hold it
            key = self.tabs.field("backend.api_key").text().strip()
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
        if not self.tabs.show_error(error):
            self.general_error.show_message(f"{error.field}: {error.message}" if error.field else error.message)

    def clear_errors(self) -> None:
        self.tabs.clear_errors()
        self.general_error.clear()

    def show_section(self, section: str) -> None:
        self.tabs.setCurrentIndex(SECTIONS.index(section))

    # -- helpers ----------------------------------------------------------------------------

    def _settings_in_fields(self) -> AppSettings | None:
        """The settings the fields hold, when they make settings at all (not yet validated)."""
        try:
            return AppSettings.from_dict(self.values())
        except SettingsError:
            return None

    def _accept_if_valid(self) -> None:
        if self.apply():
            self.accept()

    def _update_backend_fields(self) -> None:
        remote = self.server_radio.isChecked()
        for name in self.tabs.names():
            if name.startswith("backend."):
                self.tabs.field(name).setEnabled(remote)
        self._update_http_warning()

    def _update_http_warning(self) -> None:
        """Warn, before any request is made, when the address is plain http to another machine."""
        url = self.tabs.field("backend.server_url").text()
        warning = BackendSettings(kind="vllm", server_url=url).plain_http_warning() if self.server_radio.isChecked() else None
        self.http_warning.setText(f"⚠ {warning}" if warning else "")
        self.http_warning.setVisible(bool(warning))

    def set_limits(self, limits: FamilyLimits | None) -> None:
        """Size the frame and budget steps, and word their hints, by the loaded model family's
        ``limits``; settings are then checked against them. ``None`` (no model loaded yet): by the
        limits of the family the chosen checkpoint's config.json names, read off the GUI thread, and
        until then (or where it cannot be read) by none: steps of one, hints that say the family's
        bounds are checked once a model is loaded, and only the checks that need no family."""
        self._loaded_limits = limits
        self._show_limits(limits)
        chosen = self._settings_in_fields() if limits is None else None
        if chosen is None:
            self._chosen_limits.forget()
            return
        self._chosen_limits.ask(lambda: family_limits_for(chosen), self._show_limits)

    def _show_limits(self, limits: FamilyLimits | None) -> None:
        self.limits = limits
        per_slice, multiple = (limits.frames_per_slice, limits.budget_multiple) if limits else (1, 1)
        for name in ("sampling.min_frames", "sampling.max_frames"):
            self.tabs.field(name).setSingleStep(per_slice)
        for name in ("encoder.min_budget", "encoder.max_budget"):
            self.tabs.field(name).setSingleStep(multiple)
        self.tabs.set_hint("sampling.max_frames", _frames_hint(limits))
        self.tabs.set_hint("sampling.max_pixels", _pixels_hint(limits))
        self.tabs.set_hint("encoder.budgets", _budgets_hint(limits))
        self._update_budget_preview()

    def set_graphs_available(self, available: bool, reason: str) -> None:
        """Disable the settings that only CUDA graphs use where there are none, saying why on the Encoder tab."""
        self._graphs_available = available
        self.graphs_note.setText(
            f"No CUDA graphs here ({reason}), so the graph settings below are off; they apply on a machine with an NVIDIA GPU."
        )
        self.graphs_note.setVisible(not available)
        for name in GRAPH_ONLY_FIELDS:
            self.tabs.field(name).setToolTip("" if available else f"Only used with CUDA graphs, which this machine has not: {reason}")
        self.budget_mode.setEnabled(available)
        self._update_budget_mode()

    def _update_budget_mode(self) -> None:
        explicit = self.budget_mode.currentIndex() == 1
        available = self._graphs_available
        self.tabs.field("encoder.budgets").setEnabled(explicit and available)
        for name in ("encoder.min_budget", "encoder.max_budget", "encoder.budget_ratio"):
            self.tabs.field(name).setEnabled(not explicit and available)
        for name in ("encoder.use_graphs", "encoder.fuse_kernels"):
            self.tabs.field(name).setEnabled(available)
        self._update_budget_preview()

    def _update_budget_preview(self) -> None:
        """The graphs the budget fields make, for the loaded model family (none shown before one is
        loaded: the budgets are whole merge blocks of the family)."""
        try:
            encoder = AppSettings.from_dict(self.values()).encoder
        except SettingsError:
            encoder = None
        self.budget_preview.setText(_budget_preview(encoder, self.limits) if encoder and self.limits else "")


def _budget_preview(encoder: EncoderSettings, limits: FamilyLimits) -> str:
    """The graphs ``encoder``'s budget fields make for a family of ``limits``, "" when they are not valid."""
    # Validate the budget fields alone (batch limits of 1 always fit) before expanding the series.
    encoder = dataclasses.replace(encoder, max_items_per_batch=1, max_frame_pairs_per_batch=1)
    try:
        encoder.validate(limits)
        budgets = encoder.token_budgets(limits)
    except SettingsError:
        return ""
    shown = ", ".join(map(str, budgets)) if len(budgets) <= 8 else (
        ", ".join(map(str, budgets[:4])) + ", …, " + ", ".join(map(str, budgets[-2:]))
    )
    return f"{len(budgets)} graphs: {shown}"


def _add_context_field(tabs: FieldTabs, form: QFormLayout) -> None:
    """Max context: 0 reads Automatic (the largest clip the sampling allows, some questions and four answers)."""
    context = spin(0, INT_MAX, 1024)
    context.setSpecialValueText("Automatic")
    tabs.add_field(
        form, "decoding.max_context_tokens", "Max context", context,
        "Tokens an answer's context holds: the clips and pictures, the conversation so far and the answer. "
        "Automatic holds the largest clip the sampling allows, some questions and four answers; more items "
        "need more.",
    )


def _add_server_fields(tabs: FieldTabs, form: QFormLayout, api_key_note: str) -> None:
    """The vLLM server's fields after its address: the model it serves, the key, the timeouts."""
    model = QLineEdit()
    model.setPlaceholderText("empty: the one model the server serves")
    tabs.add_field(form, "backend.server_model", "Server model", model, "vLLM's --served-model-name.")
    key = QLineEdit()
    key.setEchoMode(QLineEdit.EchoMode.Password)
    key.setPlaceholderText("empty: the server needs none")
    tabs.add_field(form, "backend.api_key", "API key", key, api_key_note)
    tabs.add_field(form, "backend.timeout_s", "Connect timeout (s)", double_spin(0.0, 10_000.0, 1, 1.0))
    tabs.add_field(
        form, "backend.answer_timeout_s", "Answer timeout (s)", double_spin(0.0, 100_000.0, 0, 10.0),
        "The longest a whole answer may take, from sending the question to its last word (the server's "
        "encoding included); the server then drops it.",
    )


def _add_pruning_field(tabs: FieldTabs, form: QFormLayout) -> None:
    """``sampling.pruning``: off, auto, or a rate typed or picked."""
    choice = combo((*PRUNING_WORDS, "0.5", "0.75"))
    choice.setEditable(True)
    choice.setToolTip("off, auto, or the share of video tokens to drop, at least 0 and below 1")
    tabs.add_field(
        form, "sampling.pruning", "Pruning", choice,
        "After the encoder, drops the share of a clip's video tokens that barely change from the frame pair "
        "before: shorter prompts, faster answers about long clips, at some cost in accuracy (the demo model "
        "answered 90.8 % right at 0.5 against 98.5 % unpruned). "
        f"auto: {AUTO_PRUNING_RATE:g} for clips over {AUTO_PRUNING_ABOVE_TOKENS:,} video tokens.",
    )


def _backend_choice(local: QRadioButton, server: QRadioButton) -> QWidget:
    """The two radios of where answers come from, each with its hint under it."""
    where = QWidget()
    where.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)  # the hints wrap at full width
    column = QVBoxLayout(where)
    column.setContentsMargins(0, 0, 0, 0)
    column.addWidget(local)
    column.addWidget(choice_hint(local, "The model runs inside Framewise."))
    column.addWidget(server)
    column.addWidget(choice_hint(server, "For models or GPU counts this machine cannot hold."))
    return where


def _frames_hint(limits: FamilyLimits | None) -> str:
    if limits is None:
        return "The model family's most frames and frame-count multiple are checked once a model is loaded."
    released = f" (its released preprocessing: {limits.released_frames:,})" if limits.released_frames else ""
    return (
        f"{limits.name} takes at most {limits.max_frames:,} frames{released}; {limits.frames_rule()}, "
        f"so frame counts are multiples of {limits.frames_per_slice}."
    )


def _pixels_hint(limits: FamilyLimits | None) -> str:
    shared = "For the whole sampled clip (frames × height × width): more frames get smaller frames."
    if limits is None:
        return shared
    released = limits.released_clip_pixels
    return (
        f"{shared} {limits.pixels_per_video_token:,} pixels make one video token; {limits.name}'s released "
        f"preprocessing takes up to {released:,} ({limits.video_tokens(released):,} tokens), at most "
        f"{limits.max_clip_pixels:,} ({limits.video_tokens(limits.max_clip_pixels):,}) as the context and the card allow."
    )


def _budgets_hint(limits: FamilyLimits | None) -> str:
    if limits is None:
        return "Comma-separated token budgets; the model family's multiple is checked once a model is loaded."
    examples = ", ".join(str(limits.budget_multiple * 64 * 4**power) for power in range(3))
    return f"Comma-separated multiples of {limits.budget_multiple}, e.g. {examples}"
