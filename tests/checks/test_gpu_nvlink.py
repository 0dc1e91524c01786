"""gpu.nvlink on listings cut by the poster and on `nvidia-smi nvlink -e` error counters: the
parser's facts (counters, kinds, cut lines, a command that shows a subset) and the grader's
codes, statuses, summaries, evidence and facts. Fixtures are written here in nvidia-smi's format."""

from __future__ import annotations

import pytest

from preflight.checks import gpu, nvlink_counters
from preflight.framing import Doc
from preflight.model import Result, Status
from preflight.parsers import nvlink
from tests.conftest import capture, grade, grade_text

H100 = "h100-sxm-8x"
NAME = "NVIDIA H100 80GB HBM3"


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def nvl(text: str, profile: str = "generic") -> Result:
    [r] = grade_text("gpu.nvlink", {"nvidia-smi-nvlink": text}, profile)
    return r


def run(text: str, profile: str = "generic") -> Result:
    [r] = grade("gpu.nvlink", {"nvidia-smi-nvlink": capture("nvidia-smi-nvlink", text)}, profile)
    return r


def gpu_block(i: int, shown: list[int], speed: str = "26.562 GB/s", name: str = NAME,
              inactive: tuple[int, ...] = ()) -> list[str]:
    return [f"GPU {i}: {name} (UUID: GPU-{i:08d})",
            *[f"\t Link {k}: " + ("<inactive>" if k in inactive else speed) for k in shown]]


def text(*blocks: list[str]) -> str:
    return "\n".join(line for b in blocks for line in b) + "\n"


# --------------------------------------------------------------------------- parser: cut lines


@pytest.mark.parametrize("mark", ["...", "   ...<snip>...", "[...]", "\t [...]", "(truncated)", "…", "<snip>",
                                  "[output truncated]", "... 15 more links ...", "(lines omitted)", "-- cut --",
                                  "[links 2-16 elided]", "--snip--"])
def test_a_cut_line_in_a_gpu_listing(mark: str) -> None:
    rep = nvlink.parse(Doc(text(gpu_block(0, [0, 1]), [mark], ["\t Link 17: 26.562 GB/s"])))
    [g] = rep.gpus
    assert g.cut == [mark.strip()] and g.notes == [] and [ln.n for ln in g.links] == [0, 1, 17]
    assert rep.excerpt and rep.partial == ""


def test_lines_that_are_no_cut() -> None:
    rep = nvlink.parse(Doc(text(gpu_block(0, [0]), ["\t some note", "\t cutting edge", "\t Link 1 is fine"])))
    [g] = rep.gpus
    assert g.cut == [] and g.notes == ["some note", "cutting edge", "Link 1 is fine"] and not rep.excerpt


def test_a_cut_above_the_first_gpu_makes_an_excerpt() -> None:
    rep = nvlink.parse(Doc(text(["..."], gpu_block(6, [0, 1]))))
    assert rep.excerpt and rep.unparsed == [] and rep.gpus[0].cut == []
    plain = nvlink.parse(Doc(text(["stray"], gpu_block(6, [0, 1]))))
    assert not plain.excerpt and plain.unparsed == ["stray"]
    # the framing's own mark of an excerpt (a grep separator) is kept
    assert nvlink.parse(Doc(text(gpu_block(0, [0])), excerpt=True)).excerpt


@pytest.mark.parametrize(("command", "why"), [
    ("nvidia-smi nvlink --status", ""),
    ("nvidia-smi nvlink -s -i 3", ""),
    ("nvidia-smi nvlink -s -l 3", "the command lists one link (`nvidia-smi nvlink -s -l 3`)"),
    ("nvidia-smi nvlink --status --link=0", "the command lists one link (`nvidia-smi nvlink --status --link=0`)"),
    ("nvidia-smi nvlink --link 12 -s", "the command lists one link (`nvidia-smi nvlink --link 12 -s`)"),
    ("nvidia-smi nvlink -s | head -20", "the command filters the listing (`nvidia-smi nvlink -s | head -20`)"),
    ("nvidia-smi nvlink -s|grep -v 26.562", "the command filters the listing (`nvidia-smi nvlink -s|grep -v 26.562`)"),
    ("nvidia-smi nvlink -s | sudo egrep 'GPU|Link'", "the command filters the listing "
                                                   "(`nvidia-smi nvlink -s | sudo egrep 'GPU|Link'`)"),
    ("nvidia-smi nvlink -s | tee nvlink.txt", ""),
    ("nvidia-smi nvlink -s | less", ""),
    ("nvidia-smi nvlink -s -lo", ""),
])
def test_partial_reason(command: str, why: str) -> None:
    assert nvlink.partial_reason(command) == why


