"""The methods fedgca runs, registered once: every list of methods in the package is read from here.

A method is declared by one ``MethodSpec`` line below, with the traits callers ask about (pools the clients'
rows, a client loss term, shares parameters, record-level DP, runs on Flower, which attack applies), and its
round is one class in ``fedgca.algorithms`` that both drivers run (``algorithms.base.implements``). The CLI's
choices, the sweep's canonical keys (which options a method reads), the report's column order and labels, the
attack's threat model and the Flower apps' support all come from this table; adding a method is one module plus
one ``fedgca.algorithms.register`` call (ARCHITECTURE.md, "How to add a method").
"""
from __future__ import annotations

from dataclasses import dataclass

from fedgca.registries import Registry

# Options every method reads: they define the setting a method runs in.
COMMON = frozenset({"dataset", "method", "seed", "rounds", "clients", "participation", "batch_size", "lr",
                    "lr_step", "lr_gamma", "partition", "alpha", "quantile", "val_fraction", "threshold",
                    "selection"})
_GCA = frozenset({"k", "rho", "recon_epochs", "align_epochs", "backend", "weights", "gamma", "w_max", "weight_eps",
                  "eval_align_epochs", "eval_align_clients", "gmm_warm_start", "eval_recon_epochs"})
_LOCAL = frozenset({"local_epochs"})
_SHARING = _LOCAL | {"baseline_eval", "optimizer_state", "eval_local_epochs"}  # protocol variants, a diagnostic
_RECORD_DP = frozenset({"dp_grad_clip", "dp_grad_sigma", "target_epsilon", "dp_delta", "dp_stats_sigma"})


@dataclass(frozen=True)
class MethodSpec:
    name: str
    label: str  # as the paper's tables print it
    family: str  # "single-site" | "parameter-sharing" | "gca"
    reads: frozenset  # RunConfig fields it reads besides COMMON
    flower: bool  # runs as a Flower ServerApp/ClientApp pair
    attack: str | None  # SPEC §6 threat model: "white-box" (parameters), "latent" (codes), None (nothing sent)
    paper_phase: str = "round"  # the metric rows the paper's peak is taken over
    server_rule: str | None = None  # parameter sharing: the rule of ``protocol.server_rules``
    record_dp: bool = False  # local training is DP-SGD and everything released is accounted (``fedgca.privacy``)
    in_paper: bool = True  # one of the paper's seven methods (``compare``'s default set)
    pooled: bool = False  # one model trained on every client's rows together (a reference, not a federation)
    client_term: str | None = None  # what a client adds to L_recon: "proximal" (FedProx's c·||θ − θ^(r)||²)
    secure: bool = False  # its server receives sums over clients only (SecAgg+): replies, evaluations, selection
    server_opt: str | None = None  # parameter sharing: the server optimizer applied to the mean (protocol/server_opt)

    @property
    def options(self) -> frozenset:
        return COMMON | self.reads

    @property
    def alone(self) -> bool:
        """Each client trains its own model and sends nothing (Single-Client)."""
        return self.family == "single-site" and not self.pooled


REGISTRY: Registry = Registry("method", lambda name, known: ValueError(
    f"unknown method {name!r}; choose from {', '.join(known)}"))
register = REGISTRY.register


def get(name: str) -> MethodSpec:
    return REGISTRY.lookup(name)


def is_gca(name: str) -> bool:
    """GCA or a variant of it (DP-GCA): clients keep their own models and upload codes."""
    return get(name).family == "gca"


def names(family: str | None = None, *, flower: bool | None = None, attack: bool | None = None,
          in_paper: bool | None = None) -> tuple[str, ...]:
    """Registered method names in table order, optionally filtered."""
    return tuple(s.name for s in REGISTRY.values()
                 if (family is None or s.family == family) and (flower is None or s.flower == flower)
                 and (attack is None or (s.attack is not None) == attack)
                 and (in_paper is None or s.in_paper == in_paper))


