"""A real test cluster on this machine: network namespaces on a bridge, one OpenSSH server
per node, per-node fake GPU tools, and (optionally) a real Slurm with one slurmd per node.

Layout: namespace `<p>-sw` holds the bridge (the switch), `<p>-c` is the client (login
node) from which preflight runs, `<p>-n1..N` are the nodes. Each node has its own address,
hostname (UTS namespace), a private /run (mount namespace) for sshd. The root namespace gets
an `unreachable` route for the test subnet first, so nothing can leak to the real network;
every client command runs inside the client namespace. `down()` removes everything.

Faults: `set_port_mtu(node, 1500)` on the bridge side (jumbo frames vanish silently),
`rate_limit(node, "20mbit")` with tbf, `stop_sshd(node)`, per-node fake tool scenarios,
`remove_nvml(node)` (no driver library).

Like a real GPU node, a node has nothing of preflight installed: its `python3` is a bare venv
of the base interpreter (no preflight, no site packages), and its NVIDIA driver library is the
fake libnvidia-ml.so.1 (tests/fakes/fake_nvml.py) in its own lib folder on LD_LIBRARY_PATH. The
operator's own installs stay reachable by name after it: the preflight CLI (Prolog,
HealthCheckProgram) and torchrun of the test environment.

Usable by hand too: `python -m tests.netcluster up 4` / `down`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests import leaks

ROOT = Path(__file__).resolve().parent.parent


def sh(*argv: str, check: bool = True, timeout: float = 30, **kw: object) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p


def prerequisites() -> list[str]:
    """What this machine lacks to build the cluster (empty when all is there)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen", "/usr/sbin/sshd", "ping", "tc"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        missing.append("gcc (the fake libnvidia-ml.so.1)")
    return missing


def slurm_prerequisites() -> list[str]:
    return [t for t in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "srun", "scontrol")
            if shutil.which(t) is None]


@dataclass
class Node:
    name: str
    index: int
    addr: str
    ns: str
    veth_node: str
    veth_sw: str
    home: Path
    sshd: subprocess.Popen[bytes] | None = None
    slurmd: subprocess.Popen[bytes] | None = None


