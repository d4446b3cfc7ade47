"""Checking a vLLM server before the first question: is it up, what does it serve, which model to use."""

from __future__ import annotations

from typing import NamedTuple

import httpx

from framewise.core.backends.vllm.errors import raise_for_status
from framewise.core.backends.vllm.http import auth_headers, get, http_client
from framewise.core.backends.vllm.serve_command import pruning_note, vllm_serve_command
from framewise.core.errors import ServerAddressError, ServerFailedError, ServerModelError, ServerModelGoneError
from framewise.core.events import ServerInfo
from framewise.core.settings import BackendSettings, EncoderSettings, SamplingSettings


def check_server(backend: BackendSettings, encoder: EncoderSettings, sampling: SamplingSettings) -> ServerInfo:
    """Ask the server whether it is up (``/health``) and what it serves (``/v1/models``).

    Returns the server's description with the model to use: ``backend.server_model``, or the one
    model the server serves when that is empty. Raises a :class:`ServerError` that says what to change.
    """
    base = backend.base_url()
    with http_client(backend) as client:
        health = get(client, f"{base}/health", backend)
        if 400 <= health.status_code < 500:  # not a vLLM root (404), or a proxy in front that wants a key
            raise_for_status(health, backend.server_model)
        if health.status_code != 200:
            raise ServerFailedError(
                f"The server at {base} is not healthy (GET /health answered {health.status_code}); "
                "wait for it to finish starting, or check its log."
            )
        models = get(client, f"{base}/v1/models", backend)
        raise_for_status(models, backend.server_model or "")
        served = _served_models(models, base)
        version = _server_version(client, base, backend)
    model = _chosen_model(backend, tuple(served), base)
    source = served[model].source
    return ServerInfo(
        url=base,
        model=model,
        served_models=tuple(served),
        max_model_len=served[model].max_model_len,
        version=version,
        serve_command=vllm_serve_command(source or model, encoder, sampling, served_name=model),
        plain_http_warning=backend.plain_http_warning(),
        model_source=source,
        pruning_note=pruning_note(sampling),
    )


class _ServedModel(NamedTuple):
    """One entry of ``/v1/models``: the context length and where the model was loaded from (vLLM's ``root``)."""

    max_model_len: int | None
    source: str | None


def _served_models(response: httpx.Response, base: str) -> dict[str, _ServedModel]:
    try:
        data = response.json()["data"]
        return {
            str(entry["id"]): _ServedModel(entry.get("max_model_len"), str(entry["root"]) if entry.get("root") else None)
            for entry in data
        }
    except (ValueError, KeyError, TypeError) as error:
        raise ServerAddressError(
            f"{base}/v1/models did not answer as an OpenAI-compatible server does; check the address "
            "(it should be the server's root, e.g. http://127.0.0.1:8000)."
        ) from error


def _chosen_model(backend: BackendSettings, served: tuple[str, ...], base: str) -> str:
    wanted = backend.server_model.strip()
    if not served:
        raise ServerModelError(f"The server at {base} serves no model.")
    if not wanted:
        if len(served) > 1:
            raise ServerModelError(
                f"The server at {base} serves several models ({', '.join(served)}); name one as the server model."
            )
        return served[0]
    if wanted not in served:
        raise ServerModelError(
            f"The server at {base} does not serve {wanted!r}; it serves {', '.join(served)}. "
            "Change the server model to one of those (vLLM's --served-model-name)."
        )
    return wanted


def _server_version(client: httpx.Client, base: str, backend: BackendSettings) -> str | None:
    try:
        response = client.get(f"{base}/version", headers=auth_headers(backend))
        return str(response.json().get("version")) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def model_gone_error(server: ServerInfo, gone: str) -> ServerModelGoneError:
    """The error for a question the server refused because it no longer serves ``gone``, the model it
    served when it was checked (none was named): ``server`` is what it serves now, which answers next."""
    return ServerModelGoneError(
        f"The server at {server.url} no longer serves {gone!r}: it was restarted and serves {server.model!r} now. "
        f"Framewise asks {server.model!r} from here on; ask again (the conversation is kept)."
    )
