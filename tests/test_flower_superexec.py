"""fedgca's SuperExec (fedgca.flower.superexec): the zygote forks one child per ClientApp task, ignores
malformed specs, ends with its pipe; the executor falls back to Flower's cold start when the zygote is gone.
(tests/test_flower_deploy.py runs it for real: a TLS deployment whose every ClientApp process is forked
warm, computing exactly what the simulator computes.)"""
import json
import os
import time

import pytest

from fedgca.flower import superexec

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")


def _spec(token: str) -> dict:
    return {"runtime_api_address": "127.0.0.1:1", "token": token, "insecure": True, "root_certificates_path": None,
            "runtime_dependency_install": False, "parent_pid": os.getpid(), "suppress_output": False}


def _wait(predicate, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def recording_zygote(tmp_path, monkeypatch):
    """A zygote whose children record their spec and pid instead of running Flower's ClientApp."""
    def record(spec):  # written aside and renamed: the test polls for the file and must never read it half-written
        part = tmp_path / f".{spec['token']}.part"
        part.write_text(json.dumps({"spec": spec, "pid": os.getpid(), "ppid": os.getppid()}))
        part.rename(tmp_path / f"{spec['token']}.json")

    monkeypatch.setattr(superexec, "_run_task", record)  # the fork copies the patched module
    z = superexec.Zygote(preload=("json",))
    yield z
    z.close()


def test_each_task_runs_in_its_own_child_of_the_zygote(recording_zygote, tmp_path):
    z = recording_zygote
    assert z.alive()
    assert z.submit(_spec("a")) and z.submit(_spec("b"))
    assert _wait(lambda: (tmp_path / "a.json").exists() and (tmp_path / "b.json").exists())
    a, b = (json.loads((tmp_path / f"{t}.json").read_text()) for t in "ab")
    assert a["spec"] == _spec("a") and b["spec"] == _spec("b")
    assert a["pid"] != b["pid"] and a["ppid"] == b["ppid"] == z.pid != os.getpid()


def test_a_malformed_spec_is_skipped_and_the_zygote_goes_on(recording_zygote, tmp_path):
    z = recording_zygote
    os.write(z._w, b"not json\n" + json.dumps({"token": "x"}).encode() + b"\n")
    assert z.submit(_spec("after"))
    assert _wait(lambda: (tmp_path / "after.json").exists())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["after.json"]


def test_closing_the_pipe_ends_the_zygote_and_later_tasks_start_cold(recording_zygote, monkeypatch):
    from flwr.supercore.constant import TaskType
    from flwr.supercore.superexec.executor.types import ExecutionSpec, LaunchResult

    z = recording_zygote
    executor = superexec.ZygoteExecutor(z)
    cold = []
    monkeypatch.setattr(executor.fallback, "launch", lambda spec: cold.append(spec.token) or LaunchResult.accepted())
    z.close()
    assert _wait(lambda: not z.alive())
    assert not z.submit(_spec("late"))
    spec = ExecutionSpec(task_type=TaskType.CLIENT_APP, task_id=1, **{k: v for k, v in _spec("late").items()})
    assert executor.launch(spec).status == "accepted"
    assert cold == ["late"] and (executor.warm, executor.cold) == (0, 1)


def test_a_spec_too_long_for_one_atomic_write_is_refused(recording_zygote):
    assert not recording_zygote.submit(_spec("t" * 5000))


def test_a_flwr_without_the_swapped_internals_is_refused_at_start(monkeypatch):
    """The installed flwr passes; one that renamed ``get_executor`` (the name the swap replaces) or an
    ``ExecutionSpec`` field gets one line naming what is missing, before anything starts."""
    import dataclasses

    from flwr.supercore.superexec import run_superexec as flower_superexec
    from flwr.supercore.superexec.executor import types

    superexec.check_flower_internals()
    monkeypatch.delattr(flower_superexec, "get_executor")
    with pytest.raises(RuntimeError, match=r"lacks get_executor;"):
        superexec.check_flower_internals()
    monkeypatch.undo()

    @dataclasses.dataclass(frozen=True)
    class Renamed:  # a spec whose token field is called differently
        task_type: str
        runtime_api_address: str
        auth_token: str
        insecure: bool
        root_certificates_path: str | None
        runtime_dependency_install: bool
        parent_pid: int | None
        suppress_output: bool
        task_id: int

    monkeypatch.setattr(types, "ExecutionSpec", Renamed)
    with pytest.raises(RuntimeError, match=r"lacks ExecutionSpec\.token;"):
        superexec.check_flower_internals()
    with pytest.raises(RuntimeError, match="lacks"):
        superexec.serve("127.0.0.1:1", insecure=True)  # refused before any zygote or connection
