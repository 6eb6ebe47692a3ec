"""A resmem run directory on disk: its config.toml and its safetensors files.

A resmem model file (`model.safetensors`) holds one f32 tensor per parameter, named and shaped
as resmem's layout declares it (`crates/models/src/params.rs`: `blocks.0.w_qkv`, `wte`, …). A
checkpoint (`checkpoints/step-*.safetensors`) also holds AdamW's moments (`adamw.m/NAME`,
`adamw.v/NAME`) and, in its metadata, the step and the run's config.toml. Both carry one
metadata entry, `resmem`, a sorted compact JSON object with `format: resmem` and a CRC-32 over
the tensors and the metadata (`crates/models/src/checkpoint.rs`), which resmem checks on load.

`read_tensors` / `write_tensors` round-trip such a file bit for bit when nothing changes, and
recompute the CRC when something does.
"""

from __future__ import annotations

import json
import struct
import tomllib
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

FORMAT = "resmem"
CRC = "crc32"
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.toml"


# --- safetensors with resmem's metadata --------------------------------------------------------


def _header_metadata(data: bytes) -> dict:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    return header.get("__metadata__", {}) or {}


def checksum(tensors: dict[str, np.ndarray], meta: dict[str, str]) -> int:
    """resmem's CRC-32: the tensors in name order (name, byte length as u64 LE, bytes), then
    the metadata but the CRC itself in key order (each key and value with its length)."""
    h = 0
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        h = zlib.crc32(name.encode(), h)
        h = zlib.crc32(struct.pack("<Q", len(b)), h)
        h = zlib.crc32(b, h)
    for k in sorted(meta):
        if k == CRC:
            continue
        kb, vb = k.encode(), meta[k].encode()
        h = zlib.crc32(struct.pack("<Q", len(kb)) + kb + struct.pack("<Q", len(vb)) + vb, h)
    return h & 0xFFFFFFFF


def read_tensors(path: str | Path, verify: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A resmem safetensors file: its tensors by resmem's names and its metadata (`format`,
    `crc32`, and for a checkpoint `step` and `config`)."""
    data = Path(path).read_bytes()
    tensors = st_load(data)
    meta_json = _header_metadata(data).get(FORMAT)
    if meta_json is None:
        raise ValueError(f"{path}: not written by resmem (its metadata has no `resmem` entry)")
    meta = json.loads(meta_json)
    if verify and meta.get(CRC) != f"{checksum(tensors, meta):08x}":
        raise ValueError(f"{path}: corrupt (its CRC-32 does not match)")
    return tensors, meta


def write_tensors(path: str | Path, tensors: dict[str, np.ndarray], meta: dict[str, str] | None = None) -> None:
    """Writes `tensors` as resmem does: f32, one metadata entry `resmem` holding the sorted
    compact JSON of `meta` with `format` and a fresh CRC."""
    meta = dict(meta or {})
    meta["format"] = FORMAT
    arrays = {k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in tensors.items()}
    meta[CRC] = f"{checksum(arrays, meta):08x}"
    # serde_json of a BTreeMap: sorted keys, no spaces, non-ASCII kept.
    meta_json = json.dumps(dict(sorted(meta.items())), separators=(",", ":"), ensure_ascii=False)
    Path(path).write_bytes(st_save(arrays, metadata={FORMAT: meta_json}))


# --- config.toml -------------------------------------------------------------------------------


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        # Rust's Display of an f32: the shortest digits that read back, never an exponent.
        return np.format_float_positional(np.float32(v), unique=True, trim="0")
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} to TOML")


def dump_toml(cfg: dict) -> str:
    """A run config as resmem's `toml` crate writes it: one table per section, keys sorted."""
    out = []
    for section in sorted(cfg):
        if out:
            out.append("")
        out.append(f"[{section}]")
        for k in sorted(cfg[section]):
            out.append(f"{k} = {_toml_value(cfg[section][k])}")
    return "\n".join(out) + "\n"


@dataclass
class Run:
    """A run directory's config (the parsed config.toml, and its text as read) and parameters."""

    config: dict
    params: dict[str, np.ndarray]
    config_text: str | None = None
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> dict:
        return self.config["model"]

    @property
    def arch(self) -> str:
        return self.model["arch"]


def load_run(run_dir: str | Path, checkpoint: str | Path | None = None) -> Run:
    """`run_dir`'s config.toml and its model file (or `checkpoint`: a model file or a
    checkpoint, whose AdamW moments are left out)."""
    run_dir = Path(run_dir)
    text = (run_dir / CONFIG_FILE).read_text()
    path = Path(checkpoint) if checkpoint else run_dir / MODEL_FILE
    tensors, meta = read_tensors(path)
    params = {k: v for k, v in tensors.items() if not k.startswith("adamw.")}
    return Run(config=tomllib.loads(text), params=params, config_text=text, meta=meta)


def save_run(run: Run, run_dir: str | Path) -> None:
    """Writes config.toml (its original text when it was read and not changed) and
    model.safetensors into `run_dir`."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    text = run.config_text
    if text is None or tomllib.loads(text) != run.config:
        text = dump_toml(run.config)
    (run_dir / CONFIG_FILE).write_text(text)
    meta = {k: v for k, v in run.meta.items() if k not in (CRC, "step", "config")}
    write_tensors(run_dir / MODEL_FILE, run.params, meta)
