"""Element types of collectives, with bfloat16 done in NumPy through uint16 storage.

NumPy has no bfloat16, so bfloat16 arrays are stored as ``uint16`` (the top 16 bits of a
float32) and the caller names the type (``dtype="bfloat16"``). Reductions widen to
float32 and round back to nearest-even, as GPU kernels do.
"""

from __future__ import annotations

import numpy as np

from sdr.errors import ConfigError

DTYPES = ("float32", "float16", "bfloat16")
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def dtype_name(array_dtype: np.dtype | str, override: str | None = None) -> str:
    """The collective dtype of an array (``override`` names bfloat16 for uint16 storage)."""
    name = override or np.dtype(array_dtype).name
    if name not in DTYPES:
        raise ConfigError(f"dtype {name!r}; expected one of {DTYPES} (bfloat16 as uint16)")
    return name


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values stored as uint16 -> float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 stored as uint16, rounding to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def to_f32(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Raw element storage of ``dtype`` -> float32 for arithmetic."""
    if dtype == "bfloat16":
        return bf16_to_f32(raw.view(np.uint16))
    return raw.view(np.dtype(dtype)).astype(np.float32)


def from_f32(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> raw element storage of ``dtype`` (an array of that storage type)."""
    if dtype == "bfloat16":
        return f32_to_bf16(values)
    return values.astype(np.dtype(dtype))


def storage_dtype(dtype: str) -> np.dtype:
    """The NumPy storage type of ``dtype`` (uint16 for bfloat16)."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)
