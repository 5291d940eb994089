"""What a run's per-round checkpoint costs, by how it is written: whole runs, side by side in one invocation,
modes alternating (the machines are shared; the load is printed).

- ``none``: no checkpoint at all — the bound any way of writing one can approach;
- ``packed`` (now, ``rundir.CheckpointWriter``): the state packed in the run's thread (``tensorpack``: one copy
  per dtype, new containers), serialized, hashed, written and fsynced by a thread of its own while the next
  round computes;
- ``unpacked``: the same writer as it was before packing — ``torch.save`` of the state in the run's thread, the
  rest in the background;
- ``synchronous``: as it was before that — ``save_checkpoint`` of the state in the round loop.

Small files are where it shows: a round there computes in tens of milliseconds, and its checkpoint (every
client's model and Adam state, and the selected round's models: 1–8 MB) is hashed, written and fsynced twice
over with the manifest. Two parts:

- whole runs: the runs' summed wall time and CPU time (every thread of this process) per mode and repetition
  (each ``fedgca run`` whole, in this process: data, rounds, checkpoints — the last one's write waited for — and
  the files at the end), and each mode's median against ``packed``. Wall time on a shared VM moves with its
  scheduling; CPU time much less.
- one checkpoint: the first run's state (the first file's first method, above), saved ``--saves`` times per
  mode, modes alternating: the CPU time of the run's thread per save (what it stops computing for) and of all
  threads per save and write.

    python benchmarks/bench_checkpoints.py [--data-dir ../shared/data] [--files 6_cardio 42_WBC ...]
        [--methods gca fedavg] [--repeat 3] [--modes none packed unpacked synchronous] [--saves 200]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from fedgca import rundir
from fedgca.cli.main import main as cli

class _None(rundir.CheckpointWriter):
    """No checkpoint: the bound."""

    def save(self, obj) -> None:
        pass


class _Unpacked(rundir.CheckpointWriter):
    """The writer before packing: the state serialized by ``torch.save`` in the run's thread (a tensor at a time),
    the bytes hashed, written and fsynced in the background."""

    def save(self, obj) -> None:
        self.wait()
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        data = buffer.getbuffer()
        self._thread = threading.Thread(target=self._write, args=(lambda f: f.write(data),), daemon=True)
        self._thread.start()


class _Synchronous(rundir.CheckpointWriter):
    """The round loop's checkpoint before the writer: serialized, hashed, written and fsynced in the run's thread,
    unpacked."""

    def save(self, obj) -> None:
        rundir._save_hashed(self.dir, self.name, lambda f: torch.save(obj, f))


MODES = {"none": _None, "packed": rundir.CheckpointWriter, "unpacked": _Unpacked, "synchronous": _Synchronous}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--files", nargs="+", default=["6_cardio", "42_WBC", "39_vertebral", "31_satimage-2",
                                                   "37_Stamps"])
    ap.add_argument("--methods", nargs="+", default=["gca", "fedavg"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    ap.add_argument("--saves", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    logging.disable(logging.WARNING)  # the runs' own lines (a small file's threshold warning) are not the point
    background = rundir.CheckpointWriter
    paths = [Path(args.data_dir) / "adbench" / f"{f}.npz" for f in args.files]
    scratch = Path(tempfile.mkdtemp(prefix="fedgca-ckpt-"))
    print(f"load {os.getloadavg()[0]:.2f}; {len(paths)} ADBench files × {', '.join(args.methods)}, seed 100, "
          f"own-data defaults (R = 20), 1 thread")
    walls: dict[str, list[float]] = {mode: [] for mode in args.modes}
    cpus: dict[str, list[float]] = {mode: [] for mode in args.modes}
    state = whose = None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # imports first
            cli(["run", "--data", str(paths[0]), "--method", "gca", "--rounds", "1", "--out", str(scratch / "warm")])
        for rep in range(args.repeat):
            for mode in args.modes:
                rundir.CheckpointWriter = MODES[mode]
                total = cpu = 0.0
                for path in paths:
                    for method in args.methods:
                        out = scratch / f"{rep}-{len(walls[mode])}-{path.stem}-{method}"
                        t, c = time.perf_counter(), time.process_time()
                        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                            assert cli(["run", "--data", str(path), "--method", method, "--seed", "100",
                                        "--threads", "1", "--out", str(out)]) == 0
                        total += time.perf_counter() - t
                        cpu += time.process_time() - c
                        if state is None and mode == "packed":  # the first run's state: the one-checkpoint part's
                            state, whose = rundir.load_tensors(out / rundir.CHECKPOINT), f"{path.stem}'s {method}"
                        shutil.rmtree(out)
                walls[mode].append(total)
                cpus[mode].append(cpu)
        one = _one_checkpoint(state, scratch, args.modes, args.saves) if state is not None else {}
    finally:
        rundir.CheckpointWriter = background
        shutil.rmtree(scratch, ignore_errors=True)
    for what, table in (("wall", walls), ("cpu", cpus)):
        now = statistics.median(table["packed"]) if "packed" in table else None
        for mode, values in table.items():
            times = "  ".join(f"{v:6.2f} s" for v in values)
            ratio = f"   {statistics.median(values) / now:.2f}× packed" if now else ""
            print(f"{what:<5}{mode:<12} {times}   median {statistics.median(values):.2f} s{ratio}")
    if one:
        print(f"one checkpoint of {whose} run ({one.pop('bytes') / 2**20:.2f} MiB packed), "
              f"{args.saves} saves per mode, CPU ms per save (median of {args.repeat} alternations):")
        for mode, (thread, process) in one.items():
            print(f"  {mode:<12} run's thread {thread:5.2f} ms   all threads {process:5.2f} ms")
    print(f"(load {os.getloadavg()[0]:.2f} at the end)")


def _one_checkpoint(state, scratch: Path, modes: list[str], saves: int, repeat: int = 3) -> dict:
    """Per mode: the CPU time of the saving thread per save, and of the whole process per save and write."""
    out: dict = {}
    for mode in modes:
        (scratch / mode).mkdir()
    for _ in range(repeat):
        for mode in modes:
            writer = MODES[mode](scratch / mode)
            writer.save(state)  # warm
            writer.wait()
            c, mine = time.process_time(), 0.0
            for _ in range(saves):
                writer.wait()  # the previous write's CPU counts in all threads', not in the save's
                m = time.thread_time()
                writer.save(state)
                mine += time.thread_time() - m
            writer.wait()
            out.setdefault(mode, []).append((mine / saves * 1e3, (time.process_time() - c) / saves * 1e3))
    result = {mode: tuple(statistics.median(v[i] for v in values) for i in (0, 1)) for mode, values in out.items()}
    result["bytes"] = (scratch / "packed" / rundir.CHECKPOINT).stat().st_size
    return result


if __name__ == "__main__":
    main()
