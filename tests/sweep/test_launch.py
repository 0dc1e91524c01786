"""The launcher's watch over node agents, with real processes standing in for ssh sessions
(shell commands printing what ssh or an agent prints): the first node that cannot start ends
the launch within seconds, and the outcome names it with the launcher's own message."""

from __future__ import annotations

import shlex
import time

import pytest

from preflight.model import Status
from preflight.profile import load
from preflight.sweep import launch, outcome
from preflight.sweep.spec import SweepSpec, event_line


def agent_says(node: str, torch: bool = True, then: str = "sleep 60") -> list[str]:
    lines = [event_line("agent", node=node, nproc=1, python="/opt/job/bin/python", torch=torch, beat_s=0.3)]
    if not torch:
        lines.append(event_line("unfit", node=node, python="/opt/job/bin/python", missing="torch",
                                error="No module named 'torch' for /opt/job/bin/python (Python 3.11)"))
        then = "exit 3"
    script = "; ".join(f"echo {shlex.quote(x)}" for x in lines) + f"; {then}"
    return ["sh", "-c", script]


def ssh_fails(message: str, rc: int = 255) -> list[str]:
    return ["sh", "-c", f"echo {shlex.quote(message)} >&2; exit {rc}"]


def watched(cmds: dict[str, list[str]], **kw: float) -> launch.Launched:
    return launch.run_processes(cmds, 60, watch=launch.Watch(nodes={n: [n] for n in cmds}, **kw))


def graded(launched: launch.Launched, nodes: list[str]) -> list:
    spec = SweepSpec(max_bytes=1024)
    out = outcome.collect(launched, spec, nodes)
    return outcome.grade(out, load("generic"))[0]


def test_refused_host_key_ends_the_launch_and_names_the_node() -> None:
    t = time.monotonic()
    got = watched({"n1": agent_says("n1"), "n2": agent_says("n2"),
                   "n3": ssh_fails("Host key verification failed.")}, start_s=20, stall_s=0)
    took = time.monotonic() - t
    assert took < 8, took  # the others would have slept 60 s
    assert [f.node for f in got.failures] == ["n3"]
    f = got.failures[0]
    assert f.cause == "host key refused" and f.message == "Host key verification failed." and f.rc == 255
    res = graded(got, ["n1", "n2", "n3"])
    err = [r for r in res if r.status is Status.ERROR]
    assert [r.node for r in err] == ["n3"] and "could not start on n3" in err[0].summary
    assert "Host key verification failed." in err[0].summary and "ssh-keygen -R n3" in err[0].remedy
    group = next(r for r in res if r.node == "cluster")
    assert group.status is Status.SKIP and "stalled" not in group.summary and "n3" in group.summary


@pytest.mark.parametrize(("message", "cause"), [
    ("ssh: connect to host n3 port 22: Connection refused", "ssh connection refused (sshd not running?)"),
    ("Connection to 10.0.0.3 port 22 timed out", "ssh connection timed out"),
    ("ssh: Could not resolve hostname n3: Name or service not known", "unknown host name"),
    ("root@n3: Permission denied (publickey).", "ssh login refused"),
    ("/opt/py/bin/python: No module named preflight.sweep", "preflight is not installed for this python"),
    ("bash: line 1: /opt/py/bin/python: No such file or directory", "python not found"),
    ("something else entirely", "exited with code 255"),
])
def test_the_launchers_message_gives_the_cause(message: str, cause: str) -> None:
    assert launch.classify(["", message], 255) == (cause, message)


def test_host_key_warning_banner_gives_ssh_verdict_line() -> None:
    lines = ["@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
             "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @",
             "Host key for n3 has changed and you have requested strict checking.",
             "Host key verification failed."]
    assert launch.classify(lines, 255) == ("host key refused", "Host key verification failed.")


def test_a_node_that_never_answers_is_named_after_the_start_deadline() -> None:
    t = time.monotonic()
    got = watched({"n1": agent_says("n1"), "n2": ["sleep", "60"]}, start_s=1.5, stall_s=0)
    took = time.monotonic() - t
    assert 1.4 < took < 8, took
    assert [(f.node, f.cause) for f in got.failures] == [("n2", "no answer")]
    assert "no output at all" in got.failures[0].message


def test_a_node_that_goes_silent_is_a_stall() -> None:
    """n2 answers, then nothing (its heartbeats stop: the link stalls); n1 keeps beating."""
    beat = "while true; do echo " + shlex.quote(event_line("beat", node="n1")) + "; sleep 0.3; done"
    got = watched({"n1": agent_says("n1", then=beat), "n2": agent_says("n2")}, start_s=10, stall_s=2)
    assert [(f.node, f.cause, f.started) for f in got.failures] == [("n2", "output stalled", True)]
    assert got.seconds < 8
    err = [r for r in graded(got, ["n1", "n2"]) if r.status is Status.ERROR]
    assert [r.node for r in err] == ["n2"] and "lost during the sweep" in err[0].summary
    # an agent that does not beat (an older preflight on the node) is never taken for a stall
    quiet = ["sh", "-c", "echo " + shlex.quote(event_line("agent", node="n2", torch=True)) + "; sleep 4"]
    got = watched({"n1": agent_says("n1", then=beat.replace("while true", "for i in 1 2 3 4 5 6 7 8 9 10 11 12")),
                   "n2": quiet}, start_s=10, stall_s=2)
    assert got.failures == []


