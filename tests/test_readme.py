"""Every command in the READMEs runs as written, or is listed as not run with the reason.

Commands are read from README.md and examples/**/README.md:
- fenced code blocks with no language or a shell one (sh, bash, shell, console) whose first
  line is a command (its program is preflight, a `.venv/bin/` program, or one on PATH or of
  the cluster tools below); each line of such a block is one command (`\\` continues it, `#`
  starts a comment); in a transcript only the `$ ` lines are commands;
- inline code spans in the text that are a `preflight` command with at least one argument (a
  bare `preflight run` in a sentence names the subcommand).

Each command is classified by rules, in this order, never by a list of exceptions:
1. setup (`python3 -m venv`, `pip install`): the install is what CI itself does; the rest of
   the line is run (the whole test suite tail is this run itself, so it is not run again);
2. cluster: a cluster program (srun, sbatch, salloc, scontrol, pdsh, ssh, ...), options that
   reach other machines (--hosts, --partition, --transport, ...), a PostgreSQL URL, a Slurm job
   id, Slurm node state (prologue, resume), an NCCL sweep (GPUs), or a comment saying it runs
   inside an allocation: not run, with the reason;
3. a template: placeholders (NAME, PATH..., <x>, [--opt], ...): not run;
4. an illustration: input files that are not in the checkout: not run;
5. everything else runs as written, in a scratch folder that mirrors the checkout (so
   `examples/...` resolves and `reports/` lands in the scratch folder), `.venv/bin/X` and bare
   `preflight` mapped to this environment's executables, a scratch HOME, history store and
   config, output options (-o, --out, --html, --prometheus, ...) pointed into the scratch
   folder. It must exit 0 (GO) or 1 (NO-GO), never 2 or a traceback; a trailing comment
   `exit N` states the exact exit code.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

READMES = [ROOT / "README.md", *sorted((ROOT / "examples").glob("**/README.md"))]
BIN = Path(sys.executable).parent  # this environment's executables
SHELL_LANGS = ("", "sh", "bash", "shell", "console")
CLUSTER_PROGRAMS = ("srun", "sbatch", "salloc", "scontrol", "sinfo", "squeue", "scancel", "sacct", "pdsh", "clush",
                    "ssh", "scp", "torchrun", "mpirun", "psql", "kubectl")
REMOTE_OPTIONS = ("--hosts", "--partition", "--nodelist", "--transport", "--ssh-config", "--ssh-accept-new")
SLURM_STATE_SUBCOMMANDS = ("prologue", "resume")  # drain/resume nodes through scontrol
JOB_ID_SUBCOMMANDS = ("triage", "collect")  # a bare number is a Slurm job id
OUTPUT_OPTIONS = ("-o", "--out", "--output", "--html", "--prometheus", "--bad-nodes", "--save-bundle")
ALLOCATION_COMMENT = re.compile(r"\b(allocation|srun|sbatch|salloc|slurm|ssh)\b", re.I)
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]{2,}(\.\.\.)?$|\.\.\.|^<.*>$|^\[.*\]$|^\[-")
EXPECT_COMMENT = re.compile(r"\bexit (\d)\b")
SHELL_OPERATORS = ("|", "||", "&&", ";", ">", ">>", "<", "2>&1")
TIMEOUT_S = 300


@dataclass(frozen=True)
class Command:
    text: str  # the command as written (continuations joined), without its comment
    comment: str  # the trailing `# ...` comment, if any
    where: str  # README file and line


def _split_comment(line: str) -> tuple[str, str]:
    """(command, comment): a `#` that starts a word outside quotes starts the comment."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _program(text: str) -> str:
    words = text.split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]  # VAR=value before the program
    return words[0] if words else ""


def _is_command(text: str) -> bool:
    prog = _program(text)
    if not re.fullmatch(r"(\.venv/bin/|\./)?[A-Za-z][\w.+-]*", prog):
        return False
    name = prog.removeprefix(".venv/bin/").removeprefix("./")
    return (name in ("preflight", "python3", "python", "pip", "pytest") or prog.startswith(".venv/bin/")
            or name in CLUSTER_PROGRAMS or shutil.which(name) is not None)


