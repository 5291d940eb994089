"""The edges a user touches (issue #62): download progress on a terminal only, a run's warnings above its progress
bar, configs with any character reaching Flower intact, one file-hash helper and one durability rule."""
from __future__ import annotations

import ast
import io
import logging
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fedgca"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_a_download_shows_progress_on_a_terminal_and_nothing_in_a_log(tmp_path, monkeypatch, terminal):
    from fedgca.data import download

    src = tmp_path / "cifar-10-python.tar.gz"
    src.write_bytes(b"x" * 3_000_000)
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    download._fetch(src.as_uri(), tmp_path / "out.part")
    assert (tmp_path / "out.part").read_bytes() == src.read_bytes()
    if terminal:
        assert "downloading out" in err.getvalue() and "100%" in err.getvalue()
    else:
        assert err.getvalue() == ""


def test_a_warning_during_a_run_prints_above_its_progress_bar(tmp_path, data_dir, monkeypatch):
    """With the bar on screen a warning goes through tqdm (``logging_redirect_tqdm``): it gets a line of its own
    instead of being written into the bar's line."""
    from fedgca.config import RunConfig
    from fedgca.simulation import driver, runner

    real = driver.Simulation.run_round

    def warn_then_run(self, r, evaluate):
        logging.getLogger("fedgca").warning("injected warning in round %d", r + 1)
        return real(self, r, evaluate)

    monkeypatch.setattr(driver.Simulation, "run_round", warn_then_run)
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    handler = logging.StreamHandler(err)  # what the CLI's logging set-up attaches
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        runner.run(RunConfig(dataset="magic", method="fedavg", clients=2, rounds=2, local_epochs=1, seed=100),
                   tmp_path / "run", data_dir=data_dir, progress=True)
    finally:
        root.removeHandler(handler)
    text = err.getvalue()
    pieces = [p for line in text.split("\n") for p in line.split("\r")]
    assert any("injected warning in round 2" in p for p in pieces)
    assert not any("injected warning" in p and "fedavg/magic" in p for p in pieces)  # never inside the bar's line


def test_configs_with_quotes_and_backslashes_reach_flower_intact(tmp_path):
    """Node and run configs go to Flower as TOML files written by tomli_w (any character survives Flower's own
    parser); the inline form a person types renders its values with tomli_w and refuses what it cannot carry."""
    from flwr.common.config import parse_config_args

    from fedgca.flower.deploy import config_toml, node_config_string, supernode_command

    values = {"data-dir": 'C:\\data\\"odd" dir', "partition-id": 2, "flag": True, "share": 0.5}
    path = config_toml(tmp_path / "node0.toml", values)
    assert parse_config_args([str(path)]) == values
    assert supernode_command("127.0.0.1:9092", 9094, path)[supernode_command("127.0.0.1:9092", 9094, path)
                                                           .index("--node-config") + 1] == str(path)
    inline = node_config_string({"data-dir": "C:\\data\\dir", "partition-id": 2, "flag": False})
    assert parse_config_args([inline]) == {"data-dir": "C:\\data\\dir", "partition-id": 2, "flag": False}
    with pytest.raises(ValueError, match="cannot carry a double quote"):
        node_config_string({"data-dir": 'a"b'})


def _calls(tree, names: set[str]):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and
            isinstance(n.func, ast.Attribute) and n.func.attr in names]


# caches rebuilt when missing: an atomic rename, no fsync needed (nothing is lost with them)
CACHES = {"flower/data.py": "a node's prepared partition", "data/download.py": "a downloaded dataset file"}


def test_one_file_hash_helper_and_one_durability_rule():
    """Files are hashed by ``fedgca.filehash`` alone (hashlib.file_digest), and the package replaces a file it must
    not lose only through ``rundir``'s atomic writer, which fsyncs the file and its directory (the Ray executor's
    returned run files included); only caches rename on their own."""
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(SRC).as_posix()
        reads = [n for n in _calls(tree, {"read"}) if n.args and isinstance(n.args[0], ast.BinOp)]
        assert not reads or rel == "filehash.py", f"{rel}: a chunked read loop (use fedgca.filehash)"
        if rel != "rundir.py" and rel not in CACHES:
            assert not [n for n in _calls(tree, {"replace"}) if isinstance(n.func.value, ast.Name)
                        and n.func.value.id == "os"], f"{rel}: os.replace outside rundir's atomic writer"
