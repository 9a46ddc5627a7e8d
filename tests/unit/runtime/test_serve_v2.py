"""The V2 codec: JSON and binary tensor bodies in, numpy out and back, and the signature check."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from aicenter.runtime.serve_v2 import (
    DATATYPES,
    InferRequest,
    V2Error,
    encode_infer_response,
    parse_infer_request,
    validate_inputs,
)


def _binary(header: dict[str, object], *chunks: bytes) -> tuple[bytes, int]:
    raw = json.dumps(header).encode()
    return raw + b"".join(chunks), len(raw)


def _bytes_tensor(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(i)) + i for i in items)


def test_json_inputs_flat_or_nested_decode_to_the_shape() -> None:
    body = json.dumps(
        {
            "id": 7,
            "parameters": {"binary_data_output": True},
            "inputs": [
                {"name": "a", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4]]},
                {"name": "b", "shape": [3], "datatype": "BOOL", "data": [True, False, True]},
                {"name": "c", "shape": [1, 2], "datatype": "BYTES", "data": ["hé", "x"]},
            ],
        }
    ).encode()
    request = parse_infer_request(body)
    assert request.id == "7"
    assert request.binary_output
    assert request.inputs["a"].dtype == np.float32
    np.testing.assert_array_equal(request.inputs["a"], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(request.inputs["b"], [True, False, True])
    assert request.inputs["c"].tolist() == [["hé".encode(), b"x"]]


@pytest.mark.parametrize("datatype", [d for d in DATATYPES if d != "BYTES"])
def test_every_binary_datatype_round_trips(datatype: str) -> None:
    array = (np.arange(6) % 2 if datatype == "BOOL" else np.arange(6)).astype(DATATYPES[datatype]).reshape(2, 3)
    input_spec = {"name": "x", "shape": [2, 3], "datatype": datatype, "parameters": {"binary_data_size": array.nbytes}}
    body, length = _binary({"inputs": [input_spec], "parameters": {"binary_data_output": True}}, array.tobytes())
    request = parse_infer_request(body, length)
    np.testing.assert_array_equal(request.inputs["x"], array)
    assert request.inputs["x"].dtype == DATATYPES[datatype]
    out, out_length = encode_infer_response("m", "1", request, {"y": request.inputs["x"]})
    assert out_length is not None
    header = json.loads(out[:out_length])
    assert header["outputs"] == [
        {"name": "y", "datatype": datatype, "shape": [2, 3], "parameters": {"binary_data_size": array.nbytes}}
    ]
    assert out[out_length:] == array.tobytes()


def test_binary_and_json_inputs_mix_and_bytes_are_length_prefixed() -> None:
    words = _bytes_tensor(b"ab", b"", b"\xff\x00")
    floats = np.array([1.5, -2.0], dtype="<f8")
    body, length = _binary(
        {
            "inputs": [
                {"name": "w", "shape": [3], "datatype": "BYTES", "parameters": {"binary_data_size": len(words)}},
                {"name": "j", "shape": [1], "datatype": "INT64", "data": [5]},
                {"name": "f", "shape": [2], "datatype": "FP64", "parameters": {"binary_data_size": 16}},
            ]
        },
        words,
        floats.tobytes(),
    )
    request = parse_infer_request(body, length)
    assert request.inputs["w"].tolist() == [b"ab", b"", b"\xff\x00"]
    assert request.inputs["j"].tolist() == [5]
    np.testing.assert_array_equal(request.inputs["f"], floats)
    out, out_length = encode_infer_response(
        "m", None, request, {"w": request.inputs["w"]}
    )  # binary_data_output not asked: JSON
    assert out_length is None
    assert json.loads(out)["outputs"][0]["data"] == ["ab", "", "\ufffd\x00"]


def test_per_output_binary_choice_and_only_the_requested_outputs() -> None:
    body = json.dumps(
        {
            "id": "r1",
            "inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [1]}],
            "outputs": [{"name": "b", "parameters": {"binary_data": True}}, {"name": "s"}],
        }
    ).encode()
    request = parse_infer_request(body)
    outputs = {"a": np.zeros(1), "b": np.array([3, 4], dtype=np.int16), "s": np.array(["hi"])}
    out, length = encode_infer_response("m", "2", request, outputs)
    assert length is not None
    header = json.loads(out[:length])
    assert header["id"] == "r1"
    assert header["model_version"] == "2"
    assert [o["name"] for o in header["outputs"]] == ["b", "s"]
    assert header["outputs"][1] == {"name": "s", "datatype": "BYTES", "shape": [1], "data": ["hi"]}
    assert out[length:] == np.array([3, 4], dtype="<i2").tobytes()
    request.outputs = [{"name": "nope"}]
    with pytest.raises(V2Error, match="unknown output 'nope'"):
        encode_infer_response("m", "2", request, outputs)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]}, "input 'x': 2 elements"),
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP8", "data": [1]}]}, "unknown datatype 'FP8'"),
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": ["a"]}]}, "does not fit datatype INT8"),
        ({"inputs": [{"name": "x", "shape": [-1], "datatype": "INT8", "data": [1]}]}, "non-negative"),
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "INT8"}]}, "neither 'data'"),
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": [1]}] * 2}, "given twice"),
        ({"nothing": []}, "'inputs' list"),
    ],
)
def test_malformed_json_requests_are_400_naming_the_input(doc: dict[str, object], message: str) -> None:
    with pytest.raises(V2Error, match=message) as caught:
        parse_infer_request(json.dumps(doc).encode())
    assert caught.value.status == 400


def test_binary_sizes_must_account_for_the_body_exactly() -> None:
    spec = {"name": "x", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}
    body, length = _binary({"inputs": [spec]}, b"\0" * 8 + b"extra")
    with pytest.raises(V2Error, match="5 bytes that no input"):
        parse_infer_request(body, length)
    body, length = _binary({"inputs": [spec]}, b"\0" * 4)
    with pytest.raises(V2Error, match="runs past the end"):
        parse_infer_request(body, length)
    spec["shape"] = [3]
    body, length = _binary({"inputs": [spec]}, b"\0" * 8)
    with pytest.raises(V2Error, match="8 bytes for shape"):
        parse_infer_request(body, length)
    cut = _bytes_tensor(b"abc")[:-1]
    words = {"name": "w", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": len(cut)}}
    body, length = _binary({"inputs": [words]}, cut)
    with pytest.raises(V2Error, match="runs past binary_data_size"):
        parse_infer_request(body, length)
    with pytest.raises(V2Error, match="outside the body"):
        parse_infer_request(b"{}", 10)


def _request(**arrays: np.ndarray) -> InferRequest:
    types = {k: next(n for n, d in DATATYPES.items() if d == v.dtype) for k, v in arrays.items()}
    return InferRequest(dict(arrays), types)


def test_the_signature_checks_names_datatypes_and_shapes_with_wildcards() -> None:
    signature = [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}, {"name": "k", "datatype": "INT64", "shape": [1]}]
    x, k = np.zeros((5, 3), np.float32), np.zeros(1, np.int64)
    validate_inputs(_request(x=x, k=k), signature)
    cases = [
        (_request(x=x), "missing input 'k'"),
        (_request(x=x, k=k, z=k), "unexpected input 'z'"),
        (_request(x=x.astype(np.float64), k=k), "input 'x': datatype FP64, the model takes FP32"),
        (_request(x=np.zeros((5, 4), np.float32), k=k), r"input 'x': shape \[5, 4\]"),
        (_request(x=np.zeros(3, np.float32), k=k), r"input 'x': shape \[3\]"),
    ]
    for request, message in cases:
        with pytest.raises(V2Error, match=message) as caught:
            validate_inputs(request, signature)
        assert caught.value.status == 400