def test_the_command_above_the_listing_is_read() -> None:
    rep = nvlink.parse(Doc(text(gpu_block(0, [3])), command="nvidia-smi nvlink -s -l 3"))
    assert rep.partial == "the command lists one link (`nvidia-smi nvlink -s -l 3`)"


# --------------------------------------------------------------------------- parser: counters


@pytest.mark.parametrize(("name", "kind"), [
    ("Replay Errors", "replay"), ("Recovery Errors", "recovery"), ("CRC Errors", "crc"),
    ("CRC FLIT Errors", "crc"), ("CRC Data Errors", "crc"), ("Lane 0 CRC Errors", "crc"), ("Lane 3", "crc"),
    ("ECC Data Errors", "crc"),
    ("Malformed packet Errors", "packet"), ("Buffer overrun Errors", "packet"), ("Rx Errors", "packet"),
    ("Rx remote Errors", "packet"), ("Rx General Errors", "packet"), ("Local link integrity Errors", "packet"),
    ("Tx discards", "packet"),
    ("Link recovery successful events", "recovery"), ("Link recovery failed events", "recovery_failed"),
    ("Total link recovery events", "recovery_total"), ("Total Recovery Errors", "recovery_total"),
    ("Effective Errors", "symbol"), ("Symbol Errors", "symbol"),
    ("Effective BER", "ber"), ("Symbol BER", "ber"),
    ("FEC Errors - 0", "fec"), ("FEC Errors - 15", "fec"),
    ("Raw BER Lane 0", "raw"), ("Raw BER Total", "raw"), ("Raw Errors Lane 1", "raw"),
    ("Tx packets", "traffic"), ("Tx bytes", "traffic"), ("Rx packets", "traffic"), ("Rx bytes", "traffic"),
    ("Data Tx", "traffic"), ("Raw Rx", "traffic"),
    ("Remote PCI Bus ID", ""), ("Rx Errors total", ""), ("Rx packets lost", ""), ("P2P is supported", ""),
    ("  REPLAY   errors ", "replay"),
])
def test_counter_kinds(name: str, kind: str) -> None:
    assert nvlink.counter_kind(name) == kind


def test_counter_lines() -> None:
    rep = nvlink.parse(Doc("GPU 0: NVIDIA B200 (UUID: GPU-1)\n"
                           "\t Link 0: Replay Errors: 12\n"
                           "\t Link 1: Replay Errors: 0, Recovery Errors: 3, CRC Errors: 891\n"
                           "\t Link 2: CRC Errors: N/A\n"
                           "\t Link 3: Effective BER: 15e-255\n"
                           "\t Link 4: FEC Errors - 2: 7\n"
                           "\t Link 5: Remote PCI Bus ID: 00000000:05:00.0\n"
                           "\t Link 6: Data Tx: 12 KiB\n"
                           "\t Link 7: Replay Errors:\n"))
    [g] = rep.gpus
    got = [(c.link, c.name, c.value, c.text, c.kind) for c in g.counters]
    assert got == [(0, "Replay Errors", 12, "12", "replay"), (1, "Replay Errors", 0, "0", "replay"),
                   (1, "Recovery Errors", 3, "3", "recovery"), (1, "CRC Errors", 891, "891", "crc"),
                   (2, "CRC Errors", None, "N/A", "crc"), (3, "Effective BER", None, "15e-255", "ber"),
                   (4, "FEC Errors - 2", 7, "7", "fec"), (6, "Data Tx", None, "12 KiB", "traffic"),
                   (7, "Replay Errors", None, "", "replay")]
    assert g.counters[2].line == "Link 1: Replay Errors: 0, Recovery Errors: 3, CRC Errors: 891"
    assert g.other == ["Link 5: Remote PCI Bus ID: 00000000:05:00.0"] and g.links == []
    assert rep.counter_gpus == [g] and rep.state_gpus == [] and rep.other == g.other


def test_a_counter_list_with_a_part_that_is_no_pair_is_other() -> None:
    [g] = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\n\t Link 0: Replay Errors: 0, and more\n")).gpus
    assert g.counters == [] and g.other == ["Link 0: Replay Errors: 0, and more"]
    [h] = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\n\t Link 0: 3: 4\n")).gpus
    assert h.counters == [] and h.other == ["Link 0: 3: 4"]


