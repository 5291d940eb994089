"""`fedgca compare`: GCA and baselines over seeds on the sweep machinery, tables in the paper's layout."""
import json

from fedgca.config import RunConfig
from fedgca.experiments import compare, sweep
from fedgca.experiments.executors import LocalPool
from fedgca.reporting import comparison


def test_compare_runs_once_and_renders_the_paper_layout(tmp_path, data_dir):
    base = RunConfig(dataset="academic", rounds=1, recon_epochs=1, align_epochs=1, local_epochs=1)
    methods, seeds = ["gca", "fedavg"], [100, 200]
    first = compare.run_grid(compare.grid(base, ["academic"], methods, seeds), tmp_path, data_dir=data_dir, executor=LocalPool(0))
    assert [(s["method"], s["seed"]) for s in first] == [("gca", 100), ("gca", 200), ("fedavg", 100), ("fedavg", 200)]
    assert first[0]["k"] == 10 and first[0]["rho"] == 0.5  # each method at the dataset's preset
    started = [e for e in sweep.Ledger(tmp_path / sweep.LEDGER).events() if e["event"] == "started"]
    again = compare.run_grid(compare.grid(base, ["academic"], methods, seeds), tmp_path, data_dir=data_dir, executor=LocalPool(0))
    assert again == first  # runs already complete in DIR are not redone
    assert [e for e in sweep.Ledger(tmp_path / sweep.LEDGER).events() if e["event"] == "started"] == started
    md = comparison.render_comparison(first, methods)
    header = next(line for line in md.splitlines() if line.startswith("|"))
    assert "gca" in header.lower() and "fedavg" in header.lower()
    assert any(line.startswith("| academic") for line in md.splitlines())  # one row per dataset
    total = sum(s["wall_seconds"] for s in first)
    assert md.splitlines()[0] == (f"Setting: rounds R = 1; seeds 100, 200; partition iid; 4 runs, {total:.0f} s of run "
                                  "time in all (sum of per-run wall seconds).")
    mean = 100 * (first[0]["peak"]["accuracy"] + first[1]["peak"]["accuracy"]) / 2
    assert f"{mean:.1f}" in md
    paths = comparison.write_outputs(tmp_path, first, methods)
    assert paths["csv"].read_text().count("academic") >= 1
    assert json.loads((sweep.run_dir(tmp_path, compare.grid(base, ["academic"], ["gca"], [100])[0])
                       / "summary.json").read_text())["seed"] == 100
