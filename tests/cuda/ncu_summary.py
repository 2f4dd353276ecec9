#!/usr/bin/env python3
"""ncu_summary.py LOG: one line per (kernel, grid) from `ncu --metrics gpu__time_duration.sum
--print-summary per-kernel` output: name, grid x block, invocations, average / min / max us."""
import re
import sys

cur = None
for l in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s{2}(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), \d+, \d+\), Device \d+, CC [\d.]+, Invocations (\d+)", l)
    if m:
        name = re.sub(r"\(.*", "", m.group(1))[:60]
        cur = (name, "(%s,%s,%s)x%s" % m.group(2, 3, 4, 5), int(m.group(6)))
        continue
    if cur and "gpu__time_duration.sum" in l:
        p = l.split()
        print("%-60s %-18s n=%-5d avg %8s us  min %8s  max %8s" % (cur[0], cur[1], cur[2], p[-1], p[-3], p[-2]))
        cur = None
