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
from ouroboros.errors import EXIT_NEEDS_FIX, EXIT_NOTHING_TO_RESUME, EXIT_PAUSED, signal_exit_code
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
    parser = configparser.ConfigParser(
        strict=False, interpolation=None, delimiters=("=",), comment_prefixes=("#",)
    )
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


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here"
)
def test_systemd_analyze_verifies_the_unit(tmp_path) -> None:
    """With the program path and user of this machine, so the check is of the unit's
    directives, not of this machine's users."""
    ouroboros = Path(sys.executable).parent / "ouroboros"
    if not ouroboros.exists():
        pytest.skip("the ouroboros console script is not installed next to this python")
    text = UNIT.read_text().replace(unit_program(), str(ouroboros))
    text = text.replace("User=ouroboros", "User=root").replace("Group=ouroboros", "Group=root")
    instance = tmp_path / "ouroboros@demo.service"
    instance.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(instance)], capture_output=True, text=True, timeout=60
    )
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
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert f"XDG_CACHE_HOME={env['XDG_CACHE_HOME']}" == found["ENV"]
    for source in found["COPY"].split()[:-1]:
        assert (REPO / source).exists(), source


# -- as written: the set-up steps, systemd's notify protocol, a restricted pod ----------------


def unit_program() -> str:
    return shlex.split(unit()["Service"]["ExecStart"])[0]


def header(path: Path) -> str:
    """The comment lines a file opens with, without their `#`."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:])
    return "\n".join(lines)


def seconds(value: str) -> float:
    """A systemd time span as the example writes them: "120", "2min", "360s"."""
    import re

    found = re.fullmatch(r"(\d+)\s*(s|sec|min|m)?", value.strip())
    assert found, value
    return int(found.group(1)) * (60 if found.group(2) in ("min", "m") else 1)


def test_the_unit_is_type_notify_with_a_watchdog_and_room_to_wait_for_the_server() -> None:
    from ouroboros.config.schema import MetricsConfig, ModelConfig

    service = unit()["Service"]
    assert service["Type"] == "notify"
    watchdog = seconds(service["WatchdogSec"])
    assert watchdog >= 2 * MetricsConfig().heartbeat_secs  # pinged every half of it
    assert seconds(service["TimeoutStartSec"]) > ModelConfig().wait_for_server_secs


def test_the_units_header_lists_every_step_it_relies_on() -> None:
    import re

    from ouroboros.config.schema import LoggingConfig

    text, service = header(UNIT), unit()["Service"]
    user = service["User"]
    assert re.search(rf"useradd --system .*\b{user}\b", text), "a system user"
    program = Path(unit_program())
    venv = re.search(r"python3 -m venv (\S+)", text)
    assert venv and Path(venv.group(1)) / "bin" / "ouroboros" == program, "the venv it runs"
    assert f"{venv.group(1)}/bin/pip install" in text
    assert "pipx install" in text
    project = service["WorkingDirectory"].replace("%i", "docs-bot")
    state_dir = f"{project}/{LoggingConfig().state_dir}"
    assert f"install -d -o {user} -g {service['Group']} {state_dir}" in text, "the state dir"
    assert f"install -d -o {user} -g {service['Group']} {project}" in text
    assert "ouroboros@.service /etc/systemd/system/" in text and "daemon-reload" in text
    writable = service["ReadWritePaths"].split()
    assert service["WorkingDirectory"] in writable  # the state dir is in the project
    for code in NO_RESTART | {0, 1}:
        assert re.search(rf"^ {{2,}}{code}\s", text, re.M), f"exit {code} explained"


def containers(pod: dict) -> list[dict]:
    return pod.get("initContainers", []) + pod["containers"]


def test_the_job_meets_the_restricted_pod_security_standard(tmp_path) -> None:
    docs = job_documents()
    pod = docs["Job"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsUser"] != 0
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container in containers(pod):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"]["drop"] == ["ALL"], container["name"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context.get("privileged", False) is False

    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    writable = [
        Path(m["mountPath"])
        for m in agent["volumeMounts"]
        if not m.get("readOnly")
        and ("persistentVolumeClaim" in volumes[m["name"]] or "emptyDir" in volumes[m["name"]])
    ]
    files = docs["ConfigMap"]["data"]
    project = tmp_path / "project"
    project.mkdir()
    for name, text in files.items():
        (project / name).write_text(text)
    loaded = load_config(project / "ouroboros.toml", user_file=None, env={})
    env = {e["name"]: e["value"] for e in agent["env"]}
    written = [
        loaded.state_dir,
        loaded.workspace,
        Path(env["XDG_CACHE_HOME"]),
        Path(env.get("TMPDIR", "/tmp")),
    ]
    for path in written:
        assert any(path.is_relative_to(mount) for mount in writable), (
            f"{path} is written but not on a writable volume"
        )


def test_the_jobs_header_builds_the_image_it_runs_and_has_no_stale_figures() -> None:
    import re

    text = header(JOB)
    pod = job_documents()["Job"]["spec"]["template"]["spec"]
    images = {c["image"] for c in containers(pod)}
    assert len(images) == 1
    image = images.pop()
    assert re.search(rf"(podman|docker) build -t {re.escape(image)} -f Containerfile \.", text)
    assert CONTAINERFILE.exists()
    comments = "\n".join(
        line for line in JOB.read_text().splitlines() if line.strip().startswith("#")
    )
    figures = re.findall(r"\d[\d,.]*\s*(?:[KMG]i?B|ms|turns)\b", comments)
    assert not figures, f"figures that go stale belong in docs/benchmarks.md: {figures}"


def test_the_manual_says_what_to_do_when_a_run_pauses() -> None:
    text = (REPO / "docs" / "supervisors.md").read_text()
    section = text[text.index("## When a run pauses (exit 3)") :]
    section = section[: section.index("\n## ", 5)]
    assert "ouroboros tell" in section
    assert "kubectl delete job" in section and "kubectl apply" in section
    assert "systemctl restart" in section