def test_state_and_counter_gpus() -> None:
    mixed = nvlink.parse(Doc(text(gpu_block(0, [0, 1]), ["GPU 1: A (UUID: GPU-2)"],
                                  ["GPU 0: A (UUID: GPU-1)", "\t Link 0: Replay Errors: 0"])))
    g0, g1, g0e = mixed.gpus
    assert mixed.state_gpus == [g0, g1] and mixed.counter_gpus == [g0e]
    counters = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\n\t Link 0: CRC Errors: 0\nGPU 1: A (UUID: GPU-2)\n"))
    assert counters.state_gpus == [] and len(counters.counter_gpus) == 1
    inactive = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\n\t Link 0: CRC Errors: 0\nGPU 1: A (UUID: GPU-2)\n"
                                "\t NVML: Unable to retrieve NVLink information as all links are inactive\n"))
    assert [g.index for g in inactive.state_gpus] == [1]
    other = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\n\t Link 0: Remote: x\nGPU 1: A (UUID: GPU-2)\n"))
    assert other.state_gpus == []
    bare = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\nGPU 1: A (UUID: GPU-2)\n"))
    assert len(bare.state_gpus) == 2


def test_numbered_from_zero() -> None:
    def g(ns: list[int]) -> nvlink.NvlinkGpu:
        return nvlink.parse(Doc(text(gpu_block(0, ns)))).gpus[0]
    assert g([0, 1, 2]).numbered_from_zero and g([1, 0]).numbered_from_zero and g([]).numbered_from_zero
    assert not g([0, 2]).numbered_from_zero and not g([1, 2]).numbered_from_zero


# --------------------------------------------------------------------------- grading cut listings


def test_snipped_listing_grades_the_links_shown() -> None:
    blocks = [gpu_block(i, [0, 1]) + ["   ...<snip>...", "\t Link 17: 26.562 GB/s"] for i in range(8)]
    r = nvl(text(*blocks), H100)
    assert r.status is Status.PASS and codes(r) == []
    assert r.summary == ("24 NVLinks up on 8 GPU(s), 26.562 GB/s (listing cut: links not shown on 8 GPU(s) not "
                         "graded)")
    assert r.evidence == ["not all links shown: " + "; ".join(f"GPU {i} (3 of 18 shown)" for i in range(8))
                          + ": lines cut from the paste (`...<snip>...`); the links not shown are not graded"]
    assert r.facts["links_total"] == 24 and r.facts["links_down"] == 0
    assert r.facts["gpus"][0] == {"index": 0, "name": NAME, "links_up": 3, "links_down": 0, "expected": 18,
                                  "speeds_gbps": [26.562], "cut": True}


def test_a_cut_listing_still_fails_on_what_it_shows() -> None:
    r = nvl(text(gpu_block(0, [0, 1, 2], inactive=(1,)), ["[...]"], gpu_block(1, list(range(18)))), H100)
    assert r.status is Status.FAIL and codes(r) == ["gpu.nvlink/link-down"]
    assert r.summary == "NVLink down: GPU 0 (1 inactive)"
    assert r.evidence[0] == f"GPU 0: {NAME} (UUID: GPU-00000000) / Link 1: <inactive>"
    assert any(e.startswith("not all links shown: GPU 0 (3 of 18 shown): lines cut from the paste (`[...]`)")
               for e in r.evidence)
    slow = nvl(text(gpu_block(0, [0, 1], speed="13.281 GB/s"), ["..."]), H100)
    assert slow.status is Status.WARN and codes(slow) == ["gpu.nvlink/link-slow"]


def test_a_whole_listing_with_fewer_links_is_a_link_missing() -> None:
    r = nvl(text(gpu_block(0, list(range(18))), gpu_block(1, list(range(16)))), H100)
    assert codes(r) == ["gpu.nvlink/link-down"] and r.summary == "NVLink down: GPU 1 (2 missing)"
    assert r.facts["gpus"][1] == {"index": 1, "name": NAME, "links_up": 16, "links_down": 0, "expected": 18,
                                  "speeds_gbps": [26.562]}


