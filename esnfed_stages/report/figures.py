"""The report's figures as PNG bytes (matplotlib, Agg canvas, no pyplot global state):
stream accuracy per context per strategy and share, test accuracy against the share of training
users, the continual accuracy matrices as heatmaps, and grids of activation densities (the papers'
Fig. 3 and 5: per test user, per context, after each context), mean ± std over retrains.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Fixed colours per strategy / context so every figure reads the same way.
STRATEGY_STYLE = {"naive": ("tab:red", "o"), "replay": ("tab:blue", "s"),
                  "joint": ("tab:green", "^")}
_CONTEXT_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _figure(**kwargs) -> Figure:
    # Imported here: matplotlib costs ~0.3 s, and every `esnfed` command imports this module.
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    # No software/date metadata: the same data give the same bytes. The title (the figure's
    # suptitle) goes into the PNG too: viewers show it, and the report's index reads it back.
    meta = {"Software": None}
    if fig.get_suptitle():
        meta["Title"] = fig.get_suptitle()
    fig.savefig(buf, format="png", dpi=110, metadata=meta)
    return buf.getvalue()


def suptitle(fig: Figure, title: str) -> None:
    """The figure's title, wrapped at the figure's width: a long title over a narrow figure (the
    shares figure's three panels) ran off both edges of the PNG. The PNG's Title text and the
    report's index keep it on one line (fig.get_suptitle())."""
    fig.suptitle(title, wrap=True)


def png_title(png: bytes) -> str | None:
    """The ``Title`` text chunk of a PNG written by :func:`_png` (tEXt, or iTXt for non-Latin-1
    text, uncompressed), None without one."""
    pos = 8  # after the signature
    while pos + 8 <= len(png):
        length = int.from_bytes(png[pos:pos + 4], "big")
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        pos += 12 + length
        key, _, rest = data.partition(b"\0")
        if key != b"Title":
            continue
        if kind == b"tEXt":
            return rest.decode("latin-1")
        if kind == b"iTXt" and rest[:1] == b"\0":  # compression flag 0, method, language, translated key
            return rest[2:].split(b"\0", 2)[2].decode("utf-8")
    return None


def _band_line(ax, x, mean, std, colour: str, label: str, **style) -> Any:
    """A line at ``mean`` with a ± ``std`` band of its colour (no band where std is None); its handle."""
    handle, = ax.plot(x, mean, color=colour, label=label, **style)
    if std is not None:
        ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.15, linewidth=0)
    return handle


def _na_line(ax, colour: str, label: str, **style) -> Any:
    """An empty line whose legend entry says ``label`` has no results; its handle."""
    handle, = ax.plot([], [], color=colour, label=f"{label} (n/a)", **style)
    return handle


def _legend(fig: Figure, axes) -> None:
    """One legend outside the panels (styles are shared by every panel, so take the fullest, and of
    those the one with the fewest "(n/a)" entries: a line missing from one panel only is no n/a of
    the figure)."""
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes),
                          key=lambda hl: (len(hl[1]), -sum("(n/a)" in label for label in hl[1])))
    if labels:
        fig.legend(handles, labels, loc="outside right center", fontsize="small")


