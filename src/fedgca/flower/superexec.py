"""fedgca's SuperExec: each ClientApp process starts warm, forked, instead of cold.

Flower 1.41 runs every message a SuperNode receives in its own ClientApp process (``flwr-clientapp``
handles one task and exits: ``flwr/supernode/runtime/run_clientapp.py``). Started cold, each one imports
torch, flwr and fedgca again: ~2.5 s of CPU per message on every node, before any work.

This SuperExec serves a SuperNode started with ``--isolation process``::

    flower-supernode ... --isolation process --host 127.0.0.1 --port 9094
    fedgca flower superexec --runtime-api-address 127.0.0.1:9094 --insecure

It is Flower's own SuperExec loop (``run_superexec``) with one change: a ClientApp task is handed to a
*zygote*, a single-threaded process that imported fedgca's ClientApp once at start-up and forks one
child per task. The child runs Flower's own ``run_clientapp`` for that one task and exits, as a cold
``flwr-clientapp`` does: each message still gets a fresh process and Context from the SuperNode; only
the interpreter start and the imports are gone.

Code is imported once: restart the SuperExec after upgrading fedgca. A task the zygote cannot take
(another task type, a zygote that has died) starts the stock way, with Flower's SubprocessExecutor.
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import select
import signal
import sys
import traceback

log = logging.getLogger("fedgca.flower")

# What a ClientApp task imports, loaded once in the zygote (fedgca's ClientApp pulls in torch and flwr).
PRELOAD = ("fedgca.flower.client_app", "flwr.supernode.runtime.run_clientapp", "flwr.supercore.tls")
_SPEC_FIELDS = ("runtime_api_address", "token", "insecure", "root_certificates_path", "runtime_dependency_install",
                "parent_pid", "suppress_output")


def _run_task(spec: dict) -> None:
    """In a forked child: Flower's ClientApp process body for one task (what ``flwr-clientapp`` runs)."""
    from flwr.supercore.tls import validate_and_resolve_root_certificates
    from flwr.supernode.runtime.run_clientapp import run_clientapp

    if spec["suppress_output"]:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    run_clientapp(runtime_api_address=spec["runtime_api_address"], token=spec["token"], insecure=spec["insecure"],
                  certificates=validate_and_resolve_root_certificates(spec["root_certificates_path"],
                                                                      spec["insecure"]),
                  parent_pid=spec["parent_pid"], runtime_dependency_install=spec["runtime_dependency_install"])


def _child(spec: dict) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the task may wait on its own subprocesses
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 1
    try:
        _run_task(spec)
        code = 0
    except SystemExit as e:  # run_clientapp ends with flwr_exit → sys.exit(code)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never return into the zygote's loop


