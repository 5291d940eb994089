"""Run one federation: rounds, evaluation, checkpoints, resume and the output files."""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path


from fedgca import rundir, runrecord
from fedgca.config import EXECUTION_ONLY, RunConfig
from fedgca.data.source import DataSource, source_for
from fedgca.detector import save_client_detectors
from fedgca.rundir import CHECKPOINT, RunFileError
from fedgca.simulation.driver import SimulatedMethod
from fedgca.simulation.federation import Federation, build_federation
from fedgca.simulation.reporting import summarise

log = logging.getLogger("fedgca")


class ConfigMismatch(RuntimeError):
    pass


def run(cfg: RunConfig, out_dir, *, source: DataSource | None = None, data_dir=None, resume: bool = False,
        progress: bool | None = None, fed: Federation | None = None, dataset=None, broker=None) -> dict:
    """Run (or resume) a federation and write its files to ``out_dir``; return the summary.

    ``source``: where the run's records are (:class:`~fedgca.data.DataSource`); without one, the built-in
    dataset ``cfg.dataset`` in ``data_dir`` (the built-in datasets' directory);
    ``dataset``: the dataset already loaded (``fedgca.binding.bind`` loads it to fill defaults);
    ``broker``: the batched engine's (``training.lockstep.EpochBroker``), which computes this run's local
    epochs together with other runs' (the caller calls its ``leave`` when the run is over).

    Everything that can fail on bad input (options, an existing directory, the
    checkpoint, the data) is checked before the first file is written, so a
    run that never started leaves nothing behind.
    """
    cfg = cfg.resolved()
    out = Path(out_dir)
    _check_existing(out, cfg, resume)
    ckpt = _read_checkpoint(out) if resume and (out / CHECKPOINT).exists() else None
    fed = fed or build_federation(cfg, source or source_for(cfg.dataset, data_dir), dataset)
    method = SimulatedMethod(fed)
    k_note = method.size_note
    if broker is not None:
        broker.attach(fed.clients)

    rows: list[dict] = []
    comm: list[dict] = []
    start_round, wall_before = 0, 0.0
    if ckpt is not None:
        try:
            method.restore(ckpt)
            rows, comm = list(ckpt["rows"]), list(ckpt["comm"])
            start_round, wall_before = int(ckpt["round"]) + 1, float(ckpt["wall"])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as err:
            raise RunFileError(f"{out / CHECKPOINT}: does not belong to this run's models "
                               f"({type(err).__name__}: {' '.join(str(err).split())[:160]})") from None
        log.info("resuming %s from round %d", out, start_round + 1)

    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.tmp"):  # a write a kill interrupted: never valid, the previous file still is
        stale.unlink(missing_ok=True)
    if not (out / rundir.CONFIG).exists():
        rundir.atomic_write_text(out / rundir.CONFIG, json.dumps(cfg.to_dict(), indent=2))
        rundir.record(out, rundir.CONFIG)
    if k_note:
        log.warning("%s", k_note)

    bar = _progress(cfg, start_round, progress)
    metrics = rundir.MetricsWriter(out)
    t0 = _clock(broker)
    for r in range(start_round, cfg.rounds):
        comm.append(method.play_round(r, rows, bar.set))
        wall = wall_before + _own_seconds(t0, fed, broker)
        metrics.write(rows)
        rundir.save_checkpoint(out, {**method.checkpoint(), "rows": rows, "comm": comm, "round": r, "wall": wall})
        bar.done_round(r, rows[-1])
    bar.close()

    wall = wall_before + _own_seconds(t0, fed, broker)
    summary = summarise(cfg, fed, method, rows, comm, wall)
    if k_note:
        summary["k_note"] = k_note
    names = save_client_detectors(out, fed, method, method.deploy_selected())
    test_rows = runrecord.test_rows_text(fed.dataset)
    if test_rows is not None:
        rundir.atomic_write_text(out / rundir.TEST_ROWS, test_rows)
        names.append(rundir.TEST_ROWS)
    rundir.atomic_write_text(out / rundir.COMM, json.dumps(comm, indent=1))
    rundir.atomic_write_text(out / rundir.SUMMARY, json.dumps(summary, indent=2))
    rundir.record(out, rundir.METRICS, rundir.CLIENT_METRICS, rundir.COMM, *names, rundir.SUMMARY)
    return summary


def _clock(broker) -> float:
    """A run's clock: wall time alone; under the batched engine its thread's CPU time (its stack's other runs
    share the process)."""
    return time.perf_counter() if broker is None else time.thread_time()


def _own_seconds(t0: float, fed: Federation, broker) -> float:
    """Seconds since ``t0`` (``_clock``) that were this run's: under the batched engine, its own compute
    (``EpochBroker.own_seconds``), not the time it waited for the other runs of its stack."""
    return time.perf_counter() - t0 if broker is None else broker.own_seconds(fed.clients, time.thread_time() - t0)


def _read_checkpoint(out: Path) -> dict:
    path = rundir.verify(out, CHECKPOINT)
    ckpt = rundir.load_tensors(path, expect_keys=("clients", "method", "rows", "comm", "round", "wall"))
    if not isinstance(ckpt["rows"], list) or not isinstance(ckpt["comm"], list) or not isinstance(ckpt["round"], int):
        raise RunFileError(f"{path}: not a fedgca checkpoint (rows, comm or round of the wrong type)")
    return ckpt


def _check_existing(out: Path, cfg: RunConfig, resume: bool) -> None:
    """Refuse to overwrite another run, or to resume one with other options (reads only)."""
    path = out / rundir.CONFIG
    if path.exists() and (resume or (out / CHECKPOINT).exists()):
        saved = rundir.load_json(rundir.verify(out, rundir.CONFIG))
        try:  # a config written before an option existed holds that option's default
            saved = RunConfig.from_dict(saved).to_dict()
        except (TypeError, ValueError):
            pass
        mine = cfg.to_dict()
        for name in EXECUTION_ONLY:  # a run may be resumed on another device
            saved.pop(name, None)
            mine.pop(name, None)
        if saved != mine:
            diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
            raise ConfigMismatch(f"{out} holds a run with a different config (differs in: {', '.join(diff)}); "
                                 "use another --out or the same options")
        if not resume:
            raise ConfigMismatch(f"{out} already holds a run; pass --resume to continue it or choose another --out")


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
