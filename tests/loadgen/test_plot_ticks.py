"""The load axis of a sweep's plots: every load measured gets a tick, and no two tick labels
print over each other, even where a sweep bisected toward its knee (192, 224, 256)."""

from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from loadgen.outputs.plots import _figure, _log2_axis, _rotated

SWEEPS = {
    "doubling": [1, 2, 4, 8, 16, 32, 64],
    "bisected knee": [1, 2, 4, 8, 16, 32, 64, 128, 192, 224, 256],
    "bisected, few": [4, 8, 12, 14, 16],
    "rates": [0.5, 1, 2, 3, 3.5, 4, 8],
}


def _labels(xs: list[float]) -> tuple[int, list[tuple[str, object]]]:
    fig, (ax,) = _figure(1, 4.2, twin=True, rotated=_rotated(xs))
    ax.plot(xs, [float(x) for x in xs], "o-")
    _log2_axis(ax, xs)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ticks = ax.xaxis.get_major_ticks()
    shown = [
        (t.label1.get_text(), t.label1.get_window_extent(renderer))
        for t in ticks
        if t.label1.get_visible() and t.label1.get_text()
    ]
    return len(ax.get_xticks()), shown


@pytest.mark.parametrize("name", list(SWEEPS))
def test_every_load_has_a_tick_and_no_labels_overlap(name: str) -> None:
    xs = SWEEPS[name]
    ticks, shown = _labels(xs)
    assert ticks == len(xs)
    texts = [t for t, _ in shown]
    # The ends always read, and the powers of two where they fit.
    assert texts[0] == f"{xs[0]:g}" and texts[-1] == f"{xs[-1]:g}"
    for (ta, a), (tb, b) in zip(shown, shown[1:]):
        assert not a.overlaps(b), f"{ta} and {tb} print over each other"


def test_a_doubling_sweep_labels_every_load() -> None:
    _, shown = _labels(SWEEPS["doubling"])
    assert [t for t, _ in shown] == ["1", "2", "4", "8", "16", "32", "64"]


def test_a_bisected_knee_keeps_the_powers_of_two_and_drops_the_crowded_labels() -> None:
    _, shown = _labels(SWEEPS["bisected knee"])
    texts = [t for t, _ in shown]
    assert {"1", "2", "4", "8", "16", "32", "64", "128", "256"} <= set(texts)
    assert len(texts) < len(SWEEPS["bisected knee"])
