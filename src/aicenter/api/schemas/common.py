"""Schemas shared by every router."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")


class Schema(BaseModel):
    """Response models read ORM objects directly."""

    model_config = ConfigDict(from_attributes=True)


class Input(BaseModel):
    """Request bodies refuse unknown fields, so a typo is an error rather than silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


class HealthOut(BaseModel):
    status: str = Field(description="``ok`` when the server reaches its database.")
    version: str = Field(description="The server's aicenter version.")


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = {}


class ErrorResponse(BaseModel):
    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (401, 403, 404, 409, 422, 429)
}
# Routers that start work (jobs, notebooks, services) may refuse it on billing: 402 ``insufficient_balance`` or
# ``spending_limit_reached`` (the workspace's billing policy, docs/billing.md).
ADMISSION_RESPONSES: dict[int | str, dict[str, Any]] = {**ERROR_RESPONSES, 402: {"model": ErrorResponse}}
