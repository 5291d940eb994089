"""Secure aggregation: the masks (a generator keyed by the whole secret, on both ends), the summed vector (exact
integer sums, the overflow rule), what a curious server can and cannot do with what it receives, the same refusals
in both drivers, clients lost mid-exchange.

The Flower ≡ simulator identity of metrics.csv for the secure methods is in tests/test_flower.py (parametrised
over the registry); here the same identity with --selection and through a refused sum."""
import csv
import json
import logging

import numpy as np
import pytest
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import Key

from fedgca.algorithms import method_class
from fedgca.config import RunConfig
from fedgca.protocol import masks, secagg
from fedgca.protocol.secagg import Contribution, Part

SECURE = ["secagg-fedavg", "secagg-fedprox", "secagg-gca"]


def _academic(**kw) -> RunConfig:
    return RunConfig(**{"dataset": "academic", "method": "secagg-fedavg", "clients": 3, "rounds": 2,
                        "local_epochs": 1, "recon_epochs": 1, "align_epochs": 1, "seed": 100, **kw})


# ---------------------------------------------------------------------------- the masks


def _fold32(seed: bytes) -> int:
    """Flower 1.41's seed derivation: the key material XOR-folded to 32 bits."""
    out = 0
    for i in range(0, len(seed), 4):
        out ^= int.from_bytes(seed[i:i + 4], "little")
    return out


def test_masks_are_uniform_deterministic_and_keyed_by_every_byte():
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen as flower_generator

    key = bytes(range(44))
    a = masks.mask_arrays(key, 2 ** 62, [(1,), (3, 4), ()])
    assert [x.shape for x in a] == [(1,), (3, 4), ()] and all(x.dtype == np.int64 for x in a)
    b = masks.mask_arrays(key, 2 ** 62, [(1,), (3, 4), ()])
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    big = masks.mask_arrays(key, 2 ** 32, [(200_000,)])[0]
    assert big.min() >= 0 and big.max() < 2 ** 32
    assert abs(big.mean() / 2 ** 32 - 0.5) < 0.005  # uniform over the whole range (Flower's stops at M − 2)
    # two keys that Flower folds to the same 32-bit seed: one mask under Flower's generator, two under fedgca's
    twin = bytearray(key)
    twin[0] ^= 0x5A
    twin[4] ^= 0x5A
    assert _fold32(bytes(twin)) == _fold32(key)
    assert np.array_equal(flower_generator(key, 2 ** 62, [(8,)])[0], flower_generator(bytes(twin), 2 ** 62, [(8,)])[0])
    assert not np.array_equal(masks.mask_arrays(key, 2 ** 62, [(8,)])[0],
                              masks.mask_arrays(bytes(twin), 2 ** 62, [(8,)])[0])
    with pytest.raises(ValueError, match="power of two"):
        masks.mask_arrays(key, 3 * 2 ** 20, [(2,)])


def test_fedgcas_masks_are_in_force_on_both_ends_and_a_reverted_generator_is_refused(monkeypatch):
    """Flower's client mod and workflow look the generator up by name; fedgca binds it and checks both, and the
    pinned Flower range matches the one the check was written for (an upgrade fails here, not silently)."""
    import importlib
    import tomllib
    from pathlib import Path

    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen as flower_generator

    from fedgca.flower import masks as flower_masks

    assert flower_masks.in_force() == masks.NAME
    for name in (flower_masks.CLIENT_MODULE, flower_masks.SERVER_MODULE):
        assert importlib.import_module(name).pseudo_rand_gen is masks.mask_arrays
    pin = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [d for d in pin if d.startswith("flwr")] == ["flwr==1.41.*"] and flower_masks.TESTED_FLOWER == ("1.41.",)
    monkeypatch.setattr(importlib.import_module(flower_masks.SERVER_MODULE), "pseudo_rand_gen", flower_generator)
    with pytest.raises(flower_masks.MaskGeneratorError, match="not fedgca's mask generator"):
        flower_masks.check()
    monkeypatch.setattr("flwr.__version__", "1.43.0")
    with pytest.raises(flower_masks.MaskGeneratorError, match="verified with flwr 1.41.x only"):
        flower_masks.check()


