"""How right the diagnosis is across the lab sweep (fixtures/sweep): not a test, a scorecard.

Every sweep scenario holds its sender's and receiver's captures and its truth: the labels its
configuration makes certain (`labels`, must be found; `absent_labels`, must not be), those the
physics leaves open (`unsure_labels`, not scored), the drop counters and the sender kernel's own
account of its time (TCP_INFO busy, rwnd-limited and sndbuf-limited, `kernel_limits`). This
script analyses each pair as `tracekit analyze --receiver` does and prints:

1. per label, the confusion matrix over the scenarios it is scored on (true and false
   positives and negatives) and the share right;
2. per scenario, the verdict's class against the class the kernel gives most time, and the
   largest difference between the three shares (application, receive window, network, which
   holds a send buffer's stalls as the kernel's busy time does) and the kernel's;
3. the evidence errors: the slow-start buffer estimate against the configured bottleneck
   buffer (a ratio), and the drop counts against the counters.

    python bench/accuracy.py [--sweep DIR ...] [--jobs 2] [--only PATTERN] [--json OUT]

No root needed: the captures are stored. `python -m fixtures.lab sweep` remakes them (root).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "fixtures" / "sweep"
# The kernel's classes the verdict is scored on (tcp_chrono). A send buffer's stall is busy
# time in the lab's runs (tcpi_sndbuf_limited stays 0 for a blocking writer), so it joins the
# network's share on both sides.
CLASSES = ("application", "receive_window", "network")

Findings = list[dict[str, Any]]


def _of(findings: Findings, kind: str) -> Findings:
    return [f for f in findings if f["kind"] == kind and f.get("direction") in ("a2b", None)]


def _verdict(findings: Findings) -> dict[str, Any] | None:
    found = _of(findings, "rate_limit_cause")
    return max(found, key=lambda f: f["end_s"] - f["start_s"]) if found else None


def _cause(findings: Findings, cause: str) -> bool:
    v = _verdict(findings)
    return v is not None and v["evidence"]["cause"] == cause


def _share(findings: Findings, name: str) -> float:
    v = _verdict(findings)
    return float(v["evidence"].get(name, 0.0)) if v is not None else 0.0


# What each label asks of the findings of the scenario's transfer (direction a2b).
DETECTS: dict[str, Callable[[Findings, dict[str, Any]], bool]] = {
    "slow_start_overrun": lambda f, d: bool(_of(f, "slow_start_overrun")),
    "first_round_overrun": lambda f, d: any(
        x["evidence"].get("round") == 0 for x in _of(f, "slow_start_overrun")
    ),
    "network_drops": lambda f, d: bool(_of(f, "network_drop")),
    "receiver_drops": lambda f, d: bool(_of(f, "receiver_drop")),
    "window_oscillation": lambda f, d: bool(_of(f, "window_oscillation")),
    "window_limited": lambda f, d: bool(_of(f, "window_limited")),
    "line_rate_bursts": lambda f, d: bool(_of(f, "line_rate_burst")),
    "paced": lambda f, d: _share(f, "paced_departures_fraction") >= 0.5,
    "zero_window_stall": lambda f, d: bool(_of(f, "zero_window_stall")),
    "zero_window": lambda f, d: (
        bool(_of(f, "zero_window_stall"))
        or any(x["evidence"].get("zero_window_count", 0) > 0 for x in _of(f, "window_oscillation"))
    ),
    "window_scale_unknown": lambda f, d: any(
        c.get("ws_state") == "unknown" for c in d["connections"][:1]
    ),
    "snaplen_truncated": lambda f, d: bool(_of(f, "snaplen_truncated")),
    "super_segments": lambda f, d: any(bool(c.get("tso")) for c in d["connections"][:1]),
    "sndbuf_limited": lambda f, d: _cause(f, "sender_buffer"),
    # A step of the path's base RTT while the transfer sent (with both captures, the merge's:
    # both directions' minimal delays moved together, a path change and not clock skew).
    "delay_step": lambda f, d: bool(_of(f, "path_change")),
    "reverse_ack_drops": lambda f, d: bool(_of(f, "ack_loss")),
    "cross_traffic": lambda f, d: bool(_of(f, "competing_traffic")),
    "stretch_acks": lambda f, d: bool(_of(f, "stretch_acks")),
    # Holes in the sender capture's sequence, placed at the sending host by its handshake.
    "sender_host_drops": lambda f, d: any(
        x["evidence"].get("capture_point") == "sender" for x in _of(f, "capture_holes")
    ),
}


# Where tracekit says it cannot tell a label, the label is not scored and the scenario is
# listed: for `paced`, the verdict's text says whose clock the departures kept could not be
# told for at least half the busy time (a LAN host's turnaround hides any pacer's timer).
UNTOLD: dict[str, Callable[[Findings], bool]] = {
    "paced": lambda f: _share(f, "paced_untold_fraction") >= 0.5,
}


def kernel_shares(truth: dict[str, Any]) -> dict[str, float] | None:
    """The sender kernel's account as shares of the transfer (tcp_chrono)."""
    limits = truth.get("kernel_limits")
    if not limits or not limits.get("busy_share_of_transfer"):
        return None
    busy = limits["busy_time_us"] / 1e6
    elapsed = busy / limits["busy_share_of_transfer"]
    rwnd = limits["rwnd_limited_us"] / 1e6
    return {
        "application": max(elapsed - busy, 0.0) / elapsed,
        "receive_window": rwnd / elapsed,
        "network": max(busy - rwnd, 0.0) / elapsed,
    }


