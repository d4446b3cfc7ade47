"""API keys kept by server address in a secret store, and a store that fails."""

from __future__ import annotations

import logging

import pytest

from framewise.core.backends.vllm.keys import KEYRING_SERVICE, ServerKeys
from framewise.core.settings import AppSettings


class MemoryKeyring:
    """A secret store in memory, with keyring's three calls."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, user: str) -> str | None:
        return self.secrets.get((service, user))

    def set_password(self, service: str, user: str, secret: str) -> None:
        self.secrets[(service, user)] = secret

    def delete_password(self, service: str, user: str) -> None:
        del self.secrets[(service, user)]


class LockedKeyring(MemoryKeyring):
    """A secret store whose every call fails, as a locked one does."""

    def get_password(self, service: str, user: str) -> str | None:
        raise RuntimeError("locked")

    def set_password(self, service: str, user: str, secret: str) -> None:
        raise RuntimeError("locked")


def server(url: str, key: str) -> AppSettings:
    return AppSettings().replace("backend", kind="vllm", server_url=url, api_key=key)


def test_keys_are_kept_by_the_servers_address_and_an_empty_key_forgets() -> None:
    secrets = MemoryKeyring()
    keys = ServerKeys(secrets)
    keys.keep(server("https://gpu-box:8000/v1/", "k-1").backend)
    keys.keep(server("https://other:8000", "k-2").backend)
    assert secrets.secrets == {(KEYRING_SERVICE, "https://gpu-box:8000"): "k-1", (KEYRING_SERVICE, "https://other:8000"): "k-2"}
    assert keys.key_for(server("https://gpu-box:8000", "").backend) == "k-1"
    assert keys.key_for(AppSettings().backend) == ""  # this machine needs no key
    keys.keep(server("https://gpu-box:8000", "").backend)
    assert secrets.secrets == {(KEYRING_SERVICE, "https://other:8000"): "k-2"}


def test_a_locked_store_gives_no_key_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    keys = ServerKeys(LockedKeyring())
    assert keys.key_for(server("https://gpu-box:8000", "").backend) == ""
    keys.keep(server("https://gpu-box:8000", "k-secret").backend)
    assert "could not be read" in caplog.text and "stays for this session" in caplog.text
    assert "k-secret" not in caplog.text
