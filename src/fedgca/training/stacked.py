"""C client autoencoders trained as one stacked computation.

Each client keeps its own parameters and its own Adam state; stacking them
along a leading client axis lets one ``vmap``-ed forward/backward serve all
C clients per mini-batch. ``StackedAdam`` reproduces C independent
``torch.optim.Adam`` optimisers exactly, including clients that have no batch
left in an epoch (they take no step and their step count does not advance).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.optim.adam import adam


@dataclass(frozen=True)
class AdamConfig:
    """Adam lr 1e-3 with StepLR(step 1000 epochs, γ 0.1): SPEC's optimiser everywhere."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    lr_step: int = 1000
    lr_gamma: float = 0.1


class StackedAdam:
    """C independent Adam optimisers over stacked parameters ``{name: [C, ...]}``.

    State per parameter tensor and client: step count t, moments m and v —
    exactly what ``torch.optim.Adam`` keeps per parameter. The update itself is
    torch's own fused Adam kernel, applied to runs of consecutive clients that
    share (step count, learning rate): with equal shards that is one call per
    tensor for all C clients; unequal shards fall back to smaller runs.
    A parameter that receives no gradient (the frozen decoder during
    alignment) is not touched, nor is its state.
    """

    def __init__(self, params: dict[str, Tensor], cfg: AdamConfig):
        self.cfg = cfg
        n_clients = next(iter(params.values())).shape[0]
        self.step_count = {k: torch.zeros(n_clients, dtype=torch.long) for k in params}
        self.exp_avg = {k: torch.zeros_like(p, requires_grad=False) for k, p in params.items()}
        self.exp_avg_sq = {k: torch.zeros_like(p, requires_grad=False) for k, p in params.items()}
        self.epochs = torch.zeros(n_clients, dtype=torch.long)  # StepLR counters, one step per local epoch

    def lr(self) -> Tensor:
        return self.cfg.lr * self.cfg.lr_gamma ** (self.epochs // self.cfg.lr_step).to(torch.float64)

    @torch.no_grad()
    def step(self, params: dict[str, Tensor], grads: dict[str, Tensor], active: Tensor) -> None:
        """One Adam step for the clients where ``active`` [C] is true."""
        lrs = self.lr()
        for name, g in grads.items():
            steps = self.step_count[name]
            for a, b in _runs(active, steps, lrs):
                _fused_adam(
                    params[name].detach()[a:b], g[a:b].contiguous(), self.exp_avg[name][a:b], self.exp_avg_sq[name][a:b],
                    step=int(steps[a]), lr=float(lrs[a]), cfg=self.cfg,
                )
                steps[a:b] += 1

    def end_epoch(self, active: Tensor) -> None:
        self.epochs += active.long()

    def reset(self, clients: Tensor | None = None) -> None:
        """Fresh optimiser state (all clients, or a boolean mask of them)."""
        sel = slice(None) if clients is None else clients
        for k in self.exp_avg:
            self.exp_avg[k][sel] = 0
            self.exp_avg_sq[k][sel] = 0
            self.step_count[k][sel] = 0
        self.epochs[sel] = 0

    def state_dict(self) -> dict:
        return {"step": self.step_count, "m": self.exp_avg, "v": self.exp_avg_sq, "epochs": self.epochs}

    def client_state_dict(self, i: int) -> dict:
        """Client i's optimiser state, shaped as a one-client ``state_dict``."""
        one = slice(i, i + 1)
        return {"step": {k: v[one].clone() for k, v in self.step_count.items()},
                "m": {k: v[one].clone() for k, v in self.exp_avg.items()},
                "v": {k: v[one].clone() for k, v in self.exp_avg_sq.items()},
                "epochs": self.epochs[one].clone()}

    def load_state_dict(self, state: dict) -> None:
        for key, mine in (("step", self.step_count), ("m", self.exp_avg), ("v", self.exp_avg_sq)):
            for k, v in state[key].items():
                mine[k].copy_(v)
        self.epochs.copy_(state["epochs"])


def _runs(active: Tensor, steps: Tensor, lrs: Tensor) -> list[tuple[int, int]]:
    """Maximal runs [a, b) of consecutive active clients with equal step count and lr.

    Vectorised (this runs once per tensor and mini-batch; a Python loop over
    clients here cost more than the Adam arithmetic itself).
    """
    act = active.numpy().astype(bool)
    if not act.any():
        return []
    st, lr = steps.numpy(), lrs.numpy()
    if act.all() and (st == st[0]).all() and (lr == lr[0]).all():
        return [(0, len(act))]  # the common case: equal shards, every client active
    # a run breaks where activity, step count or lr changes between neighbours
    brk = np.flatnonzero((act[1:] != act[:-1]) | (st[1:] != st[:-1]) | (lr[1:] != lr[:-1])) + 1
    bounds = np.concatenate(([0], brk, [len(act)]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if act[a]]


def _mlp_layers(module: nn.Module) -> list[tuple[str, bool]] | None:
    """``[(linear layer name, ReLU after it)]`` for an nn.Sequential of Linear/ReLU; None otherwise."""
    if not isinstance(module, nn.Sequential):
        return None
    layers: list[list] = []
    for name, layer in module.named_children():
        if isinstance(layer, nn.Linear):
            layers.append([name, False])
        elif isinstance(layer, nn.ReLU) and layers and not layers[-1][1]:
            layers[-1][1] = True
        else:
            return None
    return [(name, relu) for name, relu in layers]


def _stacked_mlp(params: dict[str, Tensor], prefix: str, layers, x: Tensor) -> Tensor:
    """A Linear/ReLU stack for every client at once, x [C, B, d_in] -> [C, B, d_out].

    The same function as ``vmap(functional_call)``, computed as hᵀ ← W·hᵀ + b:
    in this orientation autograd returns each weight gradient contiguous in
    nn.Linear's [C, out, in] layout, where vmap's x·Wᵀ returns transposed views
    that cost a strided copy per tensor before the fused Adam step.
    """
    h = x.transpose(1, 2)
    for name, relu in layers:
        h = torch.baddbmm(params[f"{prefix}{name}.bias"].unsqueeze(-1), params[f"{prefix}{name}.weight"], h)
        if relu:
            h = torch.relu(h)
    return h.transpose(1, 2)


def _fused_adam(p: Tensor, g: Tensor, m: Tensor, v: Tensor, *, step: int, lr: float, cfg: AdamConfig) -> None:
    """torch's fused Adam kernel on one slice of clients that share a step count."""
    state_step = torch.tensor(float(step))
    adam(
        [p], [g], [m], [v], [], [state_step], foreach=False, fused=True, capturable=False,
        differentiable=False, grad_scale=None, found_inf=None, has_complex=False, amsgrad=False,
        beta1=cfg.betas[0], beta2=cfg.betas[1], lr=lr, weight_decay=0.0, eps=cfg.eps, maximize=False,
    )


class StackedModels:
    """C copies of one autoencoder architecture with stacked parameters and Adam state."""

    def __init__(self, models: list[nn.Module], adam: AdamConfig = AdamConfig()):
        self.num_clients = len(models)
        self.base = copy.deepcopy(models[0]).to("meta")
        params, buffers = stack_module_state(models)
        if buffers:
            raise ValueError("fedgca autoencoders have no buffers (no normalisation layers)")
        self.params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        self.optim = StackedAdam(self.params, adam)
        self.encoder_keys = [k for k in self.params if k.startswith("encoder.")]
        self.decoder_keys = [k for k in self.params if k.startswith("decoder.")]
        self._encode = self._stacked("encoder")
        self._decode = self._stacked("decoder")

    def _stacked(self, part: str):
        """The part's forward over a client axis: batched matmuls for a Linear/ReLU stack, else vmap."""
        general = vmap(self._call(part))
        layers = _mlp_layers(getattr(self.base, part))
        if layers is None:
            return general
        prefix = part + "."

        def call(params: dict[str, Tensor], x: Tensor) -> Tensor:
            return _stacked_mlp(params, prefix, layers, x) if x.dim() == 3 else general(params, x)

        return call

    def _call(self, part: str):
        module = getattr(self.base, part)
        prefix = part + "."

        def call(params: dict[str, Tensor], x: Tensor) -> Tensor:
            own = {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
            return functional_call(module, own, (x,))

        return call

    # ---- forward passes over a client axis: x [C, B, *input_shape] ----
    def encode(self, x: Tensor) -> Tensor:
        return self._encode(self.params, x)

    def decode(self, z: Tensor) -> Tensor:
        return self._decode(self.params, z)

    def reconstruct(self, x: Tensor) -> Tensor:
        return self.decode(self.encode(x))

    # ---- per-client views, for artifacts, attacks and the reference loop ----
    def client_state_dict(self, i: int) -> dict[str, Tensor]:
        return {k: v[i].detach().clone() for k, v in self.params.items()}

    def client_model(self, i: int, template: nn.Module) -> nn.Module:
        model = copy.deepcopy(template)
        model.load_state_dict(self.client_state_dict(i))
        return model

    def client_stack(self, i: int, template: nn.Module) -> "StackedModels":
        """Client i alone — parameters and Adam state — as a one-client stack that trains on as it would."""
        solo = StackedModels([self.client_model(i, template)], self.optim.cfg)
        solo.optim.load_state_dict(self.optim.client_state_dict(i))
        return solo

    @torch.no_grad()
    def set_all(self, state: dict[str, Tensor], clients: Tensor | None = None) -> None:
        """Copy one model's parameters into every client slot (or the masked ones)."""
        sel = slice(None) if clients is None else clients
        for k, v in self.params.items():
            v[sel] = state[k].to(v.dtype)

    def state_dict(self) -> dict:
        return {"params": {k: v.detach().clone() for k, v in self.params.items()}, "optim": self.optim.state_dict()}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        for k, v in self.params.items():
            v.copy_(state["params"][k])
        self.optim.load_state_dict(state["optim"])
