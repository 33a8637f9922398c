"""What an API server's error answer means, as one tree of exceptions.

kubernetes_asyncio raises one `ApiException` for every answer that is not 2xx. Code that
branches on it asks what happened (gone, changed meanwhile, refused for good, worth a
retry), so the status becomes a class in one place, `KubeError.of` (`api_errors` applies it
to a block of requests), and nothing above it compares status codes::

    KubeError                 the status (0: no answer) and the API server's own message
     ├── Unreachable          no answer, or none in time                        transient
     ├── ServerError          5xx: the API server failed                        transient
     ├── ClientError          4xx: this request cannot succeed as it is
     │    ├── Invalid         400, 422: a malformed request or invalid object
     │    ├── Forbidden       403: RBAC does not allow it
     │    ├── Refused         400, 403, 422 of a create: a quota, an admission policy or
     │    │                   an invalid object; the same create never succeeds
     │    ├── NotFound        404
     │    ├── RequestTimeout  408                                               transient
     │    ├── Conflict        409: the object changed since it was read         transient
     │    ├── AlreadyExists   409: a create of a name that is taken
     │    ├── VersionExpired  410: a watch's or a listing's version is too old
     │    └── TooManyRequests 429: the API server sheds load                    transient
     ├── UserApiError         a request of the command line's kubeconfig user, by status
     └── CallerApiError       a request made with a gateway caller's token, by status

`transient` follows from the class: whether the same request may succeed when retried.
The last two are not split by status: the command line and the gateway turn the status
into an exit code or an HTTP answer, and catch only the errors of their own requests.
Some classes also derive from the builtin error they were caught as before the tree
(`LookupError`, `RuntimeError`), so every `except` keeps catching what it caught.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import ClassVar, Self, TypeVar

from kubernetes_asyncio.client.exceptions import ApiException

T = TypeVar("T")

#: Statuses of a create that a retry of the same create cannot change.
REFUSAL_CODES = frozenset({400, 403, 422})


class KubeError(Exception):
    """The API server answered with an error status, or did not answer (status 0)."""

    #: The status of an error made without one (tests, fakes).
    STATUS: ClassVar[int] = 0
    TRANSIENT: ClassVar[bool] = False
    #: How much of the API server's explanation is kept.
    MESSAGE_LIMIT: ClassVar[int] = 2048

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.status = self.STATUS if status is None else status
        self.message = message

    @property
    def transient(self) -> bool:
        """Whether retrying the same request may succeed."""
        return self.TRANSIENT

    @classmethod
    def of(cls, exc: ApiException, *, creating: bool = False) -> KubeError:
        """The error `exc` stands for, with the API server's own message (its Status
        body) over the reason phrase. `creating`: a 400, 403 or 422 is a `Refused`."""
        status = int(exc.status or 0)
        message, reason = str(exc.reason or ""), ""
        try:
            body = json.loads(exc.body or "{}")
            message = str(body.get("message") or message)
            reason = str(body.get("reason") or "")
        except (ValueError, AttributeError):
            pass
        return cls.answered(status, message, reason=reason, creating=creating)

    @classmethod
    def answered(
        cls, status: int, message: str, *, reason: str = "", creating: bool = False
    ) -> KubeError:
        """The error of an answer with `status`, `message` and Status `reason`."""
        return _class_of(status, reason, creating=creating).made(status, message)

    @classmethod
    def made(cls, status: int, message: str) -> Self:
        return cls(message[: cls.MESSAGE_LIMIT], status)


class Unreachable(KubeError):
    TRANSIENT = True


class ServerError(KubeError):
    STATUS = 500
    TRANSIENT = True


class ClientError(KubeError):
    STATUS = 400


class Invalid(ClientError):
    STATUS = 400


class Forbidden(ClientError):
    STATUS = 403


class Refused(ClientError, RuntimeError):
    """The API server refused a create for good: a ResourceQuota, a LimitRange, an
    admission webhook or policy, an invalid object. Retrying the same create cannot help."""

    STATUS = 403
    MESSAGE_LIMIT = 1024

    @classmethod
    def made(cls, status: int, message: str) -> Self:
        """Its text names the status: it is shown as the reason a call failed."""
        return cls(f"{status}: {message}"[: cls.MESSAGE_LIMIT], status)


class NotFound(ClientError, LookupError):
    STATUS = 404


class RequestTimeout(ClientError):
    STATUS = 408
    TRANSIENT = True


class Conflict(ClientError, RuntimeError):
    STATUS = 409
    TRANSIENT = True


class AlreadyExists(ClientError, RuntimeError):
    STATUS = 409


class VersionExpired(ClientError):
    STATUS = 410


class TooManyRequests(ClientError):
    STATUS = 429
    TRANSIENT = True


def transient_status(status: int) -> bool:
    """Whether an answer with `status` may go otherwise when asked again."""
    return status in (0, 408, 409, 429) or status >= 500


class UserApiError(KubeError, RuntimeError):
    """The API server refused or failed a request of the command line's user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message, status)

    @property
    def transient(self) -> bool:
        return transient_status(self.status)

    @classmethod
    def answered(
        cls, status: int, message: str, *, reason: str = "", creating: bool = False
    ) -> KubeError:
        return cls.made(status, message)

    @classmethod
    def made(cls, status: int, message: str) -> Self:
        return cls(status, message[: cls.MESSAGE_LIMIT])


class CallerApiError(UserApiError):
    """The API server refused or failed a gateway caller's request; `status` is its HTTP
    status (0 when it could not be reached) and `message` its own explanation."""

    MESSAGE_LIMIT = 1024

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


_BY_STATUS: dict[int, type[KubeError]] = {
    0: Unreachable,
    400: Invalid,
    403: Forbidden,
    404: NotFound,
    408: RequestTimeout,
    409: Conflict,
    410: VersionExpired,
    422: Invalid,
    429: TooManyRequests,
}


def _class_of(status: int, reason: str, *, creating: bool) -> type[KubeError]:
    if creating and status in REFUSAL_CODES:
        return Refused
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists
    if status >= 500:
        return ServerError
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ClientError if 400 <= status < 500 else KubeError


@contextmanager
def api_errors(*, creating: bool = False) -> Iterator[None]:
    """Raise each `ApiException` of the block as the `KubeError` it stands for."""
    try:
        yield
    except ApiException as exc:
        raise KubeError.of(exc, creating=creating) from exc


async def unless_absent(request: Awaitable[T]) -> T | None:
    """The answer to `request` (a read); None when the object does not exist."""
    try:
        with api_errors():
            return await request
    except NotFound:
        return None


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the request that raised `exc` may succeed: the API server was
    unreachable, overloaded (429) or failing (5xx), or a write conflicted."""
    if isinstance(exc, KubeError):
        return exc.transient
    if isinstance(exc, OSError | TimeoutError):
        return True
    if isinstance(exc, ApiException):  # one no `api_errors` block saw (a test's fake)
        return transient_status(int(exc.status or 0))
    # aiohttp's connection errors, without importing aiohttp here.
    return type(exc).__module__.startswith("aiohttp")
