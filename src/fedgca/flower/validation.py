"""Server-side decoding of what a client sends: exactly the records its step allows, arrays that decode to what
their metadata says, or an UploadError. What the values may be is the method's ``check``."""
from __future__ import annotations

from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedgca.algorithms import Reply, Step
from fedgca.flower.records import EVALUATION, METRICS, numpy_dict
from fedgca.protocol.gca import UploadError


def decode_reply(content: RecordDict, step: Step, *, evaluation: bool = False) -> Reply:
    """A step's reply: an ArrayRecord under ``step.reply``, a MetricRecord ``metrics`` if the step has them, and
    (``evaluation``) the client's evaluation — nothing else."""
    expected = {step.reply: ArrayRecord} if step.reply else {}
    if step.metrics:
        expected[METRICS] = MetricRecord
    if evaluation:
        expected[EVALUATION] = MetricRecord
    got = list(content.keys())
    if set(got) != set(expected) or any(not isinstance(content[k], t) for k, t in expected.items()):
        allowed = ", ".join(f"{t.__name__} {k!r}" for k, t in expected.items()) or "nothing"
        raise UploadError(f"reply must hold exactly {allowed}, got records {got}")
    arrays = {}
    if step.reply:
        try:
            arrays = numpy_dict(content[step.reply])
        except Exception as e:  # noqa: BLE001 - any undecodable payload is a rejected upload
            raise UploadError(f"undecodable array ({type(e).__name__}: {e})") from None
        for name, a in arrays.items():
            meta = content[step.reply][name]
            if str(a.dtype) != meta.dtype or list(a.shape) != list(meta.shape):
                raise UploadError(f"array {name!r}: metadata ({meta.dtype}, {list(meta.shape)}) does not match its "
                                  f"data ({a.dtype}, {list(a.shape)})")
    return Reply(arrays, dict(content[METRICS]) if step.metrics else {})