def test_an_excerpt_cut_at_its_end() -> None:
    """A paste marked as an excerpt: the last GPU's listing, links 0..n-1, ends where it ends."""
    tail = text(["..."], gpu_block(6, list(range(18))), gpu_block(7, [0, 1, 2]))
    r = nvl(tail, H100)
    assert r.status is Status.PASS and r.evidence == [
        "not all links shown: GPU 7 (3 of 18 shown): the paste is an excerpt and ends in this GPU's listing; the "
        "links not shown are not graded"]
    # a GPU before the last one is no tail
    mid = nvl(text(["..."], gpu_block(6, [0, 1, 2]), gpu_block(7, list(range(18)))), H100)
    assert mid.summary == "NVLink down: GPU 6 (15 missing)"
    # links skipped in the middle are no cut end
    gap = nvl(text(["..."], gpu_block(7, [0, 1, 5])), H100)
    assert gap.summary == "NVLink down: GPU 7 (15 missing)"
    # the same listing pasted whole: links missing
    assert nvl(text(gpu_block(6, list(range(18))), gpu_block(7, [0, 1, 2])), H100).status is Status.FAIL
    # an excerpt whose last GPU lists nothing: its links are not cut, they are not there
    none = nvl(text(["..."], ["GPU 7: " + NAME + " (UUID: GPU-7)"]), H100)
    assert none.summary == "NVLink down: GPU 7 (18 missing)"


def test_a_filtered_command_shows_a_subset() -> None:
    r = nvl("[root@gpu017 ~]# nvidia-smi nvlink -s | head -8\n" + text(gpu_block(0, list(range(7)))), H100)
    assert r.status is Status.PASS and r.evidence == [
        "not all links shown: GPU 0 (7 of 18 shown): the command filters the listing (`nvidia-smi nvlink -s | head "
        "-8`); the links not shown are not graded"]
    one = nvl("$ nvidia-smi nvlink -s -l 4\n" + text(gpu_block(0, [4]), gpu_block(1, [4])), H100)
    assert one.status is Status.PASS and one.summary.endswith("(listing cut: links not shown on 2 GPU(s) not graded)")


def test_links_not_shown_is_a_policy_code() -> None:
    from preflight import policy

    assert policy.status("gpu.nvlink/links-not-shown") is Status.PASS
    token = policy.use(policy.builtin().with_overrides({"gpu.nvlink/links-not-shown": "skip"}, "site config"))
    try:
        r = nvl(text(gpu_block(0, [0, 1]), ["..."]), H100)
    finally:
        policy.reset(token)
    assert r.status is Status.SKIP and codes(r) == ["gpu.nvlink/links-not-shown"]


def test_cut_gpus_with_all_links_shown_need_no_note() -> None:
    r = nvl(text(gpu_block(0, list(range(18))), ["..."]), H100)
    assert r.status is Status.PASS and r.evidence == [] and "listing cut" not in r.summary


def test_generic_profile_unknown_model_with_cut() -> None:
    r = nvl(text(gpu_block(0, [0, 1], name="Example X"), ["..."]))
    assert r.status is Status.PASS and r.evidence == [] and r.summary == "2 NVLinks up on 1 GPU(s), 26.562 GB/s"


# --------------------------------------------------------------------------- grading error counters


def legacy(values: dict[tuple[int, str], int], links: int = 2, gpu: int = 0) -> list[str]:
    out = [f"GPU {gpu}: {NAME} (UUID: GPU-{gpu:08d})"]
    for k in range(links):
        out += [f"\t Link {k}: {n}: {values.get((k, n), 0)}" for n in ("Replay Errors", "Recovery Errors", "CRC Errors")]
    return out


def test_counters_all_zero() -> None:
    r = nvl(text(legacy({}), legacy({}, gpu=1)), H100)
    assert r.status is Status.PASS and codes(r) == [] and r.evidence == []
    assert r.summary == "NVLink error counters 0 on 4 link(s) of 2 GPU(s) (replay, recovery, CRC)"
    assert r.facts == {"links_total": 0, "error_counters": {"gpus": 2, "links": 4, "counters_read": 12, "nonzero": {},
                                                            "unread": 0}}


