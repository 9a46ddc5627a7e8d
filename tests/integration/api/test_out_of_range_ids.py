"""Integers no database column can hold, generated from the OpenAPI document: every operation, whoever wrote it.

Ids are 64-bit integers in both databases. An id beyond that range (2**63, 10**30) sent to any operation as a
path parameter, an ``*_id`` query parameter or an ``*_id`` field of a JSON body must be refused with 422
``validation_failed`` naming it (or, for a path, a 404), in the standard error body, and never reach the
database, where SQLite's driver raises OverflowError and asyncpg a DataError: a 500. The caller is a platform
admin, so that authorization refuses nothing first.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.factories import admin_login

BEYOND_INT64 = (2**63, 10**30)
_METHODS = ("get", "post", "put", "patch", "delete")
# Required headers get valid values, so that their absence does not hide the check of the id.
_HEADERS = {"X-Part-Sha256": "0" * 64, "Content-Type": "application/octet-stream"}


def _is_integer(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "integer" or any(s.get("type") == "integer" for s in schema.get("anyOf", []))


def _cases(app: FastAPI) -> list[tuple[str, str, str, str]]:
    """(method, path template, parameter name, "path" or "query") for every integer id parameter of the API."""
    cases = []
    for path, item in sorted(app.openapi()["paths"].items()):
        if not path.startswith("/api/"):
            continue
        for method in _METHODS:
            if method not in item:
                continue
            for param in item[method].get("parameters", []):
                where, name = param["in"], param["name"]
                is_id = where == "path" or name.endswith("_id")
                if where in ("path", "query") and is_id and _is_integer(param.get("schema", {})):
                    cases.append((method, path, name, where))
    return cases


def _headers(app: FastAPI, method: str, path: str) -> dict[str, str]:
    spec = app.openapi()["paths"][path][method]
    names = [p["name"] for p in spec.get("parameters", []) if p["in"] == "header" and p.get("required")]
    return {name: _HEADERS[name] for name in names if name in _HEADERS}


def _url(app: FastAPI, method: str, path: str, target: str, where: str, value: int) -> str:
    """``path`` with ``target`` set to ``value`` and every other path parameter to a plausible value."""
    spec = app.openapi()["paths"][path][method]
    for param in spec.get("parameters", []):
        if param["in"] != "path":
            continue
        name = param["name"]
        fill = str(value) if name == target else ("1" if _is_integer(param.get("schema", {})) else "x")
        path = path.replace(f"{{{name}}}", fill)
    return f"{path}?{target}={value}" if where == "query" else path


async def test_ids_beyond_int64_are_refused_by_every_operation(app: FastAPI, client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    cases = _cases(app)
    assert len(cases) > 40, "the OpenAPI document lost its id parameters"
    wrong: list[str] = []
    for method, path, name, where in cases:
        for value in BEYOND_INT64:
            url = _url(app, method, path, name, where, value)
            # An empty JSON body: body errors may come too, but the id's own error must be among them.
            headers = {**admin.headers, **_headers(app, method, path)}
            body: dict[str, Any] = {}
            if method in ("post", "put", "patch"):
                body = {"content": b""} if "Content-Type" in headers else {"json": {}}
            try:
                response = await client.request(method.upper(), url, headers=headers, **body)
            except Exception as exc:  # the ASGI transport re-raises what became a 500
                wrong.append(f"{method.upper()} {url}: 500 {exc!r}")
                continue
            case = f"{method.upper()} {url}: {response.status_code} {response.text[:200]}"
            if response.status_code not in (404, 422):
                wrong.append(case)
                continue
            error = response.json().get("error", {})
            if set(error) != {"code", "message", "details"}:
                wrong.append(case)
            elif response.status_code == 422:
                details = error["details"]
                fields = {details.get("field")} | {e["field"] for e in details.get("errors", [])}
                if error["code"] != "validation_failed" or name not in fields:
                    wrong.append(case)
    assert not wrong, f"{len(wrong)} of {2 * len(cases)} requests were not refused on the id:\n" + "\n".join(wrong)


@pytest.mark.parametrize("value", ["0", "-1"])
async def test_ids_below_one_are_refused(client: httpx.AsyncClient, value: str) -> None:
    admin = await admin_login(client)
    response = await client.get(f"/api/v1/jobs/{value}", headers=admin.headers)
    assert response.status_code == 422
    assert response.json()["error"]["details"]["field"] == "job_id"


def _body_cases(app: FastAPI) -> list[tuple[str, str, str]]:
    """(method, path template, field) for every integer ``*_id`` field at the top of a JSON request body."""
    document = app.openapi()
    cases = []
    for path, item in sorted(document["paths"].items()):
        for method in _METHODS:
            content = item.get(method, {}).get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            if "$ref" in schema:
                schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
            for name, field in schema.get("properties", {}).items():
                if name.endswith("_id") and _is_integer(field):
                    cases.append((method, path, name))
    return cases


async def test_body_ids_beyond_int64_are_refused_naming_the_field(app: FastAPI, client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    cases = _body_cases(app)
    assert len(cases) >= 8, "the OpenAPI document lost its body id fields"
    wrong: list[str] = []
    for method, path, name in cases:
        url = _url(app, method, path, "", "path", 0)  # every path parameter a plausible value
        for value in BEYOND_INT64:
            try:
                response = await client.request(method.upper(), url, headers=admin.headers, json={name: value})
            except Exception as exc:  # the ASGI transport re-raises what became a 500
                wrong.append(f"{method.upper()} {url} {name}={value}: 500 {exc!r}")
                continue
            fields = {e["field"] for e in response.json().get("error", {}).get("details", {}).get("errors", [])}
            if response.status_code != 422 or name not in fields:
                wrong.append(f"{method.upper()} {url} {name}={value}: {response.status_code} {response.text[:200]}")
    assert not wrong, f"{len(wrong)} of {2 * len(cases)} requests were not refused on the id:\n" + "\n".join(wrong)
