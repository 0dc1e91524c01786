"""Clock synchronisation: `chronyc tracking` (text and `-c` CSV), `timedatectl show` / `status`,
`ntpstat`, and the node's wall clock (`date +%s.%N`).

What each producer prints (read from their sources, not copied):
  - chronyc (chrony client.c, process_cmd_tracking): `Reference ID : <hex refid> (<name>)`,
    `Stratum`, `Ref time (UTC)`, `System time : X seconds fast|slow of NTP time` (the daemon's
    current correction: "slow" means the system clock is behind), `Last offset`, `RMS offset`,
    `Frequency`, `Residual freq`, `Skew`, `Root delay`, `Root dispersion`, `Update interval`,
    `Leap status : Normal | Insert second | Delete second | Not synchronised`. chrony 1.x printed
    the reference as a dotted address and older ones had no leap line. With `-c` the same 14
    fields come comma-separated, the correction signed (positive: the clock is slow). When chronyd
    does not answer: `506 Cannot talk to daemon` (exit 1); `501 Not authorised` when refused.
  - timedatectl (systemd timedatectl.c): `show` (systemd 239+) prints `NTPSynchronized=yes`,
    `NTP=yes`, `CanNTP=yes`, `TimeUSec=...`; `status` prints `System clock synchronized: yes` and
    `NTP service: active` (Ubuntu 18.04's 237 wrote `systemd-timesyncd.service active: yes`), older
    ones `NTP synchronized: yes` with `NTP enabled: yes` (or `Network time on: yes`). Without
    systemd as PID 1 it says `System has not been booted with systemd ...` / `Failed to connect
    to bus` / `Failed to create bus connection`.
  - ntpstat (the C original and chrony's shell rewrite): `synchronised to NTP server (<addr>) at
    stratum N`, `time correct to within X ms`, `polling server every N s`; `unsynchronised`;
    `Unable to talk to NTP daemon. Is it running?`. Exit 0 synchronised, 1 not, 2 indeterminate.
  - ntpq -pn (ntpd's ntpq.c, the peers billboard): a header `remote refid st t when poll reach
    delay offset jitter`, `====` and one row per peer whose first character is its tally (`*`
    the system peer, `o` a PPS peer, `+` candidate, ...), offset in ms; `ntpq: read: Connection
    refused` when ntpd is not running, `No association ID's returned` when it has no peers.
  - chronyc sources [-v] (client.c process_cmd_sources): `MS Name/IP address Stratum Poll Reach
    LastRx Last sample` over `====`, one row per source: mode `^` server / `=` peer / `#`
    reference clock, state `*` selected, `+` combined, `-` not combined, `?` unusable, `x`
    falseticker, `~` too variable; reach in octal; `Last sample` `<adjusted>[<measured>] +/-
    <error>` printed as ns/us/ms/s/m/h/d/y (print_signed_nanoseconds), positive: the local (NTP)
    clock ahead of the source. `-v` adds a caption above the header (lines of `.-`, `/`, `|`);
    chrony before 2.0 began with `210 Number of sources = N`; `-c` gives `^,*,name,stratum,poll,
    reach,lastrx,adjusted,measured,error` in seconds.
  - chronyc sourcestats [-v] (process_cmd_sourcestats): `Name/IP Address NP NR Span Frequency
    Freq Skew Offset Std Dev`, the estimated offset of each source (positive: local fast,
    sourcestats.c) and its standard deviation; `-c`: `name,np,nr,span,freq,skew,offset,sd`.
  - chronyd / ntpd / ntpdate log lines (journal or syslog, by their ident): chronyd's "Selected
    source X", "Can't synchronise: ..." / "No suitable source for synchronisation", "System clock
    wrong by N seconds" (reference.c: N = -offset, positive: the clock is behind), "System clock
    was stepped by N seconds", "Fatal error : ..."; ntpd's "time correction of N seconds exceeds
    sanity limit"; ntpdate's "adjust|step time server X offset N sec" and "no server suitable for
    synchronization found" / "no servers can be used, exiting"; any other line at the daemons'
    error level is kept as such.
  - date +%s.%N: seconds since the epoch; a `date` without %N prints it literally (`...%N` or
    `...N`): whole seconds only.
Every framing (srun labels, pdsh hosts, prompts) is peeled by `preflight.framing` first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec, short

PROBE_CHRONY, PROBE_TIMEDATE, PROBE_NTPSTAT, PROBE_WALL = "chronyc-tracking", "timedatectl", "ntpstat", "date-wall"
PROBE_NTPQ = "ntpq-peers"
PROBE_SOURCES, PROBE_SOURCESTATS, PROBE_LOG = "chronyc-sources", "chronyc-sourcestats", "clock-log"
# a reference that is the host's own clock, not a time source: ntpd's local clock driver
# (127.127.1.u, shown as LOCAL(u), refid .LOCL.), chrony's local mode (refid 7F7F0101, `local` directive)
_LOCAL = lazyre.compile(r"^(?:LOCAL(?:\(\d+\))?|127\.127\.1\.\d+|\.?LOCL\.?|7F7F0101)$", re.I)


def is_local(*names: str) -> bool:
    """Whether any of these names/refids is the host's own (local) clock."""
    return any(_LOCAL.match(n.strip()) for n in names if n and n.strip())


