"""Open Inference Protocol v2 (KServe ``rest_predict_v2``) codec: infer request bodies in, numpy arrays out, and back.

Two body encodings, both from the spec and Triton's binary tensor data extension:

* **JSON**: ``{"id", "parameters", "inputs": [{"name", "shape", "datatype", "data", "parameters"}], "outputs"}``;
  ``data`` is row-major, flat or nested; BYTES elements are strings.
* **Binary**: the ``Inference-Header-Content-Length: n`` header says the first ``n`` bytes are the JSON header; the
  raw little-endian tensors follow, in input order, for each input whose ``parameters.binary_data_size`` is set
  (that input has no ``data``). A BYTES tensor is its elements, each a 4-byte little-endian length then the bytes.
  Binary inputs are read without a copy (``np.frombuffer``): the arrays are read-only views of the body.

A response is binary when the request asks for it: ``parameters.binary_data_output: true`` (every output) or an
output's ``parameters.binary_data: true``; it then carries ``Inference-Header-Content-Length`` the same way.

BYTES tensors are numpy ``object`` arrays of ``bytes`` on the way in (JSON strings are UTF-8 encoded, so a
predictor sees the same thing whichever encoding the client chose); on the way out ``str`` and ``bytes`` elements
are both accepted. Errors are ``V2Error(status, message)``; the server answers ``{"error": message}``.

Imports stdlib and numpy only: this module runs inside model server images (``runtime/jobpath.py``).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DATATYPES",
    "InferRequest",
    "V2Error",
    "datatype_of",
    "encode_infer_response",
    "parse_infer_request",
    "validate_inputs",
]

# V2 datatype -> numpy dtype (explicitly little-endian: the wire order of the binary extension).
DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype("?"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}
_BY_KIND: dict[tuple[str, int], str] = {
    (dt.kind, dt.itemsize): name for name, dt in DATATYPES.items() if name != "BYTES"
}
_LENGTH = struct.Struct("<I")
# Bound once: json.dumps/loads rebuild their coder per call, ~5 us of a ~30 us request codec.
_encode_json = json.JSONEncoder(separators=(",", ":")).encode
_decode_json = json.JSONDecoder().decode


class V2Error(Exception):
    """A request the protocol refuses: ``status`` is the HTTP status, the message names the offending tensor."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class InferRequest:
    """A parsed infer request: decoded inputs in request order, and what the response should look like."""

    inputs: dict[str, np.ndarray]
    datatypes: dict[str, str]
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: list[dict[str, Any]] | None = None  # the requested outputs, None = all of them

    @property
    def binary_output(self) -> bool:
        return bool(self.parameters.get("binary_data_output", False))


def datatype_of(array: np.ndarray) -> str:
    """The V2 datatype of a numpy array (strings and objects are BYTES)."""
    kind = array.dtype.kind
    if kind in "OSU":
        return "BYTES"
    name = _BY_KIND.get((kind, array.dtype.itemsize))
    if name is None:
        raise V2Error(500, f"the model returned an array of dtype {array.dtype}, which V2 cannot carry")
    return name


