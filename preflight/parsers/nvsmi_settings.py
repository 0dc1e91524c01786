"""nvidia-smi's answers to a command that changes a setting (`-pm`, `-e`, `-c`, `-pl`, `-ac`,
`-lgc`, `-mig`, `-r`): one acknowledgement line per GPU, often closed by `All done.`. They state
what the operator asked for and report no state of the GPU, so nothing is graded from them; a
document made only of them is read (analyze says nothing more about it). Any other line, a
refusal (`Unable to set persistence mode ...`) included, is not an acknowledgement, and such a
document stays unread and said."""

from __future__ import annotations

import re

from preflight import lazyre

_GPU = r"GPU [0-9A-Fa-f:.]+"
_ACK = lazyre.compile("|".join((
    rf"(?:Enabled|Disabled)(?: Legacy)? persistence mode for {_GPU}\.?",
    rf"Persistence mode is already (?:Enabled|Disabled) for {_GPU}\.?",
    rf"(?:Enabled|Disabled) ECC support for {_GPU}\.?",
    rf"ECC support is already (?:Enabled|Disabled) for {_GPU}\.?",
    rf"(?:Enabled|Disabled) MIG Mode for {_GPU}\.?",
    rf"Set compute mode to \S+ for {_GPU}\.?",
    rf"Compute mode is already set to \S+ for {_GPU}\.?",
    rf"Power limit for {_GPU} was set to [\d.]+ W from [\d.]+ W\.?",
    rf"(?:Applications|GPU|Memory) clocks set to .* for {_GPU}\.?",
    r"All done\.?",
    rf"{_GPU} was successfully reset\.?",
)), re.I)


def acknowledged(lines: list[str]) -> bool:
    """True when the lines hold at least one acknowledgement and nothing else but blank lines."""
    text = [ln.strip() for ln in lines if ln.strip()]
    return bool(text) and all(_ACK.fullmatch(t) for t in text)


__all__ = ["acknowledged"]
