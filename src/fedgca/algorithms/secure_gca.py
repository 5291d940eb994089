"""GCA whose server never receives a code: its clustering is an EM on sums (``protocol.mixture_sums``) over
secure aggregation (``algorithms.secure.SecureSum``, Flower's SecAgg+).

Step ``train``: Phase 1 (T_recon epochs), then, on the round's upload sample (⌊ρ·N_i⌋ fresh codes, drawn as GCA
draws them, never sent), the E-step statistics against the mixture the server sent — or, before the first
mixture, the codes' first and second moments. Step ``em``: one more E-step on the same codes against the
updated mixture. The server sees only each step's statistics summed over the clients and runs the M-step; the
mixture carries over to the next round (the EM warm-starts there). Step ``align``: the mixture's means and
expected counts π_k·Σ n_i go to the clients, which run Phase 3 as GCA does.
"""
from __future__ import annotations

import numpy as np
import torch

from fedgca import seeding
from fedgca.algorithms.base import SUMMED, ClientWork, Reply, Step, implements
from fedgca.algorithms.gca import BROADCAST, GlobalCentroidAlignment
from fedgca.algorithms.secure import SecureSum
from fedgca.algorithms.sharing import all_finite
from fedgca.devices import to_numpy
from fedgca.protocol import gca, mixture_sums

MIXTURE, STATS = "mixture", "stats"
FIRST_SCALE = 32.0  # the unit of the first moments: codes up to ±8·32 fit SecAgg+'s clipping range


@implements("secagg-gca")
class SecureGCA(SecureSum, GlobalCentroidAlignment):
    steps = (Step("train", sends=MIXTURE, reply=STATS, metrics=True, summed=True),
             Step("em", sends=MIXTURE, reply=STATS, metrics=True, summed=True),
             Step("align", sends=BROADCAST))
    server_learns = ("per step, the clients' E-step statistics summed over clients (per component: responsibility "
                     "total, Σγ·z, Σγ·z²) or, before the first mixture, the codes' summed first and second moments",
                     "the mixture fitted from them (means, variances, weights)")

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.secure_settings(max(gca.upload_size(n, cfg.rho) for n in self.sizes))  # weights: code counts
        self.mixture: mixture_sums.Mixture | None = None

    # ------------------------------------------------------------------ client

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        if not step.summed:
            return super().client(step, r, work, received)
        if step.name == "train":
            self.reconstruction(r, work)
        codes = self.upload_sample(r, work)  # the same sample in both steps of the round: never sent
        mix = mixture_sums.Mixture.from_payload(received)
        out = {}
        for slot in work.slots:
            stats = mixture_sums.client_statistics(codes[slot], mix)
            if all_finite(stats.values()):  # a client checks what it sends
                out[slot] = Reply(stats, {"num-examples": len(codes[slot])})
        return out

    # ------------------------------------------------------------------ server

    def send(self, step: Step, r: int) -> dict | None:
        if step.name == "align":
            return self.broadcast
        if step.name == "train":
            self.broadcast = None
        if self.mixture is None:  # no mixture yet: an empty one asks the clients for their codes' moments
            return mixture_sums.Mixture.empty(FIRST_SCALE).payload()
        return self.mixture.payload()

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        if not step.summed:
            return
        summed = replies[SUMMED]
        s = summed.arrays
        if "m1" in s:
            self.mixture = mixture_sums.initial_mixture(np.asarray(s["m1"]), np.asarray(s["m2"]), FIRST_SCALE,
                                                        self.cfg.k, seeding.rng(self.cfg.seed, "secagg-gca-init", r))
        else:
            self.mixture = mixture_sums.m_step(np.asarray(s["s0"]), np.asarray(s["s1"]), np.asarray(s["s2"]),
                                               self.mixture)
        if step.name == "em":
            total = sum(gca.upload_size(self.sizes[i], self.cfg.rho) for i in summed.metrics["summed"])
            self.broadcast = gca.broadcast_payload(mixture_sums.broadcast(self.mixture, total))

    def uploads(self, step: Step, replies) -> int:
        return 0  # no code leaves a client

    def state_dict(self) -> dict:
        # tensors: a checkpoint is read back with torch.load(weights_only=True), which refuses NumPy arrays
        return {} if self.mixture is None else {"mixture": {k: torch.as_tensor(v) for k, v in self.mixture.payload().items()}}

    def load_state_dict(self, state: dict) -> None:
        m = state.get("mixture")
        self.mixture = None if m is None else mixture_sums.Mixture.from_payload({k: to_numpy(v) for k, v in m.items()})

