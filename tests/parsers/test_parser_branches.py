"""Branches of the line readers that the tool-specific tests do not reach: rarer log framings,
`ip -o addr` and ifconfig details, NVLink Xids without a unit word, an unknown NCCL WARN,
torchrun records cut short, odd flight-recorder dumps, nvidia-smi -q repeats and colon sections,
single-mode nccl-tests rows, ethtool keys the facts do not keep. Inputs are written in each
tool's own format."""

from __future__ import annotations

import json
from datetime import datetime

from preflight.framing import Doc, Stack, frame, peel_line, split_parts
from preflight.parsers import (
    ethtool,
    flight_recorder,
    ip,
    kernel_log,
    nccl_log,
    nccl_tests,
    nvsmi_q,
    torch_hang,
    torch_log,
)


def doc(text: str) -> Doc:
    docs = frame(text).docs
    return docs[0] if len(docs) == 1 else Doc.join(docs)


# ----------------------------------------------------------------------------- framing

def test_syslog_with_a_year_before_the_time():
    ln = peel_line("Jun  3 2024 10:12:01 gpu07 kernel: NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.",
                   1, Stack())
    assert ln.time == datetime(2024, 6, 3, 10, 12, 1)
    assert (ln.host, ln.ident, ln.layers) == ("gpu07", "kernel", ("syslog",))
    assert ln.text.startswith("NVRM: Xid")


def test_weekday_and_month_initials_peel_only_their_own_framing():
    full = peel_line("Thu 2024-06-06 10:12:01 UTC gpu07 kernel: mlx5_core 0000:17:00.0: Link up", 1, Stack())
    assert (full.layers, full.host, full.text) == (("journal-full",), "gpu07", "mlx5_core 0000:17:00.0: Link up")
    assert full.time == datetime(2024, 6, 6, 10, 12, 1)
    for text in ("Tuesday the link went down", "May the link come back", "Driver Version: 535.161.08"):
        ln = peel_line(text, 1, Stack())
        assert (ln.text, ln.layers, ln.time) == (text, (), None)


def test_empty_and_unknown_first_characters_carry_no_framing():
    for text in ("", "   ", "|  0  NVIDIA H100 |", "é kernel: x", "\u0663 three"):
        ln = peel_line(text, 1, Stack())
        assert (ln.text, ln.layers) == (text, ())


def test_scan_of_a_peeled_document_folds_case():
    d = Doc("gpu0 XID here\nnothing\nan xid there\nXiD again")
    assert len(d.lines) == 4  # peeled: the scan reads the cached lines
    hits = d.scan(["xId"], fold=True)
    assert [(h.n, h.raw) for h in hits] == [(1, "gpu0 XID here"), (3, "an xid there"), (4, "XiD again")]
    assert all(h.line is not None for h in hits)
    assert [h.n for h in d.scan(["xid"])] == [3]


def test_scan_of_a_non_ascii_text_folds_case_by_needle_variants():
    d = Doc("café NVRM: Xid one\nnvrm: lower\nNvrm: capital\nnone")
    assert [h.raw for h in d.scan(["nvrm"], fold=True)] == ["café NVRM: Xid one", "nvrm: lower", "Nvrm: capital"]


def test_split_parts_continued_prompt_and_dshbak_header_and_separator():
    text = ("$ pdsh -w gpu[01-02] \\\n  nvidia-smi -L\n"
            "----------------\ngpu01\n----------------\nGPU 0: NVIDIA H100 (UUID: GPU-1)\n"
            "--\n"
            "----------------\nnot a header line\nGPU 1: NVIDIA H100 (UUID: GPU-2)\n")
    parts = split_parts(text)
    assert [(p.host, p.command) for p in parts] == [("", "pdsh -w gpu[01-02] nvidia-smi -L"), ("gpu01", "")]
    assert parts[1].excerpt  # the grep separator
    assert "GPU 0: NVIDIA H100" in parts[1].body and "not a header line" in parts[1].body
    assert parts[1].first == 6


# ----------------------------------------------------------------------------- ip / ifconfig

