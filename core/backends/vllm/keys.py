"""API keys of vLLM servers, kept in the desktop's secret store by server address.

``keyring`` is an optional dependency (``framewise[keyring]``). Without it, or with only its fail
or null backend, there is no secret store, and a key lives in the running application only. A
key never goes into a settings file or the log.
"""

from __future__ import annotations

import logging
from typing import Any

from framewise.core.settings import BackendSettings

log = logging.getLogger(__name__)

KEYRING_SERVICE = "Framewise vLLM server"
"""The secret store's service name; the user name is the server's address."""


class ServerKeys:
    """API keys by server address in ``secrets``, a store with keyring's three calls
    (``get_password``, ``set_password``, ``delete_password``).

    A locked or broken store never stops the caller: reading gives no key and writing keeps the
    key for the session only, each with a warning in the log.
    """

    def __init__(self, secrets: Any) -> None:
        self._secrets = secrets

    def key_for(self, backend: BackendSettings) -> str:
        """The key kept for ``backend``'s server; empty when none is kept (or for this machine)."""
        if backend.kind != "vllm":
            return ""
        try:
            return self._secrets.get_password(KEYRING_SERVICE, backend.base_url()) or ""
        except Exception as error:  # noqa: BLE001 - any backend's failure means no key
            log.warning("the secret store could not be read (%s); type the API key again", type(error).__name__)
            return ""

    def keep(self, backend: BackendSettings) -> None:
        """Keep ``backend``'s key for its server, or forget the one kept when the key is empty."""
        if backend.kind != "vllm":
            return
        try:
            if backend.api_key:
                self._secrets.set_password(KEYRING_SERVICE, backend.base_url(), backend.api_key)
            elif self._secrets.get_password(KEYRING_SERVICE, backend.base_url()) is not None:
                self._secrets.delete_password(KEYRING_SERVICE, backend.base_url())
        except Exception as error:  # noqa: BLE001 - a locked or broken secret store must not stop saving
            log.warning("the API key could not be kept in the secret store (%s); it stays for this session", type(error).__name__)


def desktop_server_keys() -> ServerKeys | None:
    """The desktop's secret store when ``keyring`` is installed with a real backend (not its fail
    or null one), else ``None``."""
    try:
        import keyring
        from keyring.backends import fail
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:  # noqa: BLE001 - a misconfigured keyring counts as none
        return None
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 0) <= 0:
        return None
    return ServerKeys(keyring)
