#!/usr/bin/env python3
"""A fake GPU/IB/system tool for tests: prints captures in the real tools' formats.

Installed into a bin folder under each tool's name (nvidia-smi, ibstat, dmesg, ...). It reads
the scenario folder in $PREFLIGHT_FAKE_DIR: `<tool>.json` holds rules
  {"rules": [{"match": "<regex on the joined args>", "stdout": "<file in the scenario>",
              "stderr": "text", "rc": 0, "delay": 0.0, "hang": false, "bytes": 0}]}
The first rule whose regex matches the arguments is used. `hang` sleeps forever (a hung
tool), `bytes` prints that many bytes of filler (a flood). $PREFLIGHT_FAKE_DELAY adds a
delay to every call. No rule or no file for the tool: exits 127 like a missing command.
"""

import json
import os
import re
import sys
import time


def main() -> int:
    tool = os.environ.get("PREFLIGHT_FAKE_TOOL") or os.path.basename(sys.argv[0])
    args = " ".join(sys.argv[1:])
    scenario = os.environ.get("PREFLIGHT_FAKE_DIR", "")
    rules_path = os.path.join(scenario, tool + ".json")
    if not scenario or not os.path.isfile(rules_path):
        sys.stderr.write(f"{tool}: no fake scenario for this tool\n")
        return 127
    with open(rules_path, encoding="utf-8") as fh:
        rules = json.load(fh).get("rules", [])
    delay = float(os.environ.get("PREFLIGHT_FAKE_DELAY", "0") or 0)
    for rule in rules:
        if re.search(rule.get("match", ""), args):
            if delay or rule.get("delay"):
                time.sleep(delay + float(rule.get("delay", 0)))
            if rule.get("hang"):
                while True:
                    time.sleep(3600)
            out = sys.stdout.buffer
            if rule.get("stdout"):
                with open(os.path.join(scenario, rule["stdout"]), "rb") as fh:
                    out.write(fh.read())
            if rule.get("text"):
                out.write(rule["text"].encode())
            n = int(rule.get("bytes", 0))
            line = b"garbage " * 15 + b"\n"
            while n > 0:
                chunk = line * min(8192, n // len(line) + 1)
                out.write(chunk)
                n -= len(chunk)
            out.flush()
            if rule.get("stderr"):
                sys.stderr.write(rule["stderr"])
            return int(rule.get("rc", 0))
    sys.stderr.write(f"{tool}: unrecognised arguments: {args}\n")
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(141)
