"""The bench report's plot: aggregate tokens/s against concurrency, one line per instance, drawn by matplotlib
(Agg backend, no display needed) into PNG bytes."""

from __future__ import annotations

import io

#: Line colours in instance order (matplotlib's default tab10 cycle); the Markdown report names them too.
COLOURS = (("blue", "tab:blue"), ("orange", "tab:orange"), ("green", "tab:green"), ("red", "tab:red"),
           ("purple", "tab:purple"), ("brown", "tab:brown"), ("pink", "tab:pink"), ("grey", "tab:gray"))


def tps_chart(series: list[tuple[str, list[tuple[int, float]]]], width: int = 640, height: int = 400) -> bytes:
    """PNG (width x height pixels) of aggregate tokens/s (y, from 0) against concurrency (x, the levels measured),
    one line per (name, [(concurrency, tokens/s), ...]) in COLOURS order, with axis names and a legend."""
    import matplotlib  # imported here: only a report with a plot pays its start-up

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    ax = fig.add_subplot()
    for n, (name, pts) in enumerate(series):
        xs, ys = zip(*sorted(pts))
        ax.plot(xs, ys, marker="o", color=COLOURS[n % len(COLOURS)][1], label=name)
    ax.set_xticks(sorted({x for _, pts in series for x, _ in pts}))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("aggregate tokens/s")
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=dpi)
    return out.getvalue()