def stream_accuracy(title: str, panels: Sequence[tuple[str, Mapping[str, np.ndarray | None]]],
                    context_labels: Sequence[str] | None = None) -> bytes:
    """One panel per share; a line per strategy: mean ± population std over retrains (percent).

    ``panels``: [(share, {strategy: array (retrains, contexts) of fractions, or None})]; context
    t is at x = t (0-based, as PROTOCOL §6 numbers them), its tick ``context_labels[t]`` when
    given (else t).
    """
    fig = _figure(figsize=(3.2 * len(panels) + 0.6, 3.4), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (pct, lines) in zip(axes, panels):
        n_ctx = 0
        for strategy, acc in lines.items():
            colour, marker = STRATEGY_STYLE.get(strategy, ("black", "x"))
            if acc is None:
                _na_line(ax, colour, strategy, marker=marker)
                continue
            acc = np.asarray(acc, dtype=np.float64) * 100.0
            n_ctx = max(n_ctx, acc.shape[1])
            _band_line(ax, np.arange(acc.shape[1]), acc.mean(axis=0), acc.std(axis=0), colour, strategy,
                       marker=marker)
        ax.set_title(f"{pct}% training users")
        ax.set_xlabel("after context")
        if n_ctx:
            ax.set_xticks(np.arange(n_ctx))
            if context_labels is not None and len(context_labels) >= n_ctx:
                ax.set_xticklabels(list(context_labels)[:n_ctx], rotation=30, ha="right")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("stream accuracy (%)")
    _legend(fig, axes)
    suptitle(fig, title)
    return _png(fig)


# A method of the shares figure, by its label: (colour, marker, line style, marker size); random,
# the chance level, dashed. IncFed and FedIP as the privacy figure draws them. A baseline (IncFed,
# ridge) has a larger marker than its IP method drawn over it: the two are often within a point,
# and the baseline's marker still shows as a ring around the other's.
SHARE_STYLE = {"random": ("tab:gray", "x", "--", 6.0), "FedAvg": ("tab:green", "^", "-", 6.0),
               "IncFed": ("tab:blue", "o", "-", 9.0), "FedIP": ("tab:orange", "s", "-", 5.0),
               "ridge": ("tab:purple", "o", "-", 9.0), "IP": ("tab:red", "s", "-", 5.0)}
# A panel of the shares figure: (title, {method label: [(share in %, test accuracies over the
# retrains as fractions, or None)], or None: not assessed}).
SharePanel = tuple[str, Mapping[str, "Sequence[tuple[int, Sequence[float] | None]] | None"]]


def accuracy_by_share(title: str, panels: Sequence[SharePanel]) -> bytes:
    """One panel per setting; a line per method: test accuracy against the share of training
    users, mean ± population std over retrains (percent). A method without scores reads "(n/a)"
    in the legend, a share without scores is left out of its line. The panels show different
    methods, so the one legend holds every method of any panel."""
    fig = _figure(figsize=(3.6 * len(panels) + 1.6, 3.4), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    legend: dict[str, Any] = {}
    for ax, (name, lines) in zip(axes, panels):
        shares: set[int] = set()
        for label, points in lines.items():
            colour, marker, style, size = SHARE_STYLE.get(label, ("black", "x", "-", 6.0))
            kw = {"marker": marker, "linestyle": style, "markersize": size}
            pts = [(x, np.asarray(v, dtype=np.float64) * 100.0) for x, v in points or () if v is not None and len(v)]
            if not pts:
                handle = _na_line(ax, colour, label, **kw)
            else:
                handle = _band_line(ax, np.array([p for p, _ in pts], dtype=np.float64),
                                    np.array([v.mean() for _, v in pts]), np.array([v.std() for _, v in pts]),
                                    colour, label, **kw)
            shares |= {p for p, _ in points or ()}
            legend.setdefault(handle.get_label(), handle)
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("share of training users")
        if shares:
            ax.set_xticks(sorted(shares), [f"{p}%" for p in sorted(shares)])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    if legend:
        fig.legend(list(legend.values()), list(legend), loc="outside right center", fontsize="small")
    suptitle(fig, title)
    return _png(fig)


def accuracy_matrices(title: str, panels: Sequence[Sequence[tuple[str, "np.ndarray | None"]]],
                      context_labels: Sequence[str]) -> bytes:
    """A grid of accuracy-matrix heatmaps, ``panels`` a row of (title, matrix) each: entry [i, j] is
    the accuracy (fractions; drawn in percent and written in each cell) of the model after context
    i on the test data of context j. One colour scale, 0–100 %, for every panel; a cell None reads
    "n/a", as a missing entry (a context without test data, NaN) does."""
    n_rows, n_cols = len(panels), max((len(row) for row in panels), default=1)
    k = max(len(context_labels), 1)
    side = 0.55 * k + 1.5  # a panel's size in inches: room for the values and the context names
    fig = _figure(figsize=(side * n_cols + 1.4, side * n_rows + 0.9), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    image = None
    ticks = np.arange(len(context_labels))
    for r in range(n_rows):
        for c in range(n_cols):
            ax = axes[r][c]
            if c >= len(panels[r]):
                ax.set_visible(False)
                continue
            name, matrix = panels[r][c]
            ax.set_title(name, fontsize="medium")
            if matrix is None or not len(context_labels):
                ax.text(0.5, 0.5, "n/a", ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            values = np.asarray(matrix, dtype=np.float64) * 100.0
            image = ax.imshow(values, vmin=0.0, vmax=100.0, cmap="viridis")
            for (i, j), v in np.ndenumerate(values):
                ax.text(j, i, "n/a" if np.isnan(v) else f"{v:.1f}", ha="center", va="center",
                        fontsize="small", color="black" if np.isnan(v) or v >= 60.0 else "white")
            labels = list(context_labels)[:len(values)]
            ax.set_xticks(ticks[:len(labels)], labels, rotation=30, ha="right")
            ax.set_yticks(ticks[:len(labels)], labels)
            below = panels[r + 1][c][1] if r + 1 < n_rows and c < len(panels[r + 1]) else None
            if below is None:  # the lowest drawn panel of its column (the one below reads "n/a")
                ax.set_xlabel("test data of context")
            if c == 0:
                ax.set_ylabel("after context")
    if image is not None:
        fig.colorbar(image, ax=[ax for row in axes for ax in row], label="accuracy (%)", shrink=0.8)
    suptitle(fig, title)
    return _png(fig)


# A line of a density panel: (label, mean density (bins,), std over retrains (bins,) or None).
DensityLine = tuple[str, Sequence[float], Sequence[float] | None]
# An IP target drawn in a density panel: (μ, σ) of N(μ, σ²), and the index of the panel's line
# whose colour it takes (the shares figure: each share's own σ), None: black, the panel's one target.
Target = tuple[float, float, "int | None"]
TARGET_LABEL = "IP target N(μ, σ²), σ selected (dashed)"
LINE_TARGET_LABEL = "IP target N(μ, σ²) of each line, its σ (dashed, its colour)"


def _targets(ax, lo: float, hi: float, targets: Sequence[Target]) -> None:
    """The Gaussian density of each target, dashed, over the panel's value range, and the σ of
    the panel's targets written in its top left corner; one legend entry (TARGET_LABEL, or
    LINE_TARGET_LABEL where the targets take their lines' colours)."""
    from scipy.stats import norm  # noqa: PLC0415 (lazy, as matplotlib)

    x = np.linspace(lo, hi, 401)
    for k, (mu, sigma, line) in enumerate(targets):
        colour = "black" if line is None else _CONTEXT_COLOURS[line % len(_CONTEXT_COLOURS)]
        label = "_target" if k else TARGET_LABEL if line is None else LINE_TARGET_LABEL
        ax.plot(x, norm.pdf(x, mu, sigma), color=colour, linestyle="--", linewidth=1.0, label=label)
    sigmas = ", ".join(dict.fromkeys(f"{sigma:g}" for _, sigma, _ in targets))
    ax.text(0.02, 0.97, f"target σ {sigmas}", transform=ax.transAxes, ha="left", va="top", fontsize="x-small")


def density_grid(title: str, edges: Sequence[float] | None, row_labels: Sequence[str],
                 col_labels: Sequence[str],
                 cells: Sequence[Sequence[Sequence[DensityLine] | None]],
                 targets: Sequence[Sequence[Sequence[Target]]] | None = None,
                 ) -> bytes:
    """A grid of density panels (rows × columns); each panel a line per entry of its cell: the
    mean density over retrains with a ± population-std band. A cell None reads "n/a". ``targets``
    (rows × columns, as ``cells``): the IP targets N(μ, σ²) the panel's reservoirs were trained
    toward, each drawn as its Gaussian density, dashed (none where a cell's list is empty).

    Lines take the colours of _CONTEXT_COLOURS in order, so line i has the same colour in every
    panel. Every panel has the same density scale: the grids are read across rows and columns
    (a share against another, a strategy against another), which a scale per panel misleads.
    """
    n_rows, n_cols = len(row_labels), len(col_labels)
    fig = _figure(figsize=(2.9 * n_cols + 1.2, 2.4 * n_rows + 0.8), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, sharex=True, sharey=True, squeeze=False)
    centres = None
    if edges is not None:
        e = np.asarray(edges, dtype=np.float64)
        centres = (e[:-1] + e[1:]) / 2
    for r in range(n_rows):
        for c in range(n_cols):
            ax = axes[r][c]
            ax.grid(alpha=0.3)
            if r == 0:
                ax.set_title(col_labels[c], fontsize="medium")
            if c == 0:
                ax.set_ylabel(f"{row_labels[r]}\ndensity" if row_labels[r] else "density")
            if r == n_rows - 1:
                ax.set_xlabel("state value")
            lines = cells[r][c]
            if lines is None or centres is None:
                ax.text(0.5, 0.5, "n/a", ha="center", va="center", transform=ax.transAxes)
                continue
            for i, (label, mean, std) in enumerate(lines):
                colour = _CONTEXT_COLOURS[i % len(_CONTEXT_COLOURS)]
                _band_line(ax, centres, np.asarray(mean, dtype=np.float64),
                           None if std is None else np.asarray(std, dtype=np.float64), colour, label,
                           linewidth=1.2)
            if targets is not None and targets[r][c]:
                _targets(ax, float(e[0]), float(e[-1]), targets[r][c])
    _legend(fig, [ax for row in axes for ax in row])
    suptitle(fig, title)
    return _png(fig)


# A panel of the α figure: (title, [(α, align scores (retrains,) in percent, or None)],
# {band name: scores (retrains,) in percent, or None}).
AlphaPanel = tuple[str, Sequence[tuple[float, "np.ndarray | None"]], Mapping[str, "np.ndarray | None"]]
_BAND_COLOURS = {"ensemble": "tab:green", "local": "tab:grey", "incfed": "tab:blue"}
# The papers' methods in the papers' spelling, as the privacy figure and the titles write them.
_BAND_LABELS = {"incfed": "IncFed"}


def alpha_bands(title: str, panels: Sequence[AlphaPanel], cols: int | None = None) -> bytes:
    """One panel per (dataset, share): align's test accuracy against α (mean ± population std over
    retrains) and each band method as a horizontal line at its mean with a ± std band.
    ``cols`` panels a row (the shares: a row per dataset), at most 4 by default."""
    n = max(len(panels), 1)
    cols = min(n, cols or 4)
    rows = (n + cols - 1) // cols
    fig = _figure(figsize=(3.3 * cols + 1.4, 2.9 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False).ravel()
    for ax, (name, line, bands) in zip(axes, panels):
        for method, values in bands.items():
            colour, label = _BAND_COLOURS.get(method, "black"), _BAND_LABELS.get(method, method)
            if values is None:
                _na_line(ax, colour, label)
                continue
            mean, std = float(np.mean(values)), float(np.std(values))
            ax.axhline(mean, color=colour, linestyle="--", linewidth=1.2, label=label)
            ax.axhspan(mean - std, mean + std, color=colour, alpha=0.12, linewidth=0)
        pts = [(a, np.asarray(v)) for a, v in line if v is not None]
        if pts:
            x = np.array([a for a, _ in pts])
            mean = np.array([v.mean() for _, v in pts])
            std = np.array([v.std() for _, v in pts])
            ax.errorbar(x, mean, yerr=std, color="tab:red", marker="o", capsize=3, label="align-α")
        else:
            _na_line(ax, "tab:red", "align-α", marker="o")
        if not pts and all(v is None for v in bands.values()):
            ax.text(0.5, 0.5, "n/a", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(name, fontsize="medium")
        ax.grid(alpha=0.3)
    for i, ax in enumerate(axes[:len(panels)]):
        if i + cols >= len(panels):  # no panel below: its α axis is the column's (sharex)
            ax.set_xlabel("α (alignment toward the target)")
            ax.tick_params(labelbottom=True)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:max(len(panels), 1):cols]:  # the first panel of each row
        ax.set_ylabel("test accuracy (%)")
    _legend(fig, axes[: len(panels)] if panels else axes)
    suptitle(fig, title)
    return _png(fig)
