"""GCA whose server never receives a code: its clustering is an EM on sums (``protocol.mixture_sums``) over
secure aggregation (``algorithms.secure.SecureSum``, Flower's SecAgg+).

Step ``train`` (summed): Phase 1 (T_recon epochs), then, on the round's upload sample (⌊ρ·N_i⌋ fresh codes, drawn as
GCA draws them, never sent), the E-step statistics against the mixture the server sent — or, before the first
mixture, the codes' first and second moments — and the code count n_i. The server sees only their sums over the
clients and runs one M-step per round (the first mixture from the summed moments and its seeded draw); the mixture
carries over to the next round, where the EM goes on from it. Step ``align``: the mixture's means and expected
counts π_k·Σ n_i go to the clients that contributed, which run Phase 3 as GCA does. On Flower the align step needs
no reply, so it travels with the next round's summed exchange (``fedgca.flower.secure_rounds``): a round is one
SecAgg+ aggregation, four exchanges.
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
from fedgca.protocol import gca, mixture_sums, secagg
from fedgca.protocol.secagg import Contribution, Part

MIXTURE = "mixture"
FIRST_SCALE = 32.0  # the unit of the first moments: codes up to ±8·32 fit SecAgg+'s clipping range
CODES = "codes"  # the part carrying n_i: the server's Σ n_i (the broadcast's expected counts)


@implements("secagg-gca")
class SecureGCA(SecureSum, GlobalCentroidAlignment):
    steps = (Step("train", sends=MIXTURE, reply="stats", metrics=True, summed=True),
             Step("align", sends=BROADCAST))
    _stats = "weighted by code count, mean over the contributing clients' upload samples (never sent) of"
    summed_parts = {"m1": f"before the first mixture: {_stats} the codes (first moment)",
                    "m2": f"before the first mixture: {_stats} the squared codes (second moment)",
                    "s0": f"{_stats} each component's responsibility (E-step)",
                    "s1": f"{_stats} each component's responsibility-weighted codes",
                    "s2": f"{_stats} each component's responsibility-weighted squared codes",
                    CODES: "the contributing clients' total code count Σ⌊ρ·N_i⌋, and how many contributed"}

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.secure_settings(max(gca.upload_size(n, cfg.rho) for n in self.sizes))  # weights: code counts
        self.mixture: mixture_sums.Mixture | None = None

    # ------------------------------------------------------------------ the vector

    def summed_layout(self, step: Step, r: int) -> secagg.Layout:
        d = int(self.latent_dim)
        if self.mixture is None:
            stats = (Part("m1", d, weighted=True, exact=True), Part("m2", d, weighted=True, exact=True))
        else:
            k = len(self.mixture.weights)
            stats = (Part("s0", k, weighted=True, exact=True), Part("s1", k * d, weighted=True, exact=True),
                     Part("s2", k * d, weighted=True, exact=True))
        return (*stats, Part(CODES, 1, exact=True, scale=2.0 ** 20))

    def contributions(self, step: Step, reply: Reply) -> dict[str, Contribution]:
        if not all_finite(reply.arrays.values()):
            return {}  # a client checks what it sends: non-finite statistics are not sent
        n = int(reply.metrics["num-examples"])
        out = {k: Contribution(np.asarray(v, dtype=np.float64).ravel(), n / self.weight_scale)
               for k, v in reply.arrays.items()}
        return {**out, CODES: Contribution(np.array([float(n)]))}

    def from_sums(self, step: Step, parts: dict[str, secagg.Summed]) -> dict:
        d = int(self.latent_dim)
        out = {k: parts[k].mean.reshape(-1, d) if k in ("s1", "s2") else parts[k].mean
               for k in ("m1", "m2", "s0", "s1", "s2") if k in parts}
        out[CODES] = np.array([round(parts[CODES].mean[0] * parts[CODES].count)])  # Σ n_i over the contributors
        return out

    # ------------------------------------------------------------------ client

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        if not step.summed:
            return super().client(step, r, work, received)
        self.reconstruction(r, work)
        codes = self.upload_sample(r, work)  # never sent
        mix = mixture_sums.Mixture.from_payload(received)
        return {slot: Reply(mixture_sums.client_statistics(codes[slot], mix), {"num-examples": len(codes[slot])})
                for slot in work.slots}

    # ------------------------------------------------------------------ server

    def send(self, step: Step, r: int) -> dict | None:
        if step.name == "align":
            return self.broadcast
        self.broadcast = None
        if self.mixture is None:  # no mixture yet: an empty one asks the clients for their codes' moments
            return mixture_sums.Mixture.empty(FIRST_SCALE).payload()
        return self.mixture.payload()

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        if not step.summed:
            return
        s = replies[SUMMED].arrays
        if "m1" in s:
            self.mixture = mixture_sums.initial_mixture(np.asarray(s["m1"]), np.asarray(s["m2"]), FIRST_SCALE,
                                                        self.cfg.k, seeding.rng(self.cfg.seed, "secagg-gca-init", r))
        else:
            self.mixture = mixture_sums.m_step(np.asarray(s["s0"]), np.asarray(s["s1"]), np.asarray(s["s2"]),
                                               self.mixture)
        self.broadcast = gca.broadcast_payload(mixture_sums.broadcast(self.mixture, int(s[CODES][0])))

    def uploads(self, step: Step, replies) -> int:
        return 0  # no code leaves a client

    def state_dict(self) -> dict:
        # tensors: a checkpoint is read back with torch.load(weights_only=True), which refuses NumPy arrays; the
        # broadcast too, which on Flower rides with the next round's exchange (a server resumed between the two).
        # On the host, said explicitly: the server's NumPy values, whatever torch's default device
        out = {} if self.mixture is None else {"mixture": {k: torch.as_tensor(v, device="cpu")
                                                           for k, v in self.mixture.payload().items()}}
        if getattr(self, "broadcast", None) is not None:
            out["broadcast"] = {k: torch.as_tensor(v, device="cpu") for k, v in self.broadcast.items()}
        return out

    def load_state_dict(self, state: dict) -> None:
        m = state.get("mixture")
        self.mixture = None if m is None else mixture_sums.Mixture.from_payload({k: to_numpy(v) for k, v in m.items()})
        b = state.get("broadcast")
        self.broadcast = None if b is None else {k: to_numpy(v) for k, v in b.items()}
