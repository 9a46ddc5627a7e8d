"""Which model server runtime serves a model version, pure: from its file names and metadata.

The control plane calls ``choose_runtime`` when a revision is created, so a model nothing can serve is refused
then, with the reason, rather than as a replica that fails to start. The replica's model server
(``aicenter.runtime.serve``) gets the answer in ``AICENTER_SERVE_CONFIG``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["RUNTIMES", "choose_runtime"]

RUNTIMES = ("onnx", "torchscript", "sklearn", "python")

_ONNX = (".onnx",)
_TORCHSCRIPT = (".pt", ".pth", ".torchscript")
_SKLEARN = (".joblib", ".pkl")


def _has(files: Sequence[str], suffixes: tuple[str, ...]) -> bool:
    return any(f.lower().endswith(suffixes) for f in files)


def _is_torchscript(metadata: Mapping[str, Any]) -> bool:
    framework = str(metadata.get("framework", "")).lower()
    return framework in ("torch", "pytorch") or str(metadata.get("format", "")).lower() == "torchscript"


def choose_runtime(files: Sequence[str], metadata: Mapping[str, Any], requested: str | None = None) -> str:
    """The runtime for a model version's files (relative paths) and metadata, or the requested one if it fits.

    In order: ``python`` when the metadata names a ``predictor`` (the author said how to serve it), ``onnx`` for a
    ``*.onnx`` file, ``torchscript`` for ``*.pt``/``*.pth``/``*.torchscript`` when the metadata says the framework
    is torch or the format torchscript (a bare ``.pt`` is as often a state_dict, which nothing can serve alone),
    ``sklearn`` for ``*.joblib``/``*.pkl``.

    Raises:
        ValueError: the requested runtime is unknown or has no file it could load, or no runtime fits.
    """
    if requested is not None:
        if requested not in RUNTIMES:
            raise ValueError(f"unknown runtime {requested!r} (one of {', '.join(RUNTIMES)})")
        needs = {"onnx": _ONNX, "torchscript": _TORCHSCRIPT, "sklearn": _SKLEARN}.get(requested)
        if needs is not None and not _has(files, needs):
            raise ValueError(f"runtime {requested!r} needs a {'/'.join('*' + s for s in needs)} file in the model")
        return requested
    if metadata.get("predictor"):
        return "python"
    if _has(files, _ONNX):
        return "onnx"
    if _has(files, _TORCHSCRIPT):
        if _is_torchscript(metadata):
            return "torchscript"
        raise ValueError(
            "the model has a .pt/.pth file but its metadata does not say it is TorchScript "
            "(set framework 'pytorch' or format 'torchscript', or give a python predictor)"
        )
    if _has(files, _SKLEARN):
        return "sklearn"
    raise ValueError(
        "no runtime fits this model: it needs a .onnx, TorchScript .pt/.pth, or .joblib/.pkl file, "
        "or a 'predictor' entry (file.py:Class) in its metadata"
    )