@pytest.mark.parametrize(("name", "code", "status", "title"), [
    ("Replay Errors", "gpu.nvlink/replay-errors", Status.WARN, "NVLink replay errors"),
    ("Recovery Errors", "gpu.nvlink/recovery-errors", Status.WARN, "NVLink link recoveries"),
    ("CRC Errors", "gpu.nvlink/crc-errors", Status.WARN, "NVLink CRC errors"),
    ("Rx Errors", "gpu.nvlink/packet-errors", Status.WARN, "NVLink packet errors"),
    ("Effective Errors", "gpu.nvlink/symbol-errors", Status.WARN, "NVLink errors FEC did not correct"),
    ("Link recovery failed events", "gpu.nvlink/recovery-failed", Status.FAIL,
     "NVLink link recoveries that failed"),
])
def test_a_counter_above_zero(name: str, code: str, status: Status, title: str) -> None:
    t = text(legacy({}), [f"\t Link 1: {name}: 7"])
    r = nvl(t, H100)
    assert r.status is status and codes(r) == [code]
    assert r.summary == f"{title}: GPU 0 link 1 (7)"
    assert r.evidence == [f"Link 1: {name}: 7", f"GPU 0: {NAME} (UUID: GPU-00000000)"]  # the counter shown first
    remedy = nvlink_counters.LOST_REMEDY if status is Status.FAIL else nvlink_counters.MARGINAL_REMEDY
    assert r.remedy == remedy
    assert r.remedy.startswith("drain the node: a link failed to recover and is down until the GPU is reset" if status
                               is Status.FAIL else "watch the counters (`nvidia-smi nvlink -e`, reset with")
    kind = nvlink.counter_kind(name)
    assert r.facts["error_counters"]["nonzero"] == {kind: 7} and r.facts["error_counters"]["counters_read"] == 7
    assert r.facts["problems"] == [r.summary]


def test_one_finding_per_kind_naming_each_link() -> None:
    t = text(legacy({(0, "Replay Errors"): 3, (1, "Replay Errors"): 5, (1, "CRC Errors"): 891}),
             legacy({(0, "Replay Errors"): 1}, gpu=3))
    r = nvl(t, H100)
    assert codes(r) == ["gpu.nvlink/replay-errors", "gpu.nvlink/crc-errors"]
    assert r.summary == ("NVLink replay errors: GPU 0 link 0 (3), GPU 0 link 1 (5), GPU 3 link 0 (1); NVLink CRC errors: "
                         "GPU 0 link 1 (891)")
    assert r.evidence[:4] == ["Link 0: Replay Errors: 3", f"GPU 0: {NAME} (UUID: GPU-00000000)", "Link 1: Replay Errors: 5",
                              f"GPU 3: {NAME} (UUID: GPU-00000003)"]
    assert r.facts["error_counters"]["nonzero"] == {"replay": 9, "crc": 891}


def test_many_links_are_named_up_to_six() -> None:
    t = text(legacy({(k, "CRC Errors"): 1 for k in range(8)}, links=8))
    r = nvl(t, H100)
    assert r.summary == ("NVLink CRC errors: " + ", ".join(f"GPU 0 link {k} (1)" for k in range(6)) + " (+2 more)")
    six = nvl(text(legacy({(k, "CRC Errors"): 1 for k in range(6)}, links=6)), H100)
    assert "more" not in six.summary


def test_counters_of_one_link_add_up() -> None:
    r = nvl("GPU 0: A (UUID: GPU-1)\n\t Link 2: Rx Errors: 4\n\t Link 2: Tx discards: 6\n")
    assert r.summary == "NVLink packet errors: GPU 0 link 2 (10)"


def test_every_error_kind_read_is_named() -> None:
    t = ("GPU 0: NVIDIA B200 (UUID: GPU-1)\n\t Link 0: Replay Errors: 0\n\t Link 0: Recovery Errors: 0\n"
         "\t Link 0: Link recovery failed events: 0\n\t Link 0: CRC Errors: 0\n\t Link 0: Rx Errors: 0\n"
         "\t Link 0: Symbol Errors: 0\n")
    assert nvl(t).summary == ("NVLink error counters 0 on 1 link(s) of 1 GPU(s) (replay, recovery, failed recovery, "
                              "CRC, packet, effective/symbol)")


def nvlink5_recoveries(per_link: list[tuple[int | str, int | str, int | str]]) -> str:
    """`nvidia-smi nvlink -e` of a Blackwell/Hopper R550+ driver: successful, failed, total per link."""
    out = ["GPU 0: NVIDIA B200 (UUID: GPU-4d5e6f70-8192-4a3b-9c4d-5e6f7a8b9c0d)"]
    for k, (ok, failed, total) in enumerate(per_link):
        out += [f"\t Link {k}: Rx Errors: 0", f"\t Link {k}: Link recovery successful events: {ok}",
                f"\t Link {k}: Link recovery failed events: {failed}", f"\t Link {k}: Total link recovery events: {total}",
                f"\t Link {k}: Effective Errors: 0"]
    return "\n".join(out) + "\n"


