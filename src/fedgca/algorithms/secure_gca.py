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

from fedgca import seeding
from fedgca.algorithms.base import SUMMED, ClientWork, Reply, Step, implements
from fedgca.algorithms.gca import BROADCAST, GlobalCentroidAlignment
from fedgca.algorithms.secure import SecureSum
from fedgca.protocol import gca, mixture_sums
from fedgca.training import gca as gca_training

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

    def _codes(self, r: int, work: ClientWork) -> list:
        """This round's upload sample of every participating slot (the same draws in every step of the round)."""
        return gca_training.encode_uploads(work.models, work.shards,
                                           seeding.client_rngs(work.cfg.seed, "upload", (r,), work.ids), self.gcfg.rho,
                                           work.part, self.gcfg.dp)

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        if not step.summed:
            return super().client(step, r, work, received)
        if step.name == "train":
            g, seed = self.gcfg, work.cfg.seed
            for e in range(g.recon_epochs):
                gca_training.reconstruction_epoch(work.models, work.shards,
                                                  seeding.client_rngs(seed, "recon", (r, e), work.ids), g, work.part)
                if work.cfg.eval_recon_epochs:
                    work.evaluate("recon", e)
        codes = self._codes(r, work)
        first = len(received["means"]) == 0  # no mixture yet: the moments
        mix = None if first else mixture_sums.Mixture.from_payload(received)
        out = {}
        for slot in work.slots:
            z = codes[slot]
            stats = (mixture_sums.moments(z, float(np.asarray(received["scale"]).ravel()[0])) if first
                     else mixture_sums.statistics(z, mix))
            if all(np.isfinite(v).all() for v in stats.values()):  # a client checks what it sends
                out[slot] = Reply(stats, {"num-examples": len(z)})
        return out

    # ------------------------------------------------------------------ server

    def send(self, step: Step, r: int) -> dict | None:
        if step.name == "align":
            return self.broadcast
        if step.name == "train":
            self.broadcast = None
        if self.mixture is None:  # no mixture yet: an empty one asks the clients for their codes' moments
            return {"means": np.zeros(0), "variances": np.zeros(0), "weights": np.zeros(0),
                    "scale": np.array([FIRST_SCALE])}
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
        if self.mixture is None:
            return {}
        m = self.mixture
        return {"mixture": {"means": m.means, "variances": m.variances, "weights": m.weights, "scale": m.scale}}

    def load_state_dict(self, state: dict) -> None:
        m = state.get("mixture")
        self.mixture = None if m is None else mixture_sums.Mixture(
            np.asarray(m["means"]), np.asarray(m["variances"]), np.asarray(m["weights"]), float(m["scale"]))

