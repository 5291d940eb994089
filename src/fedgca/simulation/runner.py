"""Run one federation: rounds, evaluation, checkpoints, resume and the output files."""
from __future__ import annotations

import csv
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fedgca.config import RunConfig
from fedgca.evaluation.metrics import evaluate_clients, shard_scores
from fedgca.models import param_count
from fedgca.simulation.federation import Federation, build_federation
from fedgca.simulation.registry import method_class
from fedgca.simulation.reporting import summarise
from fedgca.detector import save_client_detectors

log = logging.getLogger("fedgca")
CHECKPOINT = "checkpoint.pt"
METRIC_FIELDS = ["round", "phase", "epoch", "accuracy", "auroc", "auprc", "train_error", "val_error", "paper"]


class ConfigMismatch(RuntimeError):
    pass


def run(cfg: RunConfig, out_dir, *, data_dir=None, resume: bool = False, progress: bool | None = None,
        fed: Federation | None = None) -> dict:
    """Run (or resume) a federation and write its files to ``out_dir``; return the summary."""
    cfg = cfg.resolved()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _check_config(out, cfg, resume)
    fed = fed or build_federation(cfg, data_dir)
    method = method_class(cfg.method)(fed)

    rows: list[dict] = []
    comm: list[dict] = []
    start_round, wall_before = 0, 0.0
    ckpt_path = out / CHECKPOINT
    if resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        fed.clients.load_state_dict(ckpt["clients"])
        method.load_state_dict(ckpt["method"])
        rows, comm, start_round, wall_before = ckpt["rows"], ckpt["comm"], ckpt["round"] + 1, ckpt["wall"]
        log.info("resuming %s from round %d", out, start_round + 1)

    bar = _progress(cfg, start_round, progress)
    t0 = time.perf_counter()
    for r in range(start_round, cfg.rounds):
        part = fed.participants(r)

        def evaluate(phase: str, epoch: int, r=r) -> None:
            rows.append(_evaluate(fed, method, r, phase, epoch))
            bar.set(r, phase, epoch)

        record = method.run_round(r, part, evaluate)
        evaluate("round", -1)
        comm.append({"round": r, "bytes_up": record.bytes_up, "bytes_down": record.bytes_down,
                     "uploads": record.uploads, "participants": record.participants, **record.extra})
        wall = wall_before + time.perf_counter() - t0
        _write_metrics(out, rows)
        _save_checkpoint(ckpt_path, fed, method, rows, comm, r, wall)
        bar.done_round(r, rows[-1])
    bar.close()

    wall = wall_before + time.perf_counter() - t0
    summary = summarise(cfg, fed, method, rows, comm, wall)
    save_client_detectors(out, fed, method)
    (out / "comm.json").write_text(json.dumps(comm, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _evaluate(fed: Federation, method, r: int, phase: str, epoch: int) -> dict:
    clients = method.deployed_clients()
    shards = method.deployed_shards() if hasattr(method, "deployed_shards") else fed.shards
    res = evaluate_clients(clients, shards, fed.test_x, fed.dataset.test_y, fed.cfg.quantile)
    val_error = float("nan")
    if fed.val_shards is not None:
        val_error = float(np.mean([s.mean() for s in shard_scores(clients, fed.val_shards)]))
    return {
        "round": r + 1, "phase": phase, "epoch": epoch + 1 if epoch >= 0 else "",
        "accuracy": res["accuracy"], "auroc": res["auroc"], "auprc": res["auprc"],
        "train_error": res["train_error"], "val_error": val_error,
        "paper": int(phase == method.paper_phase), "per_client": res["per_client"],
    }


def _write_metrics(out: Path, rows: list[dict]) -> None:
    tmp = out / "metrics.csv.tmp"
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, out / "metrics.csv")


def _save_checkpoint(path: Path, fed, method, rows, comm, r, wall) -> None:
    """Atomic: a run killed while saving keeps the previous checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save({"clients": fed.clients.state_dict(), "method": method.state_dict(), "rows": rows,
                "comm": comm, "round": r, "wall": wall}, tmp)
    os.replace(tmp, path)


def _check_config(out: Path, cfg: RunConfig, resume: bool) -> None:
    path = out / "config.json"
    if path.exists() and (resume or (out / CHECKPOINT).exists()):
        saved = json.loads(path.read_text())
        if saved != cfg.to_dict():
            diff = sorted(k for k in saved if saved.get(k) != cfg.to_dict().get(k))
            raise ConfigMismatch(f"{out} holds a run with a different config (differs in: {', '.join(diff)}); "
                                 "use another --out or the same options")
        if not resume:
            raise ConfigMismatch(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    path.write_text(json.dumps(cfg.to_dict(), indent=2))


class _Progress:
    """A tqdm bar on a terminal, plain log lines otherwise."""

    def __init__(self, cfg: RunConfig, start: int, interactive: bool):
        self.cfg, self.bar = cfg, None
        if interactive:
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.rounds, initial=start, desc=f"{cfg.method}/{cfg.dataset}", unit="round")

    def set(self, r: int, phase: str, epoch: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"round {r + 1} {phase} {epoch + 1 if epoch >= 0 else ''}".strip())

    def done_round(self, r: int, row: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
        else:
            log.info("%s %s round %d/%d acc %.4f auroc %.4f", self.cfg.method, self.cfg.dataset, r + 1,
                     self.cfg.rounds, row["accuracy"], row["auroc"])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _progress(cfg: RunConfig, start: int, progress: bool | None) -> _Progress:
    interactive = sys.stderr.isatty() if progress is None else progress
    return _Progress(cfg, start, interactive)