def test_recovery_total_is_not_added_to_its_split() -> None:
    """2 successful, 0 failed, total 2 on each of two links: 2 recoveries per link, never 4."""
    r = nvl(nvlink5_recoveries([(2, 0, 2), (2, 0, 2)]))
    assert r.status is Status.WARN and codes(r) == ["gpu.nvlink/recovery-errors"]
    assert r.summary == "NVLink link recoveries: GPU 0 link 0 (2), GPU 0 link 1 (2)"
    assert r.facts["error_counters"]["nonzero"] == {"recovery": 4}
    assert r.facts["error_counters"]["counters_read"] == 8  # Rx, successful, failed, Effective per link
    assert "Link 0: Total link recovery events: 2" not in r.evidence
    assert "Link 0: Link recovery successful events: 2" in r.evidence


def test_recovery_total_beside_failed_events() -> None:
    r = nvl(nvlink5_recoveries([(0, 0, 0), (1, 2, 3)]))
    assert r.status is Status.FAIL
    assert codes(r) == ["gpu.nvlink/recovery-failed", "gpu.nvlink/recovery-errors"]  # the FAIL first
    assert r.summary == ("NVLink link recoveries that failed: GPU 0 link 1 (2); NVLink link recoveries: "
                         "GPU 0 link 1 (1)")
    assert r.facts["error_counters"]["nonzero"] == {"recovery": 1, "recovery_failed": 2}


def test_recovery_total_all_zero() -> None:
    r = nvl(nvlink5_recoveries([(0, 0, 0)]))
    assert r.status is Status.PASS and r.evidence == []
    assert r.summary == ("NVLink error counters 0 on 1 link(s) of 1 GPU(s) (recovery, failed recovery, packet, "
                         "effective/symbol)")


def test_recovery_total_without_its_split_is_read_as_the_total() -> None:
    alone = "GPU 0: NVIDIA B200 (UUID: GPU-1)\n\t Link 3: Rx Errors: 0\n\t Link 3: Total link recovery events: 5\n"
    r = nvl(alone)
    assert r.status is Status.WARN and codes(r) == ["gpu.nvlink/recovery-errors"]
    assert r.summary == "NVLink link recoveries: GPU 0 link 3 (5)"
    assert r.evidence == ["Link 3: Total link recovery events: 5", "GPU 0: NVIDIA B200 (UUID: GPU-1)"]
    assert r.facts["error_counters"]["counters_read"] == 2
    # the split of another link is no split of this one
    other = ("GPU 0: A (UUID: GPU-1)\n\t Link 0: Link recovery successful events: 1\n"
             "\t Link 1: Total link recovery events: 4\n")
    assert nvl(other).summary == "NVLink link recoveries: GPU 0 link 0 (1), GPU 0 link 1 (4)"
    # a split that reads no number is no split: the total is read
    na = nvl(nvlink5_recoveries([("N/A", "N/A", 2)]))
    assert na.summary == "NVLink link recoveries: GPU 0 link 0 (2)"
    clean = nvl("GPU 0: A (UUID: GPU-1)\n\t Link 0: Total link recovery events: 0\n")
    assert clean.status is Status.PASS and clean.summary == "NVLink error counters 0 on 1 link(s) of 1 GPU(s) (recovery)"


def test_recovery_total_that_is_not_the_sum_is_said() -> None:
    r = nvl(nvlink5_recoveries([(2, 0, 2), (1, 0, 3)]))
    assert codes(r) == ["gpu.nvlink/recovery-errors"]
    assert r.summary == "NVLink link recoveries: GPU 0 link 0 (2), GPU 0 link 1 (1)"
    assert ("1 NVLink recovery total(s) differ from the successful + failed events beside them (3 against 1; the "
            "split is graded): Link 1: Total link recovery events: 3") in r.evidence