def proven_offset(offsets: list[float]) -> float | None:
    """The offset that every one of these readings of the clock against a source proves: all on
    one side of zero, the one nearest zero (the clock is at least that far off); readings on both
    sides of zero (or at it) prove no offset: 0.0; no reading: None."""
    if not offsets:
        return None
    if all(o > 0 for o in offsets):
        return min(offsets)
    if all(o < 0 for o in offsets):
        return max(offsets)
    return 0.0
UNSYNCED_LEAP = ("not synchronised", "not synchronized", "unsynchronised", "invalid")
SYNCED_LEAP = ("normal", "insert second", "delete second")  # chrony's leap statuses while synchronised
# chronyd's reference: 8 hex digits (chrony 2 and later), or an IPv4/IPv6 address (chrony 1.x)
_REF_ID = lazyre.compile(r"^(?:[0-9A-Fa-f]{8}|\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f:]*:[0-9A-Fa-f:]*)$")
_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_FIELD = lazyre.compile(r"^\s*([A-Za-z][A-Za-z ()]*?)\s*:\s*(.*?)\s*$")
_SYSTEM_TIME = lazyre.compile(rf"({_NUM})\s*seconds?\s+(fast|slow)", re.I)
_CHRONY_ERROR = lazyre.compile(r"^\s*(5\d\d\s+\S.*|Could not \S.*|chronyc: \S.*|.*Cannot talk to daemon.*)$")
_CSV = lazyre.compile(r"^[0-9A-Fa-f]{8},[^,]*,\d+,")
_NO_BUS = lazyre.compile(r"not been booted with systemd|Failed to (?:connect to|create) bus|Failed to query server|"
                     r"Failed to get properties|Unknown (?:operation|command verb)|Access denied", re.I)


def _lines(doc: Doc) -> list[tuple[str, str]]:
    """(text, raw) of each non-blank line."""
    return [(ln.text, ln.raw) for ln in doc.lines if ln.text.strip()]


def _num(text: str) -> float | None:
    m = re.search(_NUM, text)
    return float(m.group(0)) if m else None


# ---- chronyc tracking -------------------------------------------------------------------------


@dataclass
class Tracking:
    """A `chronyc tracking` report. `offset_s` is the system clock minus NTP time (positive: the
    clock is ahead), from `System time`; None when not reported."""

    report: bool = False  # a tracking report (text or CSV) was read
    no_daemon: bool = False  # "506 Cannot talk to daemon"
    error: str = ""  # chronyc's error line (506, 501, ...)
    ref_id: str = ""
    ref_name: str = ""
    stratum: int | None = None
    offset_s: float | None = None
    last_offset_s: float | None = None
    root_delay_s: float | None = None
    root_dispersion_s: float | None = None
    update_interval_s: float | None = None
    leap: str = ""  # as printed: Normal, Insert second, Delete second, Not synchronised
    lines: dict[str, str] = field(default_factory=dict)  # field -> the line as printed (evidence)
    unrecognised: list[str] = field(default_factory=list)

    @property
    def no_reference(self) -> bool:
        """The reference is unset (refid 0): chronyd has no source selected."""
        return self.ref_id.strip("0.") == "" and bool(self.ref_id)

    @property
    def local_reference(self) -> bool:
        """chronyd's reference is its own clock (local mode: refid 7F7F0101, no name)."""
        return is_local(self.ref_id) or (not self.ref_id and is_local(self.ref_name))

    @property
    def max_error_s(self) -> float | None:
        """chronyd's root distance, root delay / 2 + root dispersion: its own bound on the error
        of the NTP clock (chronyc(1), tracking; chrony.conf(5) maxdistance)."""
        if self.root_delay_s is None or self.root_dispersion_s is None:
            return None
        return abs(self.root_delay_s) / 2 + abs(self.root_dispersion_s)

    @property
    def synced(self) -> bool | None:
        """Whether chronyd has the clock synchronised; None when the report does not say."""
        leap = self.leap.lower()
        if leap in UNSYNCED_LEAP:
            return False
        if leap in SYNCED_LEAP:
            return not self.no_reference
        if leap:  # a leap status this reader does not know says nothing
            return None
        if self.ref_id:
            return not self.no_reference
        return None

    def evidence(self, *keys: str) -> list[str]:
        return [self.lines[k] for k in keys if k in self.lines]