def score_one(folder: Path) -> dict[str, Any]:
    """Analyse one scenario's pair and score it against its truth."""
    from tracekit.capture import read_capture
    from tracekit.errors import TracekitError
    from tracekit.pipeline import analyze

    truth = json.loads((folder / "truth.json").read_text())
    row: dict[str, Any] = {"scenario": folder.name}
    sender = next(folder.glob("sender.pcap*"))
    receivers = list(folder.glob("receiver.pcap*"))
    try:
        analysis = analyze(read_capture(sender), read_capture(receivers[0]) if receivers else None)
    except TracekitError as exc:
        row["error"] = str(exc)
        return row
    doc = analysis.to_dict()
    findings: Findings = doc["findings"]
    # The scenario's transfer is the busiest connection; score its findings only, those of its
    # data direction (b2a when the capture starts mid-connection with the receiver's ACK, so
    # that the receiver is side a) taken as a2b. The truth names the transfer's sender; where
    # data went both ways, the other direction may carry more bytes (its resends).
    busiest = max(doc["connections"], key=lambda c: c["bytes_a2b"] + c["bytes_b2a"])
    sender_end = (truth.get("flow") or {}).get("sender")
    if sender_end in (busiest["a"], busiest["b"]):
        data_dir = "a2b" if busiest["a"] == sender_end else "b2a"
    else:
        data_dir = "a2b" if busiest["bytes_a2b"] >= busiest["bytes_b2a"] else "b2a"
    findings = [
        {**f, "direction": "a2b" if f.get("direction") == data_dir else f.get("direction")}
        if f.get("direction") in (data_dir, None)
        else {**f, "direction": "other"}
        for f in findings
        if f["conn"] == busiest["conn"]
    ]
    doc["connections"] = [busiest]
    labels = {
        "expected": set(truth.get("labels", [])),
        "absent": set(truth.get("absent_labels", [])),
    }
    row["labels"] = {}
    for label, detect in DETECTS.items():
        if label in UNTOLD and UNTOLD[label](findings):
            row.setdefault("untold", []).append(label)
            continue
        if label in labels["expected"] or label in labels["absent"]:
            row["labels"][label] = {
                "expected": label in labels["expected"],
                "found": bool(detect(findings, doc)),
            }
    kernel = kernel_shares(truth)
    verdict = _verdict(findings)
    if verdict is not None:
        row["sender_end"] = verdict["evidence"].get("capture_end")
    limits = truth.get("kernel_limits") or {}
    if kernel is None and limits.get("bytes_sent") and verdict is not None:
        # Bytes went out, yet the busy clock counted no jiffy: every busy stretch began and
        # ended within one tick (a writer waking on its own timer, in step with the
        # tickless kernel's jiffies). The account holds no share to score against.
        row["no_kernel_account"] = (
            f"busy clock {limits.get('busy_time_us', 0)} us over {limits['bytes_sent']:,} bytes"
        )
    if kernel is not None and verdict is not None and "limit_class" in verdict["evidence"]:
        ours = {c: verdict["evidence"][f"{c}_fraction"] for c in CLASSES}
        row["verdict"] = {
            "ours": ours,
            "kernel": kernel,
            "class": verdict["evidence"]["limit_class"],
            "kernel_class": max(kernel, key=lambda c: kernel[c]),
            "cause": verdict["evidence"]["cause"],
            "max_error": max(abs(ours[c] - kernel[c]) for c in CLASSES),
            "window_scale_known": verdict["evidence"]["window_scale_known"],
            # Without the handshake: the receive window's share from zero windows alone, and
            # the most it can have been at the least shift the flight allows.
            "rwnd_range": (
                ours["receive_window"],
                verdict["evidence"].get("receive_window_fraction_most", ours["receive_window"]),
            ),
        }
    for f in _of(findings, "slow_start_overrun"):
        estimate = f["evidence"].get("buffer_estimate_bytes")
        configured = truth["path"].get("bottleneck_buffer_bytes")
        if estimate and configured:
            row["buffer_ratio"] = estimate / configured
    clock = (doc.get("two_vantage") or {}).get("clock") or {}
    if "delay_step" in labels["expected"] and clock:
        # Both captures read one clock: the truth is skew 0.
        row["skew_ppm"] = clock["skew_ppm"]
    true_rtts = _phase_rtts_ms(truth)
    # Where the way back's delay told a step under a standing queue, the phases' base RTTs
    # are not in the capture, and the finding gives none: nothing to score.
    found = [f for f in _of(findings, "path_change") if "phase_rtts_s" in f["evidence"]]
    if found and true_rtts:
        row["phase_rtts_pair"] = _phase_error(found[0], true_rtts)
    if receivers:
        # The same path from the sender's capture alone: its RTT floor's steps.
        alone = analyze(read_capture(sender)).to_dict()
        steps = [
            f
            for f in alone["findings"]
            if f["kind"] == "path_change"
            and f["conn"] == busiest["conn"]
            and f["direction"] == data_dir
        ]
        row["sender_only_step"] = {
            "expected": "delay_step" in labels["expected"],
            # Another flow's standing queue is a longer round trip to one capture, and a step
            # the physics leaves open (too near the transfer's end to show) may be found or
            # not: neither is scored.
            "unsure": "cross_traffic" in labels["expected"]
            or "delay_step" in set(truth.get("unsure_labels", [])),
            "found": bool(steps),
        }
        timed = [f for f in steps if "phase_rtts_s" in f["evidence"]]
        if timed and true_rtts:
            row["phase_rtts_sender"] = _phase_error(timed[0], true_rtts)
        # The receiver's capture alone, as a user with a capture of the receiving host has it:
        # its verdict must say the capture was taken at the receiver, not give the sender's
        # account from the wrong end. On a direct veth pair no end can be told.
        rx = analyze(read_capture(receivers[0])).to_dict()
        rx_verdicts = [
            f
            for f in rx["findings"]
            if f["kind"] == "rate_limit_cause" and f["conn"] == busiest["conn"]
        ]
        if rx_verdicts:
            told = max(rx_verdicts, key=lambda f: f["evidence"]["rate_bps"])["evidence"]
            row["receiver_alone"] = {
                "lan": bool(truth["path"].get("direct")),
                "end": told.get("capture_end"),
                "claims_a_class": "limit_class" in told,
            }
    lost = _of(findings, "ack_loss")
    if "reverse_acks" in truth["drops"]:
        row["reverse_acks"] = {
            "found": lost[0]["evidence"]["acks_lost_packets"] if lost else 0,
            "counter": truth["drops"]["reverse_acks"],
        }
    payload_rate = truth["path"].get("bottleneck_payload_rate_bps")
    verdict_path = (_verdict(findings) or {}).get("evidence", {}).get("path_rate_bps")
    if "stretch_acks" in labels["expected"] and payload_rate and verdict_path:
        # The path rate against the bottleneck's payload rate, with stretch ACKs.
        row["stretch_path_ratio"] = verdict_path / payload_rate
    competing = _of(findings, "competing_traffic")
    if competing and "cross_traffic" in truth:
        row["competing_share_error"] = _competing_error(competing[0], truth)
    holes = _of(findings, "capture_holes")
    if truth["drops"].get("sender_nic"):
        # Each segment the sending host dropped before its capture and TCP resent is a hole
        # the capture saw filled; with no other loss, the kernel's retransmissions count them.
        row["sender_host_drops"] = {
            "found": holes[0]["evidence"]["resent_segments_count"] if holes else 0,
            "counter": truth["retransmissions"]["segments"],
        }
    if "reverse_data" in truth["drops"]:
        # Data the receiver's host sent back, lost in the middle: the other direction's drops.
        back = [f for f in findings if f["kind"] == "network_drop" and f["direction"] == "other"]
        row["reverse_data"] = {
            "found": back[0]["evidence"]["network_drops_packets"] if back else 0,
            "counter": truth["drops"]["reverse_data"],
        }
    untold = _of(findings, "receiver_untold")
    if untold:
        row["receiver_untold"] = untold[0]["evidence"]["untold_packets"]
    for kind, counter in (("network_drop", "network"), ("receiver_drop", "receiver")):
        found = _of(findings, kind)
        if found:
            row[f"{counter}_drops"] = {
                "found": found[0]["evidence"].get(f"{kind}s_packets"),
                "counter": truth["drops"][counter],
            }
    return row


