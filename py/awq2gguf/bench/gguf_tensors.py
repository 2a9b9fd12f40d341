"""The tensor table of a GGUF file: names, shapes, types and byte sizes.

gguf.GGUFReader builds numpy views of every metadata item, which takes seconds for a
150k-token vocabulary; this reads only what the tensor table needs and skips the rest.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

_SCALAR_SIZE = {
    GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8,
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]  # ggml order: innermost (row length) first
    type: GGMLQuantizationType

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.type]
        return self.n_elements // block * size


def _u32(f: BinaryIO) -> int:
    return struct.unpack("<I", f.read(4))[0]


def _u64(f: BinaryIO) -> int:
    return struct.unpack("<Q", f.read(8))[0]


def _skip_value(f: BinaryIO, vtype: GGUFValueType) -> None:
    if vtype == GGUFValueType.STRING:
        f.seek(_u64(f), 1)
    elif vtype == GGUFValueType.ARRAY:
        item_type, count = GGUFValueType(_u32(f)), _u64(f)
        if item_type in _SCALAR_SIZE:
            f.seek(count * _SCALAR_SIZE[item_type], 1)
        else:
            for _ in range(count):
                _skip_value(f, item_type)
    else:
        f.seek(_SCALAR_SIZE[vtype], 1)


def read_tensor_infos(path: Path) -> list[TensorInfo]:
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = _u32(f)
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        n_tensors, n_kv = _u64(f), _u64(f)
        for _ in range(n_kv):
            f.seek(_u64(f), 1)  # key
            _skip_value(f, GGUFValueType(_u32(f)))
        infos = []
        for _ in range(n_tensors):
            name = f.read(_u64(f)).decode()
            ne = tuple(_u64(f) for _ in range(_u32(f)))
            ttype = GGMLQuantizationType(_u32(f))
            _u64(f)  # data offset
            infos.append(TensorInfo(name, ne, ttype))
        return infos
