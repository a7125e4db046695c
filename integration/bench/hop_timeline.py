"""Where an idle apply's time goes, hop by hop: a server's statement log
lined up with the client's own clock.

Give the database `log_min_duration_statement = 0` and the cluster
`log_line_prefix = '%m [%p] %d '`, run idle applies with a worker connected
and the timestamps recorded:

    sdk-gen/.venv/bin/python integration/bench/idle_applies.py --target 127.0.0.1:50051 \\
        --count 200 --until-ready --timestamps times.json
    python3 integration/bench/hop_timeline.py postgres.log DATABASE times.json

For each apply it finds, between sending it and seeing it Ready, the apply's
transaction, the claim that took it, its result (`complete_work`, or
`append_outbox` and the drain that applied it) and the watch hub's last
change-log read, then prints the median and p90 of each statement and of
each gap between them. Both clocks are this machine's; the log's timestamps
have millisecond resolution, so single gaps are +-1 ms and only their
medians over many applies mean anything. Run the applies one at a time on an
otherwise idle server. See docs/performance.md (history in docs/perf-log/).
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
from typing import NamedTuple, Optional

# The same log lines and statement names as the per-statement profile.
from hop_profile import LINE, STATEMENTS

PAGE = "change log page"


class Statement(NamedTuple):
    start: float  # ms since the epoch, bind included
    end: float
    name: str
    ms: float


def read_log(path: str, database: str) -> list[Statement]:
    found: list[Statement] = []
    bind_started: dict[str, float] = {}
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            m = LINE.match(line.rstrip("\n"))
            if not m or m["db"] != database:
                continue
            at = datetime.datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S.%f")
            end = at.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000
            ms = float(m["ms"])
            if m["phase"] == "bind":
                bind_started[m["pid"]] = end - ms
                continue
            if m["phase"] == "parse":
                continue
            start = bind_started.pop(m["pid"], end - ms) if m["phase"] == "execute" else end - ms
            name = next((n for prefix, n in STATEMENTS if m["text"].startswith(prefix)), None)
            if name:
                found.append(Statement(start, end, name, end - start))
    found.sort()
    return found


def first(statements: list[Statement], name: str, after: float, min_ms: float = 0.0) -> Optional[Statement]:
    # -1 ms: the log's timestamps are rounded to the millisecond.
    return next((s for s in statements if s.name == name and s.start >= after - 1 and s.ms >= min_ms), None)


def hops(statements: list[Statement], sent: float, answered: float, ready: float) -> Optional[dict[str, float]]:
    window = [s for s in statements if sent - 1 <= s.start <= ready + 1]
    begin = first(window, "begin", sent)
    commit = begin and first(window, "commit", begin.start)
    # Polls that found nothing are short; the real claim is not.
    claim = commit and first(window, "claim", commit.end, 0.2)
    if not (begin and commit and claim):
        return None
    result = first(window, "complete", claim.end)
    row = {
        "send -> apply BEGIN": begin.start - sent,
        "apply transaction": commit.end - begin.start,
        "COMMIT -> answer at the client": answered - commit.end,
        "COMMIT -> claim": claim.start - commit.end,
        "claim": claim.ms,
        "claim -> result (worker round trip)": 0.0,
    }
    if result:
        row["claim -> result (worker round trip)"] = result.start - claim.end
        row["complete_work"] = result.ms
        applied = result
    else:
        append = first(window, "append", claim.end)
        drain = append and first(window, "drain", append.end, 0.6)
        if not (append and drain):
            return None
        row["claim -> result (worker round trip)"] = append.start - claim.end
        row["append_outbox"] = append.ms
        row["append -> drain"] = drain.start - append.end
        row["drain"] = drain.ms
        applied = drain
    pages = [s for s in window if s.name == PAGE and s.start >= applied.end - 1]
    if not pages:
        return None
    row["result -> change-log page"] = pages[-1].start - applied.end
    row["page -> Ready at the client"] = ready - pages[-1].end
    row["total"] = ready - sent
    return row


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    statements = read_log(sys.argv[1], sys.argv[2])
    with open(sys.argv[3], encoding="utf-8") as f:
        times = json.load(f)
    rows = [r for r in (hops(statements, s * 1000, a * 1000, r * 1000) for s, a, r in times) if r]
    if not rows:
        sys.exit("no apply could be lined up with the log")
    print(f"{len(rows)} of {len(times)} applies lined up")
    for key in rows[0]:
        values = sorted(r[key] for r in rows if key in r)
        p90 = values[min(len(values) - 1, round((len(values) - 1) * 0.9))]
        print(f"  {key:38s} median {statistics.median(values):6.2f} ms   p90 {p90:6.2f} ms")


if __name__ == "__main__":
    main()
