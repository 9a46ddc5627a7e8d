"""Open Inference Protocol v2 (KServe rest_predict_v2) JSON tensors: numpy arrays or nested lists to request
tensors, answer tensors back to numpy arrays. numpy is optional: without it outputs stay lists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# numpy dtype kind/size -> the v2 protocol's datatype names (KServe rest_predict_v2)
_DATATYPES = {
    "b1": "BOOL",
    "i1": "INT8",
    "i2": "INT16",
    "i4": "INT32",
    "i8": "INT64",
    "u1": "UINT8",
    "u2": "UINT16",
    "u4": "UINT32",
    "u8": "UINT64",
    "f2": "FP16",
    "f4": "FP32",
    "f8": "FP64",
}
_NUMPY_DTYPES = {v: f"{k[0]}{k[1:]}" for k, v in _DATATYPES.items()}


def _list_shape(value: Any) -> list[int]:
    shape: list[int] = []
    while isinstance(value, list | tuple):
        shape.append(len(value))
        value = value[0] if value else None
    return shape


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _list_datatype(flat: list[Any]) -> str:
    """A plain list's datatype: FP32 for any float (what most models take), INT64 for ints, BOOL, else BYTES."""
    if flat and all(isinstance(x, bool) for x in flat):
        return "BOOL"
    if any(isinstance(x, float) for x in flat):
        return "FP32"
    if all(isinstance(x, int) for x in flat):
        return "INT64"
    return "BYTES"


def v2_tensor(name: str, value: Any) -> dict[str, Any]:
    """One input tensor of a v2 JSON request from a numpy array (any object with ``dtype``/``shape``) or a
    nested list; the data is sent flattened in row-major order, as the protocol prescribes."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        key = f"{value.dtype.kind}{value.dtype.itemsize}"
        datatype = _DATATYPES.get(key, "BYTES")
        return {"name": name, "shape": list(value.shape), "datatype": datatype, "data": value.reshape(-1).tolist()}
    if not isinstance(value, list | tuple):
        value = [value]
    flat = _flatten(value)
    return {"name": name, "shape": _list_shape(value), "datatype": _list_datatype(flat), "data": flat}


def v2_outputs(answer: Mapping[str, Any], as_numpy: bool = True) -> dict[str, Any]:
    """Output tensors by name: numpy arrays of their shape when numpy is importable (and wanted), else the
    flat data lists as sent."""
    outputs = answer.get("outputs") or []
    try:
        import numpy as np
    except ImportError:
        as_numpy = False
    result: dict[str, Any] = {}
    for tensor in outputs:
        data = tensor.get("data", [])
        if as_numpy:
            dtype = _NUMPY_DTYPES.get(str(tensor.get("datatype"))) if tensor.get("datatype") != "BYTES" else None
            array = np.asarray(data, dtype=dtype) if dtype else np.asarray(data)
            result[tensor["name"]] = array.reshape(tensor.get("shape") or array.shape)
        else:
            result[tensor["name"]] = data
    return result
