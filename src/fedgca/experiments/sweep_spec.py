"""A sweep's grid: the TOML sweep file (``[base]``, ``[grid]`` / ``[[grid]]``, own data's keys) and the canonical
config that names each run (``fedgca.experiments.sweep`` runs them; ``compare`` and ``bench`` build grids too)."""
from __future__ import annotations

import dataclasses
import itertools
import tomllib
from pathlib import Path

from fedgca.config import EXECUTION_ONLY, RunConfig
from fedgca.protocol.fedprox import effective_coefficient

# Which options each method reads (``MethodSpec.options``). Anything else is
# reset to its default by ``canonical``, so that runs differing only in options
# a method ignores share one key (e.g. a baseline in a grid over K).


def canonical(cfg: RunConfig) -> RunConfig:
    """The resolved config with every option its method does not read reset to its default.

    (``alpha`` only matters for the Dirichlet partition and is reset under IID.)
    """
    cfg = cfg.resolved()
    defaults = RunConfig(dataset=cfg.dataset, method=cfg.method)
    keep = set(cfg.spec.options) | set(EXECUTION_ONLY)  # where it computes, what it keeps: every method
    if cfg.partition != "dirichlet":
        keep.discard("alpha")
    if cfg.partition != "natural":
        keep.discard("small_sites")
    if cfg.data_digest is not None:  # own data: its binding stays; K, which it has no preset for, a fixed value
        from fedgca.data.defaults import DEFAULT_K

        keep |= {"data_digest", "clients", "rho", "partition", "small_sites"}
        defaults = dataclasses.replace(defaults, k=DEFAULT_K)
    values = {f.name: getattr(cfg if f.name in keep else defaults, f.name) for f in dataclasses.fields(RunConfig)}
    if cfg.spec.client_term == "proximal" and cfg.fedprox_coef == effective_coefficient(cfg.fedprox_mu, cfg.batch_size):
        values["fedprox_coef"] = None  # the derived default, not an override
    return RunConfig(**values).resolved()


@dataclasses.dataclass
class SweepSpec:
    configs: list[RunConfig]  # canonical, deduplicated, in grid order
    out: str | None = None
    data_dir: str | None = None
    name: str = ""
    source: object = None  # own data's fedgca.data.DataSource (the file's `data`), else None

    @property
    def sources(self) -> dict | None:
        """Own data's source by name (``run_sweep``'s ``sources``), or None: built-in datasets in ``data_dir``."""
        from fedgca.data.source import by_name

        return by_name(self.source)


def load_spec(path) -> SweepSpec:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None
    return parse_spec(doc, name=path.stem)


OWN_DATA_KEYS = ("data", "schema", "test_file", "test_split", "data_name")


def parse_spec(doc: dict, name: str = "sweep") -> SweepSpec:
    """A sweep file's runs. Own data: top-level ``data`` (a file or per-site directory), ``schema``,
    optionally ``test_file``, ``test_split`` and ``data_name``; grids then need no ``dataset``, and C,
    K and ρ left unset come from the data (fedgca.binding.bind). Paths are relative to the working
    directory, as ``out`` and ``data_dir`` are."""
    unknown = set(doc) - {"base", "grid", "out", "data_dir", "name", "description", *OWN_DATA_KEYS}
    if unknown:
        raise ValueError(f"sweep file: unknown top-level keys {', '.join(sorted(unknown))} "
                         f"(expected [base], [grid] or [[grid]], out, data_dir, {', '.join(OWN_DATA_KEYS)})")
    source = None
    if doc.get("data"):
        from fedgca.data.source import open_source

        source = open_source(doc["data"], doc.get("schema"), test_file=doc.get("test_file"),
                             test_split=doc.get("test_split"), name=doc.get("data_name"))
    elif any(doc.get(k) for k in OWN_DATA_KEYS):
        raise ValueError("sweep file: schema/test_file/test_split/data_name describe own data: add `data`")
    base = dict(doc.get("base", {}))
    grids = doc.get("grid")
    if grids is None:
        raise ValueError("sweep file: no [grid] table")
    if isinstance(grids, dict):
        grids = [grids]
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    configs, seen, loaded = [], set(), {}
    for i, grid in enumerate(grids):
        bad = (set(grid) | set(base)) - fields
        if bad:
            raise ValueError(f"sweep file: grid {i + 1}: unknown RunConfig fields {', '.join(sorted(bad))}")
        axes = {**{k: [v] for k, v in base.items()}, **{k: v if isinstance(v, list) else [v] for k, v in grid.items()}}
        if source is not None:
            if "dataset" in axes:
                raise ValueError(f"sweep file: grid {i + 1} names a dataset, and the file gives own data (`data`)")
            axes["dataset"] = [source.label]
        if "dataset" not in axes:
            raise ValueError(f"sweep file: grid {i + 1} names no dataset")
        names = list(axes)
        for combo in itertools.product(*(axes[n] for n in names)):
            values = dict(zip(names, combo))
            for opt in ("k", "clients", "rho"):  # "preset" means the dataset's preset value
                if values.get(opt) == "preset":
                    values[opt] = None
            cfg = canonical(_bind(values, source, loaded) if source is not None else RunConfig(**values))
            key = cfg.key()
            if key not in seen:
                seen.add(key)
                configs.append(cfg)
    return SweepSpec(configs, doc.get("out"), doc.get("data_dir"), doc.get("name", name), source)


def _bind(values: dict, source, loaded: dict) -> RunConfig:
    """Own data's config for these options (the data read once per seed and --dp-stats-sigma: its test split and
    encoding depend on them)."""
    from fedgca import privacy
    from fedgca.binding import bind
    from fedgca.data.defaults import sites_below

    given = RunConfig(**{**values, "dataset": source.label})
    key = (given.seed, privacy.stats_noise(given), sites_below(given))  # what the dataset read depends on
    cfg, loaded[key] = bind({k: v for k, v in values.items() if k != "dataset"}, source, dataset=loaded.get(key))
    return cfg
