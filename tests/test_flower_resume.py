"""A Flower run survives its server (issue #60): the ServerApp checkpoints every round (``fedgca.flower.checkpoint``),
a killed one resumes from it with ``resume``, and every node restores its client to where that checkpoint left it
(``fedgca.flower.nodestate``, keyed by the fedgca run, not by Flower's run id). The real loopback deployments — the
SuperLink killed too, TLS, SecAgg+ — are benchmarks/reliability.py's rows."""
import json
import shutil

import pytest
import torch

from fedgca.config import RunConfig
from fedgca.flower import server as flower_server
from fedgca.flower.checkpoint import ResumeRefused
from fedgca.flower.simulation import simulate


class Killed(Exception):
    """The ServerApp dies (in the in-process engine: an exception out of its loop)."""


def _academic(**kw) -> RunConfig:
    return RunConfig(**{"dataset": "academic", "clients": 3, "rounds": 3, "local_epochs": 1, "recon_epochs": 1,
                        "align_epochs": 1, "seed": 100, **kw})


def _killed_in_round_3(monkeypatch, cfg, out, data_dir):
    """Run ``cfg`` and kill its server in round 3 of 3, after the exchange in which the nodes trained (so each node
    saved a state of round 3, which the resumed run must not use)."""
    real = flower_server.FlowerServer.exchange

    def exchange(self, phase, r, messages):
        replies = real(self, phase, r, messages)
        if r == 2 and phase in ("train", "secagg.collect_masked_vectors"):
            raise Killed
        return replies

    monkeypatch.setattr(flower_server.FlowerServer, "exchange", exchange)
    with pytest.raises(Killed):
        simulate(cfg, out, data_dir=data_dir, reply_timeout=60)
    monkeypatch.undo()
    assert sorted({p.name.split(".")[1] for p in (out / "node-state").rglob("*.state")}) == ["r1", "r2"]  # r2: in play


def _untimed(path):
    return [{k: v for k, v in r.items() if k not in ("wall_seconds", "phase_seconds", "last_rest_seconds")}
            for r in json.loads(path.read_text())]


@pytest.mark.parametrize("method,extra", [("gca", {}), ("fedprox", {}), ("secagg-fedavg", {}),
                                          ("gca", {"val_fraction": 0.1, "selection": "client-val-error"})],
                         ids=["gca", "fedprox", "secagg-fedavg", "gca-selection"])
def test_a_killed_server_resumes_to_the_uninterrupted_run(tmp_path, data_dir, monkeypatch, method, extra):
    """metrics.csv, comm.json (less its timing) and every deployed detector byte for byte; without the nodes'
    saved states the same resume ends elsewhere (what the states are for: checked once, for GCA)."""
    cfg = _academic(method=method, **extra)
    simulate(cfg, tmp_path / "whole", data_dir=data_dir, reply_timeout=60)
    _killed_in_round_3(monkeypatch, cfg, tmp_path / "resumed", data_dir)
    shutil.copytree(tmp_path / "resumed", tmp_path / "no-state")
    simulate(cfg, tmp_path / "resumed", data_dir=data_dir, reply_timeout=60, resume=True)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert (resumed / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()
    assert _untimed(resumed / "comm.json") == _untimed(whole / "comm.json")
    for i in range(3):
        for f in ("model.pt", "detector.json"):
            a = (resumed / "clients" / f"client_{i:03d}" / f).read_bytes()
            assert a == (whole / "clients" / f"client_{i:03d}" / f).read_bytes(), (i, f)
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary.get("selected") == json.loads((whole / "summary.json").read_text()).get("selected")
    if method == "gca" and not extra:
        shutil.rmtree(tmp_path / "no-state" / "node-state")
        simulate(cfg, tmp_path / "no-state", data_dir=data_dir, reply_timeout=60, resume=True)
        assert (tmp_path / "no-state" / "metrics.csv").read_bytes() != (whole / "metrics.csv").read_bytes()


def test_a_resume_with_another_federation_or_other_options_is_refused_and_writes_nothing(tmp_path, data_dir,
                                                                                          monkeypatch):
    cfg = _academic(method="gca")
    out = tmp_path / "run"
    _killed_in_round_3(monkeypatch, cfg, out, data_dir)

    def snapshot():  # the server's files, and the nodes' saved states (in a deployment: on each node's disk)
        return {p.relative_to(out): (p.stat().st_size, p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}

    before = snapshot()
    other = {2: {"client-id": 7}}  # node 2 registers as another client
    with pytest.raises(ResumeRefused, match=r"^resume: the clients that registered \(\[0, 1, 7\]\) are not the run's"):
        simulate(cfg, out, data_dir=data_dir, reply_timeout=60, resume=True, node_extra=other)
    with pytest.raises(ResumeRefused, match=r"^resume: .* holds a run with other options \(differs in: seed\)$"):
        simulate(_academic(method="gca", seed=101), out, data_dir=data_dir, reply_timeout=60, resume=True)
    assert snapshot() == before
    simulate(cfg, out, data_dir=data_dir, reply_timeout=60, resume=True)  # the run itself still resumes
    with pytest.raises(ResumeRefused, match="holds a finished run"):
        simulate(cfg, out, data_dir=data_dir, reply_timeout=60, resume=True)
