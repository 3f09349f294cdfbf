"""kvtool's exceptions: one base class, one subclass per exit class of the command-line tools.

Every failure of the library carries a stable reason code (``kvtool reasons`` lists them) and the
exit code ``kvtool`` would exit with; both are attributes of the raised exception.
"""


class Error(Exception):
    """A kvtool failure. ``.reason``: stable reason name (e.g. ``"STALE_SOURCE"``);
    ``.exit_code``: 1 invalid input, 2 usage, 3 I/O, 4 internal."""

    def __init__(self, message, reason="INTERNAL", exit_code=4):
        super().__init__(message)
        self.reason = reason
        self.exit_code = exit_code

    def __str__(self):
        return f"{self.reason}: {self.args[0]}"


class InvalidInputError(Error):
    """Exit code 1: a dump, artifact, manifest, key or store is invalid or does not match."""


class UsageError(Error, ValueError):
    """Exit code 2: a bad argument or option value."""


class IOError(Error, OSError):  # noqa: A001 - kvtool's I/O class, also an OSError
    """Exit code 3: a file could not be read or written, or memory could not be allocated."""


class InternalError(Error):
    """Exit code 4: a bug in kvtool."""
