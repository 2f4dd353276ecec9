#!/usr/bin/env python3
"""ncu_summary.py LOG: one line per (kernel, grid) from `ncu --metrics gpu__time_duration.sum
--print-summary per-kernel` output: name, grid x block, invocations, average / min / max us and
the invocations' total, largest total first (ncu prints each kernel's times in its own unit,
nsecond / usecond / msecond / second, or ns / us / ms / s in newer versions: all converted to microseconds here)."""
import re
import sys

SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
rows = []
cur = None
for l in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s{2}(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), \d+, \d+\), Device \d+, CC [\d.]+, Invocations (\d+)", l)
    if m:
        name = re.sub(r"\(.*", "", m.group(1))[:60]
        cur = (name, "(%s,%s,%s)x%s" % m.group(2, 3, 4, 5), int(m.group(6)))
        continue
    if cur and "gpu__time_duration.sum" in l:
        p = l.split()
        unit = SCALE.get(p[1], None)
        if unit is None:
            sys.exit("ncu_summary.py: unit %r not understood in: %s" % (p[1], l.strip()))
        lo, hi, avg = (float(v.replace(",", "")) * unit for v in (p[-3], p[-2], p[-1]))
        rows.append((avg * cur[2], cur, avg, lo, hi))
        cur = None
rows.sort(key=lambda r: -r[0])
for total, (name, grid, n), avg, lo, hi in rows:
    print("%-60s %-18s n=%-5d avg %10.1f us  min %10.1f  max %10.1f  total %11.1f us" % (name, grid, n, avg, lo, hi,
                                                                                      total))
