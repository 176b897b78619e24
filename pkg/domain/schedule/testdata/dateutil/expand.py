"""Expand recurrence rules with python-dateutil, the independent oracle of
rrule_dateutil_test.go.

Reads one JSON object per line on stdin:
  {"id": 7, "rule": "FREQ=...;...", "dtstart": "2026-03-01T01:30:00",
   "exdate": ["2026-03-08T02:30:00", ...], "rdate": [...],
   "end": "2029-03-01T00:00:00", "limit": 300}
and writes one per line on stdout:
  {"id": 7, "readings": ["2026-03-01T01:30:00", ...], "truncated": false}

Everything is a naive wall reading: dateutil expands rules on the wall
clock, and the Go side decides which instants each reading fires at.
"""

import itertools
import json
import sys
from datetime import datetime

from dateutil.rrule import rrulestr, rruleset


def parse(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")


def main():
    for line in sys.stdin:
        case = json.loads(line)
        start = parse(case["dtstart"])
        rs = rruleset()
        rs.rrule(rrulestr(case["rule"], dtstart=start))
        for x in case.get("exdate") or []:
            rs.exdate(parse(x))
        for x in case.get("rdate") or []:
            rs.rdate(parse(x))
        end = parse(case["end"])
        limit = case["limit"]
        out = []
        for r in itertools.islice(rs, limit + 1):
            if r > end:
                break
            out.append(r)
        truncated = len(out) > limit
        out = out[:limit]
        json.dump({"id": case["id"], "readings": [r.strftime("%Y-%m-%dT%H:%M:%S") for r in out],
                   "truncated": truncated}, sys.stdout)
        sys.stdout.write("\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
