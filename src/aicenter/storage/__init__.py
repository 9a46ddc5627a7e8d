"""The artifact store: content-addressed blobs, version manifests, upload staging, archives.

Pure I/O on a local or shared filesystem (NFS, GPFS, CephFS are paths): no database, no web framework. The
catalog services record what this package stores; see docs/dev/catalog-contract.md, section "Store".
"""

from aicenter.storage.archives import expand_archive
from aicenter.storage.blobs import BLOB_MODE, BlobStore, hash_file
from aicenter.storage.bundle import bundle_header
from aicenter.storage.gc import FsckReport, GcReport, checked_blob, collect_garbage, fsck, quarantine_damaged
from aicenter.storage.importer import scan_directory
from aicenter.storage.manifest import FileEntry, check_manifest, manifest_sha256
from aicenter.storage.paths import check_path
from aicenter.storage.staging import Staging, part_count
from aicenter.storage.tarstream import iter_tar, tar_size

__all__ = [
    "BLOB_MODE",
    "BlobStore",
    "FileEntry",
    "FsckReport",
    "GcReport",
    "Staging",
    "bundle_header",
    "check_manifest",
    "check_path",
    "checked_blob",
    "collect_garbage",
    "expand_archive",
    "fsck",
    "hash_file",
    "iter_tar",
    "manifest_sha256",
    "part_count",
    "quarantine_damaged",
    "scan_directory",
    "tar_size",
]
