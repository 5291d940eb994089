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

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from fedgca.models.tabular import mlp_layers


@dataclass(frozen=True)
class AdamConfig:
    """Adam lr 1e-3 with StepLR(step 1000 epochs, γ 0.1): SPEC's optimiser everywhere."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    lr_step: int = 1000
    lr_gamma: float = 0.1


# float32 lanes of torch's CPU kernels per vector width (unknown capability: never stack a tensor's update)
_SIMD_FLOATS = {"AVX2": 8, "AVX512": 16}


class StackedAdam:
    """C independent Adam optimisers over stacked parameters ``{name: [C, ...]}``.

    State per parameter tensor and client: step count t, moments m and v —
    exactly what ``torch.optim.Adam`` keeps per parameter. The update itself is
    torch's own fused Adam kernel, one call per mini-batch (per learning rate)
    with every active client's slice of every tensor as its own tensor and
    step count (unequal shards, whose step counts drift apart, cost no more
    calls than equal ones) — or, when every client steps with one step count,
    the whole stacked tensor where that is bit-identical (``_whole_tensor_keys``).
    A parameter that receives no gradient (the frozen decoder during alignment)
    is not touched, nor is its state.
    """

    def __init__(self, params: dict[str, Tensor], cfg: AdamConfig, masked: bool = False,
                 state: dict | None = None):
        """``state``: buffers to adopt instead of a fresh state (``joined``): ``steps`` [tensors, C], ``m`` and
        ``v`` by parameter, ``epochs``, and on the masked engine ``pows`` [tensors, C, 2]."""
        self.cfg = cfg
        self.masked = masked  # the device engine's step (``step_masked``) instead of the fused client-sliced one
        n_clients = next(iter(params.values())).shape[0]
        # float32 like torch.optim.Adam's `step`; the kernel advances it in place
        device = next(iter(params.values())).device
        # step counts [tensors, C], one row per tensor (``step_masked`` updates the rows it steps at once)
        self._steps = torch.zeros(len(params), n_clients, device=device) if state is None else state["steps"]
        self.step_count = dict(zip(params, self._steps.unbind(0)))
        self.exp_avg = ({k: torch.zeros_like(p, requires_grad=False) for k, p in params.items()} if state is None
                        else state["m"])
        self.exp_avg_sq = ({k: torch.zeros_like(p, requires_grad=False) for k, p in params.items()}
                           if state is None else state["v"])
        # StepLR counters, one step per local epoch: schedule bookkeeping, on the CPU with the participation masks
        self.epochs = torch.zeros(n_clients, dtype=torch.long, device="cpu") if state is None else state["epochs"]
        self._stacked = {k: p.detach() for k, p in params.items()}
        self._slice_numel = {k: p[0].numel() for k, p in params.items()}
        simd = _SIMD_FLOATS.get(torch.backends.cpu.get_cpu_capability())
        # tensors whose client slices are whole SIMD groups (``_whole_tensor_keys``): fixed by the shapes
        self._simd_whole = set() if simd is None else {k for k, n in self._slice_numel.items() if n % simd == 0}
        self._lrs: list[float] | None = None  # per-client learning rates, until the StepLR counters move
        self._lr_dev: Tensor | None = None  # the same on the stack's device, for ``step_masked``
        # [β₁ᵗ, β₂ᵗ] per tensor and client [tensors, C, 2], as running products (``step_masked``'s bias corrections)
        self._pows = (None if not masked else torch.ones(len(params), n_clients, 2, device=device) if state is None
                      else state["pows"])
        self.beta_pow = dict(zip(params, self._pows.unbind(0))) if masked else None
        self._order = {k: j for j, k in enumerate(params)}
        self._row_cache: dict[tuple, slice | Tensor] = {}
        self._betas = torch.tensor(cfg.betas, device=device) if masked else None
        self._sync_uniform()
        # per-client views (parameter, m, v, t) of each tensor: the fused kernel's arguments, made once (the masked
        # step needs none: C × tensors views would be Python work per stacked epoch of the batched engine)
        self._client_views = {} if masked else {
            k: list(zip(p.detach().unbind(0), self.exp_avg[k].unbind(0), self.exp_avg_sq[k].unbind(0),
                        self.step_count[k].unbind(0)))
            for k, p in params.items()
        }

    @classmethod
    def joined(cls, optims: list["StackedAdam"], params: dict[str, Tensor]) -> "StackedAdam":
        """One optimiser over every client of ``optims`` (one configuration and engine), in order, for ``params``
        (their parameters on one axis): each buffer one ``torch.cat``, so the calls do not grow with the number
        of optimisers (the batched engine's stacked epoch; ``split_into`` copies back)."""
        first = optims[0]
        state = {"steps": torch.cat([o._steps for o in optims], 1), "epochs": torch.cat([o.epochs for o in optims]),
                 "m": {k: torch.cat([o.exp_avg[k] for o in optims]) for k in first.exp_avg},
                 "v": {k: torch.cat([o.exp_avg_sq[k] for o in optims]) for k in first.exp_avg_sq},
                 "pows": torch.cat([o._pows for o in optims], 1) if first.masked else None}
        return cls(params, first.cfg, masked=first.masked, state=state)

    @torch.no_grad()
    def split_into(self, optims: list["StackedAdam"], dst: list[Tensor] = (), src: list[Tensor] = ()) -> None:
        """Copy each of ``optims``' clients' state (its slice of this ``joined`` optimiser's, in order) back into
        it, together with the tensor copies ``src`` → ``dst`` (the parameters): the moments, which have the
        clients first, in one multi-tensor copy for all optimisers (a few launches on a GPU, not one per client
        slice); step counts and β powers, which have the tensors first, one copy each per optimiser."""
        counts = [o.epochs.numel() for o in optims]
        dst, src = list(dst), list(src)
        for k in self.exp_avg:
            dst += [o.exp_avg[k] for o in optims] + [o.exp_avg_sq[k] for o in optims]
            src += [*self.exp_avg[k].split(counts), *self.exp_avg_sq[k].split(counts)]
        torch._foreach_copy_(dst, src)
        pows = self._pows.split(counts, 1) if self.masked else [None] * len(optims)
        for o, steps, epochs, pw in zip(optims, self._steps.split(counts, 1), self.epochs.split(counts), pows):
            o._steps.copy_(steps)
            o.epochs.copy_(epochs)
            if pw is not None:
                o._pows.copy_(pw)
            o._lrs = o._lr_dev = None
            o._sync_uniform()

    def lr(self) -> Tensor:
        return self.cfg.lr * self.cfg.lr_gamma ** (self.epochs // self.cfg.lr_step).to(torch.float64)

    def step_active(self, grads: dict[str, Tensor], active: Tensor, clients: list[int] | None = None) -> None:
        """One step for the clients where ``active`` [C] is set, by this optimizer's engine: ``step_masked`` on
        the device engine (``active`` as it is, on the device), else ``step`` with the clients' indices (``clients``
        if the caller has them on the host, else read off ``active``)."""
        if self.masked:
            self.step_masked(grads, active)
        else:
            self.step(grads, clients if clients is not None else active.nonzero().flatten().tolist())

    @torch.no_grad()
    def step_masked(self, grads: dict[str, Tensor], active: Tensor) -> None:
        """One Adam step for the clients where ``active`` [C] (bool, on the stack's device) is set: the device
        engine's step.

        A fixed sequence of whole-tensor operations, the same for 1 or 10,000 clients, that reads nothing back
        to the host: step counts, β powers and learning rates are per-client tensors, and a client that takes
        no step keeps its slice by ``where``. Only operations that round each element once and alone (mul,
        add, sub, div, sqrt, where; no fused multiply-add, no pow) so that a client's numbers do not depend on
        where its slice lies in the stack: alone or among others, bit for bit (tests/test_stacked.py). Adam's
        formulas as ``torch.optim.Adam`` computes them, whose fused kernel rounds differently: the two agree
        to float32 precision, not bit for bit — which is why the CPU keeps the fused step."""
        if self._lr_dev is None:
            self._lr_dev = self.lr().to(active.device, torch.float32)
        b1, b2, eps = self.cfg.betas[0], self.cfg.betas[1], self.cfg.eps
        names = list(grads)
        rows = self._rows(names)
        # per tensor and client [n, C]: step counts, β₁ᵗ and β₂ᵗ, step size lr/(1 − β₁ᵗ), √(1 − β₂ᵗ)
        steps, pows = self._steps[rows], self._pows[rows]
        steps.add_(active.to(steps.dtype))
        torch.where(active.unsqueeze(-1), pows * self._betas, pows, out=pows)
        step_size = self._lr_dev / (1.0 - pows[..., 0])
        bc2_sqrt = (1.0 - pows[..., 1]).sqrt()
        if isinstance(rows, Tensor):  # not one contiguous range of rows: write them back
            self._steps[rows], self._pows[rows] = steps, pows
        ps = [self._stacked[k] for k in names]
        ms = [self.exp_avg[k] for k in names]
        vs = [self.exp_avg_sq[k] for k in names]
        gs = [grads[k] for k in names]
        shapes = [(-1,) + (1,) * (p.dim() - 1) for p in ps]
        # m ← β₁m + (1 − β₁)g;  v ← β₂v + (1 − β₂)g²;  p ← p − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
        m_new = torch._foreach_mul(ms, b1)
        torch._foreach_add_(m_new, torch._foreach_mul(gs, 1.0 - b1))
        g2 = torch._foreach_mul(gs, gs)
        torch._foreach_mul_(g2, 1.0 - b2)
        v_new = torch._foreach_mul(vs, b2)
        torch._foreach_add_(v_new, g2)
        denom = torch._foreach_sqrt(v_new)
        torch._foreach_div_(denom, [bc2_sqrt[j].view(sh) for j, sh in enumerate(shapes)])
        torch._foreach_add_(denom, eps)
        update = torch._foreach_div(m_new, denom)
        torch._foreach_mul_(update, [step_size[j].view(sh) for j, sh in enumerate(shapes)])
        p_new = torch._foreach_sub(ps, update)
        for j, sh in enumerate(shapes):  # a client that takes no step keeps its slice
            sel = active.view(sh)
            torch.where(sel, m_new[j], ms[j], out=ms[j])
            torch.where(sel, v_new[j], vs[j], out=vs[j])
            torch.where(sel, p_new[j], ps[j], out=ps[j])

    def _rows(self, names: list[str]):
        """The rows of ``names`` in the per-tensor buffers: a slice when they are consecutive (every tensor, or
        the encoder's), else an index tensor."""
        key = tuple(names)
        if key not in self._row_cache:  # made once: a captured step (CUDA graphs) may not copy from the host
            idx = [self._order[k] for k in names]
            self._row_cache[key] = (slice(idx[0], idx[0] + len(idx)) if idx == list(range(idx[0], idx[0] + len(idx)))
                                    else torch.tensor(idx, device=self._steps.device))
        return self._row_cache[key]

    def _sync_uniform(self) -> None:
        """Which tensors' step counts are equal across clients, read off the counts themselves.

        Kept up to date by ``step`` without reading the counts again (a subset of clients stepping makes a
        tensor non-uniform until a reset); a stale False only costs the client-by-client path, never a
        result. Set step counts through ``load_state_dict`` or ``reset``, never in place: a stale True would
        step drifted clients with one shared count. The masked step does not use it, and reading the counts
        would be a host synchronisation per tensor on a GPU: all False there."""
        self._uniform = {k: not self.masked and bool((t == t[0]).all()) for k, t in self.step_count.items()}

    @torch.no_grad()
    def step(self, grads: dict[str, Tensor], clients: list[int]) -> None:
        """One Adam step for the clients with these indices (the others take none)."""
        if self._lrs is None:
            self._lrs = self.lr().tolist()
        lrs = self._lrs
        for lr in sorted({lrs[i] for i in clients}):  # one lr in practice: StepLR steps every 1000 epochs
            group = [i for i in clients if lrs[i] == lr]
            # one client: its views are the whole tensors already, without the step-count copies
            whole = self._whole_tensor_keys(grads) if len(group) == len(lrs) > 1 else set()
            if len(group) < len(lrs):
                for name in grads:
                    self._uniform[name] = False
            p, m, v, t, g = [], [], [], [], []
            common: dict[str, Tensor] = {}  # the stacked tensors' shared step counts, advanced by the kernel
            for name, grad in grads.items():
                if name in whole:  # every client at once: the stacked tensor with their common step count
                    common[name] = self.step_count[name][0].clone()
                    p.append(self._stacked[name])
                    g.append(grad)
                    m.append(self.exp_avg[name])
                    v.append(self.exp_avg_sq[name])
                    t.append(common[name])
                    continue
                rows = grad.unbind(0)
                for i in group:  # (parameter, m, v, t) of one client, and its gradient
                    pi, mi, vi, ti = self._client_views[name][i]
                    p.append(pi)
                    m.append(mi)
                    v.append(vi)
                    t.append(ti)
                    g.append(rows[i])
            _fused_adam(p, g, m, v, t, lr, self.cfg)
            for name, step in common.items():
                self.step_count[name].fill_(step)

    def _whole_tensor_keys(self, grads: dict[str, Tensor]) -> set[str]:
        """Tensors that can take one kernel call for all clients with bit-identical results.

        The fused kernel updates a tensor in SIMD-width groups and its remainder element by element, and
        the two round differently (contracted multiply-adds). A client's slice of a stacked tensor is
        updated exactly as the client alone would update it when the slice is a whole number of groups
        (so that no client's elements fall into another's group or the remainder), the kernel runs in
        one chunk (one thread), and all clients share the step count. Other tensors go client by client.
        """
        if torch.get_num_threads() != 1:
            return set()
        return {name for name in grads if name in self._simd_whole and self._uniform[name]}

    def end_epoch(self, active: Tensor) -> None:
        self.epochs += active.long()
        self._lrs = self._lr_dev = None

    def reset(self, clients: Tensor | None = None) -> None:
        """Fresh optimiser state (all clients, or a boolean mask of them)."""
        sel = slice(None) if clients is None else clients
        for k in self.exp_avg:
            self.exp_avg[k][sel] = 0
            self.exp_avg_sq[k][sel] = 0
            self.step_count[k][sel] = 0
            if self.masked:
                self.beta_pow[k][sel] = 1
        self.epochs[sel] = 0
        self._lrs = self._lr_dev = None
        self._sync_uniform()

    def state_dict(self) -> dict:
        state = {"step": self.step_count, "m": self.exp_avg, "v": self.exp_avg_sq, "epochs": self.epochs}
        if self.masked:
            state["beta_pow"] = self.beta_pow
        return state

    def client_state_dict(self, i: int) -> dict:
        """Client i's optimiser state, shaped as a one-client ``state_dict``."""
        return {k: _clone(v) for k, v in select_clients(self.state_dict(), slice(i, i + 1)).items()}

    def load_state_dict(self, state: dict) -> None:
        for key, mine in (("step", self.step_count), ("m", self.exp_avg), ("v", self.exp_avg_sq)):
            for k, v in state[key].items():
                mine[k].copy_(v)
        self.epochs.copy_(state["epochs"])
        if self.masked:
            for k, pw in self.beta_pow.items():
                if "beta_pow" in state:
                    pw.copy_(state["beta_pow"][k])
                else:  # state from the fused step (a CPU checkpoint): βᵗ from the step counts. The running
                    # products may differ in the last bit; a run that changes engine changes rounding anyway
                    pw.copy_(torch.stack([torch.pow(b, self.step_count[k]) for b in self.cfg.betas], -1))
        self._lrs = self._lr_dev = None
        self._sync_uniform()


def select_clients(state: dict, clients: slice) -> dict:
    """A ``StackedAdam.state_dict`` restricted to some clients (views; every entry has the clients first)."""
    return {key: ({k: t[clients] for k, t in v.items()} if isinstance(v, dict) else v[clients])
            for key, v in state.items()}


def _clone(v):
    return {k: t.clone() for k, t in v.items()} if isinstance(v, dict) else v.clone()


def _stacked_mlp(params: dict[str, Tensor], prefix: str, layers, x: Tensor) -> Tensor:
    """A Linear/ReLU stack for every client at once, x [C, B, d_in] -> [C, B, d_out].

    The same function as ``vmap(functional_call)``, computed as hᵀ ← W·hᵀ + b:
    in this orientation autograd returns each weight gradient contiguous in
    nn.Linear's [C, out, in] layout, where vmap's x·Wᵀ returns transposed views
    that cost a strided copy per tensor before the fused Adam step.
    """
    return _stacked_mlp_t(params, prefix, layers, x.transpose(1, 2)).transpose(1, 2)


def _stacked_mlp_t(params: dict[str, Tensor], prefix: str, layers, h: Tensor, saved: list | None = None) -> Tensor:
    """``_stacked_mlp`` on transposed rows h [C, d_in, B]; with ``saved``, each layer's (name, relu, input,
    output) is appended for ``_stacked_mlp_backward``. ReLU runs in place: neither autograd's backward nor
    the hand-written one needs the pre-activation."""
    for name, relu in layers:
        out = torch.baddbmm(params[f"{prefix}{name}.bias"].unsqueeze(-1), params[f"{prefix}{name}.weight"], h)
        if relu:
            out.relu_()
        if saved is not None:
            saved.append((f"{prefix}{name}", relu, h, out))
        h = out
    return h


def _stacked_mlp_backward(params: dict[str, Tensor], saved: list, g: Tensor) -> dict[str, Tensor]:
    """The backward pass of the saved layers, g = ∂loss/∂output [C, d_out, B]: autograd's formulas for
    relu (threshold_backward on the output) and baddbmm (g·hᵀ, the bias sum, Wᵀ·g), on the same tensors in
    the same layouts, so the gradients are autograd's bit for bit (tests/test_stacked.py). No input
    gradient for the first layer: the rows are data."""
    grads = {}
    for i in range(len(saved) - 1, -1, -1):
        name, relu, h, out = saved[i]
        if relu:
            g = torch.ops.aten.threshold_backward(g, out, 0)
        grads[f"{name}.weight"] = g.bmm(h.transpose(1, 2))
        grads[f"{name}.bias"] = g.sum(-1)
        if i:
            g = params[f"{name}.weight"].transpose(1, 2).bmm(g)
    return grads


def _fused_adam(p: list[Tensor], g: list[Tensor], m: list[Tensor], v: list[Tensor], t: list[Tensor],
                lr: float, cfg: AdamConfig) -> None:
    """torch's fused Adam kernel over lists of tensors, after incrementing each step count ``t``.

    What ``torch.optim.adam.adam(..., fused=True)`` runs for CPU float tensors of one dtype, called
    directly: its per-call grouping and argument checks were a tenth of a one-model training step.
    ``tests/test_stacked.py`` holds it to ``torch.optim.Adam`` bit for bit."""
    torch._foreach_add_(t, 1)
    torch._fused_adam_(p, g, m, v, [], t, amsgrad=False, lr=lr, beta1=cfg.betas[0], beta2=cfg.betas[1],
                       weight_decay=0.0, eps=cfg.eps, maximize=False, grad_scale=None, found_inf=None)


def device_engine(device: torch.device | str) -> bool:
    """Whether stacks on ``device`` compute the device way: Adam by ``StackedAdam.step_masked`` and scoring of
    every client at once (``evaluation.metrics``) — fixed sequences of whole-tensor operations whose count does
    not grow with the clients on the axis, and no reads back to the host inside an epoch. That is what a GPU
    needs: at fedgca's shapes launches, not arithmetic, bound it (../shared/GPU.md). On CPU cores the fused,
    client-sliced Adam and one-model scoring are faster, bit-identical to ``torch.optim.Adam``, and what every
    committed CPU result was computed with; tests force the device engine on the CPU to check it."""
    return torch.device(device).type != "cpu"


class StackedModels:
    """C copies of one autoencoder architecture with stacked parameters and Adam state."""

    broker = None  # a batched engine's ``training.lockstep.EpochBroker`` while this stack trains under one
    broker_owner = None  # the run the broker counts this stack's (and its slot views') compute to: id of its stack

    def __init__(self, models: list[nn.Module], adam: AdamConfig = AdamConfig(), device: torch.device | str = "cpu"):
        self.num_clients = len(models)
        self.device = torch.device(device)
        self.base = copy.deepcopy(models[0]).to("meta")
        params, buffers = stack_module_state(models)
        if buffers:
            raise ValueError("fedgca autoencoders have no buffers (no normalisation layers)")
        self.params = {k: v.detach().to(self.device, copy=True).requires_grad_(True) for k, v in params.items()}
        self.device_engine = device_engine(self.device)
        self.optim = StackedAdam(self.params, adam, masked=self.device_engine)
        self.encoder_keys = [k for k in self.params if k.startswith("encoder.")]
        self.decoder_keys = [k for k in self.params if k.startswith("decoder.")]
        self._mlp = {part: mlp_layers(getattr(self.base, part)) for part in ("encoder", "decoder")}
        self._encode = self._stacked("encoder")
        self._decode = self._stacked("decoder")

    def _stacked(self, part: str):
        """The part's forward over a client axis: batched matmuls for a Linear/ReLU stack, else one call per
        client (``_per_client``)."""
        layers = mlp_layers(getattr(self.base, part))
        if layers is None:
            return self._per_client(part)
        general = vmap(self._call(part))
        prefix = part + "."

        def call(params: dict[str, Tensor], x: Tensor) -> Tensor:
            return _stacked_mlp(params, prefix, layers, x) if x.dim() == 3 else general(params, x)

        return call

    def _per_client(self, part: str):
        """Client by client, each on its own slice (unbind: its backward stacks the gradients, one copy).

        For the conv AE this beats vmap, whose batching rule turns C convolutions into one grouped
        convolution: 1.5× per training step and 2× per scoring pass (benchmarks/bench_conv.py). A client's
        pass is then exactly the pass a lone model takes, as in the reference loop and a Flower client.
        """
        call = self._call(part)
        prefix = part + "."

        def run(params: dict[str, Tensor], x: Tensor) -> Tensor:
            own = {k: v.unbind(0) for k, v in params.items() if k.startswith(prefix)}
            return torch.stack([call({k: v[i] for k, v in own.items()}, x[i]) for i in range(x.shape[0])])

        return run

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

    @property
    def hand_backward(self) -> bool:
        """Whether ``loss_and_grads`` can run: both parts are Linear/ReLU stacks."""
        return self._mlp["encoder"] is not None and self._mlp["decoder"] is not None

    @torch.no_grad()
    def loss_and_grads(self, x: Tensor, mask: Tensor, output_loss, parts=("encoder", "decoder")):
        """(loss [C], {parameter name: gradient}) for rows x [C, B, d] through ``parts`` — the whole
        autoencoder, or the encoder alone — with ``output_loss(output, mask) -> (loss, ∂loss/∂output)``.

        Autograd's own gradients, bit for bit, by a hand-written backward pass (``_stacked_mlp_backward``):
        no graph is recorded. Measured per training epoch: 1.03-1.05× faster with 10-50 clients, 1.2× for one
        model (C = 1), where autograd's per-step overhead weighs most (docs/results/bench_training_step.txt).
        Only for MLPs (``hand_backward``).
        """
        saved: list = []
        h = x.transpose(1, 2)
        for part in parts:
            h = _stacked_mlp_t(self.params, part + ".", self._mlp[part], h, saved)
        loss, g = output_loss(h.transpose(1, 2), mask)
        return loss, _stacked_mlp_backward(self.params, saved, g.transpose(1, 2))

    @torch.no_grad()
    def reconstruct_client(self, i: int, x: Tensor) -> Tensor:
        """Client i's reconstruction of rows x [n, *input_shape], for scoring (no autograd).

        One model at a time: for the MLP a chain of ``addmm`` on client i's own weights, in the stacked
        path's orientation (hᵀ ← W·hᵀ + b); scoring this way ran 1.17-1.39× faster than the stacked
        batched matmuls, with bit-identical scores (``benchmarks/bench_scoring.py``). Anything else runs as
        its own model (``_per_client``'s call); images in channels-last layout, weights and inputs, which
        oneDNN convolves faster than NCHW (1.2-1.3× per evaluation, ``benchmarks/bench_scoring.py --dataset
        fashion_mnist``). Those scores differ from the NCHW pass in the last bits (≤ 2.4e-7 relative);
        scoring never feeds back into training.
        """
        params = {k: v[i].detach() for k, v in self.params.items()}
        if self._mlp["encoder"] is None or self._mlp["decoder"] is None:
            if x.dim() == 4:
                cl = torch.channels_last
                params = {k: v.contiguous(memory_format=cl) if v.dim() == 4 else v for k, v in params.items()}
                x = x.contiguous(memory_format=cl)
            return self._call("decoder")(params, self._call("encoder")(params, x))
        h = x.t()
        for part in ("encoder", "decoder"):
            for name, relu in self._mlp[part]:
                h = torch.addmm(params[f"{part}.{name}.bias"].unsqueeze(-1), params[f"{part}.{name}.weight"], h)
                if relu:
                    h.relu_()  # in place: one buffer fewer per layer, ~5 % of a scoring pass
        return h.t()

    # ---- per-client views, for artifacts, attacks and the reference loop ----
    def client_state_dict(self, i: int) -> dict[str, Tensor]:
        return {k: v[i].detach().clone() for k, v in self.params.items()}

    def client_model(self, i: int, template: nn.Module) -> nn.Module:
        return slot_model(self.params, i, template)

    def slot_view(self, i: int) -> "StackedModels":
        """Client i's parameters (shared, not copied) as a one-client stack for forward passes only."""
        view = copy.copy(self)
        view.num_clients = 1
        view.params = {k: v[i : i + 1].detach() for k, v in self.params.items()}
        view.optim = None
        view._encode, view._decode = view._stacked("encoder"), view._stacked("decoder")
        return view

    def client_stack(self, i: int, template: nn.Module) -> "StackedModels":
        """Client i alone — parameters and Adam state — as a one-client stack that trains on as it would."""
        solo = StackedModels([self.client_model(i, template)], self.optim.cfg, self.device)
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


@torch.no_grad()
def stacked_reconstruction(clients: StackedModels, x: Tensor) -> Tensor:
    """Every client's reconstruction of its rows x [C, M, d] at once, no autograd: the training step's
    forward pass (``_stacked_mlp_t``), for an MLP (``hand_backward``)."""
    h = x.transpose(1, 2)
    for part in ("encoder", "decoder"):
        h = _stacked_mlp_t(clients.params, part + ".", clients._mlp[part], h)
    return h.transpose(1, 2)


def slot_model(params: dict[str, Tensor], i: int, template: nn.Module) -> nn.Module:
    """Slot i of stacked parameters (a stack's, or a snapshot of them) as a model of ``template``'s kind."""
    model = copy.deepcopy(template)
    model.load_state_dict({k: v[i].detach().clone() for k, v in params.items()})
    return model
