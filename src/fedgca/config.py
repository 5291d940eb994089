"""Run configuration: SPEC §8 presets, every one overridable, validated in one place.

``RunConfig`` is the single source of every run option: its fields carry their
help text (``metadata["help"]``) and the CLI (``fedgca run --help``) and the
Flower run-config keys are generated from them; ``resolved()`` fills the
dataset presets and validates every field before anything is written.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field

from fedgca import devices, methods
from fedgca.data import VISION, registry
from fedgca.data.partition import SMALL_SITES
from fedgca.evaluation import signals
from fedgca.protocol.clustering.base import BACKEND_NAMES
from fedgca.protocol import server_opt
from fedgca.protocol.fedprox import effective_coefficient

# SPEC §4 table: (clients C, K*, upload fraction ρ) per dataset.
DATASET_PRESETS: dict[str, dict] = {s.name: s.presets for s in registry.REGISTRY.values()}  # (data.registry)
METHODS = methods.names()  # the registry's, in the paper's table order
BACKENDS = BACKEND_NAMES  # (fedgca.protocol.clustering.base: the factory's names too)
WEIGHTINGS = ("inverse", "uniform")
PARTITIONS = ("iid", "dirichlet", "natural")  # Flower Datasets' names: IID, Dirichlet, natural-id (one per site)
BASELINE_EVALS = ("global", "local")
OPTIMIZER_STATES = ("keep", "reset")
THRESHOLDS = ("train-quantile", "val-quantile")
EVAL_ALIGN_CLIENTS = ("all", "client0")
# The weighting ablation's "one fixed client" (SPEC §5; the paper's statistic is its best accuracy over the
# evaluations after every alignment epoch): the simulator, the Flower apps and the report read it here.
ABLATION_CLIENT = 0


def evaluated_clients(cfg, phase: str) -> tuple[int, ...] | None:
    """The clients an evaluation at ``phase`` covers: --eval-align-clients client0 evaluates the alignment epochs
    of the weighting ablation's client alone; None = every client (both drivers ask this)."""
    return (ABLATION_CLIENT,) if phase == "align" and cfg.eval_align_clients == "client0" else None
K_GRID = (10, 20, 40, 80)
SEEDS = (100, 200, 300)


def _opt(default, help: str, *, choices=None, preset: str | None = None, derived: bool = False,
         added_later: bool = False):
    """A RunConfig field with its CLI help (``preset``: what None stands for, e.g. the dataset's SPEC preset;
    ``derived``: set by fedgca from other input, never typed — no CLI option; ``added_later``: see ``_later``)."""
    return field(default=default, metadata={"help": help, "choices": choices, "preset": preset, "derived": derived,
                                            "added_later": added_later})


def _later(default, help: str, **kw):
    """A field added after runs were published: it enters a run's key only when it differs from its default (the
    value that reproduces those runs), so adding an option never renames the runs made before it."""
    return _opt(default, help, added_later=True, **kw)