def test_counters_that_are_not_graded() -> None:
    t = ("GPU 0: NVIDIA B200 (UUID: GPU-1)\n"
         "\t Link 0: Tx packets: 81234567\n\t Link 0: Rx bytes: 5198706304\n"
         "\t Link 0: Effective BER: 3e-12\n\t Link 0: FEC Errors - 0: 36140749276\n\t Link 0: FEC Errors - 1: 12\n"
         "\t Link 0: Raw Errors Lane 0: 82\n\t Link 0: Rx Errors: 0\n")
    r = nvl(t)
    assert r.status is Status.PASS and r.evidence == []
    assert r.summary == "NVLink error counters 0 on 1 link(s) of 1 GPU(s) (packet)"


def test_unread_and_unknown_counters_are_said() -> None:
    t = ("GPU 0: A (UUID: GPU-1)\n\t Link 0: Replay Errors: 0\n\t Link 0: CRC Errors: N/A\n"
         "\t Link 1: CRC Errors: [Not Supported]\n\t Link 0: Bogus Errors: 5\n\t Link 0: Replay Errors: 0, Odd: 0\n")
    r = nvl(t)
    assert r.status is Status.PASS
    assert r.evidence == ["2 NVLink error counter(s) read no number, not graded: Link 0: CRC Errors: N/A",
                          "NVLink counter(s) of no known kind above 0, not graded: Bogus Errors = 5"]
    assert r.facts["error_counters"]["unread"] == 2 and r.facts["error_counters"]["counters_read"] == 2
    many = nvl("GPU 0: A (UUID: GPU-1)\n\t Link 0: Replay Errors: 0\n"
               + "".join(f"\t Link 0: Odd{i} Errors: {i + 1}\n" for i in range(5)))
    assert many.evidence == ["NVLink counter(s) of no known kind above 0, not graded: Odd0 Errors = 1, Odd1 Errors = 2, "
                             "Odd2 Errors = 3"]


def test_counters_that_all_read_no_number_are_not_recognised() -> None:
    r = nvl("GPU 0: A (UUID: GPU-1)\n\t Link 0: CRC Errors: N/A\n\t Link 0: Replay Errors: N/A\n")
    assert r.status is Status.SKIP and codes(r) == ["gpu.nvlink/not-recognised"]
    assert r.evidence == ["Link 0: CRC Errors: N/A", "Link 0: Replay Errors: N/A"]
    assert codes(run("GPU 0: A (UUID: GPU-1)\n\t Link 0: CRC Errors: N/A\n")) == ["gpu.nvlink/unreadable-output"]


def test_states_and_counters_in_one_paste() -> None:
    t = text(gpu_block(0, list(range(18))), legacy({(1, "Replay Errors"): 2}))
    r = nvl(t, H100)
    assert r.status is Status.WARN and codes(r) == ["gpu.nvlink/replay-errors"]
    assert r.facts["links_total"] == 18 and r.facts["error_counters"]["links"] == 2
    ok = nvl(text(gpu_block(0, list(range(18))), legacy({})), H100)
    assert ok.summary == ("18 NVLinks up on 1 GPU(s), 26.562 GB/s; NVLink error counters 0 on 2 link(s) of 1 GPU(s) "
                          "(replay, recovery, CRC)")


def test_counter_listing_never_counts_links_missing() -> None:
    """An -e listing of 2 links on an 18-link GPU: no link is missing, and a GPU header with
    nothing under it in a counter listing is no GPU without links."""
    r = nvl(text(legacy({}), [f"GPU 1: {NAME} (UUID: GPU-1)"]), H100)
    assert r.status is Status.PASS and "links_down" not in r.facts


def test_tool_errors_with_counters() -> None:
    lost = "Unable to determine the device handle for GPU 0000:9D:00.0: Unknown Error\n"
    r = nvl(lost + text(legacy({})), H100)
    assert codes(r) == ["gpu.nvlink/gpu-not-listed"] and r.status is Status.FAIL


def test_read_counters_directly() -> None:
    rep = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\n\t Link 0: Replay Errors: 2\n\t Link 1: Replay Errors: 0\n"
                           "\t Link 1: Tx bytes: 99\n\t Link 1: Mystery: 0\n"))
    cg = nvlink_counters.read_counters(rep.counter_gpus)
    assert (cg.gpus, cg.links, cg.read, cg.kinds, cg.unread, cg.unknown) == (1, 2, 2, {"replay"}, [], [])
    assert [(g.index, c.value, n) for g, c, n in cg.nonzero["replay"]] == [(0, 2, 2)] and cg.graded
    assert not nvlink_counters.read_counters([]).graded
    assert nvlink_counters.read_counters([]).gpus == 0
    assert gpu.grade_nvlink is not None