def parse_infer_request(body: bytes, header_length: int | None = None) -> InferRequest:
    """Decode an infer request body (JSON, or the binary extension when ``header_length`` is given).

    Raises:
        V2Error: 400 for malformed JSON, unknown datatypes, or data that does not fill the shape.
    """
    if header_length is not None and not 0 <= header_length <= len(body):
        raise V2Error(400, f"Inference-Header-Content-Length {header_length} is outside the body ({len(body)} bytes)")
    header = body if header_length is None else body[:header_length]
    try:
        doc = _decode_json(header.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise V2Error(400, f"the request is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise V2Error(400, "the request needs an 'inputs' list")
    offset = header_length or 0
    view = memoryview(body)
    inputs: dict[str, np.ndarray] = {}
    datatypes: dict[str, str] = {}
    for spec in doc["inputs"]:
        name, datatype, shape = _tensor_header(spec, "input")
        params = spec.get("parameters") or {}
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        if size is not None:
            if header_length is None:
                raise V2Error(400, f"input '{name}' has binary_data_size but no Inference-Header-Content-Length")
            if not isinstance(size, int) or size < 0 or offset + size > len(body):
                raise V2Error(400, f"input '{name}': binary_data_size {size!r} runs past the end of the body")
            array = _from_binary(name, datatype, shape, view[offset : offset + size])
            offset += size
        else:
            if "data" not in spec:
                raise V2Error(400, f"input '{name}' has neither 'data' nor parameters.binary_data_size")
            array = _from_json(name, datatype, shape, spec["data"])
        if name in inputs:
            raise V2Error(400, f"input '{name}' is given twice")
        inputs[name] = array
        datatypes[name] = datatype
    if offset != len(body) and header_length is not None:
        raise V2Error(400, f"the body has {len(body) - offset} bytes that no input's binary_data_size accounts for")
    outputs = doc.get("outputs")
    if outputs is not None and not (isinstance(outputs, list) and all(isinstance(o, dict) for o in outputs)):
        raise V2Error(400, "'outputs' must be a list of objects")
    parameters = doc.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise V2Error(400, "'parameters' must be an object")
    request_id = doc.get("id")
    return InferRequest(inputs, datatypes, None if request_id is None else str(request_id), parameters, outputs)


def _tensor_header(spec: Any, what: str) -> tuple[str, str, list[int]]:
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise V2Error(400, f"every {what} needs a 'name'")
    name = spec["name"]
    datatype = spec.get("datatype")
    if datatype not in DATATYPES:
        raise V2Error(400, f"{what} '{name}': unknown datatype {datatype!r} (one of {', '.join(DATATYPES)})")
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise V2Error(400, f"{what} '{name}': 'shape' must be a list of non-negative integers")
    return name, datatype, shape


def _from_json(name: str, datatype: str, shape: list[int], data: Any) -> np.ndarray:
    count = math.prod(shape)
    try:
        if datatype == "BYTES":
            flat = _flatten(data)
            array = np.empty(len(flat), dtype=object)
            array[:] = [x.encode() if isinstance(x, str) else bytes(x) for x in flat]
        else:
            array = np.asarray(data, dtype=DATATYPES[datatype])
    except (TypeError, ValueError, OverflowError) as exc:
        raise V2Error(400, f"input '{name}': data does not fit datatype {datatype}: {exc}") from None
    if array.size != count:
        raise V2Error(400, f"input '{name}': {array.size} elements for shape {shape} ({count} expected)")
    return array.reshape(shape)


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    for item in data:
        if isinstance(item, list):
            out.extend(_flatten(item))
        else:
            out.append(item)
    return out


def _from_binary(name: str, datatype: str, shape: list[int], raw: memoryview) -> np.ndarray:
    count = math.prod(shape)
    if datatype != "BYTES":
        dtype = DATATYPES[datatype]
        if len(raw) != count * dtype.itemsize:
            raise V2Error(
                400,
                f"input '{name}': {len(raw)} bytes for shape {shape} of {datatype} ({count * dtype.itemsize} expected)",
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
    items: list[bytes] = []
    pos, end = 0, len(raw)
    while pos < end:
        if pos + 4 > end:
            raise V2Error(400, f"input '{name}': a BYTES element's length prefix is cut short")
        (length,) = _LENGTH.unpack_from(raw, pos)
        pos += 4
        if pos + length > end:
            raise V2Error(400, f"input '{name}': a BYTES element runs past binary_data_size")
        items.append(bytes(raw[pos : pos + length]))
        pos += length
    if len(items) != count:
        raise V2Error(400, f"input '{name}': {len(items)} BYTES elements for shape {shape} ({count} expected)")
    array = np.empty(count, dtype=object)
    array[:] = items
    return array.reshape(shape)


def validate_inputs(request: InferRequest, signature: Sequence[Mapping[str, Any]]) -> None:
    """Check the request's inputs against a signature's inputs: names, datatypes, shapes (-1 matches any size).

    Raises:
        V2Error: 400 naming the first input that does not match.
    """
    expected = {str(s["name"]): s for s in signature}
    for name in request.inputs:
        if name not in expected:
            raise V2Error(400, f"unexpected input '{name}' (the model takes {', '.join(sorted(expected))})")
    for name, spec in expected.items():
        array = request.inputs.get(name)
        if array is None:
            raise V2Error(400, f"missing input '{name}'")
        datatype = spec.get("datatype")
        if datatype and request.datatypes[name] != datatype:
            raise V2Error(400, f"input '{name}': datatype {request.datatypes[name]}, the model takes {datatype}")
        shape = spec.get("shape")
        if shape is not None and (
            len(shape) != array.ndim or any(d != -1 and d != got for d, got in zip(shape, array.shape, strict=True))
        ):
            raise V2Error(400, f"input '{name}': shape {list(array.shape)}, the model takes {list(shape)}")


def encode_infer_response(
    model_name: str, model_version: str | None, request: InferRequest, outputs: Mapping[str, Any]
) -> tuple[bytes, int | None]:
    """Encode the model's outputs as the request asked; returns ``(body, json_header_length or None)``.

    Raises:
        V2Error: 400 when the request names an output the model did not produce.
    """
    wanted: list[tuple[str, bool]]
    if request.outputs is None:
        wanted = [(name, request.binary_output) for name in outputs]
    else:
        wanted = []
        for spec in request.outputs:
            name = str(spec.get("name"))
            if name not in outputs:
                raise V2Error(400, f"unknown output {name!r} (the model gives {', '.join(outputs)})")
            params = spec.get("parameters") or {}
            wanted.append((name, bool(params.get("binary_data", request.binary_output))))
    tensors: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for name, binary in wanted:
        array = np.asarray(outputs[name])
        datatype = datatype_of(array)
        tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            raw = _to_binary(array, datatype)
            tensor["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        elif datatype == "BYTES":
            tensor["data"] = [_text(x) for x in array.ravel().tolist()]
        else:
            tensor["data"] = array.ravel().tolist()
        tensors.append(tensor)
    doc: dict[str, Any] = {"model_name": model_name}
    if model_version is not None:
        doc["model_version"] = model_version
    if request.id is not None:
        doc["id"] = request.id
    doc["outputs"] = tensors
    header = _encode_json(doc).encode()
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def _to_binary(array: np.ndarray, datatype: str) -> bytes:
    if datatype != "BYTES":
        return np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes()
    parts: list[bytes] = []
    for item in array.ravel().tolist():
        raw = item if isinstance(item, bytes) else str(item).encode()
        parts.append(_LENGTH.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _text(item: Any) -> str:
    # JSON carries BYTES as strings; bytes that are not UTF-8 need the binary encoding to arrive intact.
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
