"""Checkpoints are written packed (``fedgca.tensorpack``): one flat buffer per dtype and a tree of references.
The pack gives back the state exactly, is a snapshot, loads under ``weights_only=True``, refuses a reference that
points outside its buffers, and a checkpoint written before packing still resumes."""
from __future__ import annotations

import json
import re
from collections import OrderedDict

import pytest
import torch

from fedgca import rundir, tensorpack
from fedgca.config import RunConfig
from fedgca.simulation.runner import run


def _state():
    big = torch.arange(1_000_000, dtype=torch.float32)
    w = torch.randn(4, 3)
    return {"clients": {"params": OrderedDict(w=w, w_t=w.t(), again=w, tail=big[-5:]), "step": torch.tensor(7),
                        "empty": torch.zeros(0, 2), "grad": torch.ones(2, requires_grad=True)},
            "method": [torch.arange(6).view(2, 3), (torch.ones(2, dtype=torch.float64), 3.5, None)],
            "size": torch.Size([2, 3]), "rows": [{"round": 0, "auroc": 0.5, "per_client": {"auroc": [0.5]}}],
            "round": 1, "flags": torch.tensor([True, False])}


def _same(a, b) -> None:
    """``a`` equals ``b``: containers of the same types, tensors of the same dtype, shape and values."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.detach(), b.detach())
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def test_a_packed_state_comes_back_as_it_was_through_a_weights_only_file(tmp_path):
    state = _state()
    packed = tensorpack.pack(state)
    # one buffer per dtype: float32, int64, float64, bool
    assert sorted(str(b.dtype) for b in packed["buffers"]) == ["torch.bool", "torch.float32", "torch.float64",
                                                              "torch.int64"]
    torch.save(packed, tmp_path / "packed.pt")
    torch.save(state, tmp_path / "as_is.pt")
    back = tensorpack.unpack(torch.load(tmp_path / "packed.pt", weights_only=True))
    _same(back, state)
    # a view stores its own values, not its base (`big`); a tensor that appears twice comes back once
    assert (tmp_path / "packed.pt").stat().st_size < 10_000 < (tmp_path / "as_is.pt").stat().st_size
    params = back["clients"]["params"]
    assert params["again"] is params["w"] and params["w_t"] is not params["w"]
    assert len({t.untyped_storage().data_ptr() for t in params.values()}) == 3  # each its own storage
    assert not back["clients"]["grad"].requires_grad


def test_a_pack_is_a_snapshot():
    state = _state()
    packed = tensorpack.pack(state)
    w = state["clients"]["params"]["w"].clone()
    state["clients"]["params"]["w"].mul_(-1)
    state["rows"].append({"round": 1})
    state["rows"][0]["auroc"] = 0.9
    state["clients"]["step"] += 1
    back = tensorpack.unpack(packed)
    assert torch.equal(back["clients"]["params"]["w"], w) and int(back["clients"]["step"]) == 7
    assert len(back["rows"]) == 1 and back["rows"][0]["auroc"] == 0.5


@pytest.mark.parametrize("damage, says", [
    (lambda p: p["tree"]["w"]["fedgca_tensor"].__setitem__(1, 10), "outside the packed buffers"),
    (lambda p: p["tree"]["w"]["fedgca_tensor"].__setitem__(2, [10 ** 12]), "outside the packed buffers"),
    (lambda p: p["tree"]["w"]["fedgca_tensor"].__setitem__(0, 3), "outside the packed buffers"),
    (lambda p: p["tree"]["w"]["fedgca_tensor"].__setitem__(1, -1), "outside the packed buffers"),
    (lambda p: p["tree"]["w"].__setitem__("fedgca_tensor", "w"), "outside the packed buffers"),
    (lambda p: p.__setitem__("fedgca_packed_tensors", 99), "unknown format (version 99)"),
    (lambda p: p.__setitem__("buffers", [torch.zeros(2, 2)]), "not flat tensors"),
])
def test_a_damaged_pack_is_one_clear_line(tmp_path, damage, says):
    packed = tensorpack.pack({"w": torch.ones(3), "round": 0})
    damage(packed)
    with pytest.raises(ValueError, match=re.escape(says)):
        tensorpack.unpack(packed)
    torch.save(packed, tmp_path / rundir.CHECKPOINT)
    with pytest.raises(rundir.RunFileError, match=r"checkpoint.pt: truncated or corrupted \(.*" + re.escape(says)):
        rundir.load_tensors(tmp_path / rundir.CHECKPOINT)


def test_checkpoints_are_written_packed_and_read_back_unpacked(tmp_path):
    state = {"round": 0, "w": torch.ones(2, 3), "step": torch.tensor(3), "rows": [{"round": 0}]}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    writer = rundir.CheckpointWriter(tmp_path / "a")  # a run's, in the background
    writer.save(state)
    writer.wait()
    rundir.save_checkpoint(tmp_path / "b", state)  # Flower's server and node states
    for d in ("a", "b"):
        on_disk = torch.load(tmp_path / d / rundir.CHECKPOINT, weights_only=True)
        assert tensorpack.is_packed(on_disk) and len(on_disk["buffers"]) == 2
        _same(rundir.load_tensors(rundir.verify(tmp_path / d, rundir.CHECKPOINT)), state)


def test_a_checkpoint_written_before_packing_still_resumes(tmp_path, data_dir, kill_after_round):
    """A run killed after round 1 whose checkpoint is rewritten as fedgca wrote it before packing (``torch.save``
    of the state itself, through the manifest's protocol): the resume reads it and ends with the numbers of the
    run that was never killed."""
    cfg = RunConfig("academic", method="gca", rounds=3, clients=3, k=4, recon_epochs=1, align_epochs=1)
    whole = run(cfg, tmp_path / "whole", data_dir=data_dir, progress=False)
    out = tmp_path / "resumed"
    kill_after_round(lambda: run(cfg, out, data_dir=data_dir, progress=False), 1)
    state = rundir.load_tensors(rundir.verify(out, rundir.CHECKPOINT))
    rundir._save_hashed(out, rundir.CHECKPOINT, lambda f: torch.save(state, f))  # the format before packing
    assert not tensorpack.is_packed(torch.load(out / rundir.CHECKPOINT, weights_only=True))
    run(cfg, out, data_dir=data_dir, progress=False, resume=True)
    assert (out / "metrics.csv").read_bytes() == (tmp_path / "whole" / "metrics.csv").read_bytes()
    assert json.loads((out / "summary.json").read_text())["final"] == whole["final"]
