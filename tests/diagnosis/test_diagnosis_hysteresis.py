"""Diagnoser: causes enter after enter_windows, clear after clear_windows, and do not flap."""

from __future__ import annotations

from diag_windows import gpu, make_window

from monitor.diagnosis import Caps, Diagnoser, Thresholds, diagnose

MID_GPU = gpu(0.6, 0.45, 0.3, 0.3)
CAPS = Caps(max_num_seqs=64)


def seq_cap_window(k: int):
    return make_window(gpus=[MID_GPU], engine=dict(running=64, waiting=8), wall0=1000.0 + 10 * k)


def starved_window(k: int):
    return make_window(
        gpus=[gpu(1.0, 0.89, 0.05, 0.82)],
        engine=dict(running=10, rps=1.0, e2e_s=10.0, queue_s=0.0),
        wall0=1000.0 + 10 * k,
    )


def test_the_first_window_names_a_cause_at_reduced_confidence() -> None:
    w = seq_cap_window(0)
    raw = diagnose(w, caps=CAPS).verdicts[0]
    first = Diagnoser(caps=CAPS).update(w).verdicts[0]
    assert first.cause == "seq-cap"
    assert first.confidence == round(raw.confidence * Thresholds().pending_confidence_factor, 3)
    assert first.since == w.wall_end


def test_a_cause_enters_after_enter_windows_and_keeps_its_start_time() -> None:
    d = Diagnoser(Thresholds(enter_windows=3), CAPS)
    windows = [seq_cap_window(k) for k in range(3)]
    out = [d.update(w).verdicts[0] for w in windows]
    raw = diagnose(windows[0], caps=CAPS).verdicts[0].confidence
    assert [v.confidence < raw for v in out] == [True, True, False]
    assert {v.since for v in out} == {windows[0].wall_end}


def test_a_stable_cause_survives_one_contrary_window_and_clears_after_clear_windows() -> None:
    d = Diagnoser(Thresholds(enter_windows=2, clear_windows=2), CAPS)
    for k in range(3):
        d.update(seq_cap_window(k))
    one = d.update(starved_window(3))
    assert one.verdicts[0].cause == "seq-cap"
    assert "held" in one.verdicts[0].summary
    assert [v.cause for v in one.verdicts][:2] == ["seq-cap", "starved"]
    two = d.update(starved_window(4))
    assert two.verdicts[0].cause == "starved"
    assert "seq-cap" not in {v.cause for v in two.verdicts}
    # Starved held two windows: it is stable, at full confidence, since its first window.
    assert two.verdicts[0].since == starved_window(3).wall_end
    assert (
        two.verdicts[0].confidence == diagnose(starved_window(4), caps=CAPS).verdicts[0].confidence
    )


def test_no_flapping_when_a_reading_straddles_a_threshold() -> None:
    # Waiting alternates either side of waiting_min: seq-cap one window, starved-ish the next.
    d = Diagnoser(Thresholds(enter_windows=2, clear_windows=2), Caps(max_num_seqs=4))

    def window(k: int):
        waiting = 0.6 if k % 2 == 0 else 0.4
        return make_window(
            gpus=[MID_GPU], engine=dict(running=4, waiting=waiting), wall0=1000.0 + k
        )

    d.update(window(0))
    d.update(window(0))  # seq-cap stable
    tops = [d.update(window(k)).verdicts[0].cause for k in range(1, 12)]
    assert set(tops) == {"seq-cap"}
    raw_tops = {diagnose(window(k), caps=Caps(max_num_seqs=4)).verdicts[0].cause for k in range(2)}
    assert len(raw_tops) == 2  # the raw diagnosis does flip: the hysteresis is what holds it


def test_a_pending_cause_that_lapses_starts_over() -> None:
    d = Diagnoser(Thresholds(enter_windows=2, clear_windows=2), CAPS)
    d.update(seq_cap_window(0))
    d.update(seq_cap_window(1))
    d.update(starved_window(2))  # starved pending
    d.update(seq_cap_window(3))  # starved lapses
    back = d.update(starved_window(4))
    starved = next(v for v in back.verdicts if v.cause == "starved")
    assert starved.since == starved_window(4).wall_end
    assert back.verdicts[0].cause == "seq-cap"


def test_pending_verdicts_keep_the_primary_order() -> None:
    # Without GPU data, cpu-bound is weak and starved strong: scaling both for being pending
    # must not let the weak one lead.
    w = make_window(engine=dict(running=1, rps=0.1, e2e_s=10.0, queue_s=0.0), host=dict(thread=1.0))
    first = Diagnoser(caps=Caps(max_num_seqs=4)).update(w)
    assert [v.cause for v in first.verdicts][:2] == ["starved", "cpu-bound"]
