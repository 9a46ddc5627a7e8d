"""Which runtime serves a model version: from its files and metadata, or the requested one when it fits."""

from __future__ import annotations

import pytest

from aicenter.core.serving.runtimes import choose_runtime


@pytest.mark.parametrize(
    ("files", "metadata", "expected"),
    [
        (["model.onnx"], {}, "onnx"),
        (["sub/Model.ONNX", "README.md"], {}, "onnx"),
        (["model.pt"], {"framework": "pytorch"}, "torchscript"),
        (["weights.pth"], {"framework": "torch"}, "torchscript"),
        (["m.pt"], {"format": "TorchScript"}, "torchscript"),
        (["m.torchscript"], {"format": "torchscript"}, "torchscript"),
        (["model.joblib"], {}, "sklearn"),
        (["model.pkl"], {}, "sklearn"),
        (["model.onnx", "predictor.py"], {"predictor": "predictor.py:Predictor"}, "python"),
        ([], {"predictor": "pkg.mod:Predictor"}, "python"),
    ],
)
def test_the_runtime_follows_the_files_and_metadata(files: list[str], metadata: dict[str, str], expected: str) -> None:
    assert choose_runtime(files, metadata, None) == expected


def test_a_pt_file_without_torch_metadata_is_refused_with_the_way_out() -> None:
    with pytest.raises(ValueError, match="framework 'pytorch'"):
        choose_runtime(["model.pt"], {}, None)


def test_nothing_servable_is_refused() -> None:
    with pytest.raises(ValueError, match="no runtime fits"):
        choose_runtime(["data.csv", "README.md"], {}, None)


def test_a_requested_runtime_must_exist_and_have_its_file() -> None:
    assert choose_runtime(["model.onnx", "model.joblib"], {}, "sklearn") == "sklearn"
    assert choose_runtime([], {}, "python") == "python"
    with pytest.raises(ValueError, match=r"needs a \*\.onnx"):
        choose_runtime(["model.joblib"], {}, "onnx")
    with pytest.raises(ValueError, match="unknown runtime 'tensorflow'"):
        choose_runtime(["saved_model.pb"], {}, "tensorflow")