def _block_commands(lines: list[str], first: int, rel: str) -> list[Command]:
    out: list[Command] = []
    pending, start = "", first
    for n, raw in enumerate(lines, start=first):
        text = raw.strip()
        if not pending:
            start = n
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        text, pending = pending + text, ""
        cmd, comment = _split_comment(text)
        if cmd:
            out.append(Command(cmd, comment, f"{rel}:{start}"))
    return out


def readme_commands(path: Path) -> list[Command]:
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Command] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if not fence:
            for span in re.findall(r"`([^`]+)`", lines[i]):
                words = span.split()
                if len(words) >= 3 and words[0] in ("preflight", ".venv/bin/preflight") \
                        and re.fullmatch(r"[a-z][a-z-]*", words[1]):
                    cmd, comment = _split_comment(span)
                    found.append(Command(cmd, comment, f"{rel}:{i + 1}"))
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if re.match(r"^\s*```\s*$", lines[j])), len(lines))
        body = lines[i + 1:end]
        if any(ln.startswith("$ ") for ln in body):  # a transcript: the prompted lines are the commands
            body = [ln[2:] if ln.startswith("$ ") else "" for ln in body]
        first = next((ln for ln in body if ln.strip() and not ln.strip().startswith("#")), "")
        if fence.group(1).lower() in SHELL_LANGS and first and _is_command(first):
            found.extend(_block_commands(body, i + 2, rel))
        i = end + 1
    return found


def _unique(commands: list[Command]) -> list[Command]:
    """One test per command text; where it is written twice, the copy that states its exit code."""
    seen: dict[str, Command] = {}
    for c in commands:
        if c.text not in seen or (EXPECT_COMMENT.search(c.comment) and not EXPECT_COMMENT.search(seen[c.text].comment)):
            seen[c.text] = c
    return list(seen.values())


COMMANDS = _unique([c for p in READMES for c in readme_commands(p)])


# ---------------------------------------------------------------------------------------------
# classification


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _subcommand(words: list[str]) -> str:
    for i, w in enumerate(words):
        if w.endswith("preflight") and i + 1 < len(words):
            return words[i + 1]
    return ""


def _looks_like_path(word: str) -> bool:
    return "/" in word or bool(re.search(r"\.[A-Za-z]\w{0,6}$", word))


def _output_values(words: list[str]) -> set[int]:
    """Indexes of the words that are files the command writes: the values of output options."""
    return {i + 1 for i, w in enumerate(words[:-1]) if w in OUTPUT_OPTIONS}


def needs_cluster(cmd: Command) -> str:
    """Why the command cannot run on this machine alone ("" when it can)."""
    words = _words(cmd.text)
    remote = [w.split("=")[0] for w in words if w.split("=")[0] in REMOTE_OPTIONS]
    if remote:
        return f"reaches other machines ({remote[0]})"
    programs = [Path(w).name for i, w in enumerate(words) if i == 0 or words[i - 1] in SHELL_OPERATORS]
    progs = sorted(set(programs) & set(CLUSTER_PROGRAMS))
    if progs:
        return f"uses {', '.join(progs)} (a cluster tool)"
    if any(re.match(r"^postgres(ql)?://", w) for w in words):
        return "needs a PostgreSQL server"
    sub = _subcommand(words)
    if sub in SLURM_STATE_SUBCOMMANDS:
        return f"`preflight {sub}` changes Slurm node state through scontrol"
    if sub in JOB_ID_SUBCOMMANDS and any(w.isdigit() for w in words[words.index(sub) + 1:]):
        return "names a Slurm job"
    if sub == "sweep" and "gloo" not in words:
        return "an NCCL sweep needs GPUs"
    if cmd.comment and ALLOCATION_COMMENT.search(cmd.comment):
        return f"runs where its comment says: {cmd.comment}"
    return ""


def placeholders(cmd: Command) -> list[str]:
    return [w for w in _words(cmd.text) if PLACEHOLDER.search(w)]


def missing_inputs(cmd: Command) -> list[str]:
    words = _words(cmd.text)
    outputs = _output_values(words)
    missing = []
    for i, w in enumerate(words[1:], start=1):
        if i in outputs or w.startswith("-") or "://" in w:
            continue
        if _looks_like_path(w) and not (ROOT / w).exists():
            missing.append(w)
    return missing


