"""Per-statement time of converge's idle path, from a PostgreSQL statement log.

Give the database `log_min_duration_statement = 0` and the cluster
`log_line_prefix = '%m [%p] %d '`, run some idle applies
(idle_applies.py), then:

    python3 integration/bench/hop_profile.py postgres.log DATABASE [REAL_DRAINS]

For each statement of the path it prints the median and p90 of bind
(planning) plus execute time. Drainer polls that found nothing are mixed
with real drains in the log; REAL_DRAINS (the number of applies) keeps
only that many of the longest drain calls. See docs/performance.md (history in docs/perf-log/).
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict

# One statement-log line (`log_line_prefix = '%m [%p] %d '`); hop_timeline.py
# reads the same lines.
LINE = re.compile(
    r"^(?P<at>\S+ \S+) UTC \[(?P<pid>\d+)\] (?P<db>\S+) LOG:  duration: (?P<ms>[0-9.]+) ms  "
    r"(?P<phase>parse|bind|execute|statement)[^:]*: (?P<text>.*)$"
)

# First matching prefix names the statement (order matters).
STATEMENTS = [
    ("BEGIN", "begin"),
    ("SELECT manifest_version, retired FROM lock_kind_state", "lock kind + state"),
    ("SELECT pg_advisory_xact_lock_shared", "lock kind"),
    ("SELECT m.manifest_version", "kind state"),
    ("WITH created AS", "insert resources"),
    ("WITH started AS", "first events"),
    ("SELECT schedule_eligible", "schedule"),
    ("COMMIT", "commit"),
    ("SELECT * FROM claim_work", "claim"),
    ("SELECT complete_work", "complete"),
    ("SELECT append_outbox", "append"),
    ("SELECT drain_outbox_batch", "drain"),
    ("SELECT frontier, txid, seq", "change log page"),
    ("WITH f AS", "change log page"),
    ("SELECT change_frontier()", "change frontier"),
    ("SELECT txid, seq, resource_id", "change log page"),
    ("SELECT resource_id, type, status", "conditions"),
    ("SELECT r.id", "resource read"),
]


def main() -> None:
    path, database = sys.argv[1], sys.argv[2]
    real_drains = int(sys.argv[3]) if len(sys.argv) > 3 else None
    binds: dict[str, float] = {}
    times: dict[str, list[float]] = defaultdict(list)
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            match = LINE.match(line.rstrip("\n"))
            if not match or match["db"] != database or match["phase"] == "parse":
                continue
            name = next((n for prefix, n in STATEMENTS if match["text"].startswith(prefix)), None)
            if name is None:
                continue
            ms = float(match["ms"])
            if match["phase"] == "bind":
                binds[match["pid"]] = ms
                continue
            times[name].append(binds.pop(match["pid"], 0.0) + ms)
    if real_drains is not None and times.get("drain"):
        times["drain"] = sorted(times["drain"])[-real_drains:]
    seen = []
    for _, name in STATEMENTS:
        if name in seen or name not in times:
            continue
        seen.append(name)
        values = sorted(times[name])
        p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
        print(f"{name:18s} n={len(values):5d}  median {statistics.median(values):6.3f} ms  p90 {p90:6.3f} ms")


if __name__ == "__main__":
    main()