# In the paper's table order: single-site references, parameter sharing, GCA.
register(MethodSpec("single", "Single-Client", "single-site", _LOCAL, flower=True, attack=None))
register(MethodSpec("centralized", "Centralized", "single-site", _LOCAL, flower=False, attack=None, pooled=True))
register(MethodSpec("fedavg", "FedAvg", "parameter-sharing", _SHARING, flower=True, attack="white-box",
                    server_rule="fedavg"))
register(MethodSpec("fedprox", "FedProx", "parameter-sharing", _SHARING | {"fedprox_mu", "fedprox_coef"}, flower=True,
                    attack="white-box", server_rule="fedavg", client_term="proximal"))
register(MethodSpec("fednova", "FedNova", "parameter-sharing", _SHARING, flower=True, attack="white-box",
                    server_rule="fednova"))
register(MethodSpec("dpfedavg", "DP-FedAvg", "parameter-sharing", _SHARING | {"dp_clip", "dp_sigma", "dp_delta"},
                    flower=True, attack="white-box", server_rule="dpfedavg"))
register(MethodSpec("gca", "GCA", "gca", _GCA, flower=True, attack="latent", paper_phase="recon"))
# Beyond the paper: record-level DP (docs/DP.md), DP-GCA and its matched parameter-sharing baseline.
register(MethodSpec("dpsgd-fedavg", "DP-SGD-FedAvg", "parameter-sharing", _SHARING | _RECORD_DP, flower=True,
                    attack="white-box", server_rule="fedavg", record_dp=True, in_paper=False))
# Secure aggregation (Flower's SecAgg+): the server learns only the weighted mean of the models (algorithms/secure.py);
# the white-box attack gets that mean — what the server holds of every client — instead of the victim's model.
register(MethodSpec("secagg-fedavg", "SecAgg-FedAvg", "parameter-sharing", _SHARING, flower=True, attack="white-box",
                    server_rule="fedavg", in_paper=False, secure=True))
register(MethodSpec("secagg-fedprox", "SecAgg-FedProx", "parameter-sharing", _SHARING | {"fedprox_mu", "fedprox_coef"},
                    flower=True, attack="white-box", server_rule="fedavg", client_term="proximal", in_paper=False,
                    secure=True))
# Server optimizers (Reddi et al. 2021; algorithms/server_opt.py): the server steps its own optimizer on the clients'
# weighted mean — all it needs of them, so each also runs under secure aggregation.
_SERVER_OPT = {"fedavgm": ("FedAvgM", {"server_lr", "server_momentum"}),
               "fedadam": ("FedAdam", {"server_lr", "server_beta1", "server_beta2", "server_tau"}),
               "fedyogi": ("FedYogi", {"server_lr", "server_beta1", "server_beta2", "server_tau"}),
               "fedadagrad": ("FedAdagrad", {"server_lr", "server_tau"})}
for _name, (_label, _reads) in _SERVER_OPT.items():
    register(MethodSpec(_name, _label, "parameter-sharing", _SHARING | _reads, flower=True, attack="white-box",
                        server_rule="fedavg", in_paper=False, server_opt=_name))
    register(MethodSpec(f"secagg-{_name}", f"SecAgg-{_label}", "parameter-sharing", _SHARING | _reads, flower=True,
                        attack="white-box", server_rule="fedavg", in_paper=False, secure=True, server_opt=_name))
# GCA whose server never receives a code: EM on securely summed statistics (algorithms/secure_gca.py).
register(MethodSpec("secagg-gca", "SecAgg-GCA", "gca", _GCA, flower=True, attack=None, paper_phase="recon",
                    in_paper=False, secure=True))
register(MethodSpec("dpgca", "DP-GCA", "gca", _GCA | _RECORD_DP | {"dp_code_clip", "dp_code_sigma"}, flower=True,
                    attack="latent", paper_phase="recon", record_dp=True, in_paper=False))
