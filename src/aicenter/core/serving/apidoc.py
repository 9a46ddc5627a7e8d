"""A service's generated API document: an OpenAPI 3.1 description of the endpoints its stable revision answers
under ``/serve/<workspace>/<service>`` and ready-to-paste client snippets (curl, httpx, tritonclient).

Pure: the caller passes the service's name, URL path, the server's public base URL and the stable revision's
signature and runtime (both may be missing: a service with no ready revision, a model without a signature).
Model-server runtimes speak the Open Inference Protocol v2; ``command`` runtimes are the user's own server,
documented as an OpenAI-compatible ``/v1`` API since that is what the gateway forwards for them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["KEY_PLACEHOLDER", "ApiDoc", "build_api_doc", "example_body"]

KEY_PLACEHOLDER = "<YOUR_API_KEY>"
_COMMAND_RUNTIME = "command"


@dataclass(frozen=True)
class ApiDoc:
    """The document and the snippets the console shows next to it."""

    openapi: dict[str, Any]
    curl: str
    python_httpx: str
    python_triton: str | None  # None for command runtimes (not an OIP v2 server)
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]


def _tensors(signature: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    """The signature's tensors, normalised; anything malformed is skipped (the metadata is user-supplied)."""
    out: list[dict[str, Any]] = []
    for t in (signature or {}).get(key) or []:
        if isinstance(t, dict) and isinstance(t.get("name"), str):
            shape = t.get("shape") if isinstance(t.get("shape"), list) else [-1]
            out.append({"name": t["name"], "datatype": str(t.get("datatype") or "FP32"), "shape": shape})
    return out


def _example_data(datatype: str, shape: list[Any]) -> list[Any]:
    """A flat, correctly sized example for ``shape`` (variable dimensions taken as 1)."""
    size = 1
    for dim in shape:
        size *= dim if isinstance(dim, int) and dim > 0 else 1
    size = min(size, 16)  # a snippet, not a payload: big tensors get a short example the user replaces
    if datatype == "BYTES":
        return ["text"] * size
    if datatype == "BOOL":
        return [True] * size
    if datatype.startswith(("INT", "UINT")):
        return [0] * size
    return [0.0] * size


def example_body(signature: dict[str, Any] | None) -> dict[str, Any]:
    """An OIP v2 infer request body that matches ``signature`` (one placeholder input when it is missing)."""
    inputs = _tensors(signature, "inputs") or [{"name": "input", "datatype": "FP32", "shape": [1]}]
    body_inputs = []
    for t in inputs:
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in t["shape"]]
        data = _example_data(t["datatype"], t["shape"])
        if len(data) != _product(shape):
            shape = [len(data)]
        body_inputs.append({"name": t["name"], "datatype": t["datatype"], "shape": shape, "data": data})
    return {"inputs": body_inputs}


def _product(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _tensor_schema(tensors: list[dict[str, Any]], *, with_data: bool) -> dict[str, Any]:
    """An array schema whose items are one of the named tensors (or any tensor when none are known)."""
    base: dict[str, Any] = {
        "$ref": "#/components/schemas/RequestInput" if with_data else "#/components/schemas/ResponseOutput"
    }
    if not tensors:
        return {"type": "array", "items": base}
    variants = [
        {
            "allOf": [base],
            "properties": {
                "name": {"const": t["name"]},
                "datatype": {"const": t["datatype"]},
                "x-shape": t["shape"],
            },
            "description": f"{t['name']}: {t['datatype']} {t['shape']}",
        }
        for t in tensors
    ]
    return {"type": "array", "items": {"oneOf": variants}, "minItems": len(tensors) if with_data else 0}


def _error_responses() -> dict[str, Any]:
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {
        "400": {"description": "Bad request", **ref},
        "401": {"description": "Missing or unknown key", **ref},
        "404": {"description": "No such model", **ref},
        "500": {"description": "Inference failed", **ref},
        "503": {"description": "No ready replica", **ref},
    }


def _json(schema_ref: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}}},
    }


