"""How often one `fedgca run` enters methods.py and simulation/runner.py (issue #42's measure of a readable path).

    .venv/bin/python scripts/trace_run_entries.py [DATA_DIR]

Runs `fedgca run --dataset academic --rounds 1` under a profiler and lists every distinct call site outside each
file from which the run calls into it, split into what happens before the command starts (imports, building the
CLI parser: the method lists of its --help) and what the run itself does (from ``cmd_run`` on).
"""
from __future__ import annotations

import collections
import shutil
import sys
import tempfile
from pathlib import Path

TARGETS = ("fedgca/methods.py", "fedgca/simulation/runner.py")


def main() -> None:
    data_dir = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[2] / "shared" / "data")
    out = Path(tempfile.mkdtemp()) / "run"
    argv = ["run", "--dataset", "academic", "--data-dir", data_dir, "--rounds", "1", "--recon-epochs", "1",
            "--align-epochs", "1", "--out", str(out), "--threads", "1"]
    sites = {phase: collections.defaultdict(set) for phase in ("before the command", "the run")}
    state = {"phase": "before the command"}

    def prof(frame, event, arg):
        if event != "call":
            return
        if frame.f_code.co_name == "cmd_run":
            state["phase"] = "the run"
        f = frame.f_code.co_filename
        for t in TARGETS:
            caller = frame.f_back
            if f.endswith(t) and caller is not None and not caller.f_code.co_filename.endswith(t) \
                    and "importlib" not in caller.f_code.co_filename:
                where = caller.f_code.co_filename.split("src/")[-1]
                sites[state["phase"]][t].add(f"{where}:{caller.f_lineno} → {frame.f_code.co_name}")

    from fedgca.cli.main import main as cli

    sys.setprofile(prof)
    try:
        code = cli(argv)
    finally:
        sys.setprofile(None)
        shutil.rmtree(out.parent, ignore_errors=True)
    assert code == 0
    for phase, by_file in sites.items():
        for t in TARGETS:
            print(f"{phase}: {t} entered from {len(by_file[t])} call site(s)")
            for s in sorted(by_file[t]):
                print("    ", s)


if __name__ == "__main__":
    main()
