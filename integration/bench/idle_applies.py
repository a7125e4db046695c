"""Applies noop resources one at a time against a running converge and
reports latency percentiles: of the ApplyResource call alone, or (with
--until-ready) from sending it until a watch reports the resource READY.

Runs with the Python client in sdk-gen (its virtualenv has the packages):

    sdk-gen/.venv/bin/python integration/bench/idle_applies.py \
        --target 127.0.0.1:50051 --count 200 --prefix a- --until-ready

Several --target values (e.g. two builds, each with its own database and
worker) are taken in turn, one apply each, so every build is measured in
the same minutes of a noisy machine. The noop kind must exist (converge-load
applies it). --timestamps FILE writes, for the first target, each apply's
wall-clock send, answer and Ready times (JSON) for hop_timeline.py. See
docs/performance.md (history in docs/perf-log/).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk-gen", "python", "src"))

from converge_sdk import ConvergeClient  # noqa: E402
from converge_sdk.gen.converge.v1 import resource_pb2, resource_service_pb2  # noqa: E402


def percentile(sorted_ms: list[float], p: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, round((len(sorted_ms) - 1) * p))]


class Target:
    """One server under test and what was measured on it."""

    def __init__(self, address: str, until_ready: bool) -> None:
        self.address = address
        self.client = ConvergeClient(address)
        self.ready: "queue.Queue[tuple[str, float, float]]" = queue.Queue()
        self.samples: list[float] = []
        # Wall-clock (sent, answered, ready) per apply, to line up with a
        # server's statement log.
        self.times: list[tuple[float, float, float]] = []
        if until_ready:
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        request = resource_service_pb2.WatchResourcesRequest(send_initial_events=False)
        for event in self.client.resource.WatchResources(request):
            if event.HasField("resource") and event.resource.phase == resource_pb2.PHASE_READY:
                self.ready.put((event.resource.name, time.perf_counter(), time.time()))

    def apply(self, name: str, until_ready: bool) -> None:
        sent = time.time()
        started = time.perf_counter()
        request = resource_service_pb2.ApplyResourceRequest(kind="noop", kind_version=1, name=name)
        self.client.resource.ApplyResource(request)
        finished = time.perf_counter()
        answered = ready = time.time()
        if until_ready:
            while True:
                seen, finished, ready = self.ready.get(timeout=30)
                if seen == name:
                    break
        self.samples.append((finished - started) * 1000)
        self.times.append((sent, answered, ready))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", help="host:port; repeat to interleave servers")
    parser.add_argument("--count", type=int, default=200, help="applies per target")
    parser.add_argument("--prefix", default="idle-", help="names are PREFIX0, PREFIX1, ...")
    parser.add_argument("--pause-ms", type=float, default=10, help="idle time between applies")
    parser.add_argument("--until-ready", action="store_true", help="measure apply->Ready via a watch")
    parser.add_argument("--timestamps", help="write the first target's per-apply wall-clock times here (JSON)")
    args = parser.parse_args()

    targets = [Target(address, args.until_ready) for address in (args.target or ["127.0.0.1:50051"])]
    if args.until_ready:
        time.sleep(0.5)
    for i in range(args.count):
        for target in targets:
            time.sleep(args.pause_ms / 1000)
            target.apply(f"{args.prefix}{i}", args.until_ready)
    if args.timestamps:
        with open(args.timestamps, "w", encoding="utf-8") as out:
            json.dump(targets[0].times, out)
    what = "apply->Ready" if args.until_ready else "ApplyResource"
    for target in targets:
        samples = sorted(target.samples)
        print(
            f"{target.address} {what}, {len(samples)} samples: p50 {percentile(samples, 0.5):.2f} ms, "
            f"p90 {percentile(samples, 0.9):.2f} ms, p99 {percentile(samples, 0.99):.2f} ms"
        )


if __name__ == "__main__":
    main()
