"""A report table and its renderings: Markdown, CSV, LaTeX, and the tidy cells file."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from fedgca.reporting import tables
from fedgca.tabletext import csv_text, markdown


@dataclass
class Table:
    id: str
    title: str
    protocol: str  # "peak" | "final" | "selected" | "attack" | "comm"
    head: list[str]
    rows: list[list]  # cells: str, or (mean, std, n)
    label_cols: int = 1
    scale: float = 100.0
    digits: int = 2
    notes: list[str] = field(default_factory=list)

    def seed_counts(self) -> set[int]:
        return {c[2] for r in self.rows for c in r if isinstance(c, tuple) and c[2] > 0}

    def grid(self) -> list[list[str]]:
        n_max = max(self.seed_counts() or {0})
        out = []
        for row in self.rows:
            cells = []
            for c in row:
                if isinstance(c, tuple):
                    s = tables.fmt(c, scale=self.scale, digits=self.digits)
                    if 1 < c[2] < n_max:  # one seed already says "(1 seed)"
                        s += f" (n={c[2]})"
                    cells.append(s)
                else:
                    cells.append("—" if c is None else str(c))
            out.append(cells)
        return out

    def caption(self) -> str:
        ns = sorted(self.seed_counts())
        seeds = ""
        if ns:
            seeds = (f" Mean ± sample std over {ns[0]} seed{'s' if ns[0] != 1 else ''} per cell." if len(ns) == 1
                     else f" Mean ± sample std over seeds ({'/'.join(map(str, ns))} per cell; fewer than "
                          f"{ns[-1]} marked n=).")
        return self.title + "." + seeds + "".join(" " + n for n in self.notes)


def md_table(t: Table) -> str:
    return markdown(t.head, t.grid())


def csv_table(t: Table) -> str:
    return csv_text(t.head, t.grid())


_TEX_MAP = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "±": r"$\pm$", "Δ": r"$\Delta$",
            "ρ": r"$\rho$", "α": r"$\alpha$", "μ": r"$\mu$", "σ": r"$\sigma$", "∈": r"$\in$", "Σ": r"$\Sigma$",
            "⌊": r"$\lfloor$", "⌋": r"$\rfloor$", "·": r"$\cdot$", "−": "--", "—": "---", "≤": r"$\le$",
            "×": r"$\times$", "→": r"$\to$", "≥": r"$\ge$", "ε": r"$\varepsilon$", "§": r"\S{}",
            "γ": r"$\gamma$", "φ": r"$\varphi$", "β": r"$\beta$", "’": "'", "“": "``", "”": "''"}
_TEX_TOKEN = re.compile(r"K\*|\d\^\d+|[" + re.escape("".join(_TEX_MAP)) + "]")


def _tex_token(m: re.Match) -> str:
    t = m.group(0)
    if t == "K*":
        return r"$K^*$"
    if "^" in t and len(t) > 1:
        base, exp = t.split("^")
        return f"${base}^{{{exp}}}$"
    return _TEX_MAP[t]


def tex_escape(s) -> str:
    """Plain text (with ±, Δ, K*, 2^20 ...) as LaTeX."""
    return _TEX_TOKEN.sub(_tex_token, str(s))


def tex_table(t: Table) -> str:
    cols = "l" * t.label_cols + "r" * (len(t.head) - t.label_cols)
    lines = [r"\begin{table}[ht]", r"\centering", r"\small", r"\caption{" + tex_escape(t.caption()) + "}",
             r"\label{tab:" + t.id.replace("_", "-") + "}", r"\begin{adjustbox}{max width=\linewidth}",
             r"\begin{tabular}{" + cols + "}", r"\toprule", " & ".join(tex_escape(h) for h in t.head) + r" \\",
             r"\midrule"]
    lines += [" & ".join(tex_escape(c) for c in row) + r" \\" for row in t.grid()]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{adjustbox}", r"\end{table}", ""]
    return "\n".join(lines)


def tidy_cells(ts: list[Table]) -> str:
    """Every number of every table, one per line."""
    body = []
    for t in ts:
        for row in t.rows:
            label = " / ".join(str(c) for c in row[: t.label_cols])
            for h, c in zip(t.head[t.label_cols:], row[t.label_cols:]):
                if isinstance(c, tuple):
                    body.append([t.id, t.protocol, label, h, c[0], c[1], c[2]])
    return csv_text(["table", "protocol", "row", "column", "mean", "std", "n"], body)
