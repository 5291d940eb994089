"""Client partitions of the training normals (SPEC §4, "Partitions").

Both partitions return a list of C disjoint int64 index arrays covering
``range(N)``; every method uses the same realised partition for a given
dataset and seed. Randomness comes from :mod:`fedgca.seeding` (one purpose per
draw), so a partition depends on nothing but ``(seed, data)``.
"""
from __future__ import annotations

import math

import numpy as np

from .. import seeding
from ..devices import to_numpy


def iid_partition(n: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """SPEC §4 IID: shuffle ``range(n)`` with the seed, split into C near-equal shards.

    Shard sizes differ by at most one (the first ``n % C`` shards get the extra
    row). Indices inside a shard keep the shuffled order.
    """
    if num_clients < 1 or n < num_clients:
        raise ValueError(f"iid_partition: need 1 <= num_clients <= n, got n={n}, num_clients={num_clients}")
    perm = seeding.rng(seed, "partition-iid").permutation(n)
    return [s.astype(np.int64) for s in np.array_split(perm, num_clients)]


# --------------------------------------------------------------------------- non-IID helpers


def feature_descriptors(features: np.ndarray, pool: int = 8, chunk: int = 4096) -> np.ndarray:
    """Per-row descriptors for grouping: flattened tabular rows, or images pooled to pool×pool.

    Images ``(N, C, H, W)`` (or ``(N, H, W)``) are adaptively average-pooled
    to ``pool × pool`` per channel (SPEC §4: "pixels adaptively pooled to
    8×8") in chunks, so 50k CIFAR images never need a second full copy.
    """
    x = np.asarray(features)
    if x.ndim <= 2:
        return x.reshape(len(x), -1).astype(np.float32, copy=False)
    import torch
    import torch.nn.functional as F

    if x.ndim == 3:
        x = x[:, None]
    out = []
    for start in range(0, len(x), chunk):
        t = torch.as_tensor(np.ascontiguousarray(x[start : start + chunk], dtype=np.float32))
        out.append(to_numpy(F.adaptive_avg_pool2d(t, (pool, pool)).reshape(len(t), -1)))
    return np.concatenate(out).astype(np.float32, copy=False)


def cluster_groups(descriptors: np.ndarray, n_groups: int, seed: int) -> np.ndarray:
    """Group labels from MiniBatchKMeans with SPEC §4's settings (10 inits, ≤200 iter, batch min(2048, N))."""
    from sklearn.cluster import MiniBatchKMeans

    n = len(descriptors)
    km = MiniBatchKMeans(
        n_clusters=min(n_groups, n),
        n_init=10,
        max_iter=200,
        batch_size=min(2048, n),
        random_state=seeding.int_seed(seed, "partition-kmeans"),
    )
    return km.fit(descriptors).predict(descriptors).astype(np.int64)


def largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to ``weights`` that sum exactly to ``total`` (Hamilton's method)."""
    w = np.asarray(weights, dtype=np.float64)
    exact = total * w / w.sum()
    base = np.floor(exact).astype(np.int64)
    rest = total - int(base.sum())
    if rest > 0:
        # Stable sort: ties go to the lower index, so the result is deterministic.
        order = np.argsort(-(exact - base), kind="stable")
        base[order[:rest]] += 1
    return base


def _geometric_shape(num_clients: int, ratio: float) -> np.ndarray:
    """Sizes ratio**(c/(C-1)), c = 0..C-1: a long tail from 1 up to ``ratio``."""
    if num_clients == 1:
        return np.ones(1)
    return ratio ** (np.arange(num_clients) / (num_clients - 1))


def long_tail_quotas(n: int, num_clients: int, max_min_ratio: float, min_size: int) -> np.ndarray:
    """Client sample counts (sorted ascending) with max/min ≈ ``max_min_ratio`` and min ≥ ``min_size``.

    Geometric sizes between 1 and the ratio, scaled to sum to ``n`` (largest
    remainder rounding). When ``n`` is too small for the target ratio at
    ``min_size`` (e.g. academic: 788 rows over 10 clients), the ratio is
    lowered by bisection to the largest one that keeps the smallest client at
    ``min_size`` — the minimum batch guarantee wins over the tail shape.
    """
    if n < num_clients * min_size:
        raise ValueError(
            f"dirichlet_partition: {n} rows cannot give {num_clients} clients at least {min_size} rows each"
        )

    def smallest(ratio: float) -> float:
        shape = _geometric_shape(num_clients, ratio)
        return n * shape[0] / shape.sum()

    ratio = float(max_min_ratio)
    if smallest(ratio) < min_size:
        lo, hi = 1.0, ratio  # smallest(1) = n / C >= min_size
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if smallest(mid) >= min_size else (lo, mid)
        ratio = lo
    q = largest_remainder(n, _geometric_shape(num_clients, ratio))
    # Rounding can leave the smallest a row short of min_size: take it from the largest.
    while q.min() < min_size:
        q[np.argmin(q)] += 1
        q[np.argmax(q)] -= 1
    return np.sort(q)


def allocate_groups(
    group_sizes: np.ndarray, preferences: np.ndarray, quotas: np.ndarray, order: np.ndarray
) -> np.ndarray:
    """Counts[g, c] of group g's rows given to client c: preferences subject to the quotas.

    Groups are served in ``order``. Each group's rows are split over the
    clients that still have room, in proportion to its preference vector
    (largest remainder rounding); whatever exceeds a client's remaining quota
    is re-split over the clients still open, until the group is placed. If a
    group prefers none of the open clients (all weight on full ones), the rest
    goes in proportion to the remaining room. Column sums equal ``quotas``
    exactly because sum(group_sizes) == sum(quotas).
    """
    n_groups, n_clients = preferences.shape
    room = quotas.astype(np.int64).copy()
    counts = np.zeros((n_groups, n_clients), dtype=np.int64)
    for g in order:
        left = int(group_sizes[g])
        while left > 0:
            open_ = room > 0
            w = np.where(open_, preferences[g], 0.0)
            if not (w.sum() > 0):
                w = room.astype(np.float64)
            take = np.minimum(largest_remainder(left, w), room)
            counts[g] += take
            room -= take
            left -= int(take.sum())
    return counts


def dirichlet_partition(
    features: np.ndarray,
    num_clients: int,
    seed: int,
    *,
    alpha: float = 0.1,
    max_min_ratio: float = 10.0,
    min_size: int = 50,
    n_groups: int | None = None,
) -> list[np.ndarray]:
    """SPEC §4 non-IID partition: feature groups × Dirichlet preferences × long-tail quotas.

    Algorithm (deterministic given ``seed``):

    1. Descriptors: tabular rows flattened (the standardised features);
       images adaptively average-pooled to 8×8 per channel, then flattened.
    2. Groups: ``n_groups`` (default min(20, C)) clusters from MiniBatchKMeans
       (n_init=10, max_iter=200, batch_size=min(2048, N)).
    3. Quotas: geometric client sizes from 1 to ``max_min_ratio`` scaled to
       sum to N (ratio lowered only if N is too small for every client to get
       ``min_size`` rows, i.e. one batch), then shuffled across clients so
       client id carries no size information.
    4. Preferences: one Dirichlet(alpha·1_C) vector per group.
    5. Allocation: groups in a random order; each group's rows are spread over
       clients in proportion to its preferences, capped by each client's
       remaining quota, overflow re-spread over the clients still open (see
       :func:`allocate_groups`). Which rows of a group go to which client is a
       random shuffle of the group.

    Returns C disjoint, sorted int64 index arrays covering ``range(N)``, with
    sizes exactly the quotas (so max/min ≈ ``max_min_ratio`` and every client ≥
    ``min_size``).
    """
    desc = feature_descriptors(features)
    n = len(desc)
    if num_clients < 1:
        raise ValueError(f"dirichlet_partition: num_clients must be >= 1, got {num_clients}")
    groups = cluster_groups(desc, n_groups or min(20, num_clients), seed)
    n_g = int(groups.max()) + 1
    group_sizes = np.bincount(groups, minlength=n_g)

    gen = seeding.rng(seed, "partition-noniid")
    quotas = gen.permutation(long_tail_quotas(n, num_clients, max_min_ratio, min_size))
    preferences = gen.dirichlet(np.full(num_clients, float(alpha)), size=n_g)
    counts = allocate_groups(group_sizes, preferences, quotas, order=gen.permutation(n_g))

    shards: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for g in range(n_g):
        rows = gen.permutation(np.flatnonzero(groups == g))
        bounds = np.concatenate([[0], np.cumsum(counts[g])])
        for c in range(num_clients):
            shards[c].append(rows[bounds[c] : bounds[c + 1]])
    return [np.sort(np.concatenate(s)).astype(np.int64) for s in shards]


SMALL_SITES = ("error", "drop", "merge")


def natural_partition(sites: np.ndarray, site_names: list[str], min_size: int, small_sites: str = "error") \
        -> tuple[list[np.ndarray], list[str]]:
    """One client per site (Flower Datasets' NaturalIdPartitioner): (row indices per client, client names).

    ``sites``: each training row's site code (into ``site_names``); rows keep file order. A site
    with fewer than ``min_size`` rows (one batch) cannot train: ``small_sites`` says what to do —
    "error" (one line naming them), "drop" them, or "merge" them into one client (named
    "a+b+..."; an error if even that is smaller than a batch).
    """
    if small_sites not in SMALL_SITES:
        raise ValueError(f"--small-sites must be one of {', '.join(SMALL_SITES)}, got {small_sites!r}")
    sites = np.asarray(sites)
    order = np.argsort(sites, kind="stable")
    bounds = np.searchsorted(sites[order], np.arange(len(site_names) + 1))
    rows = [np.sort(order[bounds[j]:bounds[j + 1]]).astype(np.int64) for j in range(len(site_names))]
    small = [j for j, r in enumerate(rows) if len(r) < min_size]
    if small and small_sites == "error":
        shown = ", ".join(f"{site_names[j]!r} ({len(rows[j])})" for j in small[:6])
        more = f" and {len(small) - 6} more" if len(small) > 6 else ""
        raise ValueError(f"natural partition: site(s) {shown}{more} have fewer training normals than one batch "
                         f"(B = {min_size}); pass --small-sites drop or --small-sites merge, or lower --batch-size")
    keep = [j for j in range(len(site_names)) if j not in small]
    parts, names = [rows[j] for j in keep], [site_names[j] for j in keep]
    if small and small_sites == "merge":
        merged = np.sort(np.concatenate([rows[j] for j in small]))
        name = "+".join(site_names[j] for j in small)
        if len(merged) < min_size:
            raise ValueError(f"natural partition: the small sites merged ({name}) still hold {len(merged)} training "
                             f"normals, fewer than one batch (B = {min_size}); pass --small-sites drop")
        parts.append(merged)
        names.append(name)
    if not parts:
        raise ValueError(f"natural partition: no site has one batch (B = {min_size}) of training normals")
    return parts, names


def check_per_site(partition: str, small_sites: str, pooled: bool) -> None:
    """The per-site test split's federation — client i is site i, evaluated on its own site's rows: what the
    simulator and a Flower simulation over site files both require."""
    if pooled:
        raise ValueError("the per-site test split evaluates each site's own model on its own rows; "
                         "Centralized trains one model on pooled rows: use another --test-split")
    if partition != "natural" or small_sites == "merge":
        raise ValueError("the per-site test split evaluates each site's client on its own rows: it needs "
                         "--partition natural (small sites can be dropped, not merged: --small-sites drop)")


NO_SITES = ("--partition natural needs a site column (the schema's \"site\") or a directory of per-site files; "
            "this dataset has neither")


def partition_rows(cfg, train: np.ndarray, sites: np.ndarray | None = None,
                   site_names: list[str] | None = None, *, natural=None) -> list[np.ndarray]:
    """The realised partition of a run config (``partition``, ``clients``, ``seed``, ``alpha``, ``batch_size``,
    ``small_sites``).

    Every method, the simulator and a Flower node use this same one for a dataset and seed. ``natural``: the
    natural partition already computed (``FederatedDataset.natural``); :func:`partition_of` passes it.
    """
    if cfg.partition == "iid":
        return iid_partition(len(train), cfg.clients, cfg.seed)
    if cfg.partition == "natural":
        if natural is None and sites is None:
            raise ValueError(NO_SITES)
        parts, names = natural or natural_partition(sites, site_names, cfg.batch_size, cfg.small_sites)
        if len(parts) != cfg.clients:
            raise ValueError(f"--partition natural gives {len(parts)} clients (one per site: "
                             f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}) but --clients is {cfg.clients}")
        return parts
    return dirichlet_partition(train, cfg.clients, cfg.seed, alpha=cfg.alpha, min_size=cfg.batch_size)


def partition_of(cfg, dataset) -> list[np.ndarray]:
    """:func:`partition_rows` of a loaded dataset (its natural partition computed once, carried by the dataset)."""
    natural = dataset.natural(cfg.batch_size, cfg.small_sites) if cfg.partition == "natural" else None
    return partition_rows(cfg, dataset.train, dataset.sites, dataset.site_names, natural=natural)


def client_splits(cfg, dataset) -> tuple[list, list]:
    """Each client's training rows and validation rows: the run's partition, then each part's validation share —
    the one rule the simulator, a Flower node, the bench's peers and the FLOP count split clients by."""
    return split_validation(partition_of(cfg, dataset), cfg.val_fraction, cfg.seed)


def split_validation(parts: list[np.ndarray], fraction: float, seed: int) -> tuple[list, list]:
    """Hold out ⌊fraction·N_i⌋ rows of each shard before training (and before any upload)."""
    train, val = [], []
    for i, rows in enumerate(parts):
        n_val = int(math.floor(fraction * len(rows)))
        perm = seeding.rng(seed, "validation", i).permutation(len(rows))
        val.append(np.sort(rows[perm[:n_val]]))
        train.append(np.sort(rows[perm[n_val:]]))
    return train, val
