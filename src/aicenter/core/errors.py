"""Domain errors. Each carries a stable machine-readable ``code``; the API maps them to HTTP in one handler."""

from __future__ import annotations

from typing import Any, ClassVar


class AicenterError(Exception):
    """Base of every error a person can act on. ``code`` never changes once published."""

    code: ClassVar[str] = "error"
    status: ClassVar[int] = 400

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class ValidationFailed(AicenterError):
    """Input is malformed. ``details['field']`` names the path, e.g. ``tasks[0].resources.memory``."""

    code = "validation_failed"
    status = 422

    def __init__(self, message: str, *, field: str | None = None, details: dict[str, Any] | None = None):
        merged = dict(details or {})
        if field is not None:
            merged["field"] = field
        super().__init__(f"{field}: {message}" if field else message, details=merged)


class NotFound(AicenterError):
    code = "not_found"
    status = 404


class Conflict(AicenterError):
    code = "conflict"
    status = 409


class QuotaExceeded(AicenterError):
    code = "quota_exceeded"
    status = 409


class Forbidden(AicenterError):
    code = "forbidden"
    status = 403


class Unauthenticated(AicenterError):
    code = "unauthenticated"
    status = 401


class RateLimited(AicenterError):
    code = "rate_limited"
    status = 429


class Unavailable(AicenterError):
    code = "unavailable"
    status = 503


class InUse(Conflict):
    """The thing is used by running work; ``details['users']`` names who uses it (e.g. ``job 42``)."""

    code = "in_use"


class SingleUserMode(Conflict):
    """The server runs in single-user mode (no sandbox can be made here): a second user cannot be created."""

    code = "single_user_mode"


class HashMismatch(AicenterError):
    """Received bytes do not hash to what the sender declared; nothing of them is kept."""

    code = "hash_mismatch"
    status = 422


class UploadIncomplete(Conflict):
    """A commit came before every part arrived; ``details['missing']`` lists files and parts."""

    code = "upload_incomplete"


class UnsafeArchive(AicenterError):
    """An uploaded archive holds a link, a device, an unsafe path, or expands beyond the limits."""

    code = "unsafe_archive"
    status = 422


class InvalidTransition(Conflict):
    """A status change the lifecycle table does not allow (core/jobs/lifecycle.py)."""

    code = "invalid_transition"


class Damaged(AicenterError):
    """Stored content does not match its manifest (a blob of the wrong length, or missing); nothing of it is sent.

    A server-side fault (5xx), not the caller's: the damaged blob is quarantined, and an upload of the same content
    stores it again.
    """

    code = "damaged"
    status = 500


class RangeTooWide(AicenterError):
    """A series query would return more points than a chart can use; ``details['min_step_s']`` is the smallest
    step that fits."""

    code = "range_too_wide"
    status = 400


class UnknownSeries(NotFound):
    """No series of that name (among those the caller may see) matches the filters."""

    code = "unknown_series"


class SshKeyInvalid(ValidationFailed):
    """A public key that does not parse, is a private key, or is of a refused type or size (DSA, RSA < 2048)."""

    code = "ssh_key_invalid"


class InsufficientBalance(AicenterError):
    """New work refused: the paying workspace is in arrears (balance not positive). ``details`` holds
    ``workspace_id`` and ``balance``."""

    code = "insufficient_balance"
    status = 402


class SpendingLimitReached(InsufficientBalance):
    """New work refused: the workspace's charges this month reached its monthly limit. ``details`` holds
    ``workspace_id``, ``month_spend`` and ``monthly_limit``."""

    code = "spending_limit_reached"