def test_a_secure_run_refuses_a_node_that_would_mask_otherwise(tmp_path, data_dir):
    """A node whose fedgca predates the generator (its registration announces none) or whose Flower cannot take it:
    the secure run stops at registration in one line, before any masked vector exists."""
    from flwr.app import ConfigRecord
    from flwr.clientapp import ClientApp

    from fedgca.flower import client_app as fedgca_client
    from fedgca.flower.config import to_run_config
    from fedgca.flower.inprocess import run_inprocess
    from fedgca.flower.masks import MaskGeneratorError
    from fedgca.flower.records import INFO
    from fedgca.flower.server_app import make_server_app

    app = ClientApp(mods=[fedgca_client.torch_threads])

    @app.query("info")
    def info(msg, context):
        reply = fedgca_client.info(msg, context)
        values = dict(reply.content[INFO])
        if int(context.node_config["partition-id"]) == 1:
            values.pop("secagg-masks")  # an older node
        reply.content[INFO] = ConfigRecord(values)
        return reply

    nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir)} for i in range(3)]
    with pytest.raises(MaskGeneratorError, match=r"^client 1 \(node \d+\) masks with 'Flower own 32-bit-seeded "
                                                 r"generator', not 'aes256-ctr.*refused$"):
        run_inprocess(make_server_app(to_run_config(_academic(), out_dir=str(tmp_path / "run"))), app, nodes)
    rounds = tmp_path / "run" / "rounds.jsonl"
    assert not rounds.exists() or rounds.read_text() == ""  # no round was played


# ---------------------------------------------------------------------------- the summed vector


def _layout():
    return (Part("model", 50, weighted=True), Part("stats", 7, weighted=True, exact=True),
            Part("row", 5, exact=True, scale=2.0 ** 20, flags=True), Part("codes", 1, exact=True, scale=2.0 ** 20))


def test_a_secure_sum_is_the_weighted_mean_exact_parts_to_float_precision_and_absent_clients_count_for_nothing():
    rng = np.random.default_rng(0)
    s = secagg.SecAggSettings()
    sizes = [100, 250, 40, 610]
    contribs, rngs = [], []
    for i, n in enumerate(sizes):
        row = rng.uniform(size=5) * [1, 1, 1, 50, 3]
        if i == 2:
            row[4] = np.nan  # no validation rows: not counted, and the mean says so
        contribs.append({"model": Contribution(rng.normal(scale=0.3, size=50), n / max(sizes)),
                         "stats": Contribution(rng.normal(size=7), n / max(sizes)),
                         "row": Contribution(row), "codes": Contribution(np.array([float(n)]))})
        rngs.append(lambda part, i=i: secagg.rounding_rng(1, 0, i, part))
    out = secagg.secure_sum(_layout(), contribs, rngs, s)
    q = np.array([round(n / max(sizes) * s.quantization_range) for n in sizes], dtype=np.float64)
    for name, tol in (("model", 4 * s.step), ("stats", 1e-14)):
        exact = sum(qi * c[name].values for qi, c in zip(q, contribs)) / q.sum()
        assert np.abs(out[name].mean - exact).max() < tol, name
        assert out[name].count == 4 and out[name].weight == pytest.approx(q.sum() / s.quantization_range)
    rows = np.array([c["row"].values for c in contribs])
    assert np.allclose(out["row"].mean[:4], rows[:, :4].mean(axis=0), rtol=0, atol=1e-10)
    assert np.isnan(out["row"].mean[4]) and out["row"].count == 4
    assert round(out["codes"].mean[0] * out["codes"].count) == sum(sizes)
    # the same sums whether an absent client's (all-zero) vector is in them or not, and it is not counted
    absent = secagg.encode(_layout(), {}, s, lambda part: np.random.default_rng(9))
    vectors = [secagg.encode(_layout(), c, s, r) for c, r in zip(contribs, rngs)]
    with_absent = secagg.decode(_layout(), secagg.sum_vectors([*vectors, absent]), 5, s)
    for name in out:
        np.testing.assert_array_equal(with_absent[name].mean, out[name].mean)
        assert with_absent[name].count == 4
    # a client with a non-finite model sends its model part as absent (not its finite parts)
    bad = dict(contribs[0], model=Contribution(np.full(50, np.nan), 1.0))
    one = secagg.decode(_layout(), secagg.encode(_layout(), bad, s, rngs[0]), 1, s)
    assert one["model"].count == 0 and one["stats"].count == 1


