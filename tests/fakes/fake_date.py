#!/usr/bin/env python3
"""A fake `date` for a node whose clock is skewed: the test cluster's nodes share one kernel clock,
so a node's wall clock cannot really differ. `date +%s.%N` prints the real time plus the seconds
in $PREFLIGHT_FAKE_DIR/date-skew (0 when absent); any other use runs the real date."""

import os
import sys
import time


def main() -> int:
    if sys.argv[1:] != ["+%s.%N"]:
        os.execv("/bin/date", ["date", *sys.argv[1:]])
    path = os.path.join(os.environ.get("PREFLIGHT_FAKE_DIR", ""), "date-skew")
    skew = 0.0
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            skew = float(fh.read().strip() or 0)
    sys.stdout.write(f"{time.time() + skew:.9f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
