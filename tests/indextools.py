"""Test helper: make a hostile but consistent index directory (every checksum recomputed)."""

from __future__ import annotations

import json
from pathlib import Path

from sparsesim.indexes.blocks import BLOCK_BYTES, BLOCKS_FILE, file_digests
from sparsesim.indexes.storage import manifest_checksum
from sparsesim.persistence import file_sha256


def rehash_index(directory: Path, manifest_edit=None) -> None:
    """Recompute the size and sha256 of every file, the block checksums (``blocks.sha256``) and
    the manifest checksum of an index directory, after ``manifest_edit(manifest)`` if given."""
    mpath = Path(directory) / "manifest.json"
    manifest = json.loads(mpath.read_text())
    data = Path(directory) / manifest["data_dir"] if manifest.get("data_dir") else Path(directory)
    blocks = []
    for fname, facts in sorted(manifest["files"].items()):
        if fname == BLOCKS_FILE or not (data / fname).is_file():
            continue
        facts["bytes"] = (data / fname).stat().st_size
        facts["sha256"], digests = file_digests(data / fname, manifest.get("block_bytes") or BLOCK_BYTES)
        blocks.append(digests)
    if BLOCKS_FILE in manifest["files"]:
        (data / BLOCKS_FILE).write_bytes(b"".join(blocks))
        manifest["files"][BLOCKS_FILE] = {"bytes": (data / BLOCKS_FILE).stat().st_size,
                                          "sha256": file_sha256(data / BLOCKS_FILE)}
    if manifest_edit:
        manifest_edit(manifest)
    manifest["manifest_checksum"] = manifest_checksum(manifest)
    mpath.write_text(json.dumps(manifest))