def _oip_paths(model: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    errors = _error_responses()
    model_path = f"/v2/models/{model}"
    return {
        "/v2/health/live": {
            "get": {
                "operationId": "live",
                "summary": "Server liveness",
                "responses": {"200": {"description": "Live"}, **errors},
            }
        },
        "/v2/health/ready": {
            "get": {
                "operationId": "ready",
                "summary": "Server readiness",
                "responses": {"200": {"description": "Ready"}, **errors},
            }
        },
        model_path: {
            "get": {
                "operationId": "modelMetadata",
                "summary": "Model metadata",
                "responses": {"200": _json("ModelMetadata", "Metadata"), **errors},
            }
        },
        f"{model_path}/ready": {
            "get": {
                "operationId": "modelReady",
                "summary": "Model readiness",
                "responses": {"200": {"description": "Ready"}, **errors},
            }
        },
        f"{model_path}/infer": {
            "post": {
                "operationId": "infer",
                "summary": "Run inference",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InferenceRequest"}}},
                },
                "responses": {"200": _json("InferenceResponse", "Outputs"), **errors},
            }
        },
    }


def _oip_schemas(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    tensor_props: dict[str, Any] = {
        "name": {"type": "string"},
        "datatype": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer"}},
    }
    tensor_meta = {"type": "object", "required": ["name", "datatype", "shape"], "properties": tensor_props}
    return {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
        "TensorMetadata": tensor_meta,
        "ModelMetadata": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "versions": {"type": "array", "items": {"type": "string"}},
                "platform": {"type": "string"},
                "inputs": {"type": "array", "items": {"$ref": "#/components/schemas/TensorMetadata"}},
                "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/TensorMetadata"}},
            },
        },
        "RequestInput": {
            "type": "object",
            "required": ["name", "datatype", "shape", "data"],
            "properties": {**tensor_props, "parameters": {"type": "object"}, "data": {"type": "array"}},
        },
        "ResponseOutput": {
            "type": "object",
            "required": ["name", "datatype", "shape", "data"],
            "properties": {**tensor_props, "parameters": {"type": "object"}, "data": {"type": "array"}},
        },
        "InferenceRequest": {
            "type": "object",
            "required": ["inputs"],
            "properties": {
                "id": {"type": "string"},
                "parameters": {"type": "object"},
                "inputs": _tensor_schema(inputs, with_data=True),
                "outputs": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
            },
        },
        "InferenceResponse": {
            "type": "object",
            "required": ["model_name", "outputs"],
            "properties": {
                "model_name": {"type": "string"},
                "model_version": {"type": "string"},
                "id": {"type": "string"},
                "outputs": _tensor_schema(outputs, with_data=False),
            },
        },
    }


