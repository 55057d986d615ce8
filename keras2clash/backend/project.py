"""An emitted project on disk: its manifest, its quantized parameters, its source model.

`emit` writes these; `hdl`, `simulate` and `report` read them back, so each later stage
works from the directory alone, as a user who only has the directory would.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypedDict, cast

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.hw.output import classifies, output_beats
from keras2clash.hw.plan import LayerPlan
from keras2clash.jsontypes import JsonObject
from keras2clash.quant.golden import QuantizedLayer
from keras2clash.version import __version__

MANIFEST = "manifest.json"
PARAMS = "golden.npz"
SOURCE_MODEL = "source_model.keras"
WEIGHTS_DIR = "weights"
INTEGRITY: Final = "integrity"
"""Manifest key: sha256 of the rest of the manifest and of every file `golden.npz` and
`weights/*.mem` as emitted. Every command that reads a project checks them first
(`verify_integrity`), so an edited manifest or a changed, malformed or deleted weight file
is refused with the file's name instead of being built, simulated or shipped."""


class Integrity(TypedDict):
    """The manifest's integrity record (`INTEGRITY`)."""

    manifest_sha256: str  # of the rest of the manifest (`_manifest_hash`)
    files: dict[str, str]  # path in the project -> its sha256


class ManifestExtra(TypedDict, total=False):
    """The manifest keys `emit` adds beyond the plan (`write_project_data`'s `extra`)."""

    precision: JsonObject  # the formats (`ResolvedFormats.to_json`) and the parameters' saturation
    design: JsonObject  # resources and timing (`hw.summary.design_summary`)
    writable_weights: bool  # the weight memories are on the weight port (K2C.WeightBus)
    readable_weights: bool  # the weight port reads them back too (K2C.WeightReadBack)


class ManifestBody(ManifestExtra):
    """The manifest without its integrity record: what that record's hash covers."""

    keras2clash: str  # the version that emitted the project
    name: str
    top: str
    beats_per_image: int
    beat_width: int
    layers: list[JsonObject]  # `LayerPlan.to_json` of each layer


class Manifest(ManifestBody):
    """manifest.json as `write_project_data` writes it."""

    integrity: Integrity


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    top: str
    plans: list[LayerPlan]
    params: dict[str, QuantizedLayer]
    writable_weights: bool = False  # the weight memories are on the weight port (K2C.WeightBus)
    readable_weights: bool = False  # the weight port reads them back too (K2C.WeightReadBack)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.plans[0].input_shape

    @property
    def n_out(self) -> int:
        return self.plans[-1].n_out

    @property
    def classifies(self) -> bool:
        """Whether the output is a vector the Top takes a class from (`hw.output.classifies`)."""
        return classifies(self.plans[-1])

    @property
    def output_beats(self) -> int:
        """Output beats per image (`hw.output.output_beats`): one for a vector."""
        return output_beats(self.plans[-1])

    @property
    def source_model(self) -> Path:
        return self.root / SOURCE_MODEL

    @property
    def compute_plans(self) -> list[LayerPlan]:
        """The layers with the two knobs (dense, conv2d), in order."""
        return [p for p in self.plans if p.is_compute]

    @property
    def beat_width(self) -> int:
        """Values per input beat: the input's last axis (docs/architecture/hardware.md, Streams)."""
        return self.input_shape[-1]

    @property
    def beats_per_image(self) -> int:
        """Input beats per image: the product of the other axes (row-major order)."""
        return math.prod(self.input_shape[:-1])

    @property
    def formats_label(self) -> str:
        labels = sorted({str(p.out_fmt) for p in self.plans})
        return labels[0] if len(labels) == 1 else "mixed"


