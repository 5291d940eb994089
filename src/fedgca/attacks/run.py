"""``fedgca attack``: SPEC §6 against one victim client of a finished run.

Threat models (what the honest-but-curious server holds):

* parameter-sharing runs (fedavg, fedprox, fednova, dpfedavg): the victim's
  round-R upload, i.e. its locally trained autoencoder (the simulator keeps the
  last upload of every client in its checkpoint; DP-FedAvg's server clips and
  noises *after* receiving it, FedNova's server recovers θ_i from d_i and τ_i).
  White-box inversion of that autoencoder.
* gca, dpgca: only codes. From its round-R checkpoint the victim runs 5 more
  reconstruction epochs (its own Adam state, its own data) and uploads its usual
  ⌊ρ·N_i⌋ codes; the server trains a fresh surrogate on those codes alone and
  inverts it. DP-GCA's victim trains with DP-SGD and clips and noises those codes,
  as in its run (this extra upload is one round beyond the run's accounted R).

Targets are the victim's whole training shard. The reference bank H is 100
normal records never used in training: drawn (fixed per seed) from the test
set's held-out normals, so that the training set — and the upload invariants of
SPEC §4 — stay exactly as the run had them.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from fedgca import devices, methods, privacy, rundir, seeding
from fedgca.algorithms import method_class
from fedgca.attacks.flipping import direct_decodes, train_surrogate
from fedgca.attacks.inversion import (
    VISION_BOUNDS,
    invert,
    invert_model,
    make_starts,
    start_kind,
)
from fedgca.attacks.metrics import leakage_metrics, select_reference_bank
from fedgca.config import RunConfig
from fedgca.training import gca as gca_training
from fedgca.training.loop import ClientShards

EXTRA_RECON_EPOCHS = 5
N_REFERENCE = 100


def reference_bank(test_x: np.ndarray, test_y: np.ndarray, seed: int, n: int = N_REFERENCE) -> np.ndarray:
    """H: ``n`` held-out normal test records, fixed per seed (never in any client's training data)."""
    normals = np.flatnonzero(np.asarray(test_y) == 0)
    return test_x[normals[select_reference_bank(len(normals), n, seed=seed)]]


def victim_upload_codes(fed, victim: int, epochs: int = EXTRA_RECON_EPOCHS) -> np.ndarray:
    """GCA victim: ``epochs`` more reconstruction epochs from its checkpoint, then its usual upload."""
    cfg = fed.cfg
    solo = fed.clients.client_stack(victim, fed.template)
    shard = ClientShards.from_arrays([devices.to_numpy(fed.shards.client(victim))], device=fed.device)
    one = torch.ones(1, dtype=torch.bool, device="cpu")
    gcfg = gca_training.gca_config(cfg, fed.dataset.kind, privacy.resolve(cfg, fed.shards.sizes))  # DP-GCA: its noise
    for e in range(epochs):
        gca_training.reconstruction_epoch(solo, shard, seeding.client_rngs(cfg.seed, "attack-recon", (e,), [victim]), gcfg, one)
    return gca_training.encode_uploads(solo, shard, seeding.client_rngs(cfg.seed, "attack-upload", (), [victim]), cfg.rho, one,
                                       gcfg.dp)[0]


def flipping_attack(codes: np.ndarray, input_shape: tuple[int, ...], seed: int, *, surrogate_options=None,
                    inversion_options=None, device="cpu") -> tuple[np.ndarray, np.ndarray, dict]:
    """Server side of GCA's attack: surrogate from the codes alone, 100-start inversion of T̃ = D̃ ∘ Ẽ."""
    surrogate = train_surrogate(codes, input_shape, seed=seed, **{"device": device, **(surrogate_options or {})})
    kind = start_kind(input_shape)
    starts = make_starts(100, input_shape, seed=seed, kind=kind).to(device)  # drawn on the CPU
    with torch.enable_grad():
        result = invert(surrogate, starts, bounds=VISION_BOUNDS if kind == "vision" else None,
                        **(inversion_options or {}))
    decodes = devices.to_numpy(direct_decodes(surrogate, codes))
    return devices.to_numpy(result.outputs), decodes, dict(surrogate.fit_info, inversion_steps_mean=float(result.steps.float().mean()))


def attack_run(run_dir, *, victim: int = 0, source=None, data_dir=None, surrogate_options=None,
               inversion_options=None, device: str | None = None) -> dict:
    """Attack ``victim`` of the finished run in ``run_dir``; writes attack.json and attack_outputs.npz there.

    ``source``: the run's records (:class:`~fedgca.data.DataSource`), or the built-in dataset in ``data_dir``.

    ``surrogate_options`` / ``inversion_options`` override SPEC §6's presets (tests use small budgets);
    ``device`` (fedgca.devices) where the attack computes, by default the run's ``--device``.
    """
    from fedgca.data.source import source_for
    from fedgca.simulation.federation import build_federation
    
    run_dir = Path(run_dir)
    if not (run_dir / rundir.SUMMARY).exists():
        raise FileNotFoundError(f"{run_dir}: no {rundir.SUMMARY} — attack a finished run")
    cfg = RunConfig.from_dict(rundir.load_json(rundir.verify(run_dir, rundir.CONFIG))).resolved()
    if device is not None:
        cfg = dataclasses.replace(cfg, device=device).resolved()
    threat_model = cfg.spec.attack
    if threat_model is None:
        raise ValueError(f"{run_dir}: method {cfg.method!r} sends nothing a server could attack "
                         f"(attacks exist for {', '.join(methods.names(attack=True))})")
    if not 0 <= victim < cfg.clients:
        raise ValueError(f"victim {victim} is not a client of this run (C = {cfg.clients})")
    ckpt = rundir.load_tensors(rundir.verify(run_dir, rundir.CHECKPOINT), expect_keys=("clients", "method"))
    fed = build_federation(cfg, source or source_for(cfg.dataset, data_dir))
    try:
        fed.clients.load_state_dict(ckpt["clients"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as err:
        raise rundir.RunFileError(f"{run_dir / rundir.CHECKPOINT}: does not belong to this run's models "
                                  f"({type(err).__name__})") from None
    shape = fed.dataset.input_shape
    t0 = time.perf_counter()
    extra: dict = {}
    if threat_model == "latent":
        codes = victim_upload_codes(fed, victim)
        outputs, decodes, extra["surrogate"] = flipping_attack(codes, shape, cfg.seed, surrogate_options=surrogate_options,
                                                               inversion_options=inversion_options, device=fed.device)
        threat = "latent-only flipping (surrogate trained on the victim's uploaded codes alone)"
    else:
        state = ckpt["method"]
        if state.get("last_upload_round", [-1] * cfg.clients)[victim] < 0:
            raise ValueError(f"{run_dir}: the checkpoint holds no upload of client {victim} (run from an older "
                             "fedgca, or the client never took part); re-run it to attack it")
        model = fed.template
        model.load_state_dict({k: v[victim] for k, v in state["last_upload"].items()})
        model.to(fed.device)
        with torch.enable_grad():
            outputs = devices.to_numpy(invert_model(model, shape, seed=cfg.seed, **(inversion_options or {})).outputs)
        decodes, codes = None, None
        extra["upload_round"] = int(state["last_upload_round"][victim]) + 1
        threat = ("white-box inversion of the mean model, all the server holds of the victim (secure aggregation)"
                  if any(s.summed for s in method_class(cfg.method).steps)
                  else "white-box inversion of the victim's round-R upload")
    seconds = time.perf_counter() - t0

    targets = fed.dataset.train[fed.partition[victim]]
    reference = reference_bank(fed.dataset.test_x, fed.dataset.test_y, cfg.seed)
    record = {
        "method": cfg.method, "dataset": cfg.dataset, "seed": cfg.seed, "victim": victim,
        "partition": cfg.partition, "k": cfg.k if cfg.spec.family == "gca" else None, "rounds": cfg.rounds,
        "threat_model": threat, "attack_seconds": round(seconds, 3),
        **({"target_epsilon": cfg.target_epsilon, "dp_epsilon": privacy.accounting(cfg, fed.shards.sizes)["epsilon"]}
           if privacy.is_record_dp(cfg) else {}),
        **leakage_metrics(targets, outputs, reference), **extra,
    }
    if decodes is not None:
        direct = leakage_metrics(targets, decodes, reference)
        record["direct_decodes"] = {"ntmse": direct["ntmse"], "delta_cos": direct["delta_cos"],
                                    "note": "diagnostic: the surrogate decoder applied to the uploaded codes"}
        record["n_codes"] = int(len(codes))
    if surrogate_options or inversion_options:
        record["non_preset_options"] = {"surrogate": surrogate_options, "inversion": inversion_options}
    (run_dir / "attack.json").write_text(json.dumps(record, indent=1))
    arrays = {"outputs": outputs, "reference": reference}
    if decodes is not None:
        arrays["direct_decodes"] = decodes
    np.savez_compressed(run_dir / "attack_outputs.npz", **arrays)
    if fed.dataset.kind == "vision":
        record["grid_png"] = str(save_grid(run_dir / "attack_grid.png", targets, outputs))
        (run_dir / "attack.json").write_text(json.dumps(record, indent=1))
    return record


def save_grid(path: Path, targets: np.ndarray, outputs: np.ndarray, n: int = 8) -> Path:
    """PNG: n victim images (top) above their MSE-nearest attack outputs (bottom)."""
    from matplotlib.figure import Figure  # no pyplot: the process's backend stays the user's

    from fedgca.attacks.metrics import nearest_by_mse

    picks = seeding.rng(0, "attack-grid").choice(len(targets), size=min(n, len(targets)), replace=False)
    x = targets[picks]
    r = outputs[nearest_by_mse(x, outputs)]
    fig = Figure(figsize=(1.6 * len(x), 3.4))
    axes = fig.subplots(2, len(x), squeeze=False)
    for j in range(len(x)):
        for row, img in enumerate((x[j], r[j])):
            im = np.clip((np.transpose(img, (1, 2, 0)) + 1) / 2, 0, 1)
            axes[row, j].imshow(im.squeeze(-1) if im.shape[-1] == 1 else im, cmap="gray", vmin=0, vmax=1)
            axes[row, j].axis("off")
    axes[0, 0].set_title("target", fontsize=8, loc="left")
    axes[1, 0].set_title("nearest attack output", fontsize=8, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


__all__ = ["attack_run", "flipping_attack", "reference_bank", "victim_upload_codes", "save_grid"]