_IP_O_LINK_AND_ADDR = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
2: ens1f0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode DEFAULT group default qlen 1000\\    link/ether b8:3f:d2:10:aa:01 brd ff:ff:ff:ff:ff:ff
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: ens1f0    inet 10.1.2.3/24 brd 10.1.2.255 scope global ens1f0\\       valid_lft forever preferred_lft forever
2: ens1f0    inet6 fe80::ba3f:d2ff:fe10:aa01/64 scope link \\       valid_lft forever preferred_lft forever
3: ens1f1    inet 10.1.3.3/24 brd 10.1.3.255 scope global ens1f1\\       valid_lft forever preferred_lft forever
"""


def test_ip_o_addr_lines_add_addresses_to_the_listed_links_and_list_new_ones():
    f = ip.parse(doc(_IP_O_LINK_AND_ADDR))
    by = f.by_name()
    assert f.form == "oneline" and f.shows_addresses
    assert list(by) == ["lo", "ens1f0", "ens1f1"]
    assert by["ens1f0"].addresses == ["10.1.2.3/24", "fe80::ba3f:d2ff:fe10:aa01/64"] and by["ens1f0"].mtu == 9000
    assert by["ens1f0"].ipv4 == ["10.1.2.3/24"] and by["ens1f0"].link_type == "ether"
    assert by["ens1f1"].addresses == ["10.1.3.3/24"] and by["ens1f1"].mtu is None
    assert by["ens1f1"].line == "3: ens1f1    inet 10.1.3.3/24 brd 10.1.3.255 scope global ens1f1"
    assert by["lo"].global_addresses == []


_IFCONFIG = """\
ib0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 2044
        inet 10.20.0.7  netmask 255.255.0.0  broadcast 10.20.255.255
        inet6 fe80::e61d:2d03:a:b1c2  prefixlen 64  scopeid 0x20<link>
        unspec 00-00-00-00-00-00-00-00-00-00-00-00-00-00-00-00  txqueuelen 256  (UNSPEC)

eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500
        inet
        ether 0c:42:a1:00:00:01  txqueuelen 1000  (Ethernet)
