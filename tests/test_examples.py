"""The supervisor examples (examples/systemd, examples/kubernetes, the Containerfile) say what
the CLI does: every command line they run parses as an `ouroboros` command, the exit codes
they act on are the ones in ouroboros.errors, the paths they probe are where the harness
writes, and the config they ship loads."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from ouroboros.cli import app
from ouroboros.config import load_config
from ouroboros.errors import EXIT_NEEDS_FIX, EXIT_NOTHING_TO_RESUME, EXIT_PAUSED, \
    signal_exit_code
from ouroboros.loop.heartbeat import HEARTBEAT_FILE

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "examples" / "systemd" / "ouroboros@.service"
JOB = REPO / "examples" / "kubernetes" / "ouroboros-job.yaml"
CONTAINERFILE = REPO / "Containerfile"
# Exit codes after which a restart cannot help: a person must act.
NO_RESTART = {EXIT_NEEDS_FIX, EXIT_PAUSED, EXIT_NOTHING_TO_RESUME}


def parses(argv: list[str]) -> Any:
    """The `ouroboros` command line `argv` (without the program) as the CLI parses it (its
    context); a command or flag it does not have fails the test."""
    group = typer.main.get_command(app)
    name, *rest = argv
    command = group.commands.get(name)  # type: ignore[attr-defined]
    assert command is not None, f"no command {name!r}"
    return command.make_context(name, list(rest))


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None,
                                       delimiters=("=",), comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser


def job_documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(JOB.read_text())}


def test_the_unit_runs_continue_and_restarts_only_when_it_should() -> None:
    service = unit()["Service"]
    program, *argv = shlex.split(service["ExecStart"])
    assert Path(program).name == "ouroboros"
    context = parses(argv)
    assert context.params["keep_going"] and context.params["config"] is not None
    assert service["Restart"] == "always"
    prevented = {int(code) for code in service["RestartPreventExitStatus"].split()}
    assert prevented == NO_RESTART | {0}
    success = {int(code) for code in service["SuccessExitStatus"].split()}
    assert signal_exit_code("SIGTERM") in success and not success & {1}
    assert signal_exit_code("SIGTERM") not in prevented  # a kill from elsewhere: restarted
    assert service["ExecReload"].endswith("kill -HUP $MAINPID")  # = `ouroboros reload`


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed here")
def test_systemd_analyze_verifies_the_unit(tmp_path) -> None:
    """With the program path and user of this machine, so the check is of the unit's
    directives, not of this machine's users."""
    ouroboros = Path(sys.executable).parent / "ouroboros"
    if not ouroboros.exists():
        pytest.skip("the ouroboros console script is not installed next to this python")
    text = UNIT.read_text().replace("/usr/local/bin/ouroboros", str(ouroboros))
    text = text.replace("User=ouroboros", "User=root").replace("Group=ouroboros", "Group=root")
    instance = tmp_path / "ouroboros@demo.service"
    instance.write_text(text)
    result = subprocess.run(["systemd-analyze", "verify", str(instance)], capture_output=True,
                            text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if str(instance) in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_the_job_runs_continue_with_the_project_it_mounts(tmp_path) -> None:
    docs = job_documents()
    pod = docs["Job"]["spec"]["template"]["spec"]
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    context = parses(agent["args"])
    assert context.params["keep_going"] and context.params["json_lines"]
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    config_path = Path(context.params["config"])
    assert config_path.parent == Path(mounts["project"])
    files = docs["ConfigMap"]["data"]
    assert config_path.name in files and "SYSTEM_PROMPT.md" in files
    assert pod["restartPolicy"] == "Never"  # the podFailurePolicy decides

    project = tmp_path / "project"
    project.mkdir()
    for name, text in files.items():
        (project / name).write_text(text)
    loaded = load_config(project / config_path.name, user_file=None, env={})
    data = Path(mounts["data"])
    assert loaded.state_dir.is_relative_to(data) and loaded.workspace.is_relative_to(data)
    init = pod["initContainers"][0]["command"]
    assert {str(loaded.state_dir), str(loaded.workspace)} <= set(init)

    probe = " ".join(agent["livenessProbe"]["exec"]["command"])
    assert str(loaded.state_dir / HEARTBEAT_FILE) in probe
    period = agent["livenessProbe"]["periodSeconds"]
    assert loaded.config.metrics.heartbeat_secs < period

    annotations = docs["Job"]["spec"]["template"]["metadata"]["annotations"]
    port = loaded.config.metrics.port
    assert annotations["prometheus.io/port"] == str(port) != "0"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert port in {p["containerPort"] for p in agent["ports"]}
    assert loaded.config.metrics.address == "0.0.0.0"  # reachable from the scraper


def test_the_job_fails_only_on_codes_a_restart_cannot_help() -> None:
    job = docs = job_documents()["Job"]
    rules = job["spec"]["podFailurePolicy"]["rules"]
    fail = next(r for r in rules if r["action"] == "FailJob")["onExitCodes"]
    assert fail["operator"] == "In" and set(fail["values"]) == NO_RESTART
    assert fail["containerName"] == "agent"
    ignored = next(r for r in rules if r["action"] == "Ignore")
    assert ignored["onPodConditions"] == [{"type": "DisruptionTarget"}]  # eviction, drain
    assert docs["spec"]["backoffLimit"] > 10


def test_the_job_has_a_volume_claim_for_its_data() -> None:
    docs = job_documents()
    claim = docs["PersistentVolumeClaim"]
    pod = docs["Job"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert volumes["project"]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]


def containerfile() -> dict[str, str]:
    instructions: dict[str, str] = {}
    for line in CONTAINERFILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions[keyword.upper()] = rest.strip()
    return instructions


def test_the_containerfile_runs_continue_and_is_what_the_job_expects() -> None:
    import json

    found = containerfile()
    assert json.loads(found["ENTRYPOINT"]) == ["ouroboros"]
    command = json.loads(found["CMD"])
    assert parses(command).params["keep_going"]
    pod = job_documents()["Job"]["spec"]["template"]["spec"]
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    assert command == agent["args"]
    assert found["STOPSIGNAL"] == "SIGTERM"
    assert found["USER"] == str(pod["securityContext"]["runAsUser"])
    assert f"XDG_CACHE_HOME={dict((e['name'], e['value']) for e in agent['env'])['XDG_CACHE_HOME']}" \
        == found["ENV"]
    for source in found["COPY"].split()[:-1]:
        assert (REPO / source).exists(), source