def _flower_unmask(levels: list[np.ndarray], s: secagg.SecAggSettings) -> np.ndarray:
    """What Flower's client mod and SecAggPlusWorkflow compute from these clients' level vectors: quantise (exactly,
    on the grid), weight element first, private masks from fedgca's generator, the sum modulo M, masks removed,
    dequantised and divided by the weight total (the workflow's unmask stage, line by line, with Flower's own
    functions); returns the float mean the strategy receives."""
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        factor_combine, factor_extract, parameters_addition, parameters_mod, parameters_subtraction)
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    total, private = None, []
    for i, lv in enumerate(levels):
        v = factor_combine(s.quantization_range, quantize([secagg.to_flower(lv, s)], s.clipping_range,
                                                          s.quantization_range))
        mask = masks.mask_arrays(i.to_bytes(32, "little"), s.modulus_range, [a.shape for a in v])
        private.append(mask)
        v = parameters_mod(parameters_addition(v, mask), s.modulus_range)
        total = v if total is None else parameters_addition(total, v)
    total = parameters_mod(total, s.modulus_range)
    for mask in private:
        total = parameters_subtraction(total, mask)
    q_total, rest = factor_extract(parameters_mod(total, s.modulus_range))
    out = dequantize(rest, s.clipping_range, s.quantization_range)[0]
    out += -(len(levels) - 1) * s.clipping_range
    return out * (s.quantization_range / q_total)


def test_the_overflow_rule_2000_clients():
    """2,000 clients: fedgca's modulus holds the sum and the workflow's float mean reads back the exact integer
    sum; under Flower's defaults (M = 2^32, T = 2^22) the same sum wraps, and fedgca refuses such settings."""
    s = secagg.SecAggSettings()
    rng = np.random.default_rng(3)
    layout = (Part("x", 3, exact=True, flags=True),)
    vals = rng.uniform(-7.9, 7.9, size=(2000, 3))
    levels = [secagg.encode(layout, {"x": Contribution(v)}, s, None) for v in vals]
    exact = secagg.sum_vectors(levels)
    assert exact.max() > 2 ** 32  # beyond Flower's default modulus
    np.testing.assert_array_equal(secagg.recover_sums(_flower_unmask(levels, s), 2000, s), exact)
    np.testing.assert_allclose(secagg.decode(layout, exact, 2000, s)["x"].mean, vals.mean(axis=0), atol=1e-12)
    flower_default = secagg.SecAggSettings(quantization_range=2 ** 22, modulus_range=2 ** 32)
    assert flower_default.capacity == 1023 and s.capacity == 2 ** 19
    wrapped = np.mod(sum(np.minimum(lv, 2 ** 22) for lv in levels), 2 ** 32)  # 2,000 values ≤ 2^22 modulo 2^32
    assert not np.array_equal(wrapped, sum(np.minimum(lv, 2 ** 22) for lv in levels))
    with pytest.raises(ValueError, match="secure aggregation over 2000 clients: a sum holds at most 1023"):
        secagg.check_capacity(2000, flower_default)
    secagg.check_capacity(2000, s)


# ---------------------------------------------------------------------------- what the server receives


class _Spying:
    """An in-process grid that keeps every message the ServerApp sends and every reply it receives."""

    sent: list = []
    received: list = []

    @classmethod
    def grid(cls):
        from fedgca.flower.inprocess import InProcessGrid

        class Grid(InProcessGrid):
            def push_messages(self, messages):
                messages = list(messages)
                cls.sent.extend(messages)
                return super().push_messages(messages)

            def pull_messages(self, message_ids):
                replies = super().pull_messages(message_ids)
                cls.received.extend(replies)
                return replies

        return Grid


def _spy_run(cfg, tmp_path, data_dir, client_app=None):
    from fedgca.flower import client_app as fedgca_client
    from fedgca.flower.config import to_run_config
    from fedgca.flower.inprocess import run_inprocess
    from fedgca.flower.server_app import make_server_app

    _Spying.sent, _Spying.received = [], []
    nodes = [{"partition-id": i, "num-partitions": cfg.clients, "data-dir": str(data_dir)} for i in range(cfg.clients)]
    run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(tmp_path))), client_app or fedgca_client.app, nodes,
                  grid_class=_Spying.grid())
    return json.loads((tmp_path / "summary.json").read_text())


