"""Catalog vocabulary: item kinds, version visibility and states, and the per-kind metadata each kind carries.

Pure: no I/O. Services validate item and version metadata with ``item_metadata`` / ``version_metadata``, which
raise ``ValidationFailed`` naming the field (``metadata.data_type``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aicenter.core.errors import ValidationFailed


class ItemKind(StrEnum):
    DATASET = "dataset"
    ALGORITHM = "algorithm"
    IMAGE = "image"
    MODEL = "model"

    @property
    def plural(self) -> str:
        """The REST collection name: /api/v1/datasets, /algorithms, /images, /models."""
        return f"{self.value}s"


class Visibility(StrEnum):
    PRIVATE = "private"
    WORKSPACE = "workspace"
    PUBLIC = "public"
    PRESET = "preset"


class Scope(StrEnum):
    """The four tabs of a catalog list, plus ``all`` (platform admins: metadata of every item)."""

    MINE = "mine"
    WORKSPACE = "workspace"
    PUBLIC = "public"
    PRESET = "preset"
    ALL = "all"


class VersionState(StrEnum):
    PENDING = "pending"
    BUILDING = "building"
    READY = "ready"
    FAILED = "failed"


class UploadState(StrEnum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"


class _Meta(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetMeta(_Meta):
    data_type: Literal["image", "text", "audio", "video", "tabular", "other"] = "other"


class AlgorithmMeta(_Meta):
    framework: Literal["pytorch", "tensorflow", "paddle", "mindspore", "mpi", "sklearn", "none"] = "none"
    entrypoint: str = Field(default="", max_length=1024)
    requirements: list[str] = Field(default_factory=list, max_length=500)


class ImageMeta(_Meta):
    image_type: Literal["container", "venv"] = "venv"


class ModelMeta(_Meta):
    framework: Literal["pytorch", "tensorflow", "paddle", "mindspore", "sklearn", "onnx", "other"] = "other"
    format: Literal["pytorch", "torchscript", "onnx", "sklearn", "python"] = "pytorch"


class ContainerImageVersionMeta(_Meta):
    """A container image reference, for executors that run containers."""

    image_type: Literal["container"] = "container"
    reference: str = Field(min_length=1, max_length=512)


class VenvImageVersionMeta(_Meta):
    """A virtual environment that aicenter builds with pip, cached by the hash of these inputs."""

    image_type: Literal["venv"] = "venv"
    python: str = Field(default="3", pattern=r"^3(\.\d{1,2})?$", description="Python version, e.g. 3.11")
    requirements: list[str] = Field(default_factory=list, max_length=500)
    system_site_packages: bool = False


class Lineage(_Meta):
    job_id: int | None = None
    algorithm_version_id: int | None = None
    dataset_version_ids: list[int] = Field(default_factory=list)


class ModelVersionMeta(_Meta):
    metrics: dict[str, float] = Field(default_factory=dict)
    signature: dict[str, Any] = Field(default_factory=dict)
    lineage: Lineage = Field(default_factory=Lineage)


class EmptyVersionMeta(_Meta):
    pass


ITEM_META: dict[ItemKind, type[_Meta]] = {
    ItemKind.DATASET: DatasetMeta,
    ItemKind.ALGORITHM: AlgorithmMeta,
    ItemKind.IMAGE: ImageMeta,
    ItemKind.MODEL: ModelMeta,
}


def _check(model: type[_Meta], data: dict[str, Any], field: str) -> dict[str, Any]:
    try:
        return model.model_validate(data).model_dump(mode="json")
    except ValidationError as exc:
        err = exc.errors()[0]
        path = ".".join([field, *(str(p) for p in err["loc"])])
        raise ValidationFailed(err["msg"], field=path) from None


def item_metadata(kind: ItemKind, data: dict[str, Any] | None) -> dict[str, Any]:
    """The normalized item metadata of ``kind`` (defaults filled in); ValidationFailed names the bad field."""
    return _check(ITEM_META[kind], data or {}, "metadata")


def version_metadata(kind: ItemKind, data: dict[str, Any] | None, *, image_type: str | None = None) -> dict[str, Any]:
    """The normalized version metadata. Images take the build spec of their item's ``image_type``."""
    if kind is ItemKind.IMAGE:
        model: type[_Meta] = ContainerImageVersionMeta if image_type == "container" else VenvImageVersionMeta
        return _check(model, {"image_type": image_type or "venv", **(data or {})}, "metadata")
    if kind is ItemKind.MODEL:
        return _check(ModelVersionMeta, data or {}, "metadata")
    return _check(EmptyVersionMeta, data or {}, "metadata")
