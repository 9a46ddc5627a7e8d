"""The generated service API document: structurally valid OpenAPI 3.1, the signature's tensors named, the
snippets carry the real URL and a placeholder key."""

from __future__ import annotations

import ast
from typing import Any

from aicenter.core.serving.apidoc import KEY_PLACEHOLDER, build_api_doc, example_body

SIG = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}, {"name": "mask", "datatype": "BOOL", "shape": [2]}],
    "outputs": [{"name": "y", "datatype": "INT64", "shape": [-1]}],
}


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/")
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _doc(**kw: Any):
    args: dict[str, Any] = {
        "service_name": "iris",
        "url_path": "/serve/team/iris",
        "base_url": "https://ai.example.org/",
        "signature": SIG,
        "runtime": "onnx",
        "revision": 3,
    }
    return build_api_doc(**(args | kw))


def test_oip_document_is_structurally_valid() -> None:
    doc = _doc().openapi
    assert doc["openapi"] == "3.1.0"
    assert doc["servers"] == [{"url": "https://ai.example.org/serve/team/iris"}]
    assert doc["info"]["version"] == "3"
    assert set(doc["paths"]) == {
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/iris",
        "/v2/models/iris/ready",
        "/v2/models/iris/infer",
    }
    refs = _refs(doc)
    assert refs, "the document uses components"
    for ref in refs:
        assert _resolve(doc, ref) is not None
    for scheme in doc["security"]:
        (name,) = scheme
        assert name in doc["components"]["securitySchemes"]
    for item in doc["paths"].values():
        for op in item.values():
            assert op["responses"]["400"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"
            }


def test_infer_request_names_the_signature_inputs() -> None:
    doc = _doc().openapi
    inputs = doc["components"]["schemas"]["InferenceRequest"]["properties"]["inputs"]
    variants = inputs["items"]["oneOf"]
    assert [v["properties"]["name"]["const"] for v in variants] == ["x", "mask"]
    assert [v["properties"]["datatype"]["const"] for v in variants] == ["FP32", "BOOL"]
    assert variants[0]["properties"]["x-shape"] == [-1, 4]
    outputs = doc["components"]["schemas"]["InferenceResponse"]["properties"]["outputs"]["items"]["oneOf"]
    assert [v["properties"]["name"]["const"] for v in outputs] == ["y"]


def test_snippets_carry_url_and_placeholder_key_and_are_python() -> None:
    api = _doc()
    url = "https://ai.example.org/serve/team/iris/v2/models/iris/infer"
    assert url in api.curl
    assert KEY_PLACEHOLDER in api.curl
    assert url in api.python_httpx
    assert KEY_PLACEHOLDER in api.python_httpx
    assert api.python_triton is not None
    assert "ai.example.org/serve/team/iris" in api.python_triton
    for code in (api.python_httpx, api.python_triton):
        ast.parse(code)
    assert [t["name"] for t in api.inputs] == ["x", "mask"]


def test_example_body_matches_shapes() -> None:
    body = example_body(SIG)
    x, mask = body["inputs"]
    assert x["shape"] == [1, 4]
    assert len(x["data"]) == 4
    assert mask["data"] == [True, True]
    assert example_body(None)["inputs"][0]["name"] == "input"


def test_missing_signature_still_documents_any_tensor() -> None:
    api = _doc(signature=None)
    inputs = api.openapi["components"]["schemas"]["InferenceRequest"]["properties"]["inputs"]
    assert inputs["items"] == {"$ref": "#/components/schemas/RequestInput"}
    assert api.inputs == []
    assert api.outputs == []


def test_command_runtime_documents_openai_v1() -> None:
    api = _doc(runtime="command", signature=None)
    assert set(api.openapi["paths"]) == {"/v1/models", "/v1/chat/completions", "/v1/completions"}
    assert api.python_triton is None
    assert "/serve/team/iris/v1/chat/completions" in api.curl
    for ref in _refs(api.openapi):
        _resolve(api.openapi, ref)