PUBLIC_INFO = {"client-id", "source", "secagg-masks", "num-examples", "input-shape", "num-partitions",
               "schema-digest", "has-test-set", "ready"}
PROTOCOL = {Key.PUBLIC_KEY_1, Key.PUBLIC_KEY_2, Key.DESTINATION_LIST, Key.CIPHERTEXT_LIST, Key.MASKED_PARAMETERS,
            Key.NODE_ID_LIST, Key.SHARE_LIST}


@pytest.mark.parametrize("method", SECURE)
@pytest.mark.parametrize("selection", [None, "client-val-error"])
def test_the_server_receives_no_per_client_number(tmp_path, data_dir, method, selection):
    """Every reply a secure run's ServerApp receives, checked field by field: public registration values, SecAgg+'s
    keys, encrypted shares and masked vectors (spread over [0, 2^62): no unmasked level stays below 2^31), an
    emptied FitRes (weight 1, no metric), an empty deploy reply — and nothing else: no model, code, metric or
    selection value of any client. ``server_learns`` is exactly the kinds of sums the server read."""
    from fedgca.algorithms.secure_rounds import part_kind
    from fedgca.flower.secagg import EXCHANGE, LEGACY_CONFIG, SECAGG

    extra = {"val_fraction": 0.1, "selection": selection} if selection else {}
    summary = _spy_run(_academic(method=method, **extra), tmp_path, data_dir)
    types = {m.metadata.message_type for m in _Spying.received}
    assert types <= {"query.info", "train", "query.deploy"}, types  # no evaluate, candidate or plain step reply
    masked = 0
    for m in _Spying.received:
        assert not m.has_error()
        content = m.content
        assert all(len(rec) == 0 for rec in content.array_records.values())  # the mod empties the FitRes arrays
        for name, rec in content.metric_records.items():
            assert dict(rec) in ({}, {"num_examples": 1}), (m.metadata.message_type, name, dict(rec))
        for name, rec in content.config_records.items():
            if name == "info":
                assert set(rec) <= PUBLIC_INFO and rec["secagg-masks"] == masks.NAME
            elif name == SECAGG:
                assert set(rec) <= PROTOCOL, set(rec)
                if Key.MASKED_PARAMETERS in rec:
                    values = np.concatenate([bytes_to_ndarray(b).ravel() for b in rec[Key.MASKED_PARAMETERS]])
                    assert values.max() > 2 ** 58
                    masked += 1
            elif name == "fitres.metrics":
                assert len(rec) == 0  # a FitRes' metrics: none (the old reply forwarded every one unmasked)
            else:
                assert name == "fitres.status", name
    assert masked >= 3 * 2  # three clients, two rounds (and the last round's evaluation)
    seen = {"registration", "participation"}
    for m in _Spying.sent:
        if LEGACY_CONFIG in m.content.config_records:
            todo = json.loads(m.content.config_records[LEGACY_CONFIG][EXCHANGE])
            seen |= {part_kind(p["name"]) for p in todo["layout"]}
    assert set(summary["secure_aggregation"]["server_learns"]) == seen


def _first_exchange(received: list):
    """The masked vectors (node → int64 vector) and the unmask shares (owner → shares) of the first SecAgg+ exchange."""
    from fedgca.flower.secagg import SECAGG

    train = [m for m in received if m.metadata.message_type == "train" and SECAGG in m.content.config_records]
    stage = [m.content.config_records[SECAGG] for m in train]
    vectors = {}
    for rec, m in zip(stage, train):
        if Key.MASKED_PARAMETERS in rec and len(vectors) < 2:
            vectors[m.metadata.src_node_id] = [bytes_to_ndarray(b) for b in rec[Key.MASKED_PARAMETERS]]
    shares: dict = {}
    for rec in [r for r in stage if Key.SHARE_LIST in r][:2]:
        for owner, share in zip(rec[Key.NODE_ID_LIST], rec[Key.SHARE_LIST]):
            shares.setdefault(owner, []).append(share)
    return vectors, shares