def _phase_rtts_ms(truth: dict[str, Any]) -> list[float]:
    """The relay's RTT of each path phase, in order (empty for a path that held)."""
    steps = (truth["path"].get("delay_schedule") or {}).get("steps") or []
    return [truth["path"]["rtt_ms"], *(s["rtt_ms"] for s in steps)] if steps else []


def _phase_error(finding: dict[str, Any], true_ms: list[float]) -> float:
    """The largest relative error of a path_change finding's phase RTTs against the relay's
    (inf when it found another number of phases)."""
    ours = finding["evidence"]["phase_rtts_s"]
    if len(ours) != len(true_ms):
        return float("inf")
    return max(abs(o * 1e3 - t) / t for o, t in zip(ours, true_ms, strict=True))


def _competing_error(finding: dict[str, Any], truth: dict[str, Any]) -> float:
    """The largest difference between a flow's share in the finding and the relay's count of
    what the bottleneck delivered per flow over the same span (its half-second bins)."""
    bins = truth["cross_traffic"]["bins"]
    fields = bins["fields"]
    origin = truth["capture"]["counts"]["sender"]["first_epoch_s"]
    start, end = finding["start_s"], finding["end_s"]
    got: dict[str, float] = {}
    for row in bins["rows"]:
        t = row[0] - origin
        if t + bins["bin_s"] > start and t < end:
            for name in truth["cross_traffic"]["flows"]:
                got[name] = got.get(name, 0.0) + row[fields.index(f"{name}_bytes")]
    total = sum(got.values())
    flows = truth["cross_traffic"]["flows"]
    by_name = {
        f"{flows[n]['bottleneck']['src']} -> {flows[n]['bottleneck']['dst']}": n
        for n in flows
        if n != "test"
    }
    ev = finding["evidence"]
    names = [x.rsplit(" ", 1)[0] for x in ev["competing_flows"].split("; ")]
    errors = [abs(ev["own_share_fraction"] - got["test"] / total)]
    errors += [
        abs(share - got[by_name[n]] / total)
        for n, share in zip(names, ev["competing_share_fractions"], strict=True)
        if n in by_name
    ]
    return max(errors)


