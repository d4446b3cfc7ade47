"""Typed errors raised by Framewise's core, and the one mapping from any exception to a message.

Every error carries a message written for a person: what went wrong and what to do about it.
:func:`describe_error` turns any exception into an :class:`ErrorReport`; the CLI and the window
both show its ``message`` as is. Errors Framewise raises on purpose keep their own message; running
out of memory (torch's CUDA out-of-memory error, the CPU allocator's "can't allocate memory",
Python's ``MemoryError``) says which settings to lower; anything else is a bug: its traceback goes
to the log, and the person is told where that log is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_log_file: Path | None = None
_OUT_OF_MEMORY_SIGNS = ("out of memory", "can't allocate memory", "cannot allocate memory")


class FramewiseError(Exception):
    """Base class of every error Framewise raises on purpose.

    ``field`` names the setting (``section.name``) the error is about, when there is one, so that
    a settings panel can show the message next to it.
    """

    field: str | None = None


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


class SpanError(ClipError):
    """A span asked for a closer look is empty, reversed, outside the clip, or of a picture."""


class ModelLoadError(FramewiseError):
    """A model folder or repo id could not be loaded as a checkpoint of a supported model family."""

    field = "model.source"


class QuantizationFormatError(ModelLoadError):
    """The checkpoint's weights are quantized in a way Framewise cannot run, or its quantized
    weights and their scales do not match; the message names the format and what to choose instead."""


class UnsupportedModelError(ModelLoadError):
    """The checkpoint's ``model_type`` belongs to no model family Framewise knows."""


class SettingsError(FramewiseError):
    """A setting, or a combination of settings, is invalid.

    ``field`` names the setting as ``section.name`` (``encoder.max_budget``) so a settings panel
    can show the message next to it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field: str = field
        self.message = message


class EncoderError(FramewiseError):
    """The vision encoder failed (for example while capturing CUDA graphs)."""


class EmptyQuestionError(FramewiseError):
    """The question is empty (or only white space)."""

    def __init__(self) -> None:
        super().__init__("Type a question first.")


class QuestionTooLongError(FramewiseError):
    """The question, or the conversation with it, does not fit the model's context."""


class ContextFullError(FramewiseError):
    """An item was not added: with it, the conversation's clips and pictures leave the model's
    context no room for a question and one answer."""


class CancelledError(FramewiseError):
    """The work was cancelled by the user."""


class ConversationStoreError(FramewiseError):
    """The file that keeps past conversations cannot be opened, read or written."""


class ConversationGoneError(ConversationStoreError):
    """The kept conversation being written to is no longer kept: it was deleted (in another window)."""


class ExportError(FramewiseError):
    """A conversation or a plot could not be written to the chosen file."""


class ServerError(FramewiseError):
    """The vLLM server (Settings ▸ Backend, ``--server``) could not give an answer.

    ``field`` names the setting to change. Nothing is retried on its own: the person decides.
    """

    field = "backend.server_url"


class ServerUnreachableError(ServerError):
    """No connection to the server: nothing listens there, or the name does not resolve."""


class ServerTlsError(ServerError):
    """The TLS handshake failed: the certificate is not trusted, or the address speaks plain http."""


class ServerAuthError(ServerError):
    """The server refused the API key (401) or the key may not use it (403)."""

    field = "backend.api_key"


class ServerModelError(ServerError):
    """The server does not serve the model named in the settings (404, or absent from /v1/models)."""

    field = "backend.server_model"


class ServerRequestError(ServerError):
    """The server refused the request as invalid (400); the message quotes the server's reason."""

    field = None


class ServerContextError(ServerError):
    """The question with the conversation's items, its turns and one answer does not fit the server's context."""

    field = None


class ServerLayoutError(ServerError):
    """The conversation's items cannot reach a vLLM server laid out as the model's prompt lays them out."""

    field = None


class ServerModelGoneError(ServerError):
    """The server no longer serves the model it chose when none was named (it was restarted under another name)."""

    field = None


class ServerFailedError(ServerError):
    """The server answered with an error of its own (5xx) or with something that is not vLLM's API."""

    field = None


class ServerAddressError(ServerFailedError):
    """Something answers at the address, but it is not a vLLM server's root (``/health`` is missing)."""

    field = "backend.server_url"


class ServerTimeoutError(ServerError):
    """The server did not answer within the timeout."""

    field = "backend.timeout_s"


class ServerAnswerTimeoutError(ServerTimeoutError):
    """The server's answer took longer, in all, than the answer timeout."""

    field = "backend.answer_timeout_s"


class ServerStreamCutError(ServerError):
    """The answer's stream ended before the server said it was complete."""

    field = None


class OutputWriteError(FramewiseError):
    """The answer could not be written where the program's output goes (a full disk, a closed pipe)."""


class OutOfMemoryError(FramewiseError):
    """The work needed more memory (GPU or CPU) than the machine has."""


class UnexpectedError(FramewiseError):
    """An exception Framewise did not anticipate: a bug; the traceback is in the log."""


@dataclass(frozen=True)
class ErrorReport:
    """What a person is told about a failure.

    ``kind`` is the error's class name (``OutOfMemoryError`` / ``UnexpectedError`` for exceptions
    Framewise did not raise itself), ``message`` is for a person, ``field`` the setting it is about
    (or ``None``), ``exit_code`` what the CLI exits with: 2 for a problem with the input or the
    settings, 1 for a bug.
    """

    kind: str
    message: str
    field: str | None = None
    exit_code: int = 2


def describe_error(error: BaseException) -> ErrorReport:
    """The one mapping from an exception to what a person sees (CLI and window alike).

    An unexpected exception is logged here with its traceback (the message points at the log);
    it is never shown to the person.
    """
    if isinstance(error, FramewiseError):
        return ErrorReport(type(error).__name__, str(error), error.field)
    if is_out_of_memory(error):
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        log.warning("out of memory: %s", first_line)
        return ErrorReport(
            OutOfMemoryError.__name__,
            "Out of memory. Lower Sampling ▸ max frames or max pixels (--max-frames, --max-pixels), the largest "
            f"token budget, or the model's size, then try again. ({first_line[:200]})",
        )
    log.error("unexpected error", exc_info=(type(error), error, error.__traceback__))
    where = log_file()
    message = f"Unexpected error ({type(error).__name__}) — see the log at {where}" if where else (
        f"Unexpected error ({type(error).__name__}): {error}"
    )
    return ErrorReport(UnexpectedError.__name__, message, None, exit_code=1)


def is_out_of_memory(error: BaseException) -> bool:
    """True for torch's CUDA out-of-memory error, the CPU allocator's refusal, and ``MemoryError``."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(sign in text for sign in _OUT_OF_MEMORY_SIGNS)


def log_file() -> Path | None:
    """The log file the application set up (:func:`set_log_file`), where the tracebacks go; ``None`` before."""
    return _log_file


def set_log_file(path: Path | None) -> None:
    """Record where the application's log file is, for the messages :func:`describe_error` writes."""
    global _log_file
    _log_file = path
