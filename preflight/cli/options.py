"""The options several commands share, defined once (typer `Annotated` aliases), and the
readers of option values that are more than a type (ages, sizes)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from preflight import lazyre

ProfileOpt = Annotated[str | None, typer.Option("--profile", "-p", help="Profile name or TOML file; 'auto' detects it from the GPUs (default $PREFLIGHT_PROFILE, else the config's profile, else auto).")]
ChecksDirOpt = Annotated[list[Path] | None, typer.Option("--checks-dir", help="Folder of site checks (*.py); repeatable.")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="Run only these checks or families (gpu, net.mtu); repeatable; replaces $PREFLIGHT_ONLY and the config's list.")]
SkipOpt = Annotated[list[str] | None, typer.Option("--skip", help="Skip these checks or families; repeatable; replaces $PREFLIGHT_SKIP and the config's list.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout.")]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="Report folder (default reports/<timestamp>/).")]
NoReportOpt = Annotated[bool, typer.Option("--no-report", help="Do not write report files.")]
WarnOpt = Annotated[bool, typer.Option("--warn-as-fail", help="A WARN makes the verdict NO-GO.")]
XidOpt = Annotated[str | None, typer.Option("--xid-since", help="Kernel-log window: boot (default), ISO time, or 30m/6h/2d.")]
TimeoutOpt = Annotated[float, typer.Option("--probe-timeout", help=(
    "Seconds before a hung probe is killed, for the probes without a limit of their own (default 10 s); "
    "the others keep theirs, from 5 s (clock, env) up to 20 s (nvidia-smi-q, nvml), and the config's "
    "check_timeouts sets a check's."))]
HistoryOpt = Annotated[str | None, typer.Option("--history", help="History store: sqlite:///path, postgresql://..., or off (default $PREFLIGHT_HISTORY, else the config's history, else ~/.local/share/preflight/history.db).")]
StoreOpt = Annotated[str | None, typer.Option("--history", help="Results store: sqlite:///path, a file path, or "
                                              "postgresql://user@host/db (default $PREFLIGHT_HISTORY, else the "
                                              "config's history, else ~/.local/share/preflight/history.db).")]
PeersOpt = Annotated[list[str] | None, typer.Option("--peer", help="Peer node for MTU path pings; repeatable.")]
HostsOpt = Annotated[str | None, typer.Option("--hosts", "-H", help="Nodes: Slurm hostlist (gpu[001-016]), comma list or @file.")]
TransportOpt = Annotated[str, typer.Option("--transport", "-t", help="auto, local, ssh or srun.")]
SshConfigOpt = Annotated[Path | None, typer.Option("--ssh-config", help="OpenSSH config file (default ~/.ssh/config).")]
AcceptOpt = Annotated[bool, typer.Option("--ssh-accept-new", help="Accept host keys not in known_hosts (changed keys are still refused).")]
ConcOpt = Annotated[int, typer.Option("--concurrency", min=1, help="Nodes worked on at once (at least 1).")]
HandshakesOpt = Annotated[int, typer.Option("--ssh-handshakes", min=1, help="SSH handshakes at once per server address (at least 1; under its sshd's MaxStartups, 10 by default), for many host names on one server.")]
ConnOpt = Annotated[float | None, typer.Option("--connect-timeout", help="Seconds to connect and log in to a node (default: the host's ConnectTimeout in the ssh config, else 10).")]
DeadlineOpt = Annotated[float | None, typer.Option("--deadline", help="Seconds for the whole collection, every phase together; late nodes and probes are ERROR (run: the sweep does not start once it has passed).")]
BadNodesOpt = Annotated[Path | None, typer.Option("--bad-nodes", help="Write the NO-GO nodes here as one Slurm hostlist line (empty file when none), e.g. for sbatch --exclude.")]
ExcludeOpt = Annotated[str | None, typer.Option("--exclude", "-x", help="Leave these nodes out (hostlist or @file), after --hosts / --partition / the allocation.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only FAIL and ERROR findings (and WARN with --warn-as-fail) and the verdict.")]
PerNodeOpt = Annotated[bool, typer.Option("--per-node", help="One console line per node and finding (for grep), not one per group of nodes.")]
SinceOpt = Annotated[str, typer.Option("--since", help="Window: an age (30m, 6h, 7d, 4w), an ISO time, or 'all'.")]
PrometheusOpt = Annotated[Path | None, typer.Option("--prometheus", help="Write the metrics as a node_exporter "
                                                  "textfile (.prom), atomically (default: the config's "
                                                  "prometheus_textfile).")]


def usage(message: str) -> NoReturn:
    """Stop with a one-line usage error (exit code 2)."""
    from preflight.engine import UsageError

    raise UsageError(message)


def xid_since(value: str | None) -> datetime | None:
    """`--xid-since`: 'boot' (default), an ISO time, or an age like 30m, 6h, 2d."""
    from preflight.timeparse import parse_since

    try:
        return parse_since(value)
    except ValueError:
        usage(f"--xid-since {value!r}: use 'boot', an ISO time (2024-06-03T10:00) or an age (30m, 6h, 2d)")


def since_time(value: str | None, option: str = "--since",
               forms: str = "an age (30m, 6h, 7d, 4w), an ISO time or 'all'") -> datetime | None:
    """A window's start given as an age (30m, 6h, 7d, 4w), an ISO time, or 'all' (None)."""
    from preflight.timeparse import parse_since

    try:
        return parse_since(value, open_words=("all",))
    except ValueError:
        usage(f"{option} {value!r}: use {forms}")


_SIZE = lazyre.compile(r"^\s*(\d+)\s*([kmgKMG]?)[iI]?[bB]?\s*$")


def size(text: str) -> int:
    """'8', '64K', '64M', '1G' (powers of 1024) -> bytes."""
    m = _SIZE.match(text)
    if not m:
        usage(f"size {text!r}: use bytes or a K/M/G suffix (64M)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]
