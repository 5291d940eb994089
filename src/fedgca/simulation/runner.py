"""Run one federation: rounds, evaluation, checkpoints, resume and the output files."""
from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path

from fedgca import rundir, runrecord
from fedgca.config import EXECUTION_ONLY, RunConfig
from fedgca.data.source import DataSource, source_for
from fedgca.rundir import CHECKPOINT, RunFileError
from fedgca.simulation.driver import Simulation
from fedgca.simulation.federation import Federation, build_federation

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
    cfg, out, ckpt = _open(cfg, Path(out_dir), resume)
    fed = fed or build_federation(cfg, source or source_for(cfg.dataset, data_dir), dataset)
    sim = Simulation(fed, ckpt=ckpt, broker=broker)
    if ckpt is not None:
        log.info("resuming %s from round %d", out, sim.start_round + 1)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.tmp"):  # a write a kill interrupted: never valid, the previous file still is
        stale.unlink(missing_ok=True)
    if not (out / rundir.CONFIG).exists():
        rundir.atomic_write_text(out / rundir.CONFIG, json.dumps(cfg.to_dict(), indent=2))
        rundir.record(out, rundir.CONFIG)
    if sim.size_note:
        log.warning("%s", sim.size_note)

    bar = _Progress(cfg, sim.start_round, sys.stderr.isatty() if progress is None else progress)
    metrics = rundir.MetricsWriter(out)
    checkpoints = rundir.CheckpointWriter(out)  # written while the next round computes
    wall = sim.wall_before
    try:
        with bar.logging():  # a warning during the run (a clustering fallback) prints above the bar, not through it
            for state in sim.rounds(bar.set):
                wall = state["wall"]
                metrics.write(state["rows"])
                checkpoints.save(state)
                bar.done_round(state["round"], state["rows"][-1])
    except BaseException:
        with contextlib.suppress(Exception):  # the write in flight ends first; this error is the one to report
            checkpoints.wait()
        raise
    checkpoints.wait()  # the last round's on disk (its error raised) before the manifest changes again

    summary, names = sim.finish(out, wall)
    if sim.size_note:
        summary["k_note"] = sim.size_note
    test_rows = runrecord.test_rows_text(fed.dataset)
    if test_rows is not None:
        rundir.atomic_write_text(out / rundir.TEST_ROWS, test_rows)
        names.append(rundir.TEST_ROWS)
    rundir.atomic_write_text(out / rundir.COMM, json.dumps(sim.comm, indent=1))
    rundir.atomic_write_text(out / rundir.SUMMARY, json.dumps(summary, indent=2))
    rundir.record(out, rundir.METRICS, rundir.CLIENT_METRICS, rundir.COMM, *names, rundir.SUMMARY)
    if not cfg.keep_checkpoint:
        rundir.forget(out, CHECKPOINT)
    return summary


def _open(cfg: RunConfig, out: Path, resume: bool) -> tuple[RunConfig, Path, dict | None]:
    """The resolved config, the run directory and its checkpoint (when resuming) — refusing to overwrite another
    run or to resume one with other options (reads only)."""
    cfg = cfg.resolved()
    path, ckpt_path = out / rundir.CONFIG, out / CHECKPOINT
    finished = (out / rundir.SUMMARY).exists()
    if path.exists() and (resume or ckpt_path.exists() or finished):
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
    if resume and finished and not ckpt_path.exists():  # --no-keep-checkpoint dropped it: nothing to continue
        raise ConfigMismatch(f"{out} holds a finished run whose checkpoint was not kept; its results stand as they "
                             "are (choose another --out to run it again)")
    if not (resume and ckpt_path.exists()):
        return cfg, out, None
    ckpt = rundir.load_tensors(rundir.verify(out, CHECKPOINT),
                               expect_keys=("clients", "method", "rows", "comm", "round", "wall"))
    if not isinstance(ckpt["rows"], list) or not isinstance(ckpt["comm"], list) or not isinstance(ckpt["round"], int):
        raise RunFileError(f"{ckpt_path}: not a fedgca checkpoint (rows, comm or round of the wrong type)")
    return cfg, out, ckpt


class _Progress:
    """A tqdm bar on a terminal, plain log lines otherwise."""

    def __init__(self, cfg: RunConfig, start: int, interactive: bool):
        self.cfg, self.bar = cfg, None
        if interactive and start < cfg.rounds:
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.rounds, initial=start, desc=f"{cfg.method}/{cfg.dataset}", unit="round")

    def logging(self):
        """Log records written through tqdm while the bar is on screen (``tqdm.contrib.logging``)."""
        if self.bar is None:
            return contextlib.nullcontext()
        from tqdm.contrib.logging import logging_redirect_tqdm

        return logging_redirect_tqdm()

    def set(self, r: int, phase: str, epoch: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"round {r + 1} {phase} {epoch + 1 if epoch >= 0 else ''}".strip())

    def done_round(self, r: int, row: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if r + 1 == self.cfg.rounds:
                self.bar.close()
        else:
            log.info("%s %s round %d/%d acc %.4f auroc %.4f", self.cfg.method, self.cfg.dataset, r + 1,
                     self.cfg.rounds, row["accuracy"], row["auroc"])

