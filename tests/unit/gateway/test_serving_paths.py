"""How the gateway reads a request's path and which paths a revision serves (the ASGI app itself is tested
end to end in tests/integration/gateway/test_serving_gateway.py)."""

from __future__ import annotations

import pytest

from aicenter.core.serving.routing import RevisionRoute, ServiceRoute, ServingProtocol
from aicenter.gateway.serving import _check_path, _Refusal, _split, _upstream_headers

V2 = RevisionRoute(1, 1, 100)
COMMAND = RevisionRoute(2, 2, 0, protocol=ServingProtocol.COMMAND)
SERVICE = ServiceRoute(1, "team", 3, "clf", (V2, COMMAND))


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"path": "/serve/team/clf/v2/models/clf/infer"}, ("team", "clf", "v2/models/clf/infer")),
        ({"path": "/serve/team/clf"}, ("team", "clf", "")),
        ({"path": "/x", "raw_path": b"/serve/team/clf/v2/a%2Fb?q=1"}, ("team", "clf", "v2/a%2Fb")),  # kept encoded
        # under a Starlette Mount("/serve") or a proxy's prefix: raw_path is the whole path
        ({"path": "/serve/t/s/v2", "raw_path": b"/serve/t/s/v2", "root_path": "/serve"}, ("t", "s", "v2")),
        ({"path": "/serve/t/s/v2", "raw_path": b"/api/serve/t/s/v2", "root_path": "/api"}, ("t", "s", "v2")),
    ],
)
def test_split(scope: dict[str, object], expected: tuple[str, str, str]) -> None:
    assert _split(scope) == expected


@pytest.mark.parametrize("path", ["/serve/", "/serve/team", "/serve//clf/v2", "/other/team/clf"])
def test_split_refuses_what_is_not_a_service_path(path: str) -> None:
    with pytest.raises(_Refusal) as refused:
        _split({"path": path})
    assert refused.value.status == 404


@pytest.mark.parametrize(
    ("revision", "rest", "allowed"),
    [
        (V2, "v2", True),
        (V2, "v2/health/ready", True),
        (V2, "v2/models/clf/infer", True),
        (V2, "v2/models/other/infer", False),
        (V2, "v1/chat/completions", False),
        (V2, "v2x", False),
        (COMMAND, "v1/chat/completions", True),
        (COMMAND, "anything/at/all", True),
    ],
)
def test_which_paths_a_revision_serves(revision: RevisionRoute, rest: str, allowed: bool) -> None:
    if allowed:
        _check_path(SERVICE, revision, rest)
    else:
        with pytest.raises(_Refusal):
            _check_path(SERVICE, revision, rest)


def test_credentials_and_hop_by_hop_headers_stay_behind() -> None:
    scope = {
        "headers": [
            (b"host", b"ai.example"),
            (b"authorization", b"Bearer secret"),
            (b"x-api-key", b"secret"),
            (b"connection", b"keep-alive"),
            (b"content-length", b"2"),
            (b"x-forwarded-for", b"10.0.0.1"),
            (b"content-type", b"application/json"),
        ],
        "client": ("10.0.0.2", 5555),
        "scheme": "https",
    }
    assert _upstream_headers(scope, "/serve/team/clf") == [
        (b"content-type", b"application/json"),
        (b"x-forwarded-for", b"10.0.0.1, 10.0.0.2"),
        (b"x-forwarded-host", b"ai.example"),
        (b"x-forwarded-proto", b"https"),
        (b"x-forwarded-prefix", b"/serve/team/clf"),
    ]