def test_one_node_without_torch_is_its_error() -> None:
    got = watched({"n1": agent_says("n1"), "n2": agent_says("n2", torch=False)}, start_s=10, stall_s=0)
    assert got.seconds < 8
    res = graded(got, ["n1", "n2"])
    err = [r for r in res if r.status is Status.ERROR]
    assert [r.node for r in err] == ["n2"] and "torch" in err[0].summary and "could not start" in err[0].summary


def test_no_node_with_torch_is_a_skip_naming_sweep_python() -> None:
    got = watched({"n1": agent_says("n1", torch=False), "n2": agent_says("n2", torch=False)}, start_s=10)
    res = graded(got, ["n1", "n2"])
    assert [r.status for r in res] == [Status.SKIP]
    assert "torch is not importable" in res[0].summary and "/opt/job/bin/python" in res[0].summary
    assert "--sweep-python PATH" in res[0].remedy and res[0].facts["reason"] == "no-torch"


def test_a_healthy_launch_is_left_alone() -> None:
    def cmd(node: str) -> list[str]:
        done = [event_line("agent", node=node, nproc=1, torch=True),
                event_line("rank_exit", node=node, rank=0, rc=0)]
        return ["sh", "-c", "; ".join(f"echo {shlex.quote(x)}" for x in done)]

    got = watched({"n1": cmd("n1"), "n2": cmd("n2")}, start_s=5, stall_s=5)
    assert got.failures == [] and got.rc == {"n1": 0, "n2": 0}


def test_the_path_check_line_comes_first_and_is_dropped() -> None:
    """An SSH agent's command first prints one jumbo-sized line (a black-holed path holds
    everything behind it); the launcher drops that line, the agent's answer counts as usual."""
    answer = event_line("agent", node="n1", nproc=1, torch=True)
    argv = launch.path_checked(["sh", "-c", f"echo {shlex.quote(answer)}"])
    assert argv[:2] == ["sh", "-c"] and argv[2].endswith(f"exec sh -c {shlex.quote('echo ' + shlex.quote(answer))}")
    got = watched({"n1": argv}, start_s=5, stall_s=0)
    assert got.failures == [] and list(got.agents) == ["n1"] and got.rc == {"n1": 0}
    assert [e["ev"] for e in got.events] == ["agent"] and got.raw == {}


STALL = ("SSH stalled after key exchange with n2 (10.9.0.2:22): no answer to authentication within 5 s while the "
         "small handshake packets got through; large packets are probably dropped on the path (MTU black hole: "
         "check the MTU of every hop)")


@pytest.mark.parametrize(("detail", "cause"), [
    ({"kind": "timeout", "stage": "auth"}, launch.STALLED),
    ({"kind": "timeout", "stage": "kex"}, launch.STALLED),
    ({"kind": "deadline", "stage": "command"}, launch.STALLED),
    ({"kind": "disconnected", "stage": "running", "connection": "stalled"}, launch.STALLED),
    ({"kind": "timeout", "stage": "connect"}, "ssh connection timed out"),  # nothing got through: not a stall
    ({"kind": "refused", "stage": "connect"}, "ssh connection refused (sshd not running?)"),
])
def test_an_ssh_session_that_stalls_past_the_handshake_is_a_black_hole(detail: dict, cause: str) -> None:
    from preflight.transport.base import NodeOutcome

    assert launch.ssh_cause(NodeOutcome(node="n2", error=STALL, detail=detail)) == (cause, STALL)


def test_the_black_hole_remedy_names_the_path_and_net_mtu_never_torch() -> None:
    f = launch.Failure("n2", launch.STALLED, STALL, [], None, 5.2)
    remedy = outcome.failure_remedy(f)
    assert "between this machine and n2 (10.9.0.2)" in remedy and "ping -M do -s 8972 10.9.0.2" in remedy
    assert "--only net.mtu" in remedy and "drain n2" in remedy and "torch" not in remedy
    stalled = outcome.failure_remedy(launch.Failure("n2", "output stalled", "no bytes from n2 for 9 s", [], None, 9))
    assert "net.mtu" in stalled and "torch" not in stalled
    slow = outcome.failure_remedy(launch.Failure("n3", "ssh connection timed out", "no answer from n3 (10.9.0.3:22) "
                                                 "within 5 s", [], None, 5))
    assert "ping 10.9.0.3" in slow and "torch" not in slow


def test_the_agents_start_deadline_counts_from_the_longest_connect_timeout(tmp_path) -> None:  # noqa: ANN001
    from preflight.transport.ssh import SSHTransport

    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host slow\n  ConnectTimeout 25\nHost fast*\n  ConnectTimeout 2\n")
    with SSHTransport(cfg) as ssh:
        assert launch._longest_connect(ssh, ["fast1", "fast2"]) == 2.0  # the config's, not the default 10 s
        assert launch._longest_connect(ssh, ["fast1", "slow"]) == 25.0
        assert launch._longest_connect(ssh, ["fast1", "bad;name"]) == 10.0  # an unreadable one: the default
    with SSHTransport(cfg, connect_timeout=4) as ssh:  # --connect-timeout wins
        assert launch._longest_connect(ssh, ["fast1", "slow"]) == 4.0
