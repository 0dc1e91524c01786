"""The framing layer: every prefix style peeled, its metadata kept, structure cut into documents."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from preflight.framing import (
    Doc,
    Stack,
    filter_allows,
    frame,
    grep_patterns,
    normalise,
    peel_line,
    prompt_of,
    sniff,
)


def one_line(text: str):
    docs = frame(text).docs
    assert len(docs) == 1
    lines = [ln for ln in docs[0].lines if ln.text.strip()]
    return lines[0]


# --------------------------------------------------------------------------------------------
# log time stamps


@pytest.mark.parametrize("line, when, mono, msg", [
    ("[Mon Jun  3 10:12:01 2024] NVRM: hello", datetime(2024, 6, 3, 10, 12, 1), None, "NVRM: hello"),
    ("2024-06-03T10:12:01,123456+00:00 NVRM: iso",
     datetime(2024, 6, 3, 10, 12, 1, 123456, tzinfo=timezone.utc), None, "NVRM: iso"),
    ("kern  :warn  : 2024-06-03T10:12:01,000100+00:00 NVRM: dec",
     datetime(2024, 6, 3, 10, 12, 1, 100, tzinfo=timezone.utc), None, "NVRM: dec"),
    ("[12345.678901] NVRM: mono", None, 12345.678901, "NVRM: mono"),
    ("[    4.118230] nvidia: loading", None, 4.11823, "nvidia: loading"),
    ("<4>[  77.000001] NVRM: prio", None, 77.000001, "NVRM: prio"),
    ("6,1234,5678901,-;NVRM: Xid kmsg", None, 5.678901, "NVRM: Xid kmsg"),
    ("2024-06-03T10:12:01+0000 host-1 kernel: NVRM: j", datetime(2024, 6, 3, 10, 12, 1, tzinfo=timezone.utc),
     None, "NVRM: j"),
    ("2024-06-03T10:12:01.250000+02:00 host kernel: NVRM: jp",
     datetime.fromisoformat("2024-06-03T10:12:01.250000+02:00"), None, "NVRM: jp"),
    ("Mar  9 23:59:30 dgx-b07 kernel: [612090.771209] NVRM: s", datetime(1900, 3, 9, 23, 59, 30), 612090.771209,
     "NVRM: s"),
    ("kern  :info  : [  12.5] usb 1-1: new device", None, 12.5, "usb 1-1: new device"),
    ("<30>1 2024-06-03T10:12:01.003Z gpu7 kernel - - - NVRM: rfc5424",
     datetime(2024, 6, 3, 10, 12, 1, 3000, tzinfo=timezone.utc), None, "NVRM: rfc5424"),
    ("1717409521.123456 gpu7 kernel: NVRM: unix", datetime(2024, 6, 3, 10, 12, 1, 123456, tzinfo=timezone.utc), None,
     "NVRM: unix"),
    ("[2026-03-13 22:26:02] host-01:12:34 [5] NCCL WARN x", datetime(2026, 3, 13, 22, 26, 2), None,
     "host-01:12:34 [5] NCCL WARN x"),
    ("2025/11/25 13:58:49 nvidia-fabricmanager-wrapper: found", datetime(2025, 11, 25, 13, 58, 49), None,
     "nvidia-fabricmanager-wrapper: found"),
    ("2024-01-01T00:00:00.123456789Z stdout F NVRM: cri", datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc),
     None, "NVRM: cri"),
])
def test_time_stamp_styles(line, when, mono, msg):
    ln = peel_line(line, 1, Stack())
    assert ln.time == when
    assert (ln.mono == pytest.approx(mono)) if mono is not None else ln.mono is None
    assert ln.text == msg
    assert ln.stamped


def test_syslog_host_and_identifier():
    ln = one_line("Aug 17 06:18:01 jplc7eb7-vm-0 systemd-networkd[5398]: ib6: lost carrier\n")
    assert (ln.host, ln.ident, ln.text) == ("jplc7eb7-vm-0", "systemd-networkd", "ib6: lost carrier")
    ln = one_line("Jul 13 21:22:34 RuntimeError: [pair.cc:598] Connection closed by peer\n")
    assert ln.text == "RuntimeError: [pair.cc:598] Connection closed by peer" and not ln.host  # no host, no ident
    ln = one_line("Jul 13 21:22:34     dist.barrier()\n")
    assert ln.text == "    dist.barrier()"  # indentation of the tool's own line kept


def test_docker_json_and_cloudwatch_time_lines():
    ln = one_line('{"log":"NVRM: Xid (PCI:0000:01:00): 13, x\\n","stream":"stderr","time":"2024-01-01T00:00:00Z"}\n')
    assert ln.text == "NVRM: Xid (PCI:0000:01:00): 13, x" and ln.time is not None
    doc = frame("2024-12-04T05:27:44.078Z\nalgo-1:1:2 [5] NCCL INFO NVLS multicast support is not available\n").docs[0]
    lines = [x for x in doc.lines if x.text]
    assert lines[0].text.startswith("algo-1:1:2") and lines[0].time_text == "2024-12-04T05:27:44.078Z"


def test_continuation_lines_inherit_time():
    doc = frame("[Fri Apr  5 21:29:39 2024] NVRM: A GPU crash dump has been created. If possible, please run\n"
                "                           NVRM: nvidia-bug-report.sh as root to collect this data\n").docs[0]
    a, b = doc.lines
    assert b.cont and b.time == a.time and b.text.strip().startswith("NVRM: nvidia-bug-report.sh")


# --------------------------------------------------------------------------------------------
# structure: prompts, separators, headers


@pytest.mark.parametrize("line, cmd, host", [
    ("root@node4:~# dmesg -T |grep NVRM", "dmesg -T |grep NVRM", "node4"),
    ("(venv) root@node1:~/kubespray# nvidia-smi ", "nvidia-smi", "node1"),
    ("kgk2@bock:~$ nvidia-smi", "nvidia-smi", "bock"),
    ("[root@01 ~/]$ ibstat", "ibstat", "01"),
    ("[chodera@gpu-2-12 Ro 08-2750]$ nvidia-smi", "nvidia-smi", "gpu-2-12"),
    ("$ ping -M do -s 8972 -c 3 10.30.50.11", "ping -M do -s 8972 -c 3 10.30.50.11", ""),
    ("# ethtool swp1 | grep -A 3 'Speed: '", "ethtool swp1 | grep -A 3 'Speed: '", ""),
    ("gpu01:~ # nvidia-smi -q", "nvidia-smi -q", "gpu01"),
    ("my-user@gpu-node-a:~$ sudo nvidia-smi -i 1 -r      # reset it", "sudo nvidia-smi -i 1 -r", "gpu-node-a"),
    ("root@node1:~# ", "", "node1"),
])
def test_prompts(line, cmd, host):
    p = prompt_of(line)
    assert p is not None and p.command == cmd and p.host == host


@pytest.mark.parametrize("line", [
    "#  Rank  0 Group  0 Pid  1234 on node1 device  0 [0x1b] NVIDIA H100 80GB HBM3",
    "# nThread 1 nGpus 8 minBytes 8",
    "# Avg bus bandwidth    : 745.53",
    "#PF: supervisor read access in kernel mode",
    "    $ indented",
    "Thread 0x7f (idle): \"MainThread\"",
    "GPU 0: NVIDIA H100 (UUID: GPU-1)",
])
def test_not_prompts(line):
    assert prompt_of(line) is None


def test_prompts_cut_a_paste_into_commands():
    text = ("(venv) root@node1:~/k# nvidia-smi \n"
            "Unable to determine the device handle for GPU0000:A1:00.0: Unknown Error\n\n"
            "root@node1:~# dmesg -T | grep NVRM\n"
            "[Fri Apr  5 21:29:39 2024] NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen"
            " off the bus.\n"
            "my-user@gpu-node-a:~$ sudo journalctl -k \\\n  --since '2026-08-10 15:30:00 UTC' \\\n"
            "  --no-pager | grep -iE 'nvrm|xid'\n"
            "Aug 10 15:36:05 gpu-node-a kernel: NVRM: Xid (PCI:0000:55:00): 48, x\n"
            "root@node1:~# \n")
    docs = frame(text).docs
    assert [d.command for d in docs] == [
        "nvidia-smi", "dmesg -T | grep NVRM",
        "sudo journalctl -k --since '2026-08-10 15:30:00 UTC' --no-pager | grep -iE 'nvrm|xid'"]
    assert docs[1].filter == ["NVRM"] and docs[2].filter == ["nvrm|xid"]
    assert docs[0].lines[0].text.startswith("Unable to determine")


def test_grep_separators_elisions_fences_and_journal_markers():
    text = ("```text\n-- Logs begin at Mon 2024-06-03 --\nGPU 00000000:1B:00.0\n    Fabric\n        State : Completed\n"
            "--\nGPU 00000000:43:00.0\n    Fabric\n        State : In Progress\n...\n```\n")
    d = frame(text).docs[0]
    assert [ln.text for ln in d.lines if ln.text.strip()] == [
        "GPU 00000000:1B:00.0", "    Fabric", "        State : Completed", "GPU 00000000:43:00.0", "    Fabric",
        "        State : In Progress", "..."]
    assert d.excerpt


def test_grep_patterns_and_filters():
    assert grep_patterns("dmesg -T | grep -i -e xid -e nvrm") == ["xid", "nvrm"]
    assert grep_patterns("nvidia-smi -q | grep -A4 Fabric") == ["Fabric"]
    assert grep_patterns("ethtool swp1 | grep -A 3 'Speed: '") == ["Speed: "]
    assert grep_patterns("nvidia-smi") == []
    assert grep_patterns("journalctl -k | grep -v audit") == []
    assert filter_allows(["nvrm|xid"], ["NVRM: Xid (PCI:0000:01:00): 79"])
    assert not filter_allows(["bond0"], ["NVRM: Xid (PCI:0000:01:00): 79"])


def test_dshbak_ansible_headers_and_dedent():
    text = ("----------------\ngpu[01-02]\n----------------\n[ 1.0] NVRM: a\n"
            "gpu03 | CHANGED | rc=0 >>\n[ 2.0] NVRM: b\n")
    docs = frame(text).docs
    assert [(d.host, d.lines[0].text) for d in docs] == [("gpu[01-02]", "NVRM: a"), ("gpu03", "NVRM: b")]
    d = frame("  PING 21.0.0.3 (21.0.0.3) 1300(1328) bytes of data.\n  From 21.0.0.3 icmp_seq=2 Frag needed\n").docs[0]
    assert d.lines[0].text.startswith("PING")


def test_normalise_crlf_cr_ansi_bom():
    assert normalise("\ufeffa\r\nb\r\n") == "a\nb\n"
    assert normalise("a\rb\rc") == "a\nb\nc"
    assert normalise("10%\r50%\r100%\ndone\n") == "100%\ndone\n"
    assert normalise("\x1b[4mGPU0\x1b[0m\tX") == "GPU0\tX"
    assert normalise("GPU 0:\u00a0NVIDIA\u200b H100\n\t Link 3: &lt;inactive&gt;\n") == "GPU 0: NVIDIA H100\n\t Link 3: <inactive>\n"
    assert normalise("a && b\n") == "a && b\n"


# --------------------------------------------------------------------------------------------
# transport framing decided per document


def test_pdsh_hosts_split_into_documents():
    text = "".join(f"gpu00{i}: [Mon Jun  3 10:12:0{i} 2024] NVRM: Xid (PCI:0000:1b:00): 13, x\n" for i in range(1, 4))
    framed = frame(text)
    assert framed.hosts == ["gpu001", "gpu002", "gpu003"]
    assert [d.lines[0].text[:14] for d in framed.docs] == ["NVRM: Xid (PCI"] * 3


@pytest.mark.parametrize("text", [
    "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n2: eth0: <BROADCAST,UP> mtu 1500\n",
    "        Speed: 400000Mb/s\n        Lanes: 8\n        Duplex: Full\n",
    "Speed: 400000Mb/s\nLanes: 8\nDuplex: Full\n",
    "NVRM: a\nNVRM: b\nNVRM: c\n",
    "kernel: NVRM: a\nkernel: NVRM: b\nkernel: NVRM: c\n",
])
def test_key_value_and_numbered_lines_are_not_hosts_or_labels(text):
    framed = frame(text)
    assert framed.hosts == [] and not any(d.stack.outer for d in framed.docs)


def test_sniff_srun_and_rank_tags():
    assert sniff([" 0: #  size", " 0: 26214400  6553600 float", " 1: x"]).outer == ("srun",)
    assert sniff(["[0] node0:1:1 [0] NCCL INFO a", "[1] node2:2:2 [0] NCCL INFO b", "[0] node0:1:1 [0] NCCL INFO c",
                  "[1] node2:2:2 [0] NCCL INFO d"]).outer == ("rank-tag",)


def test_doc_select_peels_only_the_needles():
    text = "[ 1.0] x\n" * 1000 + "[ 9.5] NVRM: Xid (PCI:0000:01:00): 79, x\n"
    d = Doc(text)
    got = d.select(("NVRM",))
    assert len(got) == 1 and got[0].n == 1001 and got[0].mono == pytest.approx(9.5)


def test_doc_scan_folds_case_keeps_line_numbers_and_reads_only_the_ends_when_asked():
    text = "".join(f"[{i}.0] noise line {i}\n" for i in range(1, 3001))
    text += "[3001.0] ib0: LINK DOWN\n[3002.0] ib0: Link Up\n"
    d = Doc(text)
    hits = d.scan(("link down", "link up"), fold=True)
    assert [h.raw for h in hits] == ["[3001.0] ib0: LINK DOWN", "[3002.0] ib0: Link Up"]
    assert hits[0].raw[hits[0].at:].lower().startswith("link down")
    # numbered when peeled, in any order
    assert d.peel_hit(hits[1]).n == 3002 and d.peel_hit(hits[0]).n == 3001
    assert d.peel_hit(hits[0]).text == "ib0: LINK DOWN" and d.peel_hit(hits[0]).mono == pytest.approx(3001.0)
    assert d.scan(("link down",)) == []  # case-sensitive unless folded
    # a text that is not ASCII is folded through case variants (offsets stay those of the text)
    u = Doc("[1.0] café\n" + text)
    assert [h.raw for h in u.scan(("link down", "link up"), fold=True)] == [h.raw for h in hits]
    # `ends`: only the first and the last characters of a longer text are read
    mid = Doc("[1.0] dmesg: x\n" + "[2.0] noise\n" * 5000 + "[3.0] dmesg: middle\n" + "[4.0] noise\n" * 5000)
    assert [h.raw for h in mid.scan(("dmesg: ",), ends=1000)] == ["[1.0] dmesg: x"]
    assert len(mid.scan(("dmesg: ",))) == 2


def test_detectors_do_not_peel_a_large_kernel_log(registry):
    """Every format detector reads a big document's head or scans it for needles: none peels all
    of its lines (that costs seconds on a million-line log)."""
    from preflight.analyze import classify

    lines = [f"[{i // 100}.{i % 100:06d}] mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged"
             for i in range(60_000)]
    lines[-1] = "[999.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
    d = frame("\n".join(lines) + "\n").docs[0]
    assert "kernel-log" in [f.name for f in classify(d, registry)]
    assert d._lines is None


# --------------------------------------------------------------------------------------------
# the table: every framing variant, for every log kind it applies to

MESSAGES = {
    "kernel-log": ["NVRM: GPU at PCI:0000:3b:00: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
                   "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.",
                   "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."],
    "nccl-log": ["gpu7:1234:1300 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>",
                 "gpu7:1234:1300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.7<0>",
                 "gpu7:1234:1300 [0] NCCL INFO Using network IB"],
    "watchdog-log": ["[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 3] Watchdog caught collective operation timeout: "
                     "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                     "600012 milliseconds before timing out."],
}
KIND_PROBE = {"kernel-log": "kernel-log", "nccl-log": "nccl-log", "watchdog-log": "watchdog-log"}

T = "2024-06-03T10:12:01"


def _each(prefix):
    return lambda msgs: "".join(f"{prefix(i)}{m}\n" for i, m in enumerate(msgs))


VARIANTS = {
    "plain": _each(lambda i: ""),
    "ansi": lambda msgs: "".join(f"\x1b[1m{m}\x1b[0m\n" for m in msgs),
    "crlf": lambda msgs: "".join(f"{m}\r\n" for m in msgs),
    "prompt": lambda msgs: "root@gpu7:~# some-command\n" + "".join(f"{m}\n" for m in msgs),
    "grep-separated": lambda msgs: "--\n".join(f"{m}\n" for m in msgs),
    "srun-label": _each(lambda i: f"{i % 2:2d}: "),
    "pdsh-host": _each(lambda i: "gpu007: "),
    "torchrun": _each(lambda i: "[default3]:"),
    "rank-tag": _each(lambda i: "[rank3]:"),
    "syslog-3164": _each(lambda i: f"Jun  3 10:12:0{i} gpu7 kernel: "),
    "syslog-no-host": _each(lambda i: f"Jun  3 10:12:0{i} kernel: "),
    "rfc5424": _each(lambda i: f"<4>1 {T}.00{i}Z gpu7 kernel - - - "),
    "journal-short-iso": _each(lambda i: f"{T}+0000 gpu7 kernel: "),
    "journal-short-precise": _each(lambda i: f"Jun 03 10:12:01.00012{i} gpu7 kernel: "),
    "journal-short-monotonic": _each(lambda i: f"[  1234.56789{i}] gpu7 kernel: "),
    "dmesg-raw": _each(lambda i: f"[  1234.56789{i}] "),
    "dmesg-T": _each(lambda i: f"[Mon Jun  3 10:12:0{i} 2024] "),
    "dmesg-iso": _each(lambda i: f"{T},00012{i}+00:00 "),
    "dmesg-decode": _each(lambda i: f"kern  :warn  : [  1234.56789{i}] "),
    "kmsg": _each(lambda i: f"4,{100 + i},1234567890{i},-;"),
    "container-cri": _each(lambda i: f"{T}.00000000{i}Z stderr F "),
    "k8s-talos-kern": _each(lambda i: f"10.0.0.7: kern: warning: [{T}.00{i}Z]: "),
    "journal-short-full": _each(lambda i: f"Mon 2024-06-03 10:12:0{i} UTC gpu7 kernel: "),
    "journal-short-delta": _each(lambda i: f"[ 1234.56789{i} <    0.000015>] gpu7 kernel: "),
    "dmesg-delta": _each(lambda i: f"[<    0.00001{i}>] "),
    "dmesg-reltime": _each(lambda i: f"[Jun  3 10:1{i}] "),
    "journal-json": lambda msgs: "".join(json.dumps({"__REALTIME_TIMESTAMP": f"171740952112345{i}",
                                                     "_HOSTNAME": "gpu7", "SYSLOG_IDENTIFIER": "kernel",
                                                     "MESSAGE": m}) + "\n" for i, m in enumerate(msgs)),
    "docker-json": lambda msgs: "".join(json.dumps({"log": m + "\n", "stream": "stderr",
                                                    "time": f"{T}.00{i}Z"}) + "\n" for i, m in enumerate(msgs)),
    "compose": _each(lambda i: f"trainer-{i % 2 + 1}  | "),
    "harness-level": _each(lambda i: f"2024-06-03 10:12:0{i},123 INFO "),
    "markdown-quote": lambda msgs: "".join(f"> {m}\n" for m in msgs),
    "code-fence": lambda msgs: "```\n" + "".join(f"{m}\n" for m in msgs) + "```\n",
    "stack-srun-syslog-dmesg": _each(lambda i: f"{i:2d}: Jun  3 10:12:0{i} gpu7 kernel: [  1234.56789{i}] "),
    "stack-pdsh-journal": _each(lambda i: f"gpu007: {T}+0000 gpu7 kernel: "),
}
# transport framings and terminal noise apply to every kind; kernel-log framings to kernel logs;
# time-stamp framings that are also used for application logs apply to those too
KERNEL_ONLY = {"syslog-3164", "syslog-no-host", "rfc5424", "journal-short-iso", "journal-short-precise",
               "journal-short-monotonic", "journal-short-full", "journal-short-delta", "journal-json", "dmesg-raw",
               "dmesg-T", "dmesg-iso", "dmesg-decode", "dmesg-delta", "dmesg-reltime", "kmsg", "k8s-talos-kern",
               "stack-srun-syslog-dmesg", "stack-pdsh-journal"}
APP_ONLY = {"compose", "harness-level"}  # application log framings
APPLIES = {
    "kernel-log": set(VARIANTS) - {"torchrun", "rank-tag"} - APP_ONLY,
    "nccl-log": set(VARIANTS) - KERNEL_ONLY,
    "watchdog-log": set(VARIANTS) - KERNEL_ONLY,
}
CASES = [(kind, v) for kind in sorted(MESSAGES) for v in sorted(APPLIES[kind])]


@pytest.mark.parametrize("kind, variant", CASES)
def test_framing_variant_recognised_for_log_kind(kind: str, variant: str, registry) -> None:
    from preflight.analyze import classify

    text = VARIANTS[variant](MESSAGES[kind])
    docs = frame(text).docs
    assert docs, text
    texts = [ln.text.strip() for d in docs for ln in d.lines if ln.text.strip()]
    assert texts == [m.strip() for m in MESSAGES[kind]], (variant, texts)
    probes = {f.probe_name for d in docs for f in classify(d, registry)}
    assert KIND_PROBE[kind] in probes, (variant, probes)
    if kind == "kernel-log":
        from preflight.parsers import kernel_log

        log = kernel_log.parse(docs[0] if len(docs) == 1 else Doc.join(docs))
        assert [(e.xid, e.pci) for e in log.events] == [(79, "0000:3b:00")], variant
        assert log.gpus["0000:3b:00"]["uuid"].startswith("GPU-aaaa")
        if variant in KERNEL_ONLY - {"dmesg-delta"}:
            assert log.events[0].line.time is not None or log.events[0].line.mono is not None, variant
        if variant in ("pdsh-host", "stack-pdsh-journal"):
            assert frame(text).hosts == ["gpu007"]


def test_a_kernel_drivers_own_prefix_is_not_a_host() -> None:
    """`nvidia-nvswitch3: SXid ...` is the driver naming its device, not pdsh naming a host."""
    from preflight.framing import frame

    for line in ("nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33 LTSSM Fault Up",
                 "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.90.07",
                 "mlx5_core: module verification failed"):
        [doc] = frame(line + "\n").docs
        assert doc.host == "" and doc.lines[0].text == line, line
    docs = frame("gpu001: nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33\n"
                 "gpu002: nvidia-nvswitch1: SXid (PCI:0000:87:00.0): 12028, Non-fatal, Link 61\n").docs
    assert [(d.host, d.lines[0].text[:17]) for d in docs] == [("gpu001", "nvidia-nvswitch3:"),
                                                              ("gpu002", "nvidia-nvswitch1:")]


def test_pdsh_keeps_an_indented_lines_indent_and_ip_o_addr_is_not_srun() -> None:
    """pdsh prints `host: ` and the tool's line as it was (indent kept); `ip -o addr`'s `N: name
    inet ...` lines are interface indexes, not `srun -l` task labels."""
    from preflight.framing import frame

    docs = frame("gpu017: GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\ngpu017: \t Link 0: 26.562 GB/s\n"
                 "gpu017:   MIG 1g.10gb     Device  0: (UUID: MIG-2)\ngpu018: GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-3)\n"
                 ).docs
    assert [d.host for d in docs] == ["gpu017", "gpu018"]
    assert [ln.text for ln in docs[0].lines] == ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)", "\t Link 0: 26.562 GB/s",
                                                 "  MIG 1g.10gb     Device  0: (UUID: MIG-2)"]
    [doc] = frame("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
                  "2: eth0    inet 10.1.2.3/24 brd 10.1.2.255 scope global eth0\\       valid_lft forever\n"
                  "3: ib0    inet 10.9.0.3/16 scope global ib0\\       valid_lft forever\n").docs
    assert doc.stack.outer == () and doc.lines[1].text.startswith("2: eth0    inet 10.1.2.3/24")


def test_a_time_stamp_without_seconds_is_peeled() -> None:
    from preflight.framing import frame

    [doc] = frame(" 2025-02-18 12:54 [rank13]:[E218 04:54:22.864 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught\n"
                  " 2025-02-18 12:55 host1:180:915 [7] NCCL INFO misc/socket.cc:47 -> 3\n").docs
    first, second = doc.lines
    assert first.time_text == "2025-02-18 12:54" and first.time is not None and first.time.minute == 54
    assert first.rank == 13 and first.text.startswith("[E218 04:54:22.864 ProcessGroupNCCL.cpp:616]")
    assert second.text == "host1:180:915 [7] NCCL INFO misc/socket.cc:47 -> 3"
    [kept] = frame("2025-02-18 12:54:07 still has seconds\n").docs
    assert kept.lines[0].time_text == "2025-02-18 12:54:07" and kept.lines[0].text == "still has seconds"


def test_nccl_tests_header_is_not_a_root_prompt_and_a_rank_tag_keeps_the_row() -> None:
    from preflight.framing import frame

    [doc] = frame("# nccl-tests version 2.19.6 nccl-headers=22903 nccl-library=22903\n"
                  "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592\n").docs
    assert doc.command == "" and doc.lines[0].text.startswith("# nccl-tests version 2.19.6")
    [doc] = frame("[0] # nThread 1 nGpus 8\n[0]      1048576        262144     float     sum      -1\n"
                  "[0]      2097152        524288     float     sum      -1\n[1] done\n").docs
    assert doc.stack.outer == ("rank-tag",)
    assert [ln.rank for ln in doc.lines] == [0, 0, 0, 1]
    assert doc.lines[1].text == "     1048576        262144     float     sum      -1"


def test_a_journal_line_in_a_cjk_locale_is_peeled() -> None:
    from preflight.framing import frame

    [doc] = frame("11月 15 14:15:47 gpu-a40 nv-fabricmanager[4177]: NV_WARN_NOTHING_TO_DO\n"
                  "11월 16 01:02:03 gpu-a40 systemd[1]: Started NVIDIA fabric manager service.\n").docs
    first, second = doc.lines
    assert first.text == "NV_WARN_NOTHING_TO_DO" and first.ident == "nv-fabricmanager" and first.host == "gpu-a40"
    assert first.time is not None and (first.time.month, first.time.day, first.time.hour) == (11, 15, 14)
    assert second.text == "Started NVIDIA fabric manager service." and second.ident == "systemd"
    [plain] = frame("11 items 14:15:47 left\n").docs
    assert plain.lines[0].text == "11 items 14:15:47 left"


def test_ifconfig_headers_are_interfaces_not_pdsh_hosts() -> None:
    from preflight.framing import frame

    [doc] = frame("enp12s0f0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 9000\n"
                  "        inet 10.2.0.5  netmask 255.255.255.0  broadcast 10.2.0.255\n"
                  "enp12s0f1: flags=4099<UP,BROADCAST,MULTICAST>  mtu 1500\n"
                  "        ether 0c:42:a1:00:00:01  txqueuelen 1000  (Ethernet)\n").docs
    assert doc.host == "" and doc.stack.outer == () and doc.lines[0].text.startswith("enp12s0f0: flags=4163")


@pytest.mark.parametrize("first", ["nv-fabricmanager[27360]", "sshd[911]", "nvidia-fabricmanager.service",
                                   "systemd-udevd.socket"])
def test_journal_identifiers_and_units_are_not_pdsh_hosts(first: str) -> None:
    from preflight.framing import frame

    [doc] = frame(f"{first}: one\n{first}: two\n{first}: three\n").docs
    assert doc.host == "" and doc.stack.outer == () and doc.lines[0].text == f"{first}: one"
    hosts = frame("node[1-4]: up\nnode[5-8]: up\n").docs
    assert [d.host for d in hosts] == ["node[1-4]", "node[5-8]"]


@pytest.mark.parametrize(("prefix", "host", "rank"), [
    ("(pid=4150) ", "", None), ("(RayTrainWorker pid=4150, ip=10.0.0.7) ", "10.0.0.7", None),
    ("  (simple-workload, pid=4150) ", "", None), ("(worker1, rank=1, pid=2012, ip=172.31.30.85) ", "172.31.30.85", 1),
    ("(head, rank=0, pid=1999) ", "", 0)])
def test_ray_and_skypilot_prefixes_are_peeled(prefix: str, host: str, rank: int | None) -> None:
    from preflight.framing import frame

    [doc] = frame(f"{prefix}| NVIDIA-SMI 570.172.08\n{prefix}| GPU  Name\n{prefix}|   0  NVIDIA H100\n").docs
    assert [ln.text for ln in doc.lines] == ["| NVIDIA-SMI 570.172.08", "| GPU  Name", "|   0  NVIDIA H100"]
    assert doc.lines[0].host == host and doc.lines[0].rank == rank


def test_scan_words_finds_lines_with_a_needle_and_a_word_after_it_peeled_or_not():
    import re as _re

    text = ("[1.0] mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged\n"
            "[2.0] failover01 mlx5_core 0000:17:00.0: link up\n"  # the word before the needle is no hit
            "[3.0] mlx5_core 0000:17:00.0: mlx5_cmd_out_err:838:(pid 9): CREATE_QP(0x500) op_mod(0x0) failed\n"
            "[4.0] infiniband mlx5_0: ib_register_device FAILED\n")
    words = _re.compile("fail|err")
    for peeled in (False, True):
        d = frame(text).docs[0]
        if peeled:
            assert d.lines
        hits = d.scan_words(("mlx5_core ", ":(pid ", "infiniband "), words)
        assert [d.peel_hit(h).n for h in hits] == [3, 4], peeled
        assert [d.peel_hit(h).text for h in hits][1] == "infiniband mlx5_0: ib_register_device FAILED"
        assert hits[0].raw.endswith("failed")
        if not peeled:
            assert hits[0].raw[hits[0].at:].startswith("mlx5_core ")
    assert frame(text).docs[0].scan_words((), words) == []


@pytest.mark.parametrize("text", ["", "a", "a\n", "a\n\n", "\n", "x\ny", "[  1.000000] NVRM: Xid 79\n",
                                  "Dec 05 10:00:01 n1 kernel: a\n  continued\nDec 05 10:00:02 n1 kernel: b\n",
                                  "2026-12-05T10:00:00+0000\nnext line dated by the one above\n"])
def test_lines_after_a_head_are_the_lines_without_one(text):
    """A document whose head already covers every line reuses it for `lines`: the very same
    lines (numbers, text, framing, the empty line after a final newline) as peeling anew."""
    fresh = Doc(text).lines
    headed = Doc(text)
    headed.head(400)
    assert headed.lines == fresh


def test_lines_after_a_head_are_the_same_for_every_fixture():
    root = Path(__file__).resolve().parent / "fixtures"
    for p in sorted(root.rglob("*.txt"))[:120]:
        text = p.read_text(errors="replace")
        for d, e in zip(frame(text).docs, frame(text).docs, strict=True):
            e.head(400)
            assert e.lines == d.lines, p