def _scan_attack(vectors: dict, shares: dict, generator, seed_windows: list[range], s) -> dict:
    """The curious server: for each client, its private mask from the unmask shares, then the pairwise mask's first
    value (the masked weight element minus the private mask minus the public weight T), then a scan of 32-bit
    seeds of NumPy's Mersenne Twister for it; a hit gives the whole pairwise mask and the client's vector.
    Returns {node: its recovered vector}."""
    from flwr.common.secure_aggregation.crypto.shamir import combine_shares

    M, out = s.modulus_range, {}
    for nid, y in vectors.items():
        other = next(n for n in vectors if n != nid)
        dims = [a.shape for a in y]
        private = generator(combine_shares(shares[nid]), M, dims)
        sign = 1 if nid > other else -1  # Flower adds the pairwise mask on the larger node id, subtracts on the other
        first = int((y[0][0] - private[0][0] - s.quantization_range) % M) * sign % M
        for seed in (c for w in seed_windows for c in w):
            if np.random.RandomState(seed).randint(0, M - 1, (1,), dtype=np.int64)[0] == first:
                pair = np.random.RandomState(seed)
                pair = [pair.randint(0, M - 1, d, dtype=np.int64) for d in dims]
                out[nid] = np.mod(y[1] - private[1] - sign * pair[1], M)
                break
    return out


def test_a_curious_server_cannot_undo_the_masks(tmp_path, data_dir, monkeypatch):
    """The attack of issue #59 on a 2-client secure FedAvg round, played from what the server receives (public keys,
    masked vectors, unmask shares, the public weight). Under Flower 1.41's own generator the scan finds the pairwise
    seed and reads each client's whole vector; under fedgca's it finds nothing, on both ends. (The test scans 2^10
    seeds around each key's folded seed, which it learns by watching the key agreement; an attacker scans all 2^28
    seeds of base64 key text, ~10 CPU-hours.)"""
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen as flower_generator

    import fedgca.flower.client_app as client_app
    from fedgca.flower import masks as flower_masks

    mod = __import__(flower_masks.CLIENT_MODULE, fromlist=["_"])
    wf = __import__(flower_masks.SERVER_MODULE, fromlist=["_"])
    s = secagg.SecAggSettings()
    found = {}
    for name, generator in (("flower", flower_generator), ("fedgca", masks.mask_arrays)):
        keys, levels = [], []
        real_key, real_reply = mod.generate_shared_key, client_app.legacy_reply
        monkeypatch.setattr(mod, "generate_shared_key", lambda a, b: keys.append(real_key(a, b)) or keys[-1])
        monkeypatch.setattr(client_app, "legacy_reply", lambda msg, lv, st: levels.append(lv.copy()) or real_reply(msg, lv, st))
        if name == "flower":  # every place fedgca puts its generator in force puts Flower's back instead
            def flower_in_force():
                mod.pseudo_rand_gen = wf.pseudo_rand_gen = flower_generator
                return masks.NAME
            monkeypatch.setattr(flower_masks, "in_force", flower_in_force)
        _spy_run(_academic(clients=2, rounds=1), tmp_path / name, data_dir)
        monkeypatch.undo()
        vectors, shares = _first_exchange(_Spying.received)
        windows = [range(max(0, _fold32(k) - 2 ** 9), _fold32(k) + 2 ** 9) for k in dict.fromkeys(keys[:4])]
        recovered = _scan_attack(vectors, shares, generator, windows, s)
        assert all(any(np.array_equal(v, lv) for lv in levels[:2]) for v in recovered.values())  # each one's own
        found[name] = len(recovered)
    flower_masks.in_force()
    assert found == {"flower": 2, "fedgca": 0}


# ---------------------------------------------------------------------------- the same refusals in both drivers


def _diverging(monkeypatch, ids, at_round):
    """Clients ``ids`` compute a non-finite model in round ``at_round`` (both drivers run the same method code)."""
    import torch

    from fedgca.algorithms.secure import SecureParameterSharing

    real = SecureParameterSharing.client

    def client(self, step, r, work, received):
        replies = real(self, step, r, work, received)
        if r == at_round:
            for slot, rep in replies.items():
                if work.ids[slot] in ids:
                    rep.arrays = {k: torch.full_like(v, float("nan")) for k, v in rep.arrays.items()}
        return replies

    monkeypatch.setattr(SecureParameterSharing, "client", client)


