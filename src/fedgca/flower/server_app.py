"""The fedgca Flower ServerApp: ``fedgca.flower.server_app:app``.

Its configuration is the run config (``[tool.flwr.app.config]`` of the app
project, overridden by ``flwr run --run-config``): every ``RunConfig`` field
under its dashed name plus the Flower options of :mod:`fedgca.flower.config`.
"""
from __future__ import annotations

import logging

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedgca.flower.config import parse_run_config
from fedgca.flower.rounds import run_server


def make_server_app(defaults: dict | None = None, data=None) -> ServerApp:
    """A ServerApp whose run config is ``defaults`` overridden by the context's run config.

    ``flwr run`` passes the app project's config; Python entry points
    (``flwr.simulation.run_simulation``, the in-process engine) pass theirs
    as ``defaults``. ``data``: the bound dataset of a local simulation over own data — its summary ``data`` block
    and test_rows.csv are written as the simulator writes them (a deployed server never holds it).
    """
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        _route_logs()
        cfg, opts = parse_run_config({**(defaults or {}), **dict(context.run_config)})
        summary = run_server(grid, cfg, opts, data=data)
        context.state["fedgca.summary"] = _summary_record(summary)

    return server_app


def _route_logs() -> None:
    """fedgca's log lines (drops, rejections, round summaries) go where Flower's own go (and its log stream)."""
    ours, flwr_logger = logging.getLogger("fedgca"), logging.getLogger("flwr")
    ours.setLevel(logging.INFO)
    if not ours.handlers and not logging.getLogger().handlers:
        for h in flwr_logger.handlers:
            ours.addHandler(h)


def _summary_record(summary: dict):
    import json

    from flwr.app import ConfigRecord

    return ConfigRecord({"json": json.dumps(summary, default=str)})


app = make_server_app()
