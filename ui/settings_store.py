"""Settings and recent files kept across runs with ``QSettings``.

The settings are stored as one JSON value (``AppSettings.to_dict()``) so that the GUI and the
CLI agree on field names. By default the store is the platform's native one for organization
and application "Framewise"; tests point it at an ini file instead.

The vLLM server's API key is never part of that value. With the native store it goes to the
desktop's secret store (:mod:`framewise.core.backends.vllm.keys`) when one is available;
otherwise it lives in the running application only.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

from framewise.core.backends import family_limits_for
from framewise.core.backends.vllm.keys import desktop_server_keys
from framewise.core.errors import SettingsError
from framewise.core.settings import AppSettings
from framewise.core.user_folders import user_folder
from framewise.ui.settings_dialog import SESSION_ONLY_KEY_NOTE

log = logging.getLogger(__name__)

ORGANIZATION = "Framewise"
APPLICATION = "Framewise"
MAX_RECENT_FILES = 10

_SETTINGS_KEY = "engine/settings_json"
_RECENT_KEY = "files/recent_json"
_GEOMETRY_KEY = "window/geometry"


class SettingsStore:
    """Reads and writes Framewise's persistent state.

    ``ini_path`` selects an ini file (tests, portable installs); ``None`` uses the native store.
    ``use_keyring`` (default: with the native store only) keeps API keys in the desktop's secret store.
    """

    def __init__(self, ini_path: str | Path | None = None, *, use_keyring: bool | None = None) -> None:
        if ini_path is None:
            self._qsettings = QSettings(ORGANIZATION, APPLICATION)
        else:
            self._qsettings = QSettings(str(ini_path), QSettings.Format.IniFormat)
        self.load_problem: str | None = None
        self._keys = desktop_server_keys() if (ini_path is None if use_keyring is None else use_keyring) else None

    def api_key_note(self) -> str:
        """Where the API key is kept, for the Settings dialog."""
        if self._keys is None:
            return SESSION_ONLY_KEY_NOTE
        return "Kept in the desktop's secret store (keyring), never in the settings file or the log."

    @property
    def location(self) -> str:
        return self._qsettings.fileName()

    def load_settings(self) -> AppSettings:
        """The saved settings, or the defaults when none are saved or they are no longer valid
        (checked against the model family their model names, where its config.json can be read).

        When saved settings are rejected, ``load_problem`` says why, naming the field, and where the
        file they were in is kept (:meth:`keep_rejected`), for the window to show until new settings
        are applied; the rejected ones stay in the store until then.
        """
        self.load_problem = None
        raw = self._qsettings.value(_SETTINGS_KEY)
        if not raw:
            return AppSettings()
        try:
            settings = AppSettings.from_dict(json.loads(str(raw)))
            settings.validate(family_limits_for(settings))
            if self._keys is None:
                return settings
            return settings.replace("backend", api_key=self._keys.key_for(settings.backend))
        except (ValueError, TypeError, AttributeError) as error:
            problem = f"The saved settings could not be read ({error})"
        except SettingsError as error:
            problem = f"The saved setting {error.field} is invalid: {error.message}"
        kept = self.keep_rejected(str(raw))
        self.load_problem = (
            f"{problem}. Framewise started with the default settings"
            + (f"; the settings file is kept as it was in {kept}." if kept else ".")
            + " The saved settings are replaced when you apply settings (Settings…)."
        )
        log.warning("%s", self.load_problem)
        return AppSettings()

    def keep_rejected(self, raw: str) -> Path | None:
        """Keep rejected settings for a person to read or mend: a copy of the settings file beside it
        (``.invalid`` added to its name) or, where the store is no file (the Windows registry), their
        JSON (``raw``) in Framewise's data folder. Returns where, ``None`` when it could not be written."""
        location = Path(self.location)
        try:
            if location.is_file():
                return Path(shutil.copyfile(location, location.with_name(f"{location.name}.invalid")))
            folder = user_folder("FRAMEWISE_DATA_DIR", "data")
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / "settings.invalid.json"
            target.write_text(raw, encoding="utf-8")
            return target
        except OSError as error:
            log.warning("the rejected settings could not be kept: %s", error)
            return None

    def save_settings(self, settings: AppSettings) -> None:
        """Keep ``settings`` (without the API key) and the key in the secret store when there is one."""
        self._qsettings.setValue(_SETTINGS_KEY, json.dumps(settings.to_dict(), sort_keys=True))
        self._qsettings.sync()
        if self._keys is not None:
            self._keys.keep(settings.backend)

    def recent_files(self) -> list[str]:
        raw = self._qsettings.value(_RECENT_KEY)
        try:
            files = json.loads(str(raw)) if raw else []
        except ValueError:
            return []
        return [str(path) for path in files if isinstance(path, str)][:MAX_RECENT_FILES]

    def add_recent_file(self, path: str) -> list[str]:
        """Put ``path`` first in the recent files and return the new list."""
        files = [path] + [existing for existing in self.recent_files() if existing != path]
        files = files[:MAX_RECENT_FILES]
        self._qsettings.setValue(_RECENT_KEY, json.dumps(files))
        self._qsettings.sync()
        return files

    def clear_recent_files(self) -> None:
        self._qsettings.remove(_RECENT_KEY)
        self._qsettings.sync()

    def window_geometry(self) -> QByteArray | None:
        value = self._qsettings.value(_GEOMETRY_KEY)
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def save_window_geometry(self, geometry: QByteArray) -> None:
        self._qsettings.setValue(_GEOMETRY_KEY, geometry)
        self._qsettings.sync()