def _openai_paths() -> dict[str, Any]:
    errors = _error_responses()
    body = {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}
    ok = {
        "description": "OK (JSON, or text/event-stream when streaming)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
    return {
        "/v1/models": {"get": {"operationId": "listModels", "summary": "Models", "responses": {"200": ok, **errors}}},
        "/v1/chat/completions": {
            "post": {
                "operationId": "chatCompletions",
                "summary": "Chat completion",
                "requestBody": body,
                "responses": {"200": ok, **errors},
            }
        },
        "/v1/completions": {
            "post": {
                "operationId": "completions",
                "summary": "Completion",
                "requestBody": body,
                "responses": {"200": ok, **errors},
            }
        },
    }


def build_api_doc(
    *,
    service_name: str,
    url_path: str,
    base_url: str,
    signature: dict[str, Any] | None,
    runtime: str | None,
    revision: int | None = None,
) -> ApiDoc:
    """The service's OpenAPI document and snippets.

    Args:
        service_name: The model name the v2 paths carry (the gateway requires it to be the service's name).
        url_path: ``/serve/<workspace>/<service>``.
        base_url: The server's public base URL (``settings.api_url``).
        signature: The stable revision's ``{"inputs": [...], "outputs": [...]}``, or None.
        runtime: The stable revision's runtime; ``command`` documents the OpenAI-compatible ``/v1`` API.
        revision: The stable revision's number, for the document's version.
    """
    server_url = base_url.rstrip("/") + url_path
    inputs, outputs = _tensors(signature, "inputs"), _tensors(signature, "outputs")
    is_command = runtime == _COMMAND_RUNTIME
    components: dict[str, Any] = {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "A service key or a member's API token"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
        },
        "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}},
    }
    if is_command:
        paths = _openai_paths()
    else:
        paths = _oip_paths(service_name, inputs, outputs)
        components["schemas"] = _oip_schemas(inputs, outputs)
    openapi: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": f"{service_name} inference API",
            "version": str(revision) if revision is not None else "0",
            "description": "OpenAI-compatible API served by the service's own command"
            if is_command
            else "Open Inference Protocol v2 (KServe REST predict v2)",
        },
        "servers": [{"url": server_url}],
        "security": [{"bearer": []}, {"apiKey": []}],
        "paths": paths,
        "components": components,
    }
    if is_command:
        chat = {"model": service_name, "messages": [{"role": "user", "content": "Hello"}]}
        curl = (
            f"curl -X POST {server_url}/v1/chat/completions \\\n"
            f"  -H 'Authorization: Bearer {KEY_PLACEHOLDER}' -H 'Content-Type: application/json' \\\n"
            f"  -d '{json.dumps(chat)}'"
        )
        httpx_snippet = (
            "import httpx\n\n"
            f'r = httpx.post("{server_url}/v1/chat/completions",\n'
            f'               headers={{"Authorization": "Bearer {KEY_PLACEHOLDER}"}},\n'
            f"               json={chat!r}, timeout=60)\n"
            "r.raise_for_status()\nprint(r.json())\n"
        )
        return ApiDoc(openapi, curl, httpx_snippet, None, inputs, outputs)
    body = example_body(signature)
    infer_url = f"{server_url}/v2/models/{service_name}/infer"
    curl = (
        f"curl -X POST {infer_url} \\\n"
        f"  -H 'Authorization: Bearer {KEY_PLACEHOLDER}' -H 'Content-Type: application/json' \\\n"
        f"  -d '{json.dumps(body)}'"
    )
    httpx_snippet = (
        "import httpx\n\n"
        f'r = httpx.post("{infer_url}",\n'
        f'               headers={{"Authorization": "Bearer {KEY_PLACEHOLDER}"}},\n'
        f"               json={body!r}, timeout=60)\n"
        'r.raise_for_status()\nprint(r.json()["outputs"])\n'
    )
    host = server_url.split("://", 1)[-1]
    ssl = server_url.startswith("https://")
    lines = ["import numpy as np", "import tritonclient.http as httpclient", ""]
    # tritonclient takes "host:port/base-path": the gateway's prefix is the base path
    lines.append(f'client = httpclient.InferenceServerClient("{host}", ssl={ssl})')
    lines.append(f'headers = {{"Authorization": "Bearer {KEY_PLACEHOLDER}"}}')
    lines.append("inputs = []")
    for t in body["inputs"]:
        lines.append(f'x = httpclient.InferInput("{t["name"]}", {t["shape"]!r}, "{t["datatype"]}")')
        lines.append(f"x.set_data_from_numpy(np.array({t['data']!r}).reshape({t['shape']!r}))")
        lines.append("inputs.append(x)")
    lines.append(f'result = client.infer("{service_name}", inputs, headers=headers)')
    lines.append("print(result.get_response())")
    triton = "\n".join(lines) + "\n"
    return ApiDoc(openapi, curl, httpx_snippet, triton, inputs, outputs)
