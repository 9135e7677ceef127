"""The one error a ctk command reports: a message and the exit status the command ends with.

``ctk`` (cli.py) catches :class:`CtkError` and nothing else: it prints ``error: <message>`` on
stderr and exits with ``exit_code``. By convention 2 means the command cannot run as asked (a
recipe problem, an option that does not fit, a tracking store that does not answer, a run to
resume that does not match), 1 that it ran and failed or found nothing to show, 130 that it was
interrupted. The toolkit's own errors derive from it (``RecipeError``, ``LaunchError``,
``TrackingUnavailable``, ...); those that callers also catch as ``ValueError`` or
``RuntimeError`` keep that base as well. Exceptions of code outside the commands' reach (a
checkpoint, the trainer) become a CtkError where a command calls that code.
"""

from __future__ import annotations

__all__ = ["CtkError"]


class CtkError(Exception):
    """A problem a command reports in one message; ``exit_code`` is the command's exit status and
    ``label`` the word the message is printed after (``error``, or ``interrupted``)."""

    exit_code: int = 1
    label: str = "error"

    def __init__(self, message: str = "", exit_code: int | None = None, label: str | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        if label is not None:
            self.label = label
