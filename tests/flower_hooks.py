"""Test-only wrappers around fedgca's Flower apps (production code knows nothing of them).

``faulty_client_app``: fedgca's ClientApp handlers, with ``train`` wrapped so that
a node whose node config says ``fault=...`` misbehaves in its GCA upload.
``PAUSED_SERVER_APP``: the text of a ServerApp module, written into a Flower App
directory, that sleeps between rounds so that a test can kill a node there.
"""
from __future__ import annotations

import time

import numpy as np

FAULTS = ("nan-codes", "inf-codes", "wrong-shape", "extra-rows", "float64", "extra-array", "crash", "sleep:<s>")


def _faulty_codes(codes: np.ndarray, fault: str) -> dict[str, np.ndarray]:
    from fedgca.algorithms.gca import CODES_ARRAY

    arrays = {CODES_ARRAY: codes.copy()}
    if fault == "nan-codes":
        arrays[CODES_ARRAY][0, 0] = np.nan
    elif fault == "inf-codes":
        arrays[CODES_ARRAY][-1, -1] = np.inf
    elif fault == "wrong-shape":
        arrays[CODES_ARRAY] = codes[:, :-1].copy()
    elif fault == "extra-rows":
        arrays[CODES_ARRAY] = np.concatenate([codes, codes[:1]])
    elif fault == "float64":
        arrays[CODES_ARRAY] = codes.astype(np.float64)
    elif fault == "extra-array":
        arrays["decoder.0.weight"] = np.zeros((64, 16), dtype=np.float32)
    elif fault:
        raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
    return arrays


def faulty_client_app():
    from flwr.app import Message, RecordDict
    from flwr.clientapp import ClientApp

    from fedgca.algorithms import later_step_names
    from fedgca.algorithms.gca import CODES, CODES_ARRAY
    from fedgca.flower import client_app as fedgca_client
    from fedgca.flower.records import array_record

    app = ClientApp()
    app.query("info")(fedgca_client.info)
    app.query("stats")(fedgca_client.stats)
    app.query("setup")(fedgca_client.setup)
    app.query("candidate")(fedgca_client.candidate)  # --selection (fedgca.flower.choice)
    app.query("deploy")(fedgca_client.deploy)
    for action in later_step_names():  # GCA's align: as fedgca's ClientApp
        app.train(action)(fedgca_client.train)
    app.evaluate()(fedgca_client.evaluate)

    @app.train()
    def train(msg, context):
        fault = str(context.node_config.get("fault", ""))
        if fault == "crash":
            raise RuntimeError("fault injection: crash")
        if fault.startswith("sleep:"):
            time.sleep(float(fault.split(":", 1)[1]))
            fault = ""
        reply = fedgca_client.train(msg, context)
        if not fault:
            return reply
        codes = reply.content[CODES][CODES_ARRAY].numpy()
        return Message(RecordDict({CODES: array_record(_faulty_codes(codes, fault))}), reply_to=msg)

    return app


PAUSED_SERVER_APP = '''"""fedgca's ServerApp, sleeping {pause} s after every round but the last (a test kills a node there)."""
import time

from fedgca.flower import server as _server
from fedgca.flower import server_app as _server_app

app = _server_app.app  # the component flwr loads (its check reads an assignment)

_finish_round = _server.FlowerServer.finish_round


def _paused(self, r, rows, comm):
    _finish_round(self, r, rows, comm)
    if r + 1 < self.cfg.rounds:
        time.sleep({pause})


_server.FlowerServer.finish_round = _paused
'''
