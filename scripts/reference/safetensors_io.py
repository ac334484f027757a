"""A small safetensors reader (and writer, for development checkpoints).

The format: 8 bytes little-endian u64 = length of the JSON header; the JSON header
maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets are
relative to the first byte after the header) plus an optional "__metadata__" map of
strings; then the raw little-endian tensor data.

Written from the format description, independent of the C++ reader in model/.
bf16 is read as int16 and reinterpreted with torch's dtype view (same size), so no
rounding happens on load; callers convert to float32 themselves.
"""
import json
import struct

import numpy as np
import torch

# safetensors dtype name -> (numpy dtype read from the file, torch dtype to view as or None)
_DTYPES = {
    "F64": (np.float64, None),
    "F32": (np.float32, None),
    "F16": (np.float16, None),
    "BF16": (np.int16, torch.bfloat16),
    "I64": (np.int64, None),
    "I32": (np.int32, None),
    "I16": (np.int16, None),
    "I8": (np.int8, None),
    "U8": (np.uint8, None),
    "BOOL": (np.bool_, None),
}


class SafetensorsError(RuntimeError):
    pass


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 1024 * 1024:
            raise SafetensorsError(f"{path}: header length {n} is implausible; not a safetensors file?")
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    return header, meta, 8 + n


def load(path, names=None):
    """Reads tensors from a safetensors file into CPU torch tensors (dtype as stored).

    names: optional iterable of names to read; default all.
    Returns (dict name -> tensor, metadata dict).
    """
    header, meta, start = read_header(path)
    want = header.keys() if names is None else names
    out = {}
    with open(path, "rb") as f:
        f.seek(0, 2)
        file_len = f.tell()
        for name in want:
            if name not in header:
                raise SafetensorsError(f"{path}: tensor '{name}' not found")
            info = header[name]
            dt = info["dtype"]
            if dt not in _DTYPES:
                raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {dt}")
            npdt, view = _DTYPES[dt]
            b, e = info["data_offsets"]
            shape = list(info["shape"])
            count = int(np.prod(shape)) if shape else 1
            if e - b != count * np.dtype(npdt).itemsize or start + e > file_len:
                raise SafetensorsError(
                    f"{path}: tensor '{name}' {dt}{shape} has byte range [{b},{e}) that does not fit its shape/file")
            f.seek(start + b)
            arr = np.frombuffer(f.read(e - b), dtype=np.dtype(npdt).newbyteorder("<")).reshape(shape)
            t = torch.from_numpy(arr.astype(npdt, copy=True))
            if view is not None:
                t = t.view(view)
            out[name] = t
    return out, meta


def bf16_bits(t):
    """float32 tensor -> bf16 (round to nearest even) as a torch.bfloat16 tensor."""
    return t.to(torch.float32).to(torch.bfloat16)


def save(path, tensors, metadata=None):
    """Writes a dict name -> torch tensor (F32, F16, BF16, U8, I32, I64) in safetensors format.

    Used only for development checkpoints; tensors are written in sorted name order.
    """
    tdt = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.uint8: "U8",
           torch.int32: "I32", torch.int64: "I64", torch.int8: "I8", torch.float64: "F64"}
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        if t.dtype not in tdt:
            raise SafetensorsError(f"save: tensor '{name}' has unsupported dtype {t.dtype}")
        if t.dtype == torch.bfloat16:
            data = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            data = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": tdt[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