def _unread(t: Tracking, raw: str) -> bool:
    """A tracking field whose value is not in chrony's format: kept as unrecognised, never read."""
    t.unrecognised.append(short(raw))
    return True


def _tracking_field(t: Tracking, key: str, value: str, raw: str) -> bool:
    """Read one `Name : value` line into `t`; False when the name is not a tracking field."""
    k = key.lower()
    if k == "reference id":
        ref, _, name = value.partition(" ")
        if not _REF_ID.match(ref):
            return _unread(t, raw)
        t.ref_id, t.ref_name = ref, name.strip().strip("()")
    elif k == "stratum":
        if not value.isdigit():
            return _unread(t, raw)
        t.stratum = int(value)
    elif k == "system time":
        m = _SYSTEM_TIME.search(value)
        if m is None:
            return _unread(t, raw)
        t.offset_s = float(m.group(1)) * (1 if m.group(2).lower() == "fast" else -1)
    elif k in ("last offset", "root delay", "root dispersion", "update interval"):
        setattr(t, {"last offset": "last_offset_s", "root delay": "root_delay_s", "root dispersion":
                    "root_dispersion_s", "update interval": "update_interval_s"}[k], _num(value))
    elif k == "leap status":
        t.leap = value
    elif k not in ("ref time (utc)", "ref time", "rms offset", "frequency", "residual freq", "skew"):
        return False
    t.lines[k] = short(raw)
    return True


def _tracking_csv(t: Tracking, text: str, raw: str) -> None:
    """`chronyc -c tracking`: refid,name,stratum,reftime,correction,last,rms,freq,resid,skew,delay,disp,interval,leap."""
    parts = text.strip().split(",")
    t.report = True
    t.ref_id, t.ref_name = parts[0], parts[1]
    t.stratum = int(parts[2])
    values = [_num(p) for p in parts[3:13]] + [None] * 10
    correction = values[1]
    t.offset_s = None if correction is None else -correction
    t.last_offset_s, t.root_delay_s, t.root_dispersion_s, t.update_interval_s = (values[2], values[7], values[8],
                                                                              values[9])
    t.leap = parts[13].strip() if len(parts) > 13 else ""
    for k in ("reference id", "system time", "leap status"):
        t.lines[k] = short(raw)


def parse_tracking(doc: Doc) -> Tracking:
    t = Tracking()
    for text, raw in _lines(doc):
        if _CSV.match(text.strip()):
            _tracking_csv(t, text, raw)
            continue
        m = _FIELD.match(text)
        if m and _tracking_field(t, m.group(1), m.group(2), raw):
            t.report = True
            continue
        if _CHRONY_ERROR.match(text):
            t.error = t.error or short(raw)
            t.no_daemon = t.no_daemon or "cannot talk to daemon" in text.lower()
            continue
        t.unrecognised.append(short(raw))
    return t


def detect_tracking(doc: Doc) -> bool:
    """A tracking report (text or CSV), or chronyc's answer that chronyd is not running."""
    heads = [ln.text.strip() for ln in doc.head(30)]
    return any(h.startswith("Reference ID") for h in heads) and any(
        h.startswith(("System time", "Leap status", "Stratum")) for h in heads) or any(
        h == "506 Cannot talk to daemon" or (_CSV.match(h) is not None and h.count(",") >= 12) for h in heads)


# ---- timedatectl ------------------------------------------------------------------------------


@dataclass
class Timedate:
    """What timedatectl says about synchronisation; `available` False when systemd did not answer."""

    available: bool = False
    synced: bool | None = None  # NTPSynchronized / System clock synchronized / NTP synchronized
    service: bool | None = None  # NTP= / NTP service: active / NTP enabled / Network time on
    can_ntp: bool | None = None  # CanNTP= (a time sync service is installed)
    error: str = ""
    lines: dict[str, str] = field(default_factory=dict)
    unrecognised: list[str] = field(default_factory=list)