@dataclass
class RunConfig:
    """Everything that determines a run's numbers (the data directory does not)."""

    dataset: str = field(metadata={"help": f"built-in dataset ({', '.join(DATASET_PRESETS)}) or own data's name "
                                           "(set from --data)"})
    method: str = _opt("gca", "federated method", choices=methods.REGISTRY)  # live: a method registered later too
    seed: int = _opt(100, "seed of every random draw (partition, init, batches, uploads, clustering)")
    rounds: int = _opt(100, "communication rounds R")
    clients: int | None = _opt(None, "number of clients C", preset="dataset preset")
    k: int | None = _opt(None, "number of clusters K (GCA)", preset="dataset preset")
    rho: float | None = _opt(None, "upload fraction ρ ∈ (0, 1] (GCA)", preset="dataset preset")
    recon_epochs: int = _opt(5, "GCA reconstruction epochs per round (the paper's evaluation points)")
    align_epochs: int = _opt(5, "GCA alignment epochs per round")
    local_epochs: int = _opt(10, "baselines' local epochs per round (GCA's 5 + 5)")
    participation: float = _opt(1.0, "fraction φ ∈ (0, 1] of clients sampled per round")
    batch_size: int = _opt(50, "mini-batch size B")
    lr: float = _opt(1e-3, "Adam learning rate")
    lr_step: int = _opt(1000, "StepLR step size, in local epochs")
    lr_gamma: float = _opt(0.1, "StepLR decay factor ∈ (0, 1]")
    backend: str = _opt("gmm", "GCA clustering backend", choices=BACKENDS)
    weights: str = _opt("inverse", "GCA alignment weights (uniform: the ablation)", choices=WEIGHTINGS)
    gamma: float = _opt(1.0, "exponent γ ≥ 0 of the inverse-support weights")
    w_max: float = _opt(6.0, "cap w_max > 0 of the inverse-support weights")
    weight_eps: float = _opt(1e-6, "ε > 0 of the inverse-support weights")
    partition: str = _opt("iid", "client partition (natural: one client per site)", choices=PARTITIONS)
    small_sites: str = _later("error", "natural partition: a site with fewer training normals than one batch is an "
                            "error, dropped, or merged with the other small sites into one client", choices=SMALL_SITES)
    alpha: float = _opt(0.1, "Dirichlet concentration α > 0 (--partition dirichlet)")
    quantile: float = _opt(0.75, "detection threshold: this quantile ∈ (0, 1) of a client's training scores")
    val_fraction: float = _opt(0.0, "validation split ∈ [0, 1) of each client's normals (honest 'selected' round)")
    threshold: str = _later("train-quantile", "where τ's quantile is taken: each client's training rows (the paper) "
                          "or its validation rows (needs --val-fraction > 0)", choices=THRESHOLDS)
    selection: str = _later(signals.FEDERATION_VAL_ERROR, "which model each client deploys (needs --val-fraction "
                            "> 0): federation-val-error = the round with the lowest mean validation error, one for "
                            "all (the paper's presets); client-<signal> = each client's best of the untrained model "
                            "and every round's by that label-free signal of its validation rows (one choice for "
                            "all where the model is shared); ensemble-rounds = each client's mean of all those "
                            "models' scores, each standardised on its validation rows (docs/results/adbench/signals)",
                            choices=signals.SELECTIONS)
    eval_recon_epochs: bool = _later(True, "GCA: evaluate after every reconstruction epoch (the paper's evaluation "
                                   "points, for its peak statistic); off: once per round, as the baselines")
    eval_align_epochs: bool = _opt(False, "also evaluate after each alignment epoch (diagnostic)")
    eval_align_clients: str = _later("all", "with --eval-align-epochs: evaluate every client after each alignment "
                                   f"epoch, or only client {ABLATION_CLIENT}, the weighting ablation's fixed client "
                                   "(the paper's statistic needs no other; C× less scoring)",
                                   choices=EVAL_ALIGN_CLIENTS)
    gmm_warm_start: bool = _later(False, "GCA-GMM: start each round's EM at the previous round's broadcast "
                                "centroids (a fresh k-means++ start in round 1 and whenever the number of "
                                "components changes); off = the paper's fresh fit every round. On magic it "
                                "needed more EM iterations, not fewer (docs/results/bench_gmm_warm.txt)")
    fedprox_mu: float = _opt(1e-2, "FedProx μ ≥ 0")
    fedprox_coef: float | None = _opt(None, "FedProx effective coefficient c ≥ 0", preset="μ/(2B)")
    server_lr: float | None = _later(None, "server optimizers (FedAvgM, FedAdam, FedYogi, FedAdagrad): the server "
                                           "learning rate η > 0", preset="the optimizer's (protocol/<opt>.py)")
    server_momentum: float = _later(0.9, "FedAvgM's server momentum β ∈ [0, 1)")
    server_beta1: float = _later(0.9, "FedAdam/FedYogi's first-moment β₁ ∈ [0, 1)")
    server_beta2: float = _later(0.99, "FedAdam/FedYogi's second-moment β₂ ∈ [0, 1)")
    server_tau: float = _later(1e-3, "FedAdam/FedYogi/FedAdagrad's adaptivity τ > 0")
    dp_clip: float = _opt(1.0, "DP-FedAvg clipping norm > 0")
    dp_sigma: float = _opt(1.0, "DP-FedAvg noise multiplier σ ≥ 0")
    dp_delta: float = _opt(1e-5, "δ ∈ (0, 1) of the reported ε (DP-FedAvg, DP-GCA, DP-SGD-FedAvg)")
    # Protocol variants of the parameter-sharing baselines (defaults: the paper's text).
    baseline_eval: str = _later("global", "parameter sharing: evaluate the global model after aggregation (the "
                              "paper's text) or each client's model after local training, before aggregation",
                              choices=BASELINE_EVALS)
    optimizer_state: str = _later("keep", "parameter sharing: clients keep Adam's state across rounds, or start "
                                "each round with a fresh Adam", choices=OPTIMIZER_STATES)
    eval_local_epochs: bool = _later(False, "parameter sharing, diagnostic: also evaluate the clients' local models "
                                   "after every local epoch (rows of phase local-epoch; the simulator only)")
    # Record-level DP (DP-GCA, DP-SGD-FedAvg; docs/DP.md).
    dp_grad_clip: float = _later(1.0, "DP-SGD per-example gradient clipping norm S_g > 0")
    dp_grad_sigma: float = _later(1.0, "DP-SGD noise multiplier σ_g ≥ 0 (ignored with --target-epsilon)")
    dp_code_clip: float = _later(1.0, "DP-GCA code clipping norm C_z > 0")
    dp_code_sigma: float = _later(1.0, "DP-GCA code noise multiplier σ_z ≥ 0 (ignored with --target-epsilon)")
    target_epsilon: float | None = _later(None, "record-level ε to calibrate σ_g = σ_z to, at --dp-delta",
                                        preset="use the σ's as given")
    dp_stats_sigma: float | None = _later(None, "own data fitted from per-site statistics: release each site's column "
                                        "sums and sums of squares over the schema's public ranges with Gaussian "
                                        "noise σ_s·√d, accounted in ε (docs/DP.md); the σ_z of a target ε is "
                                        "calibrated to what they leave", preset="the statistics are not released "
                                        "privately: a DP method is refused on per-site data")
    # Where it computes (fedgca.devices): not part of the run's identity (its key), like the thread count.
    device: str = _opt("auto", "torch device: auto (CUDA when available, else the CPU), cpu, cuda, cuda:N or mps; "
                       "seeded draws are made on the CPU on every device, so results agree across devices to "
                       "floating-point tolerance")
    keep_checkpoint: bool = _later(True, "keep a finished run's checkpoint.pt (for --resume and attacks); off: delete "
                                 "it once summary.json is written, so a bench or sweep of large runs keeps its "
                                 "results, metrics and detectors but not every client's models and optimiser state "
                                 "(the simulator; --selection ensemble-rounds keeps R + 1 models in it)")
    # Own data: the content's identity (data bytes, schema, test file), set when fedgca reads --data; no path.
    data_digest: str | None = _later(None, "own data's content digest (set from --data; resume checks it)",
                                   preset="a built-in dataset", derived=True)

    def resolved(self) -> "RunConfig":
        """Fill dataset presets and validate every field (ValueError naming the option).

        Own data has no preset: its C, K and ρ are filled from the data where the run's data is
        read (``fedgca.data.defaults.own_defaults``), so here they must already be set.

        A run resolves its config once: resolving a config that came out of ``resolved()`` and was not changed
        since returns it as it is (the drivers, the key and the sweep all ask for a resolved config).
        """
        if self.__dict__.get("_resolved") == self._values():
            return self
        if self.dataset not in DATASET_PRESETS:
            if not isinstance(self.dataset, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", self.dataset):
                raise ValueError(f"--dataset: {self.dataset!r} is neither a built-in dataset "
                                 f"({', '.join(DATASET_PRESETS)}) nor a plain name for own data")
            if self.data_digest is None:
                raise ValueError(f"unknown dataset {self.dataset!r}; choose from {', '.join(DATASET_PRESETS)}, "
                                 "or give your own data with --data FILE (and --schema S.json)")
            unset = [option_name(n) for n in ("clients", "k", "rho") if getattr(self, n) is None]
            if unset:
                raise ValueError(f"own data {self.dataset!r}: {', '.join(unset)} must be set (fedgca fills them from "
                                 "the data when it reads --data)")
            preset = {}
        else:
            preset = DATASET_PRESETS[self.dataset]
        cfg = dataclasses.replace(
            self,
            clients=self.clients if self.clients is not None else preset.get("clients"),
            k=self.k if self.k is not None else preset.get("k"),
            rho=self.rho if self.rho is not None else preset.get("rho"),
        )
        _check_choice(cfg, "method")  # every default below reads the method's traits
        if cfg.server_lr is None and cfg.spec.server_opt:
            cfg = dataclasses.replace(cfg, server_lr=server_opt.default_lr(cfg.spec.server_opt))
        if cfg.fedprox_coef is None and _is_number(cfg.fedprox_mu) and _is_number(cfg.batch_size) and cfg.batch_size:
            cfg = dataclasses.replace(cfg, fedprox_coef=effective_coefficient(cfg.fedprox_mu, cfg.batch_size))
        cfg.validate()
        cfg.__dict__["_resolved"] = cfg._values()
        return cfg

    @property
    def spec(self) -> "methods.MethodSpec":
        """The method's registry entry (its traits), looked up once per config and carried with it."""
        spec = self.__dict__.get("_spec")
        if spec is None or spec.name != self.method:
            spec = self.__dict__["_spec"] = methods.get(self.method)
        return spec

    @property
    def paper_phase(self) -> str:
        """The metric rows the paper's peak is taken over for this run (``--baseline-eval local``: the
        parameter-sharing clients' pre-aggregation evaluations)."""
        if self.spec.family == "parameter-sharing" and self.baseline_eval == "local":
            return "local"
        if self.spec.family == "gca" and not self.eval_recon_epochs:  # no evaluation after reconstruction epochs
            return "round"
        return self.spec.paper_phase

    def _values(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def validate(self) -> None:
        """Every field in range, then the rules between fields; the message names the option as the CLI spells it."""
        self.check_fields()
        if self.partition == "natural" and self.clients == 1 and self.spec.family != "single-site":
            raise ValueError(f"--partition natural gives one client (one site), and {self.method} is a federated "
                             "method: it needs two sites or more (--method single or centralized train one site)")
        if self.eval_local_epochs and self.spec.family != "parameter-sharing":
            raise ValueError(f"--eval-local-epochs evaluates the local models of a parameter-sharing method "
                             f"(not {self.method})")
        if self.eval_align_clients != "all" and not self.eval_align_epochs:
            raise ValueError(f"--eval-align-clients {self.eval_align_clients} chooses whom --eval-align-epochs "
                             "evaluates; add --eval-align-epochs")
        if self.spec.secure and self.eval_align_clients != "all":
            raise ValueError(f"--eval-align-clients {self.eval_align_clients} evaluates one client alone; under "
                             f"--method {self.method} the server learns evaluations only as sums over clients")
        if self.gmm_warm_start and self.backend != "gmm":
            raise ValueError(f"--gmm-warm-start warm-starts the GMM backend only (--backend is {self.backend})")
        if self.threshold == "val-quantile" and not self.val_fraction > 0:
            raise ValueError("--threshold val-quantile needs a validation split: set --val-fraction > 0")
        if self.selection != signals.FEDERATION_VAL_ERROR and not self.val_fraction > 0:
            raise ValueError(f"--selection {self.selection} reads each client's validation rows: set --val-fraction > 0")
        if self.spec.record_dp and self.dataset in VISION:
            raise ValueError(f"--method {self.method}: DP-SGD is implemented for the tabular (MLP) autoencoder; "
                             f"{self.dataset} uses the conv autoencoder")

    def check_fields(self, *, presets_open: bool = False) -> None:
        """Each field alone in its range (a finite number where a number is read): what own data's binding checks
        before it reads a file, so a bad option is named before the data says anything. ``presets_open``: a field
        still None that a preset or the data fills later is not checked yet."""
        open_ = {f.name for f in dataclasses.fields(self)
                 if presets_open and f.metadata.get("preset") and getattr(self, f.name) is None}

        def _check(cfg, name, kind, ok, rule):
            if name not in open_:
                _check_field(cfg, name, kind, ok, rule)

        for f in dataclasses.fields(self):
            if f.metadata.get("choices"):
                _check_choice(self, f.name)
        _check(self, "seed", int, lambda v: v >= 0, "≥ 0")
        for name in ("rounds", "clients", "k", "batch_size", "lr_step"):
            _check(self, name, int, lambda v: v >= 1, "≥ 1")
        for name in ("align_epochs", "local_epochs"):
            _check(self, name, int, lambda v: v >= 0, "≥ 0")
        gca = self.spec.family == "gca"
        _check(self, "recon_epochs", int, lambda v: v >= (1 if gca else 0),
               "≥ 1 for GCA (the paper evaluates after every reconstruction epoch)" if gca else "≥ 0")
        devices.check(self.device)
        for name in ("eval_align_epochs", "eval_recon_epochs", "eval_local_epochs", "gmm_warm_start"):
            _check(self, name, bool, lambda v: True, "")
        for name in ("rho", "participation", "lr_gamma"):
            _check(self, name, float, lambda v: 0 < v <= 1, "in (0, 1]")
        for name in ("quantile", "dp_delta"):
            _check(self, name, float, lambda v: 0 < v < 1, "in (0, 1)")
        _check(self, "val_fraction", float, lambda v: 0 <= v < 1, "in [0, 1)")
        for name in ("lr", "w_max", "weight_eps", "alpha", "dp_clip", "dp_grad_clip", "dp_code_clip"):
            _check(self, name, float, lambda v: v > 0, "> 0")
        for name in ("target_epsilon", "dp_stats_sigma"):
            if getattr(self, name) is not None:
                _check(self, name, float, lambda v: v > 0, "> 0")
        for name in ("gamma", "fedprox_mu", "fedprox_coef", "dp_sigma", "dp_grad_sigma", "dp_code_sigma"):
            _check(self, name, float, lambda v: v >= 0, "≥ 0")
        for name in ("server_momentum", "server_beta1", "server_beta2"):
            _check(self, name, float, lambda v: 0 <= v < 1, "in [0, 1)")
        _check(self, "server_tau", float, lambda v: v > 0, "> 0")
        if self.server_lr is not None:
            _check(self, "server_lr", float, lambda v: v > 0, "> 0")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        if not isinstance(d, dict):
            raise ValueError("a run config must be a table of option names and values")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(sorted(unknown))}")
        if "dataset" not in d:
            raise ValueError("a run config needs 'dataset'")
        return cls(**d)

    def key(self) -> str:
        """A short stable hash of the resolved config: names a run in sweeps and caches.

        Fields added after runs were published enter the hash only when they differ from their
        default, so adding an option never renames the runs made before it; where a run computes
        (``EXECUTION_ONLY``) never does: a run resumed on another device continues the same run.
        """
        d = self.resolved().to_dict()
        for name in EXECUTION_ONLY:
            d.pop(name)
        for name, default in ADDED_LATER.items():
            if d.get(name) == default:
                d.pop(name)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


# Options added after runs were committed (``_later`` on the field), with the default that reproduces those runs.
ADDED_LATER = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.metadata.get("added_later")}


# Fields that say where a run computes or what it keeps, not what it computes: kept out of its key.
EXECUTION_ONLY = ("device", "keep_checkpoint")


def option_name(name: str) -> str:
    """How the CLI spells a RunConfig field (the Flower run config uses the same dashed key)."""
    return "--" + name.replace("_", "-")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_choice(cfg: RunConfig, name: str) -> None:
    choices = RunConfig.__dataclass_fields__[name].metadata["choices"]
    value = getattr(cfg, name)
    if value not in choices:
        raise ValueError(f"{option_name(name)}: unknown {name} {value!r}; choose from {', '.join(choices)}")


def _check_field(cfg: RunConfig, name: str, kind: type, ok, rule: str) -> None:
    value = getattr(cfg, name)
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{option_name(name)} must be true or false, got {value!r}")
        return
    if kind is int:
        valid_type = isinstance(value, int) and not isinstance(value, bool)
    else:
        valid_type = _is_number(value)
    if not valid_type:
        what = "an integer" if kind is int else "a finite number"
        raise ValueError(f"{option_name(name)} must be {what}, got {value!r}")
    if not ok(value):
        raise ValueError(f"{option_name(name)} must be {rule}, got {value!r}")
