"""The short form of `make soak` (tests/e2e/soak.py): a few thousand requests, streamed and
not, over two healthy targets and one that goes through every flap phase once, with a config
reload half-way. What must be zero is zero: requests without an answer, Wasm VM restarts and
crashes; and with a healthy target always there, no client sees an error."""

import soak

# One turn of the flap schedule at 0.4 s a unit: about 6 s of load (the whole test < 20 s).
TOTAL = 2000
PHASE_S = 0.4


def test_short_soak_loses_nothing_and_keeps_its_vms(figure):
    f = soak.run(TOTAL, cycles=1, phase_s=PHASE_S, max_seconds=40)
    for name in ("sent", "seconds", "client_errors", "no_answer", "vm_restarts", "attempts", "flaky_received"):
        figure(name, f[name])
    print(f)

    # It ran as planned: every flap phase, the reload taken half-way, faults met.
    assert f["sent"] >= TOTAL and f["flap_phases"] >= len(soak.FLAP), f
    assert f["reload_applied"] is True and f["ecds_updates"] == (1, 0), f
    assert f["resolved_after_reload"], "no request after the reload"
    faulty = sum(n for phase, n in f["flaky_received"].items() if phase != "healthy")
    assert faulty > 0 and sum(n for a, n in f["attempts"].items() if a > 1) > 0, f

    assert f["no_answer"] == 0, f["no_answer_kinds"]
    assert f["vm_restarts"] == 0 and f["vm_crash_log_lines"] == 0, f
    assert f["vms_active"][0] == f["vms_active"][1], f
    assert f["client_errors"] == 0, f["client_error_kinds"]