_SYNC_KEYS = ("ntpsynchronized", "system clock synchronized", "ntp synchronized", "ntp synchronised")
_SERVICE_KEYS = ("ntp", "ntp service", "ntp enabled", "network time on", "systemd-timesyncd.service active")
_YES = {"yes": True, "active": True, "true": True, "1": True, "no": False, "inactive": False, "false": False,
        "0": False}
_TIMEDATE_INFO = ("timezone", "localrtc", "timeusec", "rtctimeusec", "local time", "universal time", "rtc time",
                  "time zone", "rtc in local tz", "dst active", "last dst change", "next dst change",
                  "ntpsynchronizedusec", "timeusecmonotonic", "canntp")


def _timedate_field(td: Timedate, key: str, value: str, raw: str) -> bool:
    k = key.strip().lower()
    yes = _YES.get(value.strip().lower())
    if k in _SYNC_KEYS:
        td.synced = yes
    elif k in _SERVICE_KEYS:
        td.service = yes
    elif k == "canntp":
        td.can_ntp = yes
    elif k not in _TIMEDATE_INFO:
        return False
    td.lines[k] = short(raw)
    return True


def parse_timedate(doc: Doc) -> Timedate:
    td = Timedate()
    for text, raw in _lines(doc):
        m = re.match(r"^\s*([A-Za-z][\w .-]*?)(?:=|\s*:\s)\s*(.*)$", text)
        if m and _timedate_field(td, m.group(1), m.group(2), raw):
            td.available = True
            continue
        if _NO_BUS.search(text):
            td.error = td.error or short(raw)
            continue
        td.unrecognised.append(short(raw))
    return td


def detect_timedate(doc: Doc) -> bool:
    heads = [ln.text.strip() for ln in doc.head(30)]
    return any(h.startswith(("NTPSynchronized=", "System clock synchronized:", "NTP synchronized:")) for h in heads)


# ---- ntpq -pn (ntpd) -----------------------------------------------------------------------------


@dataclass
class NtpPeer:
    """One row of the peers billboard. `offset_s` is this host's clock minus the peer's
    (ntpq prints the peer's minus the host's, in ms)."""

    tally: str  # "*" system peer, "o" PPS peer, "+" candidate, "-" outlier, "x" falseticker, ...
    remote: str
    refid: str
    stratum: int | None
    reach: int  # the reach register (printed in octal)
    offset_s: float
    line: str

    @property
    def local(self) -> bool:
        return is_local(self.remote, self.refid)

    @property
    def usable(self) -> bool:
        """A reading of this clock against real time: reached, synchronised (stratum < 16), not the local clock."""
        return self.reach != 0 and (self.stratum is None or self.stratum < 16) and not self.local


@dataclass
class Peers:
    """`ntpq -pn`: ntpd's peers. The system peer is the one tallied `*` (or `o`, PPS); ntpq's
    offset is the peer's time minus this host's, in milliseconds, so the clock's own offset is
    its negative. `table` says a peer table (its header) was printed."""

    table: bool = False
    peers: int = 0
    system_peer: str = ""
    offset_s: float | None = None  # this host's clock minus the system peer's (positive: ahead)
    no_daemon: bool = False
    error: str = ""
    line: str = ""  # the system peer's line (evidence)
    rows: list[NtpPeer] = field(default_factory=list)
    unrecognised: list[str] = field(default_factory=list)

    @property
    def local_peer(self) -> bool:
        """The system peer is ntpd's local clock driver (LOCAL(0), 127.127.1.0): no real time source."""
        return any(r.tally in "*o" and r.local for r in self.rows)

    @property
    def synced(self) -> bool | None:
        if self.system_peer:
            return not self.local_peer
        return False if self.table or "no association" in self.error.lower() else None

    def reading(self) -> tuple[float | None, list[str]]:
        """(this clock minus real time as the peers show it, the rows that show it): the system
        peer's offset when it is a real source, else what every usable peer proves together."""
        if self.offset_s is not None and not self.local_peer:
            return self.offset_s, [self.line]
        usable = [r for r in self.rows if r.usable]
        return proven_offset([r.offset_s for r in usable]), [r.line for r in usable]


_NTPQ_ERROR = lazyre.compile(r"Connection refused|timed out, nothing received|Request timed out|No association ID|"
                         r"^ntpq: ", re.I)