@dataclass
class NetCluster:
    n: int
    workdir: Path
    prefix: str = "pf"
    subnet: str = "10.77.0"
    mtu: int = 9000
    nodes: list[Node] = field(default_factory=list)
    client_ns: str = ""
    sw_ns: str = ""
    client_addr: str = ""
    ssh_config: Path = Path()
    key: Path = Path()
    known_hosts: Path = Path()
    _route_added: bool = False
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    slurm_conf: Path = Path()  # set by start_slurm
    _slurm_procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _lock: IO[str] | None = None

    # ---- building -------------------------------------------------------------------------
    def up(self, tools: list[str] | None = None) -> NetCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._lock_prefix()
        self.sw_ns = f"{self.prefix}-sw"
        self.client_ns = f"{self.prefix}-c"
        self.client_addr = f"{self.subnet}.2"
        # Safety first: the test subnet can never leave this machine through the default route.
        p = sh("ip", "route", "add", "unreachable", f"{self.subnet}.0/24", check=False)
        self._route_added = p.returncode == 0
        try:
            self._build(tools or [])
        except Exception:
            self.down()
            raise
        return self

    def _lock_prefix(self, timeout: float = 900) -> None:
        """Own the namespace prefix while the cluster is up: a second test run that builds a
        cluster of the same prefix (the same test file, run twice at once) waits for this one
        to come down, instead of taking its namespaces away and ending its processes as stale.
        The lock goes with the process that holds it, so a crashed run leaves nothing held."""
        import fcntl

        if self._lock is not None:
            return
        folder = Path("/tmp/preflight-netcluster-locks")  # namespaces are the machine's: so is the lock
        folder.mkdir(exist_ok=True)
        lock = open(folder / f"{self.prefix}.lock", "a+")  # noqa: SIM115 - held until down()
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.seek(0)
                    holder = lock.read().strip()
                    lock.close()
                    raise RuntimeError(f"test cluster prefix {self.prefix!r} still in use after {timeout:g} s "
                                       f"by {holder or 'another process'}") from None
                time.sleep(1)
        lock.truncate(0)
        lock.write(f"pid {os.getpid()} ({self.workdir})\n")
        lock.flush()
        self._lock = lock

    def _unlock_prefix(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the lock
            self._lock = None

    def _build(self, tools: list[str]) -> None:
        self._cleanup_stale()
        sh("ip", "netns", "add", self.sw_ns)
        leaks.register_namespace(self.sw_ns)
        sh("ip", "-n", self.sw_ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.sw_ns, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.sw_ns, "link", "set", "br0", "mtu", str(self.mtu), "up")
        self._attach(self.client_ns, f"{self.prefix}ca", f"{self.prefix}cb", self.client_addr)
        for i in range(1, self.n + 1):
            node = Node(name=f"n{i}", index=i, addr=f"{self.subnet}.{10 + i}", ns=f"{self.prefix}-n{i}",
                        veth_node=f"{self.prefix}n{i}a", veth_sw=f"{self.prefix}n{i}b",
                        home=self.workdir / f"n{i}")
            node.home.mkdir(parents=True, exist_ok=True)
            self._attach(node.ns, node.veth_node, node.veth_sw, node.addr)
            self.nodes.append(node)
        hosts = self.workdir / "hosts"
        hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{n.addr} {n.name}\n" for n in self.nodes)
                         + f"{self.client_addr} login\n")
        self._keys()
        for node in self.nodes:
            self._install_tools(node, tools)
            self.start_sshd(node)
        self.wait_ssh()

    def _cleanup_stale(self) -> None:
        listed = sh("ip", "netns", "list", check=False).stdout
        names = [w[0] for line in listed.splitlines() if (w := line.split()) and w[0].startswith(f"{self.prefix}-")]
        self._remove_namespaces(names)

    def _remove_namespaces(self, names: list[str]) -> None:
        """End every process that runs in these namespaces (sshd's session children, slurmstepd,
        job tasks, whatever a test started there: not only the daemons we started), then
        delete the namespaces. A process left in one would keep it alive after `ip netns del`."""
        inodes = {ino: name for name in names if (ino := leaks.named_netns_inode(name)) is not None}
        if inodes:
            left = leaks.end(leaks.in_namespaces(set(inodes)))
            if left:
                print(f"netcluster: processes still alive in {sorted(inodes.values())}: {left}", file=sys.stderr)
        for name in names:
            sh("ip", "netns", "del", name, check=False)
        for ino in inodes:
            leaks.namespace_deleted(ino)

    def _attach(self, ns: str, inner: str, outer: str, addr: str) -> None:
        sh("ip", "netns", "add", ns)
        leaks.register_namespace(ns)
        sh("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
        sh("ip", "link", "set", inner, "netns", ns)
        sh("ip", "link", "set", outer, "netns", self.sw_ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", inner, "name", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "mtu", str(self.mtu))
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.sw_ns, "link", "set", outer, "mtu", str(self.mtu))
        sh("ip", "-n", self.sw_ns, "link", "set", outer, "master", "br0")
        sh("ip", "-n", self.sw_ns, "link", "set", outer, "up")

    def _keys(self) -> None:
        self.key = self.workdir / "id_ed25519"
        if not self.key.exists():
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key), "-C", "preflight-test")
        (self.workdir / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        lines = []
        for node in self.nodes:
            hk = node.home / "ssh_host_ed25519_key"
            if not hk.exists():
                sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hk), "-C", node.name)
            pub = " ".join(hk.with_suffix(".pub").read_text().split()[:2])
            lines.append(f"{node.name},{node.addr} {pub}\n")
        self.known_hosts = self.workdir / "known_hosts"
        self.known_hosts.write_text("".join(lines))
        self.ssh_config = self.workdir / "ssh_config"
        cfg = []
        for node in self.nodes:
            cfg.append(f"Host {node.name}\n  HostName {node.addr}\n  User root\n  Port 22\n"
                       f"  IdentityFile {self.key}\n  UserKnownHostsFile {self.known_hosts}\n"
                       "  StrictHostKeyChecking yes\n\n")
        self.ssh_config.write_text("".join(cfg))

    def _install_tools(self, node: Node, tools: list[str]) -> None:
        from tests import fakes

        fakes.install(node.home / "bin", tools)
        (node.home / "scenario").mkdir(exist_ok=True)
        self.install_nvml(node.name)

    def install_nvml(self, name: str, variant: str = "") -> Path:
        """Put the (fake) driver library into the node's lib folder."""
        from tests.fakes import fake_nvml

        return fake_nvml.install(self.node(name).home / "lib", variant)

    def remove_nvml(self, name: str) -> None:
        """The node loses its driver library (as a node without the NVIDIA driver)."""
        (self.node(name).home / "lib" / "libnvidia-ml.so.1").unlink(missing_ok=True)

    def node_python(self) -> Path:
        """The nodes' python3: a bare venv of the base interpreter, made once per cluster (no
        preflight, no nvidia-ml-py, no site packages)."""
        venv = self.workdir / "nodepython"
        if not (venv / "bin" / "python3").exists():
            base = getattr(sys, "_base_executable", sys.executable)
            sh(base, "-m", "venv", "--without-pip", str(venv), timeout=120)
        return venv / "bin"

    def node_path(self, node: Node) -> str:
        # the node's own python3 first; the test environment's bin (preflight, torchrun) after it
        return (f"{node.home / 'bin'}:{self.node_python()}:{Path(sys.executable).parent}:"
                "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")

    def start_sshd(self, node: Node) -> None:
        cfg = node.home / "sshd_config"
        cfg.write_text(
            f"Port 22\nListenAddress {node.addr}\nHostKey {node.home / 'ssh_host_ed25519_key'}\n"
            "PidFile /run/sshd.pid\n"
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nPrintMotd no\nMaxStartups 100:30:200\nMaxSessions 100\n"
            f"SetEnv PATH={self.node_path(node)} PREFLIGHT_FAKE_DIR={node.home / 'scenario'} "
            f"LD_LIBRARY_PATH={node.home / 'lib'}\n"
        )
        script = (f"hostname {node.name} && mount -t tmpfs tmpfs /run && mkdir -p /run/sshd && "
                  f"{self._plain_bashrc()}exec /usr/sbin/sshd -D -e -f {cfg}")
        log = open(node.home / "sshd.log", "ab")  # noqa: SIM115 - the daemon owns it
        node.sshd = subprocess.Popen(
            ["ip", "netns", "exec", node.ns, "unshare", "--uts", "--mount", "--propagation", "private",
             "sh", "-c", script],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self._procs.append(node.sshd)

    def _plain_bashrc(self) -> str:
        """Shell words that hide this machine's ~/.bashrc from the node's sessions (bash reads
        it for commands run over ssh): a developer's pyenv shims would otherwise come before the
        node's PATH and pick its python3. Empty when there is none."""
        import pwd

        rc = Path(pwd.getpwnam("root").pw_dir) / ".bashrc"
        if not rc.is_file():
            return ""
        plain = self.workdir / "node.bashrc"
        plain.write_text("# a node's own shell start-up: nothing added to PATH\n")
        return f"mount --bind {plain} {rc} && "

    def stop_sshd(self, node: Node) -> None:
        if node.sshd and node.sshd.poll() is None:
            os.killpg(node.sshd.pid, signal.SIGTERM)
            try:
                node.sshd.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(node.sshd.pid, signal.SIGKILL)

    def wait_ssh(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        pending = list(self.nodes)
        while pending and time.monotonic() < deadline:
            still = []
            for node in pending:
                p = self.client("timeout", "1", "bash", "-c", f"exec 3<>/dev/tcp/{node.addr}/22", check=False)
                if p.returncode != 0:
                    still.append(node)
            pending = still
            if pending:
                time.sleep(0.2)
        if pending:
            logs = {n.name: (n.home / "sshd.log").read_text()[-500:] for n in pending}
            raise RuntimeError(f"sshd did not come up on {[n.name for n in pending]}: {logs}")

    # ---- faults -----------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def set_port_mtu(self, name: str, mtu: int) -> None:
        sh("ip", "-n", self.sw_ns, "link", "set", self.node(name).veth_sw, "mtu", str(mtu))

    def rate_limit(self, name: str, rate: str = "20mbit") -> None:
        node = self.node(name)
        for ns, dev in ((self.sw_ns, node.veth_sw), (node.ns, "eth0")):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", rate, "burst", "32kbit", "latency", "400ms")

    def scenario(self, name: str, spec: dict[str, list[dict]], files: dict[str, str | Path] | None = None) -> Path:
        from tests import fakes

        folder = self.node(name).home / "scenario"
        for old in folder.glob("*"):
            if old.is_file():
                old.unlink()
        return fakes.scenario(folder, spec, files)

    # ---- running ----------------------------------------------------------------------------
    def client(self, *argv: str, check: bool = True, timeout: float = 120,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command in the client namespace (the only place test clients run)."""
        return sh("ip", "netns", "exec", self.client_ns, *argv, check=check, timeout=timeout, env=env)

    def on_node(self, name: str, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", self.node(name).ns, *argv, check=check, timeout=timeout)

    # ---- teardown ---------------------------------------------------------------------------
    def down(self) -> None:
        if self._lock is None:
            try:  # never built (or already down): take nothing from a cluster of another run
                self._lock_prefix(timeout=0)
            except RuntimeError as e:
                print(f"netcluster: not tearing down: {e}", file=sys.stderr)
                return
        self.stop_slurm()
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        # the daemons are gone; what they started in a namespace of their own session (sshd's
        # session children) is not: end everything that runs in the cluster's namespaces
        self._remove_namespaces([ns for ns in [n.ns for n in self.nodes] + [self.client_ns, self.sw_ns] if ns])
        self._cleanup_stale()
        if self._route_added:
            sh("ip", "route", "del", "unreachable", f"{self.subnet}.0/24", check=False)
            self._route_added = False
        self._unlock_prefix()

    # ---- slurm ------------------------------------------------------------------------------
    # A real Slurm: munged with its own socket and key, slurmctld in the client namespace (as
    # host `login`), one slurmd per node namespace (`nsenter --net`, own UTS name nK). The
    # Prolog, HealthCheckProgram and every task see the node's PATH (fake tools first),
    # PREFLIGHT_FAKE_DIR and LD_LIBRARY_PATH (the node's driver library), like the sshd sessions do.
    def slurm_env(self) -> dict[str, str]:
        """Environment for Slurm client commands (srun, sbatch, scontrol, sinfo)."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        for var in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            del env[var]
        return env

    def slurm(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A Slurm client command, in the client namespace."""
        return self.client(*argv, check=check, timeout=timeout, env=self.slurm_env())

    def _slurm_dir(self) -> Path:
        return self.workdir / "slurm"

    def _node_env_script(self, name: str, target: Path | None, body: str = "") -> Path:
        """A wrapper that gives a Slurm-run script the node's environment, then runs target."""
        node = '${SLURMD_NODENAME:-$(hostname)}'
        path = self.node_path(Node(name="X", index=0, addr="", ns="", veth_node="", veth_sw="",
                                   home=self.workdir / "@NODE@")).replace("@NODE@", node)
        script = self._slurm_dir() / name
        text = (f"#!/bin/sh\nexport PATH=\"{path}\"\n"
                f"export PREFLIGHT_FAKE_DIR=\"{self.workdir}/{node}/scenario\"\n"
                f"export LD_LIBRARY_PATH=\"{self.workdir}/{node}/lib\"\n"
                f"export SLURM_CONF=\"{self._slurm_dir() / 'slurm.conf'}\"\n{body}")
        if target is not None:
            text += f"exec {target} \"$@\"\n"
        script.write_text(text)
        script.chmod(0o755)
        return script

    def start_slurm(self, prolog: Path | None = None, health_check: Path | None = None,
                    timeout: float = 60, cred_expire: int = 5, wait_for: list[str] | None = None) -> None:
        """Start munged, slurmctld and one slurmd per node; wait until sinfo shows them idle.

        cred_expire (AuthInfo) is also how long a requeued job waits before it may start again
        (120 s by default in Slurm; short here so a job requeued by a failing Prolog moves on).
        wait_for: the nodes that must come up idle (default all)."""
        d = self._slurm_dir()
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "munge").chmod(0o700)
        key = d / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = d / "munge" / "munge.socket.2"
        tag = {**os.environ, "PREFLIGHT_SLURM_TAG": str(d)}
        self._spawn_slurm(["/usr/sbin/munged", "-F", "--force", f"--socket={sock}", f"--key-file={key}",
                           f"--pid-file={d / 'munge' / 'munged.pid'}", f"--seed-file={d / 'munge' / 'munged.seed'}",
                           f"--log-file={d / 'munge' / 'munged.log'}"], d / "munged.out", tag)
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not sock.exists():
            raise RuntimeError(f"munged did not start: {(d / 'munged.out').read_text()[-500:]}")
        task_prolog = self._node_env_script("task_prolog.sh", None, body=(
            'echo "export PATH=$PATH"\necho "export PREFLIGHT_FAKE_DIR=$PREFLIGHT_FAKE_DIR"\n'
            'echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"\n'))
        lines = [
            "ClusterName=pftest", f"SlurmctldHost=login({self.client_addr})",
            "SlurmctldPort=6817", "SlurmdPort=6818", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock},cred_expire={cred_expire}",
            f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d}/slurmd.%n.pid",
            f"SlurmctldLogFile={d / 'slurmctld.log'}", f"SlurmdLogFile={d}/slurmd.%n.log",
            "SlurmctldDebug=info", "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "MpiDefault=none",
            "SwitchType=switch/none", "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides",
            "SchedulerParameters=nohold_on_prolog_fail,sched_interval=2,bf_interval=1", "ReturnToService=2",
            "SlurmdTimeout=60", "SlurmctldTimeout=30", "InactiveLimit=0", "KillWait=2", "MinJobAge=300",
            "MessageTimeout=10", "PrologFlags=Alloc", f"TaskProlog={task_prolog}",
        ]
        if prolog is not None:
            lines.append(f"Prolog={self._node_env_script('prolog.sh', prolog.resolve())}")
        if health_check is not None:
            lines.append(f"HealthCheckProgram={self._node_env_script('healthcheck.sh', health_check.resolve())}")
            lines.append("HealthCheckInterval=3600")
        for node in self.nodes:
            lines.append(f"NodeName={node.name} NodeAddr={node.addr} CPUs=4 RealMemory=1000 State=UNKNOWN")
        names = ",".join(n.name for n in self.nodes)
        lines.append(f"PartitionName=main Nodes={names} Default=YES MaxTime=INFINITE State=UP")
        self.slurm_conf = d / "slurm.conf"
        self.slurm_conf.write_text("\n".join(lines) + "\n")
        env = {**tag, "SLURM_CONF": str(self.slurm_conf)}
        self._spawn_slurm(["nsenter", f"--net=/run/netns/{self.client_ns}", "unshare", "--uts", "sh", "-c",
                           f"hostname login && exec /usr/sbin/slurmctld -D -i -f {self.slurm_conf}"],
                          d / "slurmctld.out", env)
        for node in self.nodes:
            node.slurmd = self._spawn_slurm(
                # own UTS name, and an /etc/hosts (private mount namespace) that resolves the
                # cluster's names, as a real node's does (torchrun's rendezvous needs it)
                ["nsenter", f"--net=/run/netns/{node.ns}", "unshare", "--uts", "--mount", "--propagation",
                 "private", "sh", "-c",
                 f"hostname {node.name} && mount --bind {self.workdir / 'hosts'} /etc/hosts && "
                 f"exec /usr/sbin/slurmd -D -N {node.name} -f {self.slurm_conf}"],
                d / f"slurmd.{node.name}.out", env)
        self.wait_slurm_idle(timeout, wait_for)

    def _spawn_slurm(self, argv: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(log_path, "ab")  # noqa: SIM115 - the daemon owns it
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        self._slurm_procs.append(proc)
        return proc

    def slurm_states(self) -> dict[str, str]:
        """node -> state as sinfo prints it (idle, alloc, drain, ...)."""
        p = self.slurm("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=20)
        out: dict[str, str] = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def wait_slurm_idle(self, timeout: float = 60, nodes: list[str] | None = None) -> None:
        want = nodes or [n.name for n in self.nodes]
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.slurm_states()
            if all(states.get(n) == "idle" for n in want):
                return
            time.sleep(0.3)
        logs = (self._slurm_dir() / "slurmctld.log")
        tail = logs.read_text()[-1500:] if logs.exists() else ""
        raise RuntimeError(f"slurm nodes not idle after {timeout:g} s: {states}\n{tail}")

    def stop_slurm(self) -> None:
        """Cancel every job, stop the daemons, and kill whatever they left behind."""
        if not self._slurm_procs:
            return
        if any(p.poll() is None for p in self._slurm_procs) and self.client_ns:
            self.slurm("scancel", "--full", "--quiet", "-p", "main", check=False, timeout=10)
        for proc in reversed(self._slurm_procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except OSError:
                    pass
        for proc in self._slurm_procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait(timeout=5)
        # slurmstepd and job tasks outlive slurmd: find them by the tag or this cluster's
        # SLURM_CONF in their environment, and by parentage, and kill them by pid.
        for pid in self._slurm_leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._slurm_procs.clear()
        for node in self.nodes:
            node.slurmd = None

    def _slurm_leftovers(self) -> list[int]:
        tags = {f"PREFLIGHT_SLURM_TAG={self._slurm_dir()}".encode(), f"SLURM_CONF={self.slurm_conf}".encode()}
        parents: dict[int, int] = {}
        tagged: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
                parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
                if tags & set((entry / "environ").read_bytes().split(b"\0")):
                    tagged.add(pid)
            except (OSError, ValueError, IndexError):
                continue
        found = set(tagged)
        for _ in range(10):
            more = {p for p, pp in parents.items() if pp in found and p not in found}
            if not more:
                break
            found |= more
        found.discard(os.getpid())
        return sorted(found)



@contextmanager
def healthy_cluster(n: int, workdir: Path, prefix: str, subnet: str) -> Iterator[NetCluster]:
    """An n-node cluster with every fake tool installed and a healthy 8xH100 scenario on each
    node (`tests.scenarios.healthy_h100`), torn down at the end whatever happened."""
    from tests import scenarios

    c = NetCluster(n, workdir, prefix=prefix, subnet=subnet)
    c.up(scenarios.TOOLS)
    try:
        for node in c.nodes:
            scenarios.healthy_h100(node.home / "scenario")
        yield c
    finally:
        c.down()

def main() -> None:
    cmd = sys.argv[1] if len(sys.argv) > 1 else "up"
    work = Path(os.environ.get("PREFLIGHT_CLUSTER_DIR", "/tmp/preflight-cluster"))
    if cmd == "up":
        c = NetCluster(int(sys.argv[2]) if len(sys.argv) > 2 else 4, work)
        c.up(["nvidia-smi", "dmesg", "ibstat"])
        print(f"up: {[n.name for n in c.nodes]}; ssh config {c.ssh_config}; client netns {c.client_ns}")
        print("processes are children of this command: press Ctrl-C to tear down")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            c.down()
    elif cmd == "down":
        NetCluster(0, work).down()


if __name__ == "__main__":
    main()
