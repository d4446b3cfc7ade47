"""Settings from the dialog to the engine and back: the dialog opens filled with the applied settings
and the loaded model's limits, what it applies goes to the session, and what the engine applied is
saved; what it refused comes back to the dialog, the error beside its field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from PySide6.QtWidgets import QWidget

from framewise.core.errors import SettingsError
from framewise.core.events import EngineInfo, Failed
from framewise.core.settings import AppSettings
from framewise.ui.settings_dialog import SettingsDialog
from framewise.ui.settings_store import SettingsStore
from framewise.ui.wording import held_memory_text

if TYPE_CHECKING:
    from framewise.ui.session import Session
    from framewise.ui.queries import RunQuery


class SettingsFlow:
    """Opens the settings dialog over ``parent`` (made once, on first use) for ``session``; keeps the
    applied settings in ``store``. The dialog's memory estimate comes from ``memory_estimate`` run
    through ``run_query`` (off the GUI thread)."""

    def __init__(
        self,
        parent: QWidget,
        session: Session,
        store: SettingsStore,
        memory_estimate: Callable[[AppSettings], str],
        run_query: RunQuery,
    ) -> None:
        self._parent = parent
        self._session = session
        self._store = store
        self._memory_estimate = memory_estimate
        self._run_query = run_query
        self.dialog: SettingsDialog | None = None
        signals = session.signals
        signals.settings_applied.connect(store.save_settings)
        signals.settings_refused.connect(self._refused)
        signals.engine_changed.connect(self._show_held_memory)

    def open(self, section: str | None) -> SettingsDialog:
        """Show the settings dialog (on ``section``'s tab when given) filled with the applied settings."""
        if self.dialog is None:
            self.dialog = SettingsDialog(
                self._session.settings, self._run_query, self._parent,
                api_key_note=self._store.api_key_note(), memory_estimate=self._memory_estimate,
            )
            self.dialog.settings_applied.connect(self.apply)
        else:
            self.dialog.set_settings(self._session.settings)
        info = self._session.info
        self.dialog.set_limits(info.limits if info else None)
        self.dialog.set_graphs_available(not (info is not None and info.on_cpu), info.graphs_reason if info else "")
        self.dialog.set_held_memory(held_memory_text(info) if info else "")
        if section:
            self.dialog.show_section(section)
        self.dialog.open()
        return self.dialog

    def apply(self, settings: AppSettings) -> None:
        """Send valid ``settings`` to the engine (it re-captures or reloads); they become the window's,
        and are saved for the next run, only once the engine has applied them. When it cannot, the
        settings dialog shows the error next to the field that caused it and nothing changes."""
        if not self._session.apply_settings(settings):
            self._store.save_settings(settings)  # the applied ones, chosen again on purpose: kept

    def _show_held_memory(self, info: EngineInfo) -> None:
        if self.dialog is not None:
            self.dialog.set_held_memory(held_memory_text(info))

    def _refused(self, settings: AppSettings, failure: Failed | None) -> None:
        dialog = self.open(None)
        dialog.set_settings(settings)  # the person's choices stay in the fields, to be corrected
        if failure is not None:
            dialog.show_error(SettingsError(failure.field or "", failure.message))