def test_a_sum_of_one_contribution_is_refused_alike_in_both_drivers(tmp_path, data_dir, monkeypatch, caplog):
    """3 clients, 2 of which diverge in round 2: the sum holds one contribution, so both drivers refuse it in one
    warning line, keep the global model, and write the same metrics.csv byte for byte."""
    from fedgca.flower.simulation import simulate
    from fedgca.simulation.runner import run

    _diverging(monkeypatch, {1, 2}, at_round=1)
    cfg = _academic(rounds=3)
    with caplog.at_level(logging.WARNING, logger="fedgca"):
        run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
        simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=60)
    refusals = [r for r in caplog.records if "secure aggregation refused: 1 contribution" in r.getMessage()]
    assert len(refusals) == 2  # one line per driver
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()
    rows = list(csv.DictReader((tmp_path / "sim" / "metrics.csv").open()))
    assert rows[0]["auroc"] == rows[1]["auroc"]  # round 2's sum refused: the global model stays round 1's
    comm = json.loads((tmp_path / "sim" / "comm.json").read_text())
    assert [c["uploads"] for c in comm] == [3, 1, 3]


@pytest.mark.parametrize("method", ["secagg-fedavg", "secagg-gca"])
def test_partial_participation_is_the_same_in_both_drivers(tmp_path, data_dir, method):
    """4 clients, 2 a round: the others only evaluate in the exchange (the server's model, where it is shared)."""
    from fedgca.flower.simulation import simulate
    from fedgca.simulation.runner import run

    cfg = _academic(method=method, clients=4, participation=0.5, rounds=2)
    simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=60)
    run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()


def test_two_clients_warn_and_a_round_of_one_is_refused(tmp_path, data_dir, caplog):
    from fedgca.simulation.runner import run

    with caplog.at_level(logging.WARNING, logger="fedgca"):
        s = run(_academic(clients=2, rounds=1), tmp_path / "two", data_dir=data_dir, progress=False)
    assert "each client learns the other's model" in caplog.text and "learns the other" in s["k_note"]
    with pytest.raises(ValueError, match="every round needs 2 or more"):
        run(_academic(clients=3, participation=0.5, rounds=1), tmp_path / "half", data_dir=data_dir, progress=False)
    with pytest.raises(ValueError, match="evaluates one client alone"):
        _academic(method="secagg-gca", eval_align_epochs=True, eval_align_clients="client0").resolved().validate()


def _faulty_app(crash_clients):
    """fedgca's ClientApp whose listed clients crash inside SecAgg+'s collect stage (after sharing their keys)."""
    from flwr.clientapp import ClientApp

    from fedgca.flower import client_app as fedgca_client
    from fedgca.flower.secagg import LEGACY_CONFIG, secure_aggregation

    app = ClientApp(mods=[fedgca_client.torch_threads, secure_aggregation])
    app.query("info")(fedgca_client.info)
    app.query("deploy")(fedgca_client.deploy)

    @app.train()
    def train(msg, context):
        if LEGACY_CONFIG in msg.content.config_records and int(context.node_config["partition-id"]) in crash_clients:
            raise RuntimeError("fault injection: crash in the secure exchange")
        return fedgca_client.train(msg, context)

    return app


@pytest.mark.parametrize("lost", [[2], [1, 2]], ids=["one-lost-above-threshold", "two-lost-below-threshold"])
def test_a_client_lost_in_the_secure_round(tmp_path, data_dir, caplog, lost):
    """3 clients, threshold 2: one lost after sharing its keys → the others' sums, its masks recovered; two lost
    → every sum fails in one warning line, the global model is kept, no metric row is written (with one client
    alive there is nothing the server may learn), and the run goes on to its end."""
    from fedgca.flower.config import to_run_config
    from fedgca.flower.inprocess import run_inprocess
    from fedgca.flower.server_app import make_server_app

    cfg = _academic(rounds=2)
    nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir)} for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="fedgca"):
        run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(tmp_path), reply_timeout=30.0)),
                      _faulty_app(set(lost)), nodes)
    rounds = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    kept = [i for i in range(3) if i not in lost]
    if len(kept) >= 2:
        assert len(rounds) == 2 and all(r["took_part"] == kept for r in rounds)
        assert len(rows) == 2 and all(0 <= float(r["auroc"]) <= 1 for r in rows)
        assert all(r["evaluated"] == kept for r in rounds)
    else:
        assert all(r["took_part"] == [] for r in rounds) and rows == []
        assert "secure aggregation did not complete" in caplog.text
    assert all(str(i) in rounds[0]["dropped"] for i in lost)


