"""The HTTP core every area of the SDK builds on: auth header, error parsing, pagination."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from aicenter import __version__
from aicenter.client.errors import ApiError, ConnectionFailed
from aicenter.client.models import ApiModel, Page

M = TypeVar("M", bound=ApiModel)

API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT_S = 30.0
PAGE_SIZE = 200  # items per request when iterating a whole list: few round trips, modest responses


class _Unset:
    """Marks a PATCH field as "leave unchanged", so that ``None`` can mean "clear it"."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


def body(**fields: Any) -> dict[str, Any]:
    """A request body without the fields left UNSET."""
    return {k: v for k, v in fields.items() if v is not UNSET}


def query(**params: Any) -> dict[str, Any]:
    """Query parameters without the ones that are None; booleans as the server parses them."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None or value is UNSET:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


def _error_from(response: httpx.Response) -> ApiError:
    request_id = response.headers.get("x-request-id")
    try:
        error = response.json()["error"]
        return ApiError(
            response.status_code,
            str(error.get("code") or "error"),
            str(error.get("message") or response.reason_phrase),
            dict(error.get("details") or {}),
            request_id=request_id,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        # Not our error format: a proxy in between, or not an aicenter server at all.
        text = response.text.strip().splitlines()[0][:200] if response.text.strip() else response.reason_phrase
        return ApiError(response.status_code, f"http_{response.status_code}", text, request_id=request_id)


class BaseClient:
    """Holds the connection; the area mixins add one method per endpoint."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        verify: bool | str = True,
    ) -> None:
        """Connect to an aicenter server.

        Args:
            base_url: The server's URL, e.g. ``http://127.0.0.1:8000`` (a trailing ``/api/v1`` is accepted).
            token: A bearer token (from :meth:`login` or ``aicenter token create``); None for public calls.
            timeout: Seconds to wait for connect, read and write.
            transport: An httpx transport to use instead of the network (tests, proxies).
            verify: TLS verification: True, False, or the path of a CA bundle.
        """
        base = base_url.rstrip("/")
        if base.endswith(API_PREFIX):
            base = base[: -len(API_PREFIX)]
        self.base_url = base
        self.token = token
        self._http = httpx.Client(
            base_url=base + API_PREFIX,
            timeout=timeout,
            transport=transport,
            verify=verify,
            headers={"User-Agent": f"aicenter-sdk/{__version__}", "Accept": "application/json"},
        )

    @classmethod
    def from_env(cls, **kwargs: Any) -> Self:
        """A client for the server named by ``AICENTER_API_URL`` and ``AICENTER_TOKEN`` (set inside jobs)."""
        url = os.environ.get("AICENTER_API_URL") or os.environ.get("AICENTER_SERVER") or "http://127.0.0.1:8000"
        return cls(url, os.environ.get("AICENTER_TOKEN"), **kwargs)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r}, token={'set' if self.token else None})"

    # -- requests ----------------------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(self.base_url, f"timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        if response.is_error:
            raise _error_from(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError(response.status_code, "bad_response", f"{method} {path}: the answer is not JSON") from exc

    def _one(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        return model.model_validate(self._json(method, path, **kwargs))

    def _array(self, model: type[M], path: str, params: Mapping[str, Any] | None = None) -> list[M]:
        return [model.model_validate(item) for item in self._json("GET", path, params=params)]

    def _page(
        self,
        model: type[M],
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[M]:
        data = self._json("GET", path, params={**(params or {}), **query(limit=limit, cursor=cursor)})
        return Page[model](  # type: ignore[valid-type]
            items=[model.model_validate(item) for item in data["items"]], next_cursor=data.get("next_cursor")
        )

    def _iterate(self, fetch: Callable[[str | None], Page[M]]) -> Iterator[M]:
        """Every item of a list, following cursors lazily: the next page is fetched when it is reached."""
        cursor: str | None = None
        while True:
            page = fetch(cursor)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor
