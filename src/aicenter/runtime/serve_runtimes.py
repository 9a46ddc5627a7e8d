"""The model server's runtimes: load a model directory, run a batch of numpy inputs, describe the signature.

Every runtime imports its framework lazily in ``load``: the server binds its port and answers liveness first, and
an image only needs the framework of the runtime it serves (an ONNX service needs no torch).

Contract (``Runtime``): ``load`` runs once, in a background thread; ``predict`` may run in several threads at
once when ``AICENTER_SERVE_WORKERS`` > 1 (onnxruntime sessions, torch modules under ``no_grad`` and sklearn
``predict`` are safe to share; a custom predictor that is not must keep one worker). ``predict`` raises
``V2Error(400, ...)`` for inputs the model refuses, anything else is a 500.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from aicenter.runtime.serve_v2 import V2Error, datatype_of

__all__ = ["RUNTIME_CLASSES", "Runtime", "make_runtime"]

Signature = dict[str, list[dict[str, Any]]]


class Runtime:
    """A loaded model. Subclasses implement ``load`` and ``predict``; ``metadata`` may be empty lists.

    ``authoritative``: the runtime read the signature from the model itself (ONNX), so the server checks requests
    against it when the revision gives none, and a wrong shape is a 400 naming the input.
    """

    name = "base"
    authoritative = False

    def __init__(self) -> None:
        self.signature: Signature = {"inputs": [], "outputs": []}

    def load(self, model_dir: Path, config: dict[str, Any]) -> None:
        raise NotImplementedError

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def metadata(self) -> Signature:
        return self.signature


def _one_file(model_dir: Path, suffixes: tuple[str, ...], preferred: str) -> Path:
    # model.<ext> at the top wins; otherwise the first by path, so the choice never depends on listing order.
    top = model_dir / preferred
    if top.is_file():
        return top
    found = sorted(p for p in model_dir.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
    if not found:
        raise FileNotFoundError(f"no {'/'.join('*' + s for s in suffixes)} file in {model_dir}")
    return found[0]


_ONNX_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


class OnnxRuntime(Runtime):
    """onnxruntime on the CPU provider; one intra-op thread unless ``config["intra_op_threads"]`` says more
    (replicas scale out, and one thread per replica keeps a small model's latency flat under load)."""

    name = "onnx"
    authoritative = True

    def load(self, model_dir: Path, config: dict[str, Any]) -> None:
        import onnxruntime as ort  # the framework only where it is served

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(config.get("intra_op_threads", 1))
        options.inter_op_num_threads = 1
        path = _one_file(model_dir, (".onnx",), "model.onnx")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._input_names = {i.name for i in self.session.get_inputs()}
        self._output_names = [o.name for o in self.session.get_outputs()]
        self.signature = {
            "inputs": [self._arg(i) for i in self.session.get_inputs()],
            "outputs": [self._arg(o) for o in self.session.get_outputs()],
        }
        self._invalid: tuple[type[BaseException], ...] = ()
        try:
            from onnxruntime.capi.onnxruntime_pybind11_state import (
                Fail,
                InvalidArgument,
            )

            self._invalid = (InvalidArgument, Fail)
        except ImportError:  # pragma: no cover - onnxruntime moved its exception types
            pass

    @staticmethod
    def _arg(arg: Any) -> dict[str, Any]:
        shape = [d if isinstance(d, int) else -1 for d in (arg.shape or [])]
        return {"name": arg.name, "datatype": _ONNX_TYPES.get(arg.type, arg.type), "shape": shape}

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self.session.run(self._output_names, inputs)
        except self._invalid as exc:  # wrong rank, shape or type for the graph: the client's mistake
            raise V2Error(400, str(exc)) from None
        return dict(zip(self._output_names, results, strict=True))


class TorchScriptRuntime(Runtime):
    """``torch.jit.load`` on the CPU (or ``cuda`` when a GPU is visible); a single input goes positionally,
    several by name. Outputs: a tensor is ``output__0``, a tuple ``output__i``, a dict keeps its keys."""

    name = "torchscript"

    def load(self, model_dir: Path, config: dict[str, Any]) -> None:
        import torch

        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        path = _one_file(model_dir, (".pt", ".pth", ".torchscript"), "model.pt")
        self.module = torch.jit.load(str(path), map_location=self.device)  # type: ignore[no-untyped-call]
        self.module.eval()
        self._arg_names = [a.name for a in self.module.forward.schema.arguments[1:]]
        # TorchScript keeps argument names but no dtypes or shapes: the signature is the revision's, if any.
        signature = config.get("signature") or {}
        self.signature = {
            "inputs": list(signature.get("inputs") or []),
            "outputs": list(signature.get("outputs") or []),
        }

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self.torch
        # Binary inputs are read-only views of the request body; torch wants writable memory.
        tensors = {k: torch.from_numpy(v if v.flags.writeable else v.copy()).to(self.device) for k, v in inputs.items()}
        with torch.no_grad():
            if len(tensors) == 1:
                result = self.module(next(iter(tensors.values())))
            else:
                missing = [n for n in self._arg_names if n not in tensors]
                if missing:
                    raise V2Error(400, f"missing input '{missing[0]}' (the model takes {', '.join(self._arg_names)})")
                result = self.module(*(tensors[n] for n in self._arg_names))
        if isinstance(result, dict):
            return {str(k): v.cpu().numpy() for k, v in result.items()}
        if isinstance(result, list | tuple):
            return {f"output__{i}": v.cpu().numpy() for i, v in enumerate(result)}
        return {"output__0": result.cpu().numpy()}


class SklearnRuntime(Runtime):
    """A scikit-learn estimator from ``model.joblib`` or ``model.pkl``; its single input goes to ``predict``,
    the answer is the ``predict`` output."""

    name = "sklearn"

    def load(self, model_dir: Path, config: dict[str, Any]) -> None:
        path = _one_file(model_dir, (".joblib", ".pkl"), "model.joblib")
        try:
            import joblib

            self.model = joblib.load(path)
        except ImportError:
            with path.open("rb") as f:
                self.model = pickle.load(f)  # noqa: S301 - the workspace's own model, in its own sandbox
        signature = config.get("signature") or {}
        self.signature = {
            "inputs": list(signature.get("inputs") or []),
            "outputs": list(signature.get("outputs") or []),
        }

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if len(inputs) != 1:
            raise V2Error(400, f"a scikit-learn model takes one input, got {len(inputs)}")
        x = next(iter(inputs.values()))
        try:
            return {"predict": np.asarray(self.model.predict(x))}
        except ValueError as exc:  # sklearn's complaint about the feature count or rank
            raise V2Error(400, f"input '{next(iter(inputs))}': {exc}") from None


class PythonRuntime(Runtime):
    """A custom predictor class: ``entry`` is ``file.py:Class`` or ``module:Class``, looked up in
    ``AICENTER_CODE_DIR`` then ``AICENTER_MODEL_DIR``. The class is built without arguments, then
    ``load(model_dir)``; ``predict(inputs)`` takes and gives dicts of numpy arrays; ``metadata()`` is optional."""

    name = "python"

    def load(self, model_dir: Path, config: dict[str, Any]) -> None:
        entry = str(config.get("entry") or "predictor.py:Predictor")
        target, sep, class_name = entry.rpartition(":")
        if not sep or not target or not class_name:
            raise ValueError(f"entry {entry!r} is not 'file.py:Class' or 'module:Class'")
        roots = [Path(p) for p in (os.environ.get("AICENTER_CODE_DIR"), str(model_dir)) if p]
        cls = getattr(self._import(target, roots), class_name, None)
        if cls is None:
            raise ValueError(f"{target} has no class {class_name!r}")
        self.predictor = cls()
        self.predictor.load(str(model_dir))
        described = getattr(self.predictor, "metadata", None)
        signature = described() if callable(described) else None
        self.authoritative = bool(signature)  # the author's own signature: requests are checked against it
        signature = signature or config.get("signature") or {}
        self.signature = {
            "inputs": list(signature.get("inputs") or []),
            "outputs": list(signature.get("outputs") or []),
        }

    @staticmethod
    def _import(target: str, roots: list[Path]) -> Any:
        for root in roots:  # the predictor's own helpers import from its directory
            if root.is_dir() and str(root) not in sys.path:
                sys.path.insert(0, str(root))
        if target.endswith(".py"):
            for root in roots:
                path = root / target
                if path.is_file():
                    spec = importlib.util.spec_from_file_location(f"aicenter_predictor_{path.stem}", path)
                    if spec is None or spec.loader is None:
                        raise ImportError(f"cannot import {path}")
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[spec.name] = module
                    spec.loader.exec_module(module)
                    return module
            raise FileNotFoundError(f"{target} is in none of {', '.join(map(str, roots))}")
        return importlib.import_module(target)

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = self.predictor.predict(inputs)
        if not isinstance(result, dict):
            raise TypeError(f"the predictor returned {type(result).__name__}, not a dict of arrays")
        outputs = {str(k): np.asarray(v) for k, v in result.items()}
        for array in outputs.values():
            datatype_of(array)  # a dtype V2 cannot carry fails here, with the reason
        return outputs


RUNTIME_CLASSES: dict[str, type[Runtime]] = {
    cls.name: cls for cls in (OnnxRuntime, TorchScriptRuntime, SklearnRuntime, PythonRuntime)
}


def make_runtime(name: str) -> Runtime:
    """A fresh runtime by name (``ValueError`` for an unknown one)."""
    cls = RUNTIME_CLASSES.get(name)
    if cls is None:
        raise ValueError(f"unknown runtime {name!r} (one of {', '.join(RUNTIME_CLASSES)})")
    return cls()
