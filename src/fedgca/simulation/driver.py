"""The simulator's driver of a method (``fedgca.algorithms``): every client of a round stacked in one process.

It runs the method's steps as the Flower ServerApp does over messages — the first step for the sampled
clients, each later one for those whose reply was accepted, each reply checked by the method — and keeps
what only the simulator has: all clients' models in one stack (``Federation.clients``), the pooled rows of a
``pooled`` method (Centralized), the comm record measured from the payloads built, the evaluation of the
deployed models at every point the method names (a metric row over all clients), and the models of the round
the validation rule selects (the detectors a run saves).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import torch

from fedgca import devices
from fedgca.algorithms import ClientWork, FederatedMethod, method_for
from fedgca.algorithms import secure_rounds
from fedgca.algorithms.base import SUMMED, arrays_nbytes
from fedgca.detector import client_detectors, save_client_detectors
from fedgca.evaluation.candidates import ClientSelection, RoundsEnsemble
from fedgca.evaluation.selection import validation_selected
from fedgca.evaluation.signals import ENSEMBLE_ROUNDS, FEDERATION_VAL_ERROR
from fedgca.protocol.gca import UploadError
from fedgca.rundir import CHECKPOINT, RunFileError
from fedgca.simulation import evaluation
from fedgca.simulation.reporting import summarise
from fedgca.training.loop import ClientShards

log = logging.getLogger("fedgca")


def _pooled(fed) -> tuple:
    """A pooled method's training and validation rows: every client's rows as one shard each."""
    out = []
    for shards in (fed.shards, fed.val_shards):
        rows = None if shards is None else [devices.to_numpy(shards.client(i)) for i in range(shards.num_clients)]
        out.append(None if rows is None else ClientShards.from_arrays([np.concatenate(rows)], device=shards.device))
    return tuple(out)


class Simulation:
    """One run's method over a ``Federation``, from round 0 or from a checkpoint (``ckpt``).

    ``rounds`` plays the remaining rounds, one per iteration, and yields what the runner writes; ``finish``
    deploys the selected round's models and returns the summary and the saved detectors. ``broker``: the
    batched engine's, which computes this run's local epochs together with other runs' (its clock counts this
    run's own compute).
    """

    def __init__(self, fed, method: FederatedMethod | None = None, ckpt: dict | None = None, broker=None):
        self.fed, self.broker = fed, broker
        # a pooled method trains one model on every client's rows; its τ and validation error on all of them
        self.shards, self.val_shards = _pooled(fed) if fed.cfg.spec.pooled else (fed.shards, fed.val_shards)
        self.method = method or method_for(fed.cfg, fed.dataset.kind, fed.shards.sizes)
        self.method.latent_dim = fed.latent_dim
        self.size_note = self.method.size_note(fed.shards.sizes)  # before any file: it may refuse the run
        self.method.start(fed.clients.client_state_dict(0), fed.num_clients)
        if self.method.deploys_global:
            fed.clients.set_all(self.method.deployed())
        self.deployed = evaluation.Deployed(fed, fed.clients, self.shards, self.val_shards, self.method.deploys_global)
        # the round the validation rule selects (evaluation.selection), and its models: the detectors saved
        self.selected_round, self.selected_params = None, None
        # --selection client-*: each client's model chosen among the untrained one and every round's
        self.selection = None
        if fed.val_shards is not None and fed.cfg.selection == ENSEMBLE_ROUNDS:
            self.selection = RoundsEnsemble(fed.cfg, fed.clients, self.val_shards)
        elif fed.val_shards is not None and fed.cfg.selection != FEDERATION_VAL_ERROR:
            self.selection = ClientSelection(fed.cfg, fed.clients, self.val_shards,
                                             shared=self.method.deploys_global or fed.cfg.spec.pooled,
                                             summed=fed.cfg.spec.secure)
        self.rows: list[dict] = []
        self.comm: list[dict] = []
        self.start_round, self.wall_before = 0, 0.0
        if broker is not None:
            broker.attach(fed.clients)
            self.method.fit_clustering = broker.clustering(fed.clients)
        if ckpt is not None:
            try:
                fed.clients.load_state_dict(ckpt["clients"])
                self.method.load_state_dict(ckpt["method"])
                self.rows, self.comm = list(ckpt["rows"]), list(ckpt["comm"])
                if self.selection is not None:
                    self.selection.load_state_dict(ckpt["selected"]["selection"])
                elif ckpt.get("selected"):
                    self.selected_round = int(ckpt["selected"]["round"])
                    self.selected_params = dict(ckpt["selected"]["params"])
                self.start_round, self.wall_before = int(ckpt["round"]) + 1, float(ckpt["wall"])
            except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as err:
                raise RunFileError(f"{CHECKPOINT}: does not belong to this run's models "
                                   f"({type(err).__name__}: {' '.join(str(err).split())[:160]})") from None
        elif self.selection is not None:
            self.selection.observe(0)  # the untrained models are a candidate

    def run_round(self, r: int, evaluate) -> dict:
        """Round ``r``'s steps (``evaluate(phase, epoch)`` where the method evaluates); its comm.json record, bytes
        and uploads measured from what was built."""
        fed, method = self.fed, self.method
        part = fed.participants(r)
        if fed.cfg.spec.pooled:
            part = torch.ones(1, dtype=torch.bool, device="cpu")
        ids = list(range(self.shards.num_clients))
        targets = part.clone()
        record = {"bytes_up": 0, "bytes_down": 0, "uploads": 0}
        secure = fed.cfg.spec.secure
        for step in method.steps:
            sent = method.send(step, r)
            if secure:  # a step after the summed one travels with the next exchange, to every client
                traffic = secure_rounds.step_traffic(method, step, r, sent, self._addressed(r), fed.num_clients)
                record["bytes_down"] += traffic[0]
                record["bytes_up"] += traffic[1]
            elif sent is not None:
                record["bytes_down"] += int(targets.sum()) * arrays_nbytes(sent)
            work = ClientWork(fed.cfg, fed.clients, self.shards, targets, ids, evaluate)
            replies = method.client(step, r, work, sent)
            if step.summed:  # the server gets the sums SecAgg+ returns, no reply alone; the same refusal as Flower
                accepted = {i: rep for i, rep in replies.items() if method.contributions(step, rep)}
                reply = method.summed_reply(step, r, accepted) if accepted else None
                record["uploads"] += method.uploads(step, accepted)
                if reply is None:
                    if not accepted:
                        log.warning("round %d %s: no valid reply; the rest of the round is skipped", r + 1, step.name)
                    break
                method.aggregate(step, r, {SUMMED: reply})
            else:
                accepted = {}
                for slot, reply in replies.items():
                    try:
                        accepted[slot] = method.check(step, reply, int(self.shards.sizes[slot]), fed.latent_dim)
                    except UploadError as e:  # a client's own computation can diverge (NaN): rejected, as on Flower
                        log.warning("round %d %s: rejected the reply of client %d: %s", r + 1, step.name, slot, e)
                if not secure:
                    record["bytes_up"] += sum(arrays_nbytes(a.arrays) for a in accepted.values())
                record["uploads"] += method.uploads(step, accepted)
                if not accepted:
                    log.warning("round %d %s: no valid reply; the rest of the round is skipped", r + 1, step.name)
                    break
                method.aggregate(step, r, accepted)
            targets = torch.zeros_like(targets)
            targets[sorted(accepted)] = True
        if secure:  # the round's evaluation travels summed, from every client, with the next exchange
            down, up = secure_rounds.evaluation_traffic(method, fed.cfg, r, fed.num_clients)
            record["bytes_down"] += down
            record["bytes_up"] += up
        if method.deploys_global:
            fed.clients.set_all(method.deployed())  # every client evaluates/deploys the server's model
        return {"round": r, **record, "participants": [int(i) for i in torch.nonzero(part).flatten()],
                **method.round_record()}

    def _addressed(self, r: int) -> int:
        """How many clients a secure round's summed exchange reaches: the round's participants and every client
        that owes the previous round's evaluation (all of them after round 0; in round 0, under --selection)."""
        fed = self.fed
        if secure_rounds.owes_evaluation(fed.cfg, self.method, r):
            return fed.num_clients
        return int(fed.participants(r).sum())

    def rounds(self, progress=None):
        """Play the remaining rounds; after each, yield the checkpoint's content (``progress(r, phase, epoch)`` is
        told of every evaluation). The metric rows and comm records accumulate in ``rows`` and ``comm``."""
        fed, broker = self.fed, self.broker
        t0 = time.perf_counter() if broker is None else time.thread_time()
        for r in range(self.start_round, fed.cfg.rounds):
            self.comm.append(self.run_round(r, evaluation.recorder(self.deployed, r, self.rows, progress)))
            evaluation.record(self.deployed, r, self.rows, progress, "round", -1)
            if self.selection is not None:
                self.selection.observe(r + 1)
            elif fed.val_shards is not None and validation_selected(self.rows)["round"] == r + 1:
                self.selected_round = r
                self.selected_params = {k: v.detach().clone() for k, v in fed.clients.params.items()}
            # a batched run's clock: its own compute, not the time it waited for its stack's other runs
            wall = self.wall_before + (time.perf_counter() - t0 if broker is None
                                       else broker.own_seconds(fed.clients, time.thread_time() - t0))
            selected = ({"selection": self.selection.state_dict()} if self.selection is not None
                        else {} if self.selected_params is None
                        else {"round": self.selected_round, "params": self.selected_params})
            yield {"clients": fed.clients.state_dict(), "method": self.method.state_dict(), "selected": selected,
                   "rows": self.rows, "comm": self.comm, "round": r, "wall": wall}

    def finish(self, out, wall: float) -> tuple[dict, list[str]]:
        """The run is over: its summary, and each client's detector saved under ``out`` — the selected round's
        models (with a validation split), else the final round's; under ``--selection`` the client's choice, or
        the ensemble of its rounds."""
        fed, rounds = self.fed, self.fed.cfg.rounds
        deployed_round, ensemble = rounds, None
        extra = self.method.summary_extra()
        if isinstance(self.selection, RoundsEnsemble):
            ensemble = self.selection.members
        elif self.selection is not None:
            deployed_round = self.selection.apply()
        elif self.selected_params is not None and self.selected_round != rounds - 1:
            with torch.no_grad():
                for k, v in fed.clients.params.items():
                    v.copy_(self.selected_params[k])
            deployed_round = self.selected_round + 1
        detectors = client_detectors(fed, fed.clients, deployed_round, ensemble)
        if self.selection is not None:
            extra = {**extra, **evaluation.deployed(fed, detectors, self.selection)}
        summary = summarise(fed.cfg, fed, extra, self.rows, self.comm, wall)
        return summary, save_client_detectors(out, detectors)
