"""Server-side checks of what a client sends: exactly what the protocol allows, or an UploadError."""
from __future__ import annotations

import math

import numpy as np
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedgca.flower.records import ARRAYS, CODES, CODES_ARRAY, METRICS, numpy_dict
from fedgca.protocol import gca
from fedgca.protocol.gca import UploadError


def check_codes(content: RecordDict, *, max_rows: int, latent_dim: int) -> np.ndarray:
    """A GCA train reply must be exactly one ArrayRecord holding exactly one valid code array."""
    records = list(content.keys())
    if records != [CODES] or not isinstance(content[CODES], ArrayRecord):
        raise UploadError(f"reply must hold exactly one ArrayRecord {CODES!r}, got records {records}")
    arrays = list(content[CODES].keys())
    if arrays != [CODES_ARRAY]:
        raise UploadError(f"reply must hold exactly one array {CODES_ARRAY!r}, got {arrays}")
    arr = content[CODES][CODES_ARRAY]
    try:
        codes = numpy_dict(content[CODES])[CODES_ARRAY]
    except Exception as e:  # noqa: BLE001 - any undecodable payload is a rejected upload
        raise UploadError(f"undecodable array ({type(e).__name__}: {e})") from None
    if str(codes.dtype) != arr.dtype or list(codes.shape) != list(arr.shape):
        raise UploadError(f"array metadata ({arr.dtype}, {list(arr.shape)}) does not match its data "
                          f"({codes.dtype}, {list(codes.shape)})")
    return gca.validate_upload(codes, max_rows=max_rows, latent_dim=latent_dim)


def check_params(content: RecordDict, reference: ArrayRecord, num_examples: int) -> dict[str, np.ndarray]:
    """A baseline train reply: the model (same names, shapes, dtypes as the global one, finite) and its metrics.
    Returns the decoded model, so that the server aggregates what it checked without decoding it again."""
    if set(content.keys()) != {ARRAYS, METRICS} or not isinstance(content[ARRAYS], ArrayRecord) \
            or not isinstance(content[METRICS], MetricRecord):
        raise UploadError(f"reply must hold ArrayRecord {ARRAYS!r} and MetricRecord {METRICS!r}, got {list(content.keys())}")
    got, ref = content[ARRAYS], reference
    if list(got.keys()) != list(ref.keys()):
        raise UploadError("model tensors differ in names from the global model")
    try:
        decoded = numpy_dict(got)
    except Exception as e:  # noqa: BLE001 - any undecodable payload is a rejected upload
        raise UploadError(f"undecodable model tensors ({type(e).__name__})") from None
    for k, a in decoded.items():
        if a.shape != tuple(ref[k].shape) or str(a.dtype) != ref[k].dtype:
            raise UploadError(f"tensor {k!r} is {a.dtype}{list(a.shape)}, expected {ref[k].dtype}{list(ref[k].shape)}")
        if not np.isfinite(a).all():
            raise UploadError(f"tensor {k!r} contains NaN or inf")
    m = content[METRICS]
    if m.get("num-examples") != num_examples:
        raise UploadError(f"num-examples {m.get('num-examples')} ≠ the {num_examples} rows the client registered")
    tau = m.get("local-steps")
    if not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
        raise UploadError(f"local-steps must be a positive number, got {tau!r}")
    return decoded