def _peer_rows(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Rows with a remote name too long for its column (ntpq wraps it onto a line of its own) joined."""
    out: list[tuple[str, str]] = []
    for text, raw in rows:
        prev = out[-1][0].split() if out else []
        if len(prev) == 1 and set(prev[0]) != {"="} and text[:1].isspace():
            out[-1] = (out[-1][0] + " " + text.strip(), out[-1][1] + " " + raw.strip())
        else:
            out.append((text, raw))
    return out


def _peer(p: Peers, text: str, raw: str) -> bool:
    cols = text.split()
    if len(cols) < 10 or not re.fullmatch(_NUM, cols[-2]) or not re.fullmatch(r"[0-7]{1,3}", cols[-4]):
        return False
    p.peers += 1
    tally = cols[0][0] if cols[0][0] in "x.-+#*o" and len(cols[0]) > 1 else " "
    remote = cols[0][1:] if tally != " " else cols[0]
    offset = -float(cols[-2]) / 1000.0
    p.rows.append(NtpPeer(tally, remote, cols[1], int(cols[2]) if cols[2].isdigit() else None, int(cols[-4], 8),
                          offset, short(raw)))
    if tally in "*o":
        p.system_peer, p.line = remote, short(raw)
        p.offset_s = offset
    return True


def parse_peers(doc: Doc) -> Peers:
    p = Peers()
    for text, raw in _peer_rows(_lines(doc)):
        t = text.strip()
        if t.startswith("remote") and "refid" in t:
            p.table = True
        elif set(t) == {"="} or _peer(p, text, raw):
            continue
        elif _NTPQ_ERROR.search(t):
            p.error = p.error or short(raw)
            p.no_daemon = p.no_daemon or "connection refused" in t.lower()
        else:
            p.unrecognised.append(short(raw))
    return p


def detect_peers(doc: Doc) -> bool:
    heads = [ln.text.strip() for ln in doc.head(10)]
    return any(h.startswith("remote") and "refid" in h and "offset" in h for h in heads)


# ---- chronyc sources / sourcestats ------------------------------------------------------------

# print_signed_nanoseconds / print_nanoseconds (client.c): ns, us, ms, s, then minutes, hours, days, years
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "y": 365 * 86400.0}
_DUR = r"[-+]?\d+(?:\.\d+)?(?:ns|us|ms|s|m|h|d|y)"
_SOURCE_ROW = lazyre.compile(
    rf"^(?P<mode>[\^=#])(?P<state>[*+\-?x~ ])\s*(?P<name>\S+)\s+(?P<stratum>\d+)\s+(?P<poll>-?\d+)\s+"
    rf"(?P<reach>[0-7]{{1,3}})\s+(?P<lastrx>-|\d+[mhdy]?)\s+(?P<adj>{_DUR})\s*\[\s*(?P<meas>{_DUR})\s*\]"
    rf"\s*\+/-\s*(?P<err>{_DUR})\s*$")
_SOURCE_CSV = lazyre.compile(rf"^(?P<mode>[\^=#]),(?P<state>[*+\-?x~ ]),(?P<name>[^,]+),(?P<stratum>\d+),(?P<poll>-?\d+),"
                         rf"(?P<reach>[0-7]{{1,3}}),(?P<lastrx>\d+),(?P<adj>{_NUM}),(?P<meas>{_NUM}),(?P<err>{_NUM})$")
_STATS_ROW = lazyre.compile(rf"^(?P<name>\S+)\s+(?P<np>\d+)\s+(?P<nr>\d+)\s+(?P<span>-|\d+[mhdy]?)\s+(?P<freq>{_NUM})\s+"
                        rf"(?P<skew>{_NUM})\s+(?P<offset>{_DUR})\s+(?P<sd>{_DUR})\s*$")
_STATS_CSV = lazyre.compile(rf"^(?P<name>[^,]+),(?P<np>\d+),(?P<nr>\d+),(?P<span>\d+),(?P<freq>{_NUM}),(?P<skew>{_NUM}),"
                        rf"(?P<offset>{_NUM}),(?P<sd>{_NUM})$")
_NUMBER_OF_SOURCES = lazyre.compile(r"^210 Number of sources\s*=\s*(\d+)$")
_CAPTION = lazyre.compile(r"^(?:\.-|/|\||\\)")  # the -v caption lines above the header


def duration(text: str) -> float | None:
    """chronyc's `-123us` / `+12.3s` / `5m` (or a bare number of seconds, -c) in seconds."""
    m = re.fullmatch(r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(ns|us|ms|s|m|h|d|y)?", text.strip())
    if m is None:
        return None
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


@dataclass
class Source:
    """One `chronyc sources` row; offsets are this (NTP) clock minus the source's (positive: ahead)."""

    mode: str  # ^ server, = peer, # reference clock
    state: str  # * selected, + combined, - not combined, ? unusable, x falseticker, ~ too variable
    name: str
    stratum: int
    reach: int
    offset_s: float  # the adjusted offset (left of the brackets)
    measured_s: float
    error_s: float  # +/- the estimated error (root distance)
    sampled: bool  # LastRx is not `-` (a sample was received)
    line: str

    @property
    def local(self) -> bool:
        return is_local(self.name)

    @property
    def usable(self) -> bool:
        """A reading of this clock against real time: reached, sampled, not the local clock."""
        return self.reach != 0 and self.sampled and not self.local


@dataclass
class Sources:
    """`chronyc sources`: `table` when its header (or -c rows) was read."""

    table: bool = False
    verbose: bool = False
    rows: list[Source] = field(default_factory=list)
    no_daemon: bool = False
    error: str = ""
    header: str = ""  # the column header (evidence when there is no row)
    unrecognised: list[str] = field(default_factory=list)

    @property
    def selected(self) -> Source | None:
        return next((r for r in self.rows if r.state == "*"), None)

    @property
    def local_reference(self) -> bool:
        sel = self.selected
        return sel is not None and sel.local

    @property
    def synced(self) -> bool | None:
        """A source selected (`*`) that is not the local clock; no `*` source: not synchronised."""
        if not self.table:
            return None
        sel = self.selected
        return sel is not None and not sel.local

    def reading(self) -> tuple[float | None, list[str]]:
        """(the NTP clock minus real time, the rows that show it): the selected source's adjusted
        offset, else what every usable source proves together."""
        sel = self.selected
        if sel is not None and not sel.local:
            return sel.offset_s, [sel.line]
        usable = [r for r in self.rows if r.usable and r.state != "x"] or [r for r in self.rows if r.usable]
        return proven_offset([r.offset_s for r in usable]), [r.line for r in usable]


def _chrony_reply(obj: Sources | SourceStats, text: str, raw: str) -> bool:
    if _CHRONY_ERROR.match(text):
        obj.error = obj.error or short(raw)
        obj.no_daemon = obj.no_daemon or "cannot talk to daemon" in text.lower()
        return True
    return False


def parse_sources(doc: Doc) -> Sources:
    s = Sources()
    for text, raw in _lines(doc):
        t = text.strip()
        m = _SOURCE_ROW.match(t) or _SOURCE_CSV.match(t)
        if m:
            s.table = True
            s.rows.append(Source(m["mode"], m["state"], m["name"], int(m["stratum"]), int(m["reach"], 8),
                                 duration(m["adj"]) or 0.0, duration(m["meas"]) or 0.0, duration(m["err"]) or 0.0,
                                 m["lastrx"] != "-", short(raw)))
        elif t.startswith("MS Name/IP address"):
            s.table, s.header = True, short(raw)
        elif set(t) == {"="} or _NUMBER_OF_SOURCES.match(t):
            continue
        elif _CAPTION.match(t):
            s.verbose = True
        elif not _chrony_reply(s, text, raw):
            s.unrecognised.append(short(raw))
    return s


def detect_sources(doc: Doc) -> bool:
    heads = [ln.text.strip() for ln in doc.head(30)]
    return any(h.startswith("MS Name/IP address") and "Reach" in h for h in heads) or (
        sum(1 for h in heads if _SOURCE_CSV.match(h)) >= 1 and all(_SOURCE_CSV.match(h) for h in heads if h))


@dataclass
class SourceStat:
    name: str
    samples: int  # NP
    offset_s: float  # estimated offset: this clock minus the source's (positive: local fast)
    std_dev_s: float
    line: str

    @property
    def usable(self) -> bool:
        return self.samples > 0 and not is_local(self.name)


@dataclass
class SourceStats:
    """`chronyc sourcestats`: no selection state, only each source's estimated offset."""

    table: bool = False
    verbose: bool = False
    rows: list[SourceStat] = field(default_factory=list)
    no_daemon: bool = False
    error: str = ""
    unrecognised: list[str] = field(default_factory=list)

    def reading(self) -> tuple[float | None, list[str]]:
        """(what every source with samples proves of this clock's offset, their rows)."""
        usable = [r for r in self.rows if r.usable]
        return proven_offset([r.offset_s for r in usable]), [r.line for r in usable]


def parse_sourcestats(doc: Doc) -> SourceStats:
    s = SourceStats()
    for text, raw in _lines(doc):
        t = text.strip()
        m = _STATS_ROW.match(t) or _STATS_CSV.match(t)
        if m and not t.startswith("Name/IP"):
            s.table = True
            s.rows.append(SourceStat(m["name"], int(m["np"]), duration(m["offset"]) or 0.0, duration(m["sd"]) or 0.0,
                                     short(raw)))
        elif t.startswith("Name/IP Address") and "NP" in t:
            s.table = True
        elif set(t) == {"="} or _NUMBER_OF_SOURCES.match(t):
            continue
        elif _CAPTION.match(t):
            s.verbose = True
        elif not _chrony_reply(s, text, raw):
            s.unrecognised.append(short(raw))
    return s


def detect_sourcestats(doc: Doc) -> bool:
    heads = [ln.text.strip() for ln in doc.head(30)]
    return any(h.startswith("Name/IP Address") and "NP" in h and "Std Dev" in h for h in heads) or (
        any(_STATS_CSV.match(h) for h in heads) and all(_STATS_CSV.match(h) for h in heads if h))


# ---- chronyd / ntpd log lines -----------------------------------------------------------------

LOG_IDENTS = ("chronyd", "ntpd", "ntpdate")
# a source in use: chronyd's selection, ntpdate's adjustment or step (ntpdate.c: "adjust time server %s offset")
_SELECTED = lazyre.compile(r"^(?:Selected source \S+|(?:adjust|step) time server \S+ offset)")
# no source: chronyd (sources.c, reference.c); ntpdate (ntpdate.c, LOG_ERR) found none it could use
_NO_SOURCES = lazyre.compile(r"^(?:Can't synchronise: .*|No suitable source for synchronisation|"
                         r"no server suitable for synchronization found|no servers can be used, exiting)$")
_WRONG_BY = lazyre.compile(rf"^System clock wrong by ({_NUM}) seconds")
_STEPPED = lazyre.compile(r"^System clock was stepped by")
_SANITY = lazyre.compile(rf"time correction of ({_NUM}) seconds exceeds sanity limit", re.I)
_EXITED = lazyre.compile(r"^Fatal error\s*:|, exiting\.?$|^(?:ntpd )?exiting\b(?! on signal)", re.I)
# what the daemons print at error level (chrony LOG(LOGS_ERR), LOG_FATAL; ntpd msyslog(LOG_ERR)), by its wording
_ERROR_LEVEL = lazyre.compile(r"^(?:Fatal error|Could not|Can't|Cannot|Failed|Failing|Error|Invalid|Unable to|"
                          r"Another chronyd|CAP_SYS_TIME not present|Backward time jump|Forward time jump|"
                          r"no servers can be used)|\bfailed\b|\bexceeds\b|\bnot supported\b", re.I)


@dataclass
class LogEvent:
    kind: str  # selected, no-sources, wrong-by, stepped, exited, error
    text: str
    line: str
    value: float | None = None  # wrong-by: the clock minus true time (positive: ahead)
    ident: str = ""  # chronyd, ntpd


@dataclass
class ClockLog:
    """chronyd / ntpd lines of a journal or syslog, in order."""

    events: list[LogEvent] = field(default_factory=list)
    lines: int = 0  # the daemons' lines read, events or not

    def last(self, *kinds: str) -> LogEvent | None:
        return next((e for e in reversed(self.events) if e.kind in kinds), None)


def _log_event(text: str, raw: str) -> LogEvent | None:
    t = text.strip()
    if (m := _SELECTED.match(t)) is not None:
        return LogEvent("selected", t, raw)
    if _NO_SOURCES.match(t):
        return LogEvent("no-sources", t, raw)
    if (m := _WRONG_BY.match(t)) is not None:
        return LogEvent("wrong-by", t, raw, -float(m.group(1)))  # reference.c logs -offset: positive = behind
    if (m := _SANITY.search(t)) is not None:
        return LogEvent("wrong-by", t, raw, -float(m.group(1)))  # ntpd's correction: positive = the clock is behind
    if _STEPPED.match(t):
        return LogEvent("stepped", t, raw)
    if _EXITED.search(t):
        return LogEvent("exited", t, raw)
    if _ERROR_LEVEL.search(t):
        return LogEvent("error", t, raw)
    return None


def parse_log(doc: Doc) -> ClockLog:
    out = ClockLog()
    for ln in doc.select(LOG_IDENTS):
        if ln.ident not in LOG_IDENTS or not ln.text.strip():
            continue
        out.lines += 1
        ev = _log_event(ln.text, short(ln.raw))
        if ev is not None:
            ev.ident = ln.ident
            out.events.append(ev)
    return out


def detect_log(doc: Doc) -> bool:
    return any(ln.ident in LOG_IDENTS for ln in doc.head())


# ---- ntpstat ----------------------------------------------------------------------------------


@dataclass
class NtpStat:
    state: str = ""  # "synchronised", "unsynchronised", "no-daemon", "" (not recognised)
    source: str = ""  # "NTP server (10.0.0.1)", "local net", ...
    stratum: int | None = None
    within_ms: float | None = None
    line: str = ""
    unrecognised: list[str] = field(default_factory=list)


def parse_ntpstat(doc: Doc) -> NtpStat:
    s = NtpStat()
    for text, raw in _lines(doc):
        low = text.strip().lower()
        m = re.match(r"^synchroni[sz]ed to (.*?)(?: at stratum (\d+)|, stratum unknown)?\s*$", low)
        if m:
            s.state, s.line = "synchronised", short(raw)
            s.source = re.split(r" at stratum|, stratum", text.strip()[len("synchronised to "):])[0]
            s.stratum = int(m.group(2)) if m.group(2) else None
        elif low.startswith(("unsynchronised", "unsynchronized")):
            s.state, s.line = "unsynchronised", short(raw)
        elif "unable to talk to ntp daemon" in low or "cannot talk to daemon" in low:
            s.state, s.line = "no-daemon", short(raw)
        elif low.startswith("time correct to within"):
            s.within_ms = _num(low)
        elif not low.startswith(("polling server every", "time server re-starting", "accuracy unknown",
                                 "poll interval unknown")):
            s.unrecognised.append(short(raw))
    return s


def detect_ntpstat(doc: Doc) -> bool:
    heads = [ln.text.strip().lower() for ln in doc.head(10)]
    return any(h.startswith(("synchronised to ", "synchronized to ")) and "stratum" in h for h in heads) or (
        any(h.startswith(("unsynchronised", "unsynchronized")) for h in heads)
        and any(h.startswith(("polling server", "time server re-starting")) for h in heads)) or any(
        h.startswith("unable to talk to ntp daemon") for h in heads)


# ---- the wall clock ---------------------------------------------------------------------------


@dataclass
class WallClock:
    """The node's wall clock as `date +%s.%N` printed it; `resolution` is 1 s without %N."""

    epoch: float | None = None
    resolution: float = 1e-9
    line: str = ""


def parse_wall(doc: Doc) -> WallClock:
    for text, raw in _lines(doc):
        m = re.fullmatch(r"\s*(\d{9,11})(?:\.(\d{1,9}|%?N))?\s*", text)
        if m is None:
            continue
        frac = m.group(2) or ""
        if frac.isdigit():
            return WallClock(float(f"{m.group(1)}.{frac}"), 10.0 ** -len(frac), short(raw))
        return WallClock(float(m.group(1)), 1.0, short(raw))
    return WallClock()


FORMATS = [
    Format("chronyc-tracking", detect=detect_tracking, description="chronyc tracking report", priority=60),
    Format("timedatectl", detect=detect_timedate, description="timedatectl show / status", priority=60),
    Format("ntpstat", detect=detect_ntpstat, description="ntpstat", priority=60),
    Format("ntpq-peers", detect=detect_peers, description="ntpq -pn (ntpd's peers)", priority=60),
    Format(PROBE_SOURCES, detect=detect_sources, description="chronyc sources [-v] [-c]", priority=60),
    Format(PROBE_SOURCESTATS, detect=detect_sourcestats, description="chronyc sourcestats [-v] [-c]", priority=60),
    Format(PROBE_LOG, detect=detect_log, description="chronyd / ntpd lines of a journal or syslog", priority=35),
]
PARSERS = [ParserSpec(PROBE_CHRONY, parse_tracking), ParserSpec(PROBE_TIMEDATE, parse_timedate),
           ParserSpec(PROBE_NTPSTAT, parse_ntpstat), ParserSpec(PROBE_NTPQ, parse_peers),
           ParserSpec(PROBE_WALL, parse_wall), ParserSpec(PROBE_SOURCES, parse_sources),
           ParserSpec(PROBE_SOURCESTATS, parse_sourcestats), ParserSpec(PROBE_LOG, parse_log)]

__all__ = ["FORMATS", "PARSERS", "ClockLog", "LogEvent", "NtpPeer", "NtpStat", "Peers", "Source", "SourceStat",
           "SourceStats", "Sources", "detect_log", "detect_sources", "detect_sourcestats", "duration", "is_local",
           "parse_log", "parse_sources", "parse_sourcestats", "proven_offset", "Timedate", "Tracking", "WallClock", "parse_ntpstat", "parse_peers", "parse_timedate",
           "parse_tracking", "parse_wall"]
