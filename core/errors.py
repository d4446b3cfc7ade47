"""Typed errors raised by Framewise's core.

Every error carries a message written for a person: what went wrong and what to do about it.
The GUI and the CLI show ``str(error)`` as is.
"""

from __future__ import annotations


class FramewiseError(Exception):
    """Base class of every error Framewise raises on purpose."""


class ClipError(FramewiseError):
    """A clip could not be opened, decoded or sampled."""


class ClipNotFoundError(ClipError):
    """The path does not exist or is not a file."""


class ClipAccessError(ClipError):
    """The file, or a folder on its path, may not be read by this user (permissions)."""


class UnreadableClipError(ClipError):
    """The file is not a media file any reader understands, or it is truncated or corrupt."""


class NoVideoStreamError(ClipError):
    """The file holds no video stream (audio only, say)."""


class EmptyClipError(ClipError):
    """The video stream holds no decodable frame."""


class ClipTooLargeError(ClipError):
    """The clip's resolution or frame count is beyond what Framewise accepts."""


class DecodeTimeoutError(ClipError):
    """Decoding stopped making progress within the allowed time."""


class ReaderStuckError(ClipError):
    """Earlier reads are still stuck inside the decoder, so no new one is started."""


class ModelLoadError(FramewiseError):
    """A model folder or repo id could not be loaded as a Qwen3-VL checkpoint."""


class SettingsError(FramewiseError):
    """A setting, or a combination of settings, is invalid.

    ``field`` names the setting as ``section.name`` (``encoder.max_budget``) so a settings panel
    can show the message next to it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class EncoderError(FramewiseError):
    """The vision encoder failed (for example while capturing CUDA graphs)."""


class CancelledError(FramewiseError):
    """The work was cancelled by the user."""


class ConversationStoreError(FramewiseError):
    """The file that keeps past conversations cannot be opened, read or written."""


class ExportError(FramewiseError):
    """A conversation or a plot could not be written to the chosen file."""
