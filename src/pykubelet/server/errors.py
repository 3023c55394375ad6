"""Kubernetes ``Status`` errors for the dev API server.

Every failure the server reports leaves as a ``meta/v1 Status`` object, because kubectl and
client-go decode the body of any non-2xx response as a Status and print
``Error from server (<reason>): <message>``.  Handlers raise :class:`StatusError`; the HTTP
middleware turns it into the JSON response.  Reasons and codes follow
``k8s.io/apimachinery/pkg/api/errors`` (NotFound 404, AlreadyExists 409, Conflict 409,
Invalid 422, BadRequest 400, Forbidden 403, Unauthorized 401, MethodNotAllowed 405,
Gone/Expired 410, RequestEntityTooLarge 413, UnsupportedMediaType 415, ServiceUnavailable 503).
"""

from __future__ import annotations

from typing import Any

from pykubelet.common.apistatus import status_object, success_status

__all__ = ["StatusError", "status_object", "success_status"]


class StatusError(Exception):
    """An error that is rendered as a Kubernetes Status object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        name: str | None = None,
        kind: str | None = None,
        group: str | None = None,
        causes: list[dict[str, str]] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.name = name
        self.kind = kind
        self.group = group
        self.causes = causes
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        return status_object(
            self.code,
            self.reason,
            self.message,
            name=self.name,
            kind=self.kind,
            group=self.group,
            causes=self.causes,
            retry_after=self.retry_after,
        )


def _qual(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> StatusError:
    return StatusError(404, "NotFound", f'{_qual(resource, group)} "{name}" not found',
                       name=name, kind=resource, group=group)


def already_exists(resource: str, name: str, group: str = "") -> StatusError:
    return StatusError(409, "AlreadyExists", f'{_qual(resource, group)} "{name}" already exists',
                       name=name, kind=resource, group=group)


def conflict(resource: str, name: str, group: str = "", why: str | None = None) -> StatusError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return StatusError(409, "Conflict",
                       f'Operation cannot be fulfilled on {_qual(resource, group)} "{name}": {why}',
                       name=name, kind=resource, group=group)


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


_CAUSE_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Not found", "FieldValueNotFound"),
)


def _cause_reason(message: str) -> str:
    return next((r for prefix, r in _CAUSE_REASONS if message.startswith(prefix)), "FieldValueInvalid")


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> StatusError:
    """422 Invalid with one cause per (field, message), as field.ErrorList renders them; the kind
    is group-qualified in the message (``Lease.coordination.k8s.io "x" is invalid: ...``)."""
    parts = [f"{f}: {m}" if f else m for f, m in causes]
    if len(parts) == 1:
        summary = parts[0]
    else:
        summary = "[" + ", ".join(parts) + "]"
    qualified = f"{kind}.{group}" if group and kind else kind
    return StatusError(
        422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', name=name, kind=kind, group=group,
        causes=[{"reason": _cause_reason(m), "message": m, "field": f} for f, m in causes],
    )


def invalid_options(kind: str, causes: list[tuple[str, str]]) -> StatusError:
    """A request option struct that fails validation: ``CreateOptions.meta.k8s.io "" is invalid``."""
    return invalid(kind, "", causes, "meta.k8s.io")


def expired(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)