def _tolerance(
    rows: list[dict[str, Any]],
    key: str,
    inside: Callable[[float], bool],
    title: str,
    show: Callable[[float], str],
) -> None:
    """One evidence check over the scenarios that have it: how many are within tolerance, and
    each scenario's value."""
    found = [(r["scenario"], r[key]) for r in rows if key in r]
    if not found:
        return
    print(f"\n{title} in {sum(inside(x) for _, x in found)} of {len(found)}")
    for name, x in found:
        print(f"  {name}: {show(x)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sweep",
        type=Path,
        action="append",
        help="a sweep folder (default fixtures/sweep); given more than once, one table of all",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="*", help="scenario names matching this pattern")
    parser.add_argument("--json", type=Path, help="write every scenario's row here")
    args = parser.parse_args()
    sweeps = args.sweep or [SWEEP]
    folders = sorted(
        (
            p
            for sweep in sweeps
            for p in sweep.iterdir()
            if (p / "truth.json").exists() and fnmatch.fnmatch(p.name, args.only)
        ),
        key=lambda p: p.name,
    )
    if not folders:
        sys.exit(f"accuracy: no scenarios under {', '.join(map(str, sweeps))}")
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(score_one, folders))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    report(rows)


def report(rows: list[dict[str, Any]]) -> None:
    print(f"{len(rows)} scenarios")
    for row in rows:
        if "error" in row:
            print(f"  {row['scenario']}: {row['error']}")
    print("\nlabel                 scored    TP   FN   FP   TN   right  wrong scenarios")
    for label in DETECTS:
        cells = [r["labels"][label] for r in rows if label in r.get("labels", {})]
        if not cells:
            continue
        tp = sum(c["expected"] and c["found"] for c in cells)
        fn = sum(c["expected"] and not c["found"] for c in cells)
        fp = sum(not c["expected"] and c["found"] for c in cells)
        tn = sum(not c["expected"] and not c["found"] for c in cells)
        wrong = [
            r["scenario"]
            for r in rows
            if label in r.get("labels", {})
            and r["labels"][label]["expected"] != r["labels"][label]["found"]
        ]
        print(
            f"{label:21s} {len(cells):6d} {tp:5d} {fn:4d} {fp:4d} {tn:4d} "
            f"{(tp + tn) / len(cells):6.0%}  {', '.join(wrong)}"
        )
    for label in UNTOLD:
        names = [r["scenario"] for r in rows if label in r.get("untold", [])]
        if names:
            print(f"{label}: not scored where tracekit says it cannot tell: {', '.join(names)}")
    # Without the handshake's window scale the capture cannot show the window's share: the
    # verdict says so, and is not scored on its shares.
    unknown = [r for r in rows if "verdict" in r and not r["verdict"]["window_scale_known"]]
    scored = [r for r in rows if "verdict" in r and r["verdict"]["window_scale_known"]]
    if unknown:
        names = ", ".join(r["scenario"] for r in unknown)
        print(f"\nverdict says it cannot tell the window's share (window scale unknown): {names}")
        inside = [
            r
            for r in unknown
            if r["verdict"]["rwnd_range"][0] - 0.10
            <= r["verdict"]["kernel"]["receive_window"]
            <= r["verdict"]["rwnd_range"][1] + 0.10
        ]
        print(
            f"  the kernel's receive-window share within 10 points of the range the verdict "
            f"gives (zero windows alone to the least shift the flight allows) in "
            f"{len(inside)} of {len(unknown)}"
        )
        for r in unknown:
            low, high = r["verdict"]["rwnd_range"]
            kernel = r["verdict"]["kernel"]["receive_window"]
            print(f"  {r['scenario']}: {low:.2f}-{high:.2f} | kernel {kernel:.2f}")
    if scored:
        same = sum(r["verdict"]["class"] == r["verdict"]["kernel_class"] for r in scored)
        within = sum(r["verdict"]["max_error"] <= 0.10 for r in scored)
        print(
            f"\nverdict against the kernel's account: class right in {same} of {len(scored)}, "
            f"every share within 10 points in {within} of {len(scored)}"
        )
        for r in rows:
            if "no_kernel_account" in r:
                print(f"  not scored, {r['scenario']}: {r['no_kernel_account']}")
        for r in scored:
            v = r["verdict"]
            if v["class"] != v["kernel_class"] or v["max_error"] > 0.10:
                ours = " ".join(f"{c[:4]} {v['ours'][c]:.2f}" for c in CLASSES)
                kern = " ".join(f"{c[:4]} {v['kernel'][c]:.2f}" for c in CLASSES)
                print(f"  {r['scenario']}: ours {ours} ({v['cause']}) | kernel {kern}")
    ratios = [(r["scenario"], r["buffer_ratio"]) for r in rows if "buffer_ratio" in r]
    if ratios:
        inside = sum(1 / 1.5 <= x <= 1.5 for _, x in ratios)
        print(f"\nbuffer estimate / configured buffer: within 1.5x in {inside} of {len(ratios)}")
        for name, x in ratios:
            print(f"  {name}: {x:.2f}")
    _tolerance(
        rows,
        "competing_share_error",
        lambda x: x <= 0.10,
        "competing traffic: every flow's share within 10 points of the relay's count",
        lambda x: f"largest error {x * 100:.1f} points",
    )
    _tolerance(
        rows,
        "stretch_path_ratio",
        lambda x: abs(x - 1) <= 0.03,
        "stretch ACKs: the path rate within 3% of the bottleneck's payload rate",
        lambda x: f"{x:.3f}",
    )
    _tolerance(
        rows,
        "skew_ppm",
        lambda x: abs(x) <= 50,
        "path changes on one clock: skew within 50 ppm of 0",
        lambda x: f"{x:+.2f} ppm",
    )
    alone = [r for r in rows if "sender_only_step" in r and not r["sender_only_step"]["unsure"]]
    if alone:
        cells = [r["sender_only_step"] for r in alone]
        tp = sum(c["expected"] and c["found"] for c in cells)
        fp = sum(c["found"] and not c["expected"] for c in cells)
        steps = sum(c["expected"] for c in cells)
        wrong = [
            r["scenario"]
            for r in alone
            if r["sender_only_step"]["expected"] != r["sender_only_step"]["found"]
        ]
        print(
            f"\npath changes from the sender's capture alone: found in {tp} of {steps} step "
            f"scenarios, {fp} found in the {len(cells) - steps} others (not scored: "
            "cross-traffic scenarios, where another flow's queue is a longer round trip to one "
            "capture, and steps the physics leaves open)"
            + (f"; wrong: {', '.join(wrong)}" if wrong else "")
        )
    for key, title in (
        ("phase_rtts_pair", "both captures"),
        ("phase_rtts_sender", "the sender's capture alone"),
    ):
        _tolerance(
            rows,
            key,
            lambda x: x <= 0.05,
            f"path phases' RTTs within 5% of the relay's, from {title},",
            lambda x: f"largest error {x:.1%}",
        )
    for counter in ("network", "receiver", "reverse_acks", "reverse_data", "sender_host"):
        key = counter if counter.startswith("reverse_") else f"{counter}_drops"
        drops = [(r["scenario"], r[key]) for r in rows if key in r]
        if drops:
            exact = sum(d["found"] == d["counter"] for _, d in drops)
            print(f"\n{counter} drops equal to the counter in {exact} of {len(drops)}")
            for name, d in drops:
                if d["found"] != d["counter"]:
                    print(f"  {name}: found {d['found']}, counter {d['counter']}")
    alone_rx = [r for r in rows if "receiver_alone" in r]
    if alone_rx:
        wan = [r for r in alone_rx if not r["receiver_alone"]["lan"]]
        right = [r for r in wan if r["receiver_alone"]["end"] == "receiver"]
        claims = [r["scenario"] for r in wan if r["receiver_alone"]["claims_a_class"]]
        print(
            f"\nthe receiver's capture alone: told as taken at the receiver (no sender's account "
            f"given) in {len(right)} of {len(wan)} relayed scenarios"
            + (f"; a class claimed in: {', '.join(claims)}" if claims else "")
            + f"; on the {len(alone_rx) - len(wan)} direct veth pairs no end is told by design"
        )
    ends = [r.get("sender_end") for r in rows if "sender_end" in r]
    print(
        f"the sender's capture: told as taken at the sender in {ends.count('sender')} of "
        f"{len(ends)}, at the receiver in {ends.count('receiver')}, not told in {ends.count(None)}"
    )
    untold = [(r["scenario"], r["receiver_untold"]) for r in rows if "receiver_untold" in r]
    print(
        "\narrivals resent before the receiver's ACKs could tell whether its host kept them "
        f"(receiver_untold, counted as neither drop nor delivery) in {len(untold)} scenarios"
    )
    for name, count in untold:
        print(f"  {name}: {count}")


if __name__ == "__main__":
    main()