def test_a_client_lost_before_sharing_its_keys_leaves_the_sum_to_the_others(tmp_path, data_dir, caplog):
    """Client 2 fails SecAgg+'s setup stage in round 2 (a node that died between rounds, still sampled): it never
    received a key or a share, so it leaves that exchange and the others' sum completes. Flower 1.41's workflow alone
    would list it as dropped in the unmask stage and ask the survivors for shares none holds, failing the sum
    (``secagg_server._Workflow``)."""
    from flwr.clientapp import ClientApp
    from flwr.common.secure_aggregation.secaggplus_constants import Stage

    from fedgca.flower import client_app as fedgca_client
    from fedgca.flower.config import to_run_config
    from fedgca.flower.inprocess import run_inprocess
    from fedgca.flower.secagg import SECAGG, secure_aggregation
    from fedgca.flower.server_app import make_server_app

    def crash_at_setup(msg, context, call_next):
        rec = msg.content.config_records.get(SECAGG) if SECAGG in msg.content.config_records else None
        if (rec is not None and rec.get(Key.STAGE) == Stage.SETUP and msg.metadata.group_id == "2"
                and int(context.node_config["partition-id"]) == 2):
            raise RuntimeError("fault injection: the node is gone")
        return call_next(msg, context)

    app = ClientApp(mods=[crash_at_setup, fedgca_client.torch_threads, secure_aggregation])
    app.query("info")(fedgca_client.info)
    app.query("deploy")(fedgca_client.deploy)
    app.train()(fedgca_client.train)
    nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir)} for i in range(3)]
    run_inprocess(make_server_app(to_run_config(_academic(rounds=3), out_dir=str(tmp_path), reply_timeout=30.0)), app,
                  nodes)
    rounds = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [r["took_part"] for r in rounds] == [[0, 1, 2], [0, 1], [0, 1, 2]]
    assert "2" in rounds[1]["dropped"] and len(list(csv.DictReader((tmp_path / "metrics.csv").open()))) == 3


def test_secure_methods_are_the_sum_rules():
    """FedNova needs each client's τ_i and DP-FedAvg clips each update at the server: neither is a sum."""
    from fedgca import methods

    secure = [n for n in methods.names(family="parameter-sharing") if methods.get(n).secure]
    assert secure == ["secagg-fedavg", "secagg-fedprox", "secagg-fedavgm", "secagg-fedadam", "secagg-fedyogi",
                      "secagg-fedadagrad"]  # FedAvg's mean, and the server optimizers that read only the mean
    assert all(any(s.summed for s in method_class(n).steps) for n in methods.names() if methods.get(n).secure)
    assert all(methods.get(n).server_rule == "fedavg" for n in secure)
    assert all(methods.get(n).attack == "white-box" for n in secure)  # on the mean: all the server holds


def test_secure_fedavg_equals_fedavg_up_to_quantisation(tmp_path, data_dir):
    from fedgca.simulation.runner import run

    secure = run(_academic(), tmp_path / "secure", data_dir=data_dir, progress=False)
    plain = run(_academic(method="fedavg"), tmp_path / "plain", data_dir=data_dir, progress=False)
    for p in ("final", "peak"):
        assert secure[p]["auroc"] == pytest.approx(plain[p]["auroc"], abs=1e-6)
    # what crossed the network, per round: the model down (and once the final model, for the last evaluation);
    # up, one masked int64 vector a client: Flower's weight, the model part (count, weight, 46,758 values: academic's
    # 22 inputs) and the round's evaluation row (count, 5 figures on two elements each, 5 finite flags)
    assert secure["bytes_up_per_round"] == 3 * 8 * (1 + 2 + 46_758) + 3 * 8 * (1 + 10 + 5)
    assert secure["bytes_down_per_round"] == plain["bytes_down_per_round"] + 3 * 4 * 46_758 / 2