"""


def test_ifconfig_addresses_a_bare_inet_line_adds_none():
    f = ip.parse(doc(_IFCONFIG))
    by = f.by_name()
    assert f.shows_addresses and list(by) == ["ib0", "eth0"]
    assert by["ib0"].addresses[0] == "10.20.0.7/16" and len(by["ib0"].addresses) == 2  # a dotted netmask as a length
    assert by["ib0"].mtu == 2044 and by["ib0"].up
    assert by["eth0"].addresses == [] and by["eth0"].mtu == 1500


def test_ip_link_detail_line_with_parentbus_and_kind():
    text = ("4: ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 4092 qdisc mq state UP mode DEFAULT group default qlen 256\n"
            "    link/infiniband 00:00:10:29:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:10:aa:01 brd 00:ff:ff:ff:ff:12:40:1b:"
            "ff:ff:00:00:00:00:00:00:ff:ff:ff:ff promiscuity 0\n"
            "    ipoib pkey  0xffff mode datagram umcast 0000 addrgenmode eui64 numtxqueues 256 parentbus pci "
            "parentdev 0000:17:00.0\n")
    i = ip.parse(doc(text)).by_name()["ib0"]
    assert (i.link_type, i.kind, i.parentbus, i.mtu, i.state) == ("infiniband", "ipoib", "pci", 4092, "UP")


# ----------------------------------------------------------------------------- kernel log

def test_nvlink_xid_without_a_unit_word_reads_fatal_from_the_text():
    line = peel_line("NVRM: Xid (PCI:0000:17:00): 74, pid=1234, name=python, NVLink: fatal error detected on "
                     "link 6 (0x0, 0x10000, 0x0)", 1, Stack())
    ev = kernel_log.parse_xid(line.text, line)
    assert ev is not None and ev.xid == 74 and ev.unit == ""
    assert (ev.fatal, ev.link, ev.registers) == (True, 6, ["0x0", "0x10000", "0x0"])
    line2 = peel_line("NVRM: Xid (PCI:0000:17:00): 145, NVLink: Non-Fatal error on link 3", 1, Stack())
    ev2 = kernel_log.parse_xid(line2.text, line2)
    assert ev2 is not None and (ev2.fatal, ev2.link, ev2.registers) == (False, 3, [])
    assert kernel_log.parse_xid("NVRM: GPU at PCI:0000:17:00: GPU-abc", line) is None


def test_kernel_log_reset_note_and_a_driver_line_that_is_nothing():
    text = ("[  100.000001] NVRM: GPU 0000:17:00.0: GPU needs to be reset to recover.\n"
            "[  100.000002] NVRM: nvidia-bug-report.sh as root to collect this data\n"
            "[  100.000003] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08  Fri Feb 23 2024\n")
    log = kernel_log.parse(doc(text))
    assert list(log.reset_notes) == ["0000:17:00"] and log.nvrm == 3
    assert not log.events and not log.faults and not log.driver_faults
    assert log.module_version == "535.161.08"


# ----------------------------------------------------------------------------- NCCL

def test_nccl_warn_of_no_known_kind_is_an_other_error_with_its_rank():
    text = ("gpu01:2001:2001 [0] NCCL INFO comm 0x55d0 rank 3 nranks 8 cudaDev 0 busId 17000 - Init COMPLETE\n"
            "gpu01:2001:2050 [0] misc/argcheck.cc:30 NCCL WARN AllReduce : invalid root 9 (root should be in "
            "the 0..8 range)\n")
    log = nccl_log.parse(doc(text))
    assert [(e.kind, e.rank, e.dev) for e in log.errors] == [("other", 3, "0")]
    assert len(log.warns) == 1 and log.recognised


def test_nccl_network_lines_first_match_wins_and_nvls_in_use_outweighs_off():
    text = ("gpu01:2001:2001 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>\n"
            "gpu01:2001:2001 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
            "gpu01:2001:2001 [0] NCCL INFO Using network Socket\n"
            "gpu01:2001:2001 [0] NCCL INFO 0 nvls channels\n"
            "gpu01:2001:2001 [0] NCCL INFO NVLS comm 0x55d0 headRank 0 nHeads 4\n"
            "gpu01:2001:2001 [0] NCCL INFO NVLS multicast support is not available on dev 0\n"
            "gpu01:2001:2001 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    p = next(iter(nccl_log.parse(doc(text)).procs.values()))
    assert (p.net, p.interfaces, p.addresses) == ("Socket", ["eth0", "eth1"], ["10.0.0.1", "10.0.1.1"])
    assert (p.bootstrap, p.bootstrap_addr) == ("eth0", "10.0.0.1")
    assert p.nvls is True and p.evidence["nvls"].endswith("nHeads 4") and p.intra == {"P2P/CUMEM"}
    assert p.evidence["using_network"].endswith("Using network Socket")


# ----------------------------------------------------------------------------- torch logs

def test_watchdog_rank_from_the_launcher_prefix_and_status_merge():
    text = ("[rank5]:[E603 10:12:01.000000000 ProcessGroupNCCL.cpp:616] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
            "ran for 600012 milliseconds before timing out.\n"
            "[rank5]:[E603 10:12:01.000000001 ProcessGroupNCCL.cpp:1785] Exception (either an error or timeout) "
            "detected by watchdog at work: 77, last enqueued NCCL work: 78, last completed NCCL work: 76.\n")
    log = torch_log.parse_hang_log(text)
    assert [(e.kind, e.rank, e.seq) for e in log.events] == [("nccl_timeout", 5, 77), ("nccl_status", 5, 77)]
    t = torch_hang.merge_status(log)
    assert [(e.last_enqueued, e.last_completed, e.ran_ms) for e in t] == [(78, 76, 600012)]


def test_chained_traceback_ends_at_the_last_exception():
    text = ("Traceback (most recent call last):\n"
            '  File "train.py", line 10, in <module>\n'
            "    step()\n"
            "KeyError: 'x'\n"
            "\n"
            "During handling of the above exception, another exception occurred:\n"
            "\n"
            "Traceback (most recent call last):\n"
            '  File "train.py", line 12, in <module>\n'
            "RuntimeError: NCCL communicator was aborted on rank 2\n")
    crashes = torch_log.parse_rank_log(text).crashes
    assert [(c.exception, c.message, c.secondary) for c in crashes] == [
        ("KeyError", "'x'", False), ("RuntimeError", "NCCL communicator was aborted on rank 2", True)]


def test_traceback_whose_exception_line_was_cut_ends_at_the_chained_one():
    text = ("[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "train.py", line 10, in <module>\n'
            "[rank1]: During handling of the above exception, another exception occurred:\n"
            "[rank1]: The above exception was the direct cause of the following exception:\n"
            "[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "train.py", line 12, in <module>\n'
            "[rank1]: torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving "
            "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: "
            "Connection reset by peer\n")
    crashes = torch_log.parse_rank_log(text).crashes
    assert [(c.exception, c.rank, c.secondary, len(c.lines)) for c in crashes] == [
        ("torch.distributed.DistBackendError", 1, True, 7)]


def test_torchrun_records_cut_short_or_without_an_exit_code():
    text = ("============================================================\n"
            "train.py FAILED\n"
            "------------------------------------------------------------\n"
            "Failures:\n"
            "[1]:\n"
            "  time      : 2024-06-03_10:12:02\n"
            "  host      : gpu08\n"
            "  rank      : 4 (local_rank: 0)\n"
            "  exitcode  : 1 (pid: 555)\n"
            "  error_file: <N/A>\n"
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
            "[2]:\n"
            "  time      : 2024-06-03_10:12:04\n"
            "  host      : gpu09\n"
            "------------------------------------------------------------\n"
            "Root Cause (first observed failure):\n"
            "[0]:\n"
            "  time      : 2024-06-03_10:12:01\n"
            "  host      : gpu07\n"
            "  rank      : 3 (local_rank: 3)\n"
            "  exitcode  : -6 (pid: 4242)\n"
            "  error_file: <N/A>\n"
            "  traceback : Signal 6 (SIGABRT) received by PID 4242\n"
            "============================================================\n")
    failures = torch_log.parse_rank_log(text).failures
    assert [(f.rank, f.host, f.exitcode, f.pid, f.signal, f.root_cause, len(f.lines)) for f in failures] == [
        (4, "gpu08", 1, 555, "", False, 6), (3, "gpu07", -6, 4242, "SIGABRT", True, 6)]
    assert torch_log.torchrun_time("2024-06-03_10:12:01") == datetime(2024, 6, 3, 10, 12, 1)
    assert torch_log.torchrun_time("<N/A>") is None


# ----------------------------------------------------------------------------- flight recorder

def test_fr_dump_odd_shapes_keep_what_they_can():
    dump = {"version": "2.4", "entries": [
        "not an entry",
        {"pg_id": 1, "profiling_name": "all_gather", "collective_seq_id": "12", "state": "scheduled",
         "retired": "no", "time_created_ns": 0},
    ], "pg_config": {"1": {"ranks": "[0, 1, 2, 3]"}, "2": "broken", "3": {"ranks": "0,1"}},
        "pg_status": {"1": {"last_enqueued_collective": "12", "bad": "x"}, "2": []}}
    d = flight_recorder.parse_fr_dump(json.dumps(dump).encode(), "rank_2")
    assert d.rank == 2 and not d.problem and d.backend == ""
    e = d.entries[0]
    assert (e.pg, e.op, e.seq, e.retired, e.time_created_ns) == ("1", "all_gather", 12, None, None)
    assert d.pg_ranks == {"1": [0, 1, 2, 3], "3": [0, 1]}
    assert d.pg_status == {"1": {"last_enqueued_collective": 12}}
    bad = flight_recorder.parse_fr_dump(json.dumps({"entries": {"a": 1}}))
    assert bad.entries == [] and "no entries" in bad.problem
    assert flight_recorder.parse_fr_dump(b"[1, 2]").problem == "neither a JSON nor a pickle flight-recorder dump"


# ----------------------------------------------------------------------------- nvidia-smi -q

def test_q_repeated_fields_numbered_and_colon_sections():
    text = ("==============NVSMI LOG==============\n"
            "\n"
            "Driver Version                            : 535.161.08\n"
            "\n"
            "GPU 00000000:17:00.0\n"
            "    Product Name                          : NVIDIA H100 80GB HBM3\n"
            "    Processes\n"
            "        GPU instance ID                   : N/A\n"
            "        Process ID                        : 101\n"
            "        Process ID                        : 102\n"
            "        Process ID                        : 103\n"
            "    Retired Pages :\n"
            "        Pending Page Blacklist            : No\n")
    r = nvsmi_q.parse_lines(text.split("\n"))
    g = r.gpus[0]
    assert r.recognised and r.driver == "535.161.08"
    assert [g.get(p) for p in ("Processes/Process ID", "Processes/Process ID#2", "Processes/Process ID#3")] == \
        ["101", "102", "103"]
    assert g.get("Retired Pages") == "" and g.get("Retired Pages/Pending Page Blacklist") == "No"


# ----------------------------------------------------------------------------- nccl-tests

def test_nccl_tests_single_mode_rows_and_rows_with_text_cells():
    text = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
            "validation: 1 graph: 0\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
            "           8             2     float     sum      -1    24.11    0.00    0.00      0\n"
            "          16             4     float     sum      -1    23.90    0.00    0.00    N/A\n"
            "          32             8     float     sum      -1    22.00    0.00    0.00    0    22.1  0.00  "
            "0.00  oops\n"
            "          64            16     float     sum      -1    24.0    x    0.00    0\n")
    out = nccl_tests.parse_nccl_tests(text)
    assert [(r.bytes, r.time_us, r.wrong, r.ip_time_us) for r in out.rows] == [(8, 24.11, 0, None),
                                                                              (16, 23.9, None, None)]
    assert out.recognised


# ----------------------------------------------------------------------------- ethtool

def test_ethtool_keys_the_facts_do_not_keep_are_not_evidence():
    text = ("Settings for ens1f0np0:\n"
            "\tSupported ports: [ FIBRE ]\n"
            "\tSpeed: 400000Mb/s\n"
            "\tLanes: 8\n"
            "\n"
            "\tDuplex: Full\n"
            "\tMDI-X: Unknown\n"
            "\tLink detected: yes\n")
    link = ethtool.parse(doc(text)).links[0]
    assert (link.name, link.speed_mbps, link.lanes, link.duplex, link.link_detected) == \
        ("ens1f0np0", 400000, 8, "Full", True)
    assert link.lines == ["Settings for ens1f0np0:", "Speed: 400000Mb/s", "Lanes: 8", "Duplex: Full",
                          "Link detected: yes"]