def _zygote_loop(fd: int) -> None:
    """Read one JSON spec per line; fork a child per spec. Ends when the SuperExec closes the pipe."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished children
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the SuperExec; its closed pipe then ends this loop
    with os.fdopen(fd, "rb") as pipe:
        for line in pipe:
            try:
                spec = json.loads(line)
                if not isinstance(spec, dict) or set(spec) != set(_SPEC_FIELDS):
                    raise ValueError(f"unexpected task spec fields {sorted(spec) if isinstance(spec, dict) else spec}")
            except ValueError as e:
                print(f"fedgca superexec zygote: ignoring a malformed task spec: {e}", file=sys.stderr, flush=True)
                continue
            if os.fork() == 0:
                pipe.close()
                _child(spec)


class Zygote:
    """A forked, single-threaded process with ``preload`` imported, forking one child per ClientApp task.

    Fork it before the process starts threads (the SuperExec's HTTP client and heartbeats): a fork
    copies only the calling thread, so forking later could copy a lock some other thread holds.
    """

    def __init__(self, preload=PRELOAD):
        for module in preload:
            importlib.import_module(module)
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            code = 0
            try:
                _zygote_loop(r)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        os.close(r)
        self.pid, self._w = pid, w

    def alive(self) -> bool:
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0

    def submit(self, spec: dict) -> bool:
        """Hand one task to the zygote; False when it cannot take it (then start the task another way)."""
        line = (json.dumps({k: spec[k] for k in _SPEC_FIELDS}) + "\n").encode()
        if len(line) > select.PIPE_BUF or not self.alive():  # one write of ≤ PIPE_BUF bytes is atomic
            return False
        try:
            os.write(self._w, line)
        except OSError:
            return False
        return True

    def close(self) -> None:
        try:
            os.close(self._w)  # EOF: the zygote's loop ends; running tasks finish on their own
        except OSError:
            pass


class ZygoteExecutor:
    """Flower's executor interface (``flwr.supercore.superexec.executor.types.Executor``): ClientApp tasks
    go to the zygote, anything else (or everything, once the zygote is gone) to Flower's SubprocessExecutor."""

    def __init__(self, zygote: Zygote):
        from flwr.supercore.superexec.executor.subprocess_executor import (
            SubprocessExecutor,
        )

        self.zygote, self.fallback = zygote, SubprocessExecutor()
        self.warm = self.cold = 0

    def get_eligible_capacity(self, supported_task_types, **tls):
        return self.fallback.get_eligible_capacity(supported_task_types, **tls)

    def wait_for_capacity(self, task_type=None, **kwargs):
        self.fallback.wait_for_capacity(task_type, **kwargs)

    def launch(self, spec):
        from flwr.supercore.constant import TaskType
        from flwr.supercore.superexec.executor.types import LaunchResult

        if spec.task_type == TaskType.CLIENT_APP and self.zygote.submit(
                {k: getattr(spec, k) for k in _SPEC_FIELDS}):
            self.warm += 1
            return LaunchResult.accepted()
        if spec.task_type == TaskType.CLIENT_APP:
            log.warning("fedgca superexec: the zygote is gone; task %d starts cold", spec.task_id)
        self.cold += 1
        return self.fallback.launch(spec)

    def reconcile(self) -> None:
        self.fallback.reconcile()

    def close(self) -> None:
        self.zygote.close()
        self.fallback.close()


def check_flower_internals() -> None:
    """Raise one line if the installed flwr lacks what this SuperExec swaps into or reads.

    It relies on flwr 1.41 internals: ``run_superexec`` choosing its executor through the module-level
    name ``get_executor``, and ``ExecutionSpec``'s fields. Another flwr could rename either, and the swap
    would then be silently skipped (cold processes) or a spec misread; fail at start instead."""
    import dataclasses

    import flwr
    from flwr.supercore.superexec import run_superexec as flower_superexec
    from flwr.supercore.superexec.executor.types import ExecutionSpec, LaunchResult

    missing = [name for name in ("run_superexec", "get_executor") if not callable(getattr(flower_superexec, name, None))]
    fields = {f.name for f in dataclasses.fields(ExecutionSpec)}
    missing += [f"ExecutionSpec.{name}" for name in (*_SPEC_FIELDS, "task_type", "task_id") if name not in fields]
    if not callable(getattr(LaunchResult, "accepted", None)):
        missing.append("LaunchResult.accepted")
    if missing:
        raise RuntimeError(f"fedgca flower superexec was built against flwr 1.41, and flwr {flwr.__version__} lacks "
                           f"{', '.join(missing)}; start the SuperNode with Flower's own SuperExec instead "
                           "(ClientApp processes then start cold)")


def serve(runtime_api_address: str, *, insecure: bool, root_certificates: str | None = None,
          parent_pid: int | None = None, preload=PRELOAD) -> None:
    """Run the SuperExec until it is stopped (SIGTERM/SIGINT, or its parent ``parent_pid`` exits)."""
    from flwr.supercore.superexec import run_superexec as flower_superexec

    check_flower_internals()
    if not hasattr(os, "fork"):
        raise RuntimeError("fedgca flower superexec forks its ClientApp processes, which this OS cannot; start the "
                           "SuperNode without --isolation process and Flower starts them its own way")
    executor = ZygoteExecutor(Zygote(preload))
    # Flower's loop picks its executor through this module-level name; everything else is Flower's own.
    flower_superexec.get_executor = lambda *args, **kwargs: executor
    flower_superexec.run_superexec(runtime_api_address=runtime_api_address, insecure=insecure,
                                   root_certificates_path=root_certificates, parent_pid=parent_pid)