def test_secure_gca_clusters_on_sums_and_learns_as_gca(tmp_path, data_dir):
    """The server's mixture comes from summed statistics alone: its EM matches an EM on the pooled codes (the
    same moments and E-steps computed centrally), no code is uploaded, and the detectors learn about as GCA's."""
    from fedgca.protocol import mixture_sums
    from fedgca.simulation.runner import run

    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=c, scale=0.5, size=(n, 4)) for c, n in ((-2.0, 300), (2.0, 200), (0.0, 250))]
    pooled = np.concatenate(parts)
    layout = (Part("m1", 4, weighted=True, exact=True), Part("m2", 4, weighted=True, exact=True))
    summed = secagg.secure_sum(layout, [{k: Contribution(v, len(p) / 300) for k, v in mixture_sums.moments(p, 32.0).items()}
                                        for p in parts], [None] * 3, secagg.SecAggSettings())
    exact = mixture_sums.moments(pooled, 32.0)
    assert np.allclose(summed["m1"].mean, exact["m1"], atol=1e-9) and np.allclose(summed["m2"].mean, exact["m2"], atol=1e-9)
    mix = mixture_sums.initial_mixture(exact["m1"], exact["m2"], 32.0, 3, np.random.default_rng(1))
    for _ in range(30):
        st = mixture_sums.statistics(pooled, mix)
        mix = mixture_sums.m_step(st["s0"], st["s1"], st["s2"], mix)
    assert sorted(np.round(mix.means[:, 0]).tolist()) == [-2.0, 0.0, 2.0]  # the three clusters found
    assert sorted(np.round(mix.weights * len(pooled)).tolist()) == [200, 250, 300]

    cfg = RunConfig(dataset="magic", method="secagg-gca", clients=3, rounds=3, recon_epochs=1, align_epochs=1, seed=100)
    secure = run(cfg, tmp_path / "secure", data_dir=data_dir, progress=False)
    plain = run(RunConfig(**{**cfg.to_dict(), "method": "gca"}), tmp_path / "gca", data_dir=data_dir, progress=False)
    assert secure["uploads_per_round"] == 0 and plain["uploads_per_round"] > 0
    assert secure["peak"]["auroc"] > plain["peak"]["auroc"] - 0.02
    comm = json.loads((tmp_path / "secure" / "comm.json").read_text())
    assert all(c["broadcast_k"] >= 1 for c in comm)


def test_a_killed_secure_gca_run_resumes_to_the_same_metrics(tmp_path, data_dir, kill_after_round):
    """The server's mixture is in the checkpoint (as tensors: torch.load(weights_only=True) refuses NumPy)."""
    from fedgca.simulation import runner

    cfg = RunConfig(dataset="academic", method="secagg-gca", clients=3, rounds=3, recon_epochs=1, align_epochs=1,
                    seed=100)
    runner.run(cfg, tmp_path / "whole", data_dir=data_dir, progress=False)
    kill_after_round(lambda: runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False), 1)
    runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False, resume=True)
    assert (tmp_path / "resumed" / "metrics.csv").read_bytes() == (tmp_path / "whole" / "metrics.csv").read_bytes()


@pytest.mark.parametrize("method,selection", [("secagg-fedavg", "client-val-error"),  # the server chooses
                                              ("secagg-gca", "client-val-error"),  # each client: a histogram
                                              ("secagg-gca", "ensemble-rounds")])
def test_secure_selection_is_the_same_in_both_drivers(tmp_path, data_dir, method, selection):
    """--selection under a secure method: the shared model's choice from summed values, each client's own choice
    counted in a histogram, the deployed detectors' summed metrics — the same summary and metrics.csv from both
    drivers, and the detectors each node writes equal the simulator's."""
    from fedgca.flower.simulation import simulate
    from fedgca.simulation.runner import run

    cfg = _academic(method=method, val_fraction=0.1, selection=selection, rounds=3)
    fl = simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=60)
    sim = run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()
    assert fl["selected"] == sim["selected"] and fl["selection"] == sim["selection"]
    assert "per_client" not in fl["selected"] and "values" not in fl["selection"]
    for i in range(3):
        for f in ("model.pt", "detector.json"):
            a = tmp_path / "flower" / "clients" / f"client_{i:03d}" / f
            assert a.read_bytes() == (tmp_path / "sim" / "clients" / f"client_{i:03d}" / f).read_bytes(), (i, f)
