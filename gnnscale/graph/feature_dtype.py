"""How feature rows are stored and sent: float32, or half precision (float16, bfloat16) for half the
bytes on disk, in the page cache, in every worker's memory and on the wire. Computation stays float32:
rows are widened where they arrive (:func:`to_float32`).

numpy has no bfloat16, so bfloat16 rows are stored as the uint16 bit patterns torch gives them (the
upper half of the float32's bits, rounded to nearest even); :func:`as_tensor` views them as bfloat16
again. A file's dtype says which: float32 ``<f4``, float16 ``<f2``, bfloat16 ``<u2``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gnnscale.graph.dataset import flagged_rows

FEATURE_DTYPES = ("float32", "float16", "bfloat16")
# The least float32 magnitude each half dtype rounds to Inf (rounding to nearest even: the tie above its
# largest finite value): float16's largest is 65504; bfloat16 has float32's range but for the top half ULP.
OVERFLOWS_AT = {"float16": 65520.0, "bfloat16": float(np.array(0x7F7F8000, dtype=np.uint32).view(np.float32))}
_NUMPY = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}
_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def check_feature_dtype(name: str) -> str:
    if name not in FEATURE_DTYPES:
        raise ValueError(f"feature_dtype: expected one of {', '.join(FEATURE_DTYPES)}, got {name!r}")
    return name


def numpy_dtype(name: str) -> np.dtype:
    """The dtype of a stored feature matrix of ``name`` (bfloat16: uint16 bit patterns)."""
    return _NUMPY[check_feature_dtype(name)]


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH[check_feature_dtype(name)]


def stored_name(array: np.ndarray | Tensor) -> str:
    """Which of :data:`FEATURE_DTYPES` an array of stored rows holds (numpy uint16: bfloat16)."""
    for name in FEATURE_DTYPES:
        if array.dtype in (_NUMPY[name], _TORCH[name]):
            return name
    raise TypeError(f"features: expected float32, float16 or bfloat16 rows (bfloat16 as uint16 in numpy), got "
                    f"{array.dtype}")


def encode(rows: np.ndarray, name: str) -> np.ndarray:
    """float32 ``rows`` as stored in ``name`` (rounded to nearest even); float32 rows are returned as they are."""
    name = check_feature_dtype(name)
    if name == "float32":
        return np.asarray(rows, dtype=np.float32)
    wide = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))
    narrow = wide.to(_TORCH[name])
    if name == "bfloat16":
        narrow = narrow.view(torch.uint16)
    return narrow.numpy()


def check_features_fit(features: np.ndarray, feature_dtype: str, chunk_rows: int = 1 << 16) -> None:
    """ValueError naming the first rows of finite float32 ``features`` that ``feature_dtype`` would store as
    Inf (float16: a value beyond +-65504), which would train a NaN model as a NaN feature does. Read in
    chunks, as :func:`~gnnscale.graph.dataset.check_finite_features`."""
    limit = OVERFLOWS_AT.get(check_feature_dtype(feature_dtype))
    if limit is None:
        return
    count, shown = flagged_rows(features, lambda rows: (np.abs(rows) >= limit).any(axis=1), chunk_rows)
    if count:
        raise ValueError(f"feature_dtype: {count} rows hold values that {feature_dtype} stores as Inf (magnitude "
                         f"{limit:g} or more; rows {shown}); store them as bfloat16 or float32, or scale the features")


def stored_array(rows: np.ndarray | Tensor) -> np.ndarray:
    """Stored rows as numpy, without a copy: a tensor's memory seen as numpy (bfloat16 as uint16)."""
    if isinstance(rows, np.ndarray):
        return rows
    return rows.view(torch.uint16).numpy() if rows.dtype == torch.bfloat16 else rows.numpy()


def as_tensor(rows: np.ndarray) -> Tensor:
    """Stored numpy rows as a tensor of their torch dtype, without a copy (uint16 viewed as bfloat16)."""
    tensor = torch.from_numpy(rows)
    return tensor.view(torch.bfloat16) if rows.dtype == np.uint16 else tensor


def to_float32(rows: Tensor) -> Tensor:
    """Rows as float32 for computation (no copy when they are float32 already)."""
    return rows if rows.dtype == torch.float32 else rows.to(torch.float32)


def half_or_float32(rows: Tensor) -> Tensor:
    """Rows as a model's input: half precision (float16, bfloat16) as it is, which a typed model widens a chunk at
    a time; any other dtype as float32 (no copy when it is float32 already)."""
    return rows if rows.dtype in (torch.float16, torch.bfloat16) else to_float32(rows)


def decode(rows: np.ndarray) -> Tensor:
    """Stored numpy rows (float32, float16, or bfloat16 as uint16) as a float32 tensor."""
    rows = np.ascontiguousarray(rows)
    if not rows.flags.writeable:  # a slice of a memory map: torch wants memory it may write
        rows = rows.copy()
    return to_float32(as_tensor(rows))