def is_setup(cmd: Command) -> bool:
    return bool(re.search(r"\bpip install\b|\bpython3? -m venv\b", cmd.text))


def setup_tail(cmd: Command) -> list[str]:
    """The parts of a setup line after the environment is made and the package installed."""
    parts = [p.strip() for p in cmd.text.split("&&")]
    return [p for p in parts if not re.search(r"\bpip install\b|\bpython3? -m venv\b", p)]


def not_run_reason(cmd: Command) -> str:
    if is_setup(cmd):
        tail = setup_tail(cmd)
        if any(_program(t).endswith("pytest") for t in tail):
            return "installs the test extras and runs the whole test suite: the run CI makes (.ci/run), this run"
        return ""
    why = needs_cluster(cmd)
    if why:
        return why
    ph = placeholders(cmd)
    if ph:
        return f"a template (placeholders {', '.join(ph)})"
    miss = missing_inputs(cmd)
    if miss:
        return f"an illustration: {', '.join(miss)} not in the checkout"
    return ""


def expected_exit(cmd: Command) -> int | None:
    m = EXPECT_COMMENT.search(cmd.comment)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# running


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that mirrors the checkout's top level (links), with its own HOME, config and
    history store, so relative paths in the READMEs resolve and nothing lands in the checkout."""
    base = tmp_path_factory.mktemp("readme")
    work = base / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("reports", ".venv"):
            (work / entry.name).symlink_to(entry)
    (base / "home").mkdir()
    (base / "out").mkdir()
    (base / "config.toml").write_text("")
    return base


def _env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PREFLIGHT_"))}
    env.update(HOME=str(base / "home"), PREFLIGHT_HISTORY=str(base / "history.db"),
               PREFLIGHT_CONFIG=str(base / "config.toml"), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
               COLUMNS="120", NO_COLOR="1")
    return env


def _mapped(text: str, base: Path) -> str:
    words = _words(text)
    outputs = _output_values(words)
    out = []
    for i, w in enumerate(words):
        if w in SHELL_OPERATORS:
            out.append(w)
            continue
        if i in outputs:
            w = str(base / "out" / Path(w).name)
        elif w.startswith(".venv/bin/"):
            w = str(BIN / w.removeprefix(".venv/bin/"))
        out.append(shlex.quote(w))
    return " ".join(out)


def run_readme_command(text: str, base: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", _mapped(text, base)], cwd=base / "work", env=_env(base), text=True,
                          capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)


def _check_ran(cmd: Command, text: str, base: Path) -> None:
    p = run_readme_command(text, base)
    said = (p.stdout + p.stderr)[-3000:]
    assert "Traceback (most recent call last)" not in p.stdout + p.stderr, f"{cmd.where}: {text}\n{said}"
    want = expected_exit(cmd)
    if want is not None:
        assert p.returncode == want, f"{cmd.where}: {text} exited {p.returncode}, README says {want}\n{said}"
        return
    assert p.returncode in (0, 1), f"{cmd.where}: {text} exited {p.returncode} (0 GO, 1 NO-GO)\n{said}"


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.text for c in COMMANDS])
def test_readme_command(cmd: Command, scratch: Path) -> None:
    reason = not_run_reason(cmd)
    if reason:
        pytest.skip(f"not run here: {reason}")
    for text in (setup_tail(cmd) if is_setup(cmd) else [cmd.text]):
        _check_ran(cmd, text, scratch)


def test_every_readme_command_is_classified() -> None:
    """The list the commands above come from: something to run, and the reasons for the rest."""
    assert len(COMMANDS) >= 10
    by_text = {c.text: c for c in COMMANDS}
    assert expected_exit(by_text[".venv/bin/preflight analyze examples/captures/faulty-node"]) == 1
    assert expected_exit(by_text[".venv/bin/preflight analyze examples/captures/healthy-node"]) == 0
    runnable = [c for c in COMMANDS if not not_run_reason(c)]
    assert len(runnable) >= 5
    for c in COMMANDS:
        reason = not_run_reason(c)
        assert reason == "" or len(reason) > 10, c


def test_the_example_captures_give_no_go_and_go(scratch: Path) -> None:
    faulty = run_readme_command(".venv/bin/preflight analyze examples/captures/faulty-node", scratch)
    assert faulty.returncode == 1 and "NO-GO" in faulty.stdout, faulty.stdout[-2000:]
    healthy = run_readme_command(".venv/bin/preflight analyze examples/captures/healthy-node", scratch)
    assert healthy.returncode == 0 and "GO" in healthy.stdout and "NO-GO" not in healthy.stdout, healthy.stdout


# --- the rules themselves ---------------------------------------------------------------------


@pytest.mark.parametrize(("text", "comment", "why"), [
    ("preflight run --hosts 'gpu[001-016]' --transport ssh", "", "--hosts"),
    ("pdsh -w gpu[001-064] 'dmesg -T | grep -i xid' | preflight analyze -", "", "pdsh"),
    ("preflight run", "inside an allocation: srun on $SLURM_JOB_NODELIST", "comment"),
    ("preflight triage 123456", "", "Slurm job"),
    ("preflight prologue --damp 3,2", "", "scontrol"),
    ("preflight history --history postgresql://u@h/db", "", "PostgreSQL"),
    ("preflight sweep --hosts 'gpu[001-004]' --nproc-per-node 8", "", "--hosts"),
    ("preflight sweep --nproc 8", "", "GPUs"),
    ("preflight profiles --show NAME", "", "template"),
    ("preflight baseline learn --history ... -o site-baseline.toml", "", "template"),
    ("preflight analyze node7-dmesg.txt ./bundle/", "", "not in the checkout"),
    ("preflight triage job42.tar.gz", "", "not in the checkout"),
])
def test_rules_keep_cluster_commands_templates_and_illustrations_apart(text: str, comment: str, why: str) -> None:
    assert why in not_run_reason(Command(text, comment, "x"))


@pytest.mark.parametrize("text", [
    "preflight sweep --nproc 4 --backend gloo --max-bytes 4M",
    "preflight node --prometheus /var/lib/node_exporter/textfile/preflight.prom",
    ".venv/bin/preflight analyze examples/captures/faulty-node",
    "preflight history --since 7d",
    "preflight analyze examples/captures --bad-nodes bad.txt",
])
def test_rules_run_what_runs_on_one_machine(text: str) -> None:
    assert not_run_reason(Command(text, "", "x")) == ""


def test_output_options_go_to_the_scratch_folder(tmp_path: Path) -> None:
    mapped = _mapped("preflight history --html fleet.html --prometheus /var/lib/node_exporter/preflight.prom", tmp_path)
    assert f"--html {tmp_path}/out/fleet.html" in mapped
    assert f"--prometheus {tmp_path}/out/preflight.prom" in mapped
    mapped = _mapped("preflight analyze examples/captures --bad-nodes bad.txt --profile h100-sxm-8x", tmp_path)
    assert mapped.endswith(f"examples/captures --bad-nodes {tmp_path}/out/bad.txt --profile h100-sxm-8x")
    # an input option's value is left as written
    assert _mapped("preflight analyze --checks-dir site/checks x", tmp_path).endswith("--checks-dir site/checks x")


def test_blocks_that_are_not_commands_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(
        "text `preflight list` and `preflight analyze examples/captures/healthy-node`\n\n"
        "```\n{\"verdict\": \"GO\"}\n```\n\n```\npreflight/   engine, model\ntests/  pytest\n```\n\n"
        "```python\nimport os\n```\n\n```\npreflight node --json   # one node\nls \\\n  -l\n```\n\n"
        "```console\n$ preflight list\nid  scope\n$ preflight profiles\n```\n")
    got = [(c.text, c.comment) for c in readme_commands(tmp_path / "README.md")]
    assert got == [("preflight analyze examples/captures/healthy-node", ""), ("preflight node --json", "one node"),
                   ("ls  -l", ""), ("preflight list", ""), ("preflight profiles", "")]



@pytest.mark.parametrize(("text", "comment"), [
    ("preflight analyze --no-such-option examples/captures/faulty-node", ""),  # exit 2: usage error
    ("preflight analyze examples/captures/faulty-node", "GO, exit 0"),  # NO-GO where the README says GO
])
def test_a_readme_command_that_does_not_do_what_it_says_fails(text: str, comment: str, scratch: Path) -> None:
    with pytest.raises(AssertionError):
        _check_ran(Command(text, comment, "x"), text, scratch)
