"""The one failure record of the remote transport, and how it maps onto a lane failure."""

from __future__ import annotations

from enum import StrEnum

from attrs import frozen

from eps.core.outcome import FailureKind, LaneFailure

#: Messages are one line, at most this long.
MAX_MESSAGE = 300


class RemoteErrorKind(StrEnum):
    """A closed set: what went wrong reaching a machine or moving files."""

    UNREACHABLE = "unreachable"  # no sshd answered (refused, timed out, no route, closed early)
    AUTH = "auth"  # sshd answered and refused our key
    HOST_KEY = "host_key"  # the host key differs from the one eps recorded for that address
    TRANSFER = "transfer"  # rsync failed after the connection was made
    COMMAND = "command"  # the remote command ran and failed
    KEY = "key"  # eps's own key pair cannot be made or used (permissions, ssh-keygen)
    TOO_BIG = "too_big"  # the workdir is over the size limit
    MISSING_TOOL = "missing_tool"  # ssh, rsync or ssh-keygen is not installed here


_LANE_KIND = {
    RemoteErrorKind.UNREACHABLE: FailureKind.UNREACHABLE,
    RemoteErrorKind.AUTH: FailureKind.AUTH,
    RemoteErrorKind.HOST_KEY: FailureKind.AUTH,
    RemoteErrorKind.TRANSFER: FailureKind.TRANSIENT,
    RemoteErrorKind.COMMAND: FailureKind.TRANSIENT,
    RemoteErrorKind.KEY: FailureKind.AUTH,
    RemoteErrorKind.TOO_BIG: FailureKind.INVALID_REQUEST,
    RemoteErrorKind.MISSING_TOOL: FailureKind.UNREACHABLE,
}


@frozen
class RemoteFailure:
    """A transport step failed.  ``message`` is one line, safe to show: it never
    carries an environment value or a key (it is built from ssh/rsync's stderr,
    paths and exit codes only)."""

    kind: RemoteErrorKind
    message: str

    @classmethod
    def of(cls, kind: RemoteErrorKind, message: str) -> RemoteFailure:
        return cls(kind, one_line(message))

    def lane_failure(self) -> LaneFailure:
        """The same failure as the executor classifies rungs (``eps.core.outcome``)."""
        return LaneFailure(_LANE_KIND[self.kind], self.message, code=self.kind.value)


def one_line(text: str) -> str:
    """``text`` on one line, at most :data:`MAX_MESSAGE` characters.  A longer one keeps its
    start and its end, cut in the middle: the cause (rsync's ``No space left on device (28)``,
    ssh's ``Connection refused``) comes last, after the paths, and long paths must not push it out."""
    text = " ".join(text.split())
    if len(text) <= MAX_MESSAGE:
        return text
    head = (MAX_MESSAGE - 5) // 2
    return f"{text[:head]} ... {text[len(text) - (MAX_MESSAGE - 5 - head):]}"
