"""Where a model source points and what its config.json says, without torch: the bundled demo
model, a local folder, or a Hugging Face repo id found in the local cache (never downloaded), and
the model family the checkpoint's ``model_type`` names.

The CLI, the vLLM backend and the window read a checkpoint's family here before anything heavy is
imported; :mod:`framewise.core.loading` loads the weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from framewise.core.errors import FramewiseError, ModelLoadError, UnsupportedModelError
from framewise.core.families import family_for
from framewise.core.resources import asset_path
from framewise.core.seam import FamilyLimits
from framewise.core.settings import DEMO_MODEL

DEMO_MODEL_DIR = asset_path("demo_model")

MODEL_INFO_FILE = "framewise.json"
"""Framewise's own notes on a model folder: its label and description."""


def resolve_model_source(source: str) -> Path:
    """The folder a model source points to.

    ``"demo"`` is the bundled demo model; an existing folder is itself; anything else is a
    Hugging Face repo id looked up in the local cache (``HF_HUB_CACHE`` / ``HF_HOME``, read now),
    never downloaded. Raises ModelLoadError when there is no such folder or cached repo.
    """
    source = source.strip()
    if source == DEMO_MODEL:
        if not DEMO_MODEL_DIR.is_dir():
            raise ModelLoadError(
                f"The bundled demo model is missing from {DEMO_MODEL_DIR}; reinstall Framewise "
                "(in a clone of the repository: git checkout -- assets/demo_model)."
            )
        return DEMO_MODEL_DIR
    path = Path(source).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise ModelLoadError(f"{source} is a file; choose the checkpoint folder that holds config.json.")
    if looks_like_path(source):
        raise ModelLoadError(f"The model folder {source} does not exist; check the path.")
    return _cached_snapshot(source)


def looks_like_path(source: str) -> bool:
    """Whether ``source`` is written as a path (absolute, from ``~`` or ``.``, with a backslash or
    more than one ``/``) rather than as a repo id."""
    return (
        os.path.isabs(source)
        or source.startswith(("~", "."))
        or "\\" in source
        or source.count("/") > 1
    )


def _cached_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache_dir = hub_cache_dir()
    try:
        return Path(snapshot_download(repo_id, cache_dir=cache_dir, local_files_only=True))
    except HFValidationError as error:
        raise ModelLoadError(
            f"{repo_id} is neither an existing folder nor a Hugging Face repo id (like Qwen/Qwen3-VL-2B-Instruct); "
            "check the spelling."
        ) from error
    except (LocalEntryNotFoundError, FileNotFoundError) as error:
        raise ModelLoadError(
            f"{repo_id} is not a folder and is not in the local Hugging Face cache ({cache_dir}). "
            f"Framewise never downloads: run `hf download {repo_id}` on a machine with network access "
            "(and copy the cache here), or choose the checkpoint folder."
        ) from error


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder, from the environment as it is now."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def read_config(path: Path) -> dict[str, Any]:
    """The checkpoint's config.json (``{}`` when it holds no JSON object); ModelLoadError when
    there is none or it is not JSON."""
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(
            f"{path} has no config.json, so it is not a model checkpoint folder (or it is incomplete)."
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{config_file} cannot be read as JSON ({error}); the download may be damaged.") from error
    return config if isinstance(config, dict) else {}


def read_model_type(path: Path) -> str:
    """The checkpoint's ``model_type``; UnsupportedModelError when no registered family loads it."""
    model_type = read_config(path).get("model_type")
    try:
        family_for(model_type)
    except UnsupportedModelError as error:
        described = model_type or "model of unknown type"
        raise UnsupportedModelError(f"{path} holds a {described!s} checkpoint. {error}") from None
    return model_type


def family_limits_of(source: str) -> FamilyLimits | None:
    """The limits of the family whose checkpoint ``source`` names, read from its config.json alone
    (no weights); ``None`` when that cannot be known (no such folder, no readable config, a family
    Framewise lacks), which loading the model then says in its own words."""
    try:
        return family_for(read_model_type(resolve_model_source(source))).limits
    except FramewiseError:
        return None


def read_model_info(path: Path) -> dict[str, Any]:
    """Framewise's own notes on a model folder (``framewise.json``: label, description), or {}."""
    info_file = path / MODEL_INFO_FILE
    if not info_file.is_file():
        return {}
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{info_file} cannot be read as JSON ({error}).") from error
    return info if isinstance(info, dict) else {}