def write_project_data(
    root: Path,
    name: str,
    top: str,
    plans: list[LayerPlan],
    params: dict[str, QuantizedLayer],
    extra: ManifestExtra | None = None,
) -> None:
    """Write the manifest and the golden parameters into a (temporary) project folder.

    `extra` adds top-level manifest keys (e.g. "precision": formats and saturation report)."""
    body: ManifestBody = {
        "keras2clash": __version__,
        "name": name,
        "top": top,
        "beats_per_image": math.prod(plans[0].input_shape[:-1]),
        "beat_width": plans[0].input_shape[-1],
        "layers": [plan.to_json() for plan in plans],
        **(extra or {}),
    }
    arrays = {}
    for layer, p in params.items():
        arrays[f"{layer}/kernel"] = p.kernel
        arrays[f"{layer}/bias"] = p.bias
    np.savez(root / PARAMS, **arrays)  # type: ignore[arg-type]
    files = [root / PARAMS, *sorted((root / WEIGHTS_DIR).glob("*.mem"))]
    manifest: Manifest = {
        **body,
        INTEGRITY: {
            "manifest_sha256": _manifest_hash(body),
            "files": {path.relative_to(root).as_posix(): _file_hash(path) for path in files},
        },
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest_hash(manifest: Mapping[str, object]) -> str:
    """sha256 of the manifest's content without its integrity record (formatting-independent)."""
    content = {key: value for key, value in manifest.items() if key != INTEGRITY}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def verify_integrity(root: Path, manifest: JsonObject) -> None:
    """The manifest and the files it lists must be exactly as `emit` wrote them."""
    again = "emit the project again (keras2clash emit ... --force)"
    record = manifest.get(INTEGRITY)
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(files, dict):
        raise K2CError(
            f"{root / MANIFEST} has no integrity record (emitted by an older keras2clash, or "
            f"edited), so its weight files cannot be checked; {again}"
        )
    if record.get("manifest_sha256") != _manifest_hash(manifest):
        raise K2CError(
            f"{root / MANIFEST} was changed after emit (it no longer matches the hash recorded "
            f"in it); the project would be simulated and reported with wrong figures; {again}"
        )
    listed = set(files)
    for path in sorted((root / WEIGHTS_DIR).glob("*.mem")):
        if path.relative_to(root).as_posix() not in listed:
            raise K2CError(f"weight file {path} was not written by emit; {again}")
    for name, digest in sorted(files.items()):
        path = root / name
        kind = "weight file" if name.startswith(WEIGHTS_DIR + "/") else "file"
        if not path.is_file():
            raise K2CError(f"{kind} {path} is missing (deleted after emit); {again}")
        if _file_hash(path) != digest:
            raise K2CError(
                f"{kind} {path} was changed after emit (its sha256 differs from the one in {MANIFEST}); {again}"
            )


def load_project(root: Path | str) -> Project:
    """Read an emitted project; one clear error if the folder is not one."""
    root = Path(root).resolve()  # tools run with the project as working directory
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise K2CError(f"{root} is not an emitted keras2clash project (no {MANIFEST}); run 'keras2clash emit' first")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise K2CError(f"project {root} is damaged ({type(exc).__name__}: {exc}); emit it again") from None
    if not isinstance(manifest, dict):
        raise K2CError(f"project {root} is damaged ({MANIFEST} is not a JSON object); emit it again")
    verify_integrity(root, manifest)
    written = cast(Manifest, manifest)  # its hash matched: it is as emit wrote it
    try:
        plans = [LayerPlan.from_json(layer) for layer in written["layers"]]
        with np.load(root / PARAMS) as archive:
            params = {
                plan.name: QuantizedLayer(archive[f"{plan.name}/kernel"], archive[f"{plan.name}/bias"])
                for plan in plans
                if plan.has_params
            }
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise K2CError(f"project {root} is damaged ({type(exc).__name__}: {exc}); emit it again") from None
    return Project(
        root=root,
        name=written["name"],
        top=written["top"],
        plans=plans,
        params=params,
        writable_weights=bool(written.get("writable_weights", False)),
        readable_weights=bool(written.get("readable_weights", False)),
    )
