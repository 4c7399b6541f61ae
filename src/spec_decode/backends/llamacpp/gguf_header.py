"""A GGUF file: where it is, its weight types and a fingerprint of its contents, read from the
file itself without loading it: what the per-model exact-rows promise (:mod:`.promise`) is keyed
by.

GGUF (v2 and v3) is a header of key/value pairs, then one record per tensor (name, shape, weight
type, offset), then the tensor data; only the records are read, the values are skipped.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import BinaryIO

#: ggml's weight type ids, as GGUF stores them, by name (ggml.h, ``enum ggml_type``).
GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S",
    23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip

# Sizes of GGUF's fixed-size value types (uint8 ... float64), by type id; 8 is a string, 9 an array.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, file: BinaryIO) -> None:
        self.file = file

    def unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        data = self.file.read(size)
        if len(data) != size:
            raise ValueError("the file ends inside its GGUF header")
        return struct.unpack(fmt, data)[0]

    def string(self) -> bytes:
        return self.file.read(self.unpack("<Q"))

    def skip_value(self, kind: int) -> None:
        if kind in _FIXED:
            self.file.seek(_FIXED[kind], 1)
        elif kind == _STRING:
            self.file.seek(self.unpack("<Q"), 1)
        elif kind == _ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            if item in _FIXED:
                self.file.seek(_FIXED[item] * count, 1)
            else:
                for _ in range(count):
                    self.skip_value(item)
        else:
            raise ValueError(f"unknown GGUF value type {kind}")


def weight_types(path: str | Path) -> dict[str, int]:
    """How many tensors of each weight type (``"Q4_K"``, ``"F32"``, ...) the GGUF file holds;
    ``ValueError`` for a file that is not GGUF v2 or v3."""
    with open(path, "rb") as file:
        reader = _Reader(file)
        if file.read(4) != b"GGUF" or reader.unpack("<I") not in (2, 3):
            raise ValueError(f"{path} is not a GGUF v2/v3 file")
        n_tensors, n_keys = reader.unpack("<Q"), reader.unpack("<Q")
        for _ in range(n_keys):
            reader.string()
            reader.skip_value(reader.unpack("<I"))
        counts: dict[str, int] = {}
        for _ in range(n_tensors):
            reader.string()
            file.seek(8 * reader.unpack("<I"), 1)  # the dimensions
            kind = reader.unpack("<I")
            file.seek(8, 1)  # the data offset
            name = GGML_TYPES.get(kind, f"type {kind}")
            counts[name] = counts.get(name, 0) + 1
        return counts


def fingerprint(path: str | Path, samples: int = 16, chunk: int = 1 << 16) -> str:
    """A sha256 over the file's size and ``samples`` chunks spread evenly over it, the first and
    last included: any re-quantization or other model changes it, at a cost of a millisecond
    where a full hash of a gigabyte takes one second."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        size = file.seek(0, 2)
        digest.update(size.to_bytes(8, "little"))
        for i in range(samples):
            file.seek(max(0, size - chunk) * i // max(1, samples - 1))
            digest.update(file.read(chunk))
    return digest.hexdigest()


def gguf_file(path: str | Path) -> Path:
    """``path`` as a file (``ValueError`` when there is none)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"no GGUF model file at {file}")
    return file
