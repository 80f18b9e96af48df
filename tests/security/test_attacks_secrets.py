"""Attacks on secrets: no credential reaches a cell by any route the recorder controls (SECURITY.md, threat 1).

A cell walks every ancestor of its kernel up to init and reads each one's
``/proc/<pid>/environ``; the credentials given to ``themisto`` must be in none
of them, nor in the kernel's own environment, nor anywhere in the trajectory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from attacks import (
    PROCESS_TIMEOUT,
    REPOSITORY,
    process_environment,
    run_themisto,
    write_notebook,
)

from themisto.cli import main
from themisto.kernel.environment import allowed_environment, is_credential, kernel_environment
from themisto.trajectory import read_trajectory

# Each credential the issue names, with a value no other process holds.
SECRETS = {
    "GITHUB_PAT": "ghp-themisto-attack-1",
    "MY_PAT_TOKEN": "themisto-attack-2",
    "MYSQL_PWD": "themisto-attack-3",
    "SENTRY_DSN": "https://themisto-attack-4@sentry.example/1",
    "SLACK_WEBHOOK_URL": "https://hooks.example/themisto-attack-5",
    "AZURE_STORAGE_CONNECTION_STRING": "AccountKey=themisto-attack-6",
    "PIP_INDEX_URL": "https://user:themisto-attack-7@pypi.example/simple",
    "HF_TOKEN": "hf_themisto-attack-8",
    "X_AUTH": "themisto-attack-9",
}
# Credentials no name rule catches, and one variable of no meaning: the kernel gets none of
# them, because it gets only an allowlist. JUPYTER_TOKEN is allowlisted by its prefix and still left out.
UNNAMED_SECRETS = {
    "SSHPASS": "themisto-attack-10",
    "CI_JOB_JWT_V2": "themisto-attack-11",
    "HTTP_AUTHORIZATION": "Bearer themisto-attack-12",
    "LDAP_BIND_PW": "themisto-attack-13",
    "SMTPPASS": "themisto-attack-14",
    "DB_CREDS": "themisto-attack-15",
    "privateKey": "themisto-attack-16",
    "JDBC_URL": "jdbc:mysql://db.example/app?user=app&password=themisto-attack-17",
    "MONGO_URI": "mongodb://app:pa/ss-themisto-attack-18@db.example/app",
    "JUPYTER_TOKEN": "themisto-attack-19",
    "SOME_SETTING": "themisto-attack-20",
}

# A cell that reads the environment of the kernel and of each of its ancestors, and names the processes
# where it found the secrets' common marker (the cell holds only the marker, never a secret value).
MARKER = "themisto-attack"
PROBE = """import os, json
leaks, readable, pid = [], [], os.getpid()
while pid > 1:
    try:
        with open(f'/proc/{pid}/environ', 'rb') as handle:
            if MARKER.encode() in handle.read():
                leaks.append(pid)
        readable.append(pid)
    except OSError:
        pass
    with open(f'/proc/{pid}/stat') as handle:
        pid = int(handle.read().rsplit(')', 1)[1].split()[1])
leaks += [name for name, value in os.environ.items() if MARKER in value]
print(json.dumps({'leaks': leaks, 'readable': readable, 'kernel': os.getpid()}))"""


def probe_notebook(path: Path) -> Path:
    return write_notebook(path, [f"MARKER = {MARKER!r}\n" + PROBE])


def assert_no_leak(out: Path) -> None:
    """The probe found no secret, read at least its parent's environment, and the files hold no secret."""
    [trajectory] = list(out.glob("*.jsonl"))
    [step] = read_trajectory(trajectory)
    assert step.error is None, step.output
    report = json.loads(step.output)
    assert report["leaks"] == []
    # the probe is not vacuous: it reads environments (the kernel's own at least; a root kernel, which has
    # lost the capabilities that read other processes' memory, reads no process with more of them)
    assert report["kernel"] in report["readable"]
    for file in out.iterdir():
        text = file.read_text(errors="replace")
        assert not [value for value in [*SECRETS.values(), *UNNAMED_SECRETS.values()] if value in text], file


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        *[(name, value, True) for name, value in SECRETS.items()],
        ("DATABASE_URL", "postgres://app:hunter2@db.example:5432/app", True),
        ("PIP_EXTRA_INDEX_URL", "https://pypi.org/simple https://u:p@private.example/simple", True),
        ("PATH", "/usr/bin:/bin", False),
        ("PWD", "/home/user", False),
        ("OLDPWD", "/tmp", False),
        ("PYTHONPATH", "/src", False),
        ("LD_LIBRARY_PATH", "/usr/lib", False),
        ("DISPATCH_MODE", "fast", False),
        ("PIP_INDEX_URL", "https://pypi.org/simple", False),
        ("GIT_URL", "ssh://git@github.com/org/repo", False),  # a user name is no password
    ],
)
def test_credential_names_and_values(name: str, value: str, secret: bool) -> None:
    assert is_credential(name, value) is secret
    assert (name in kernel_environment({name: value})) is not secret


@pytest.mark.parametrize("name", sorted(UNNAMED_SECRETS))
def test_the_kernel_gets_an_allowlist_so_credentials_of_any_name_are_absent(name: str) -> None:
    environ = {"PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1", name: UNNAMED_SECRETS[name]}
    kernel = allowed_environment(environ)
    assert kernel == {"PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    assert allowed_environment(environ, pass_env=[name])[name] == UNNAMED_SECRETS[name]  # unless the user asks


@pytest.mark.kernel
def test_record_command_leaves_no_secret_to_any_ancestor_of_the_kernel(tmp_path: Path) -> None:
    notebook = probe_notebook(tmp_path / "probe.ipynb")
    environment = process_environment(**SECRETS, **UNNAMED_SECRETS)
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"), env=environment)
    assert result.returncode == 0, result.stderr
    assert_no_leak(tmp_path / "out")


@pytest.mark.kernel
def test_pass_env_gives_the_kernel_a_variable_the_allowlist_leaves_out(tmp_path: Path) -> None:
    cell = "import os\nprint(os.environ.get('SOME_SETTING'), os.environ.get('HF_TOKEN'), 'PATH' in os.environ)"
    notebook = write_notebook(tmp_path / "passed.ipynb", [cell])
    environment = process_environment(**SECRETS, **UNNAMED_SECRETS)
    out = tmp_path / "out"
    passed = run_themisto("record", str(notebook), "-o", str(out), "--pass-env", "SOME_SETTING", env=environment)
    assert passed.returncode == 0, passed.stderr
    assert [step.output for step in read_trajectory(out / "passed.jsonl")] == ["themisto-attack-20 None True"]
    # a credential the user names reaches the kernel too: the recorder keeps it for the kernel alone
    named = run_themisto(
        "record", str(notebook), "-o", str(out), "--overwrite", "--pass-env", "HF_TOKEN", env=environment
    )
    assert named.returncode == 0, named.stderr
    assert [step.output for step in read_trajectory(out / "passed.jsonl")] == ["None hf_themisto-attack-8 True"]
    unset = run_themisto("record", str(notebook), "-o", str(out), "--pass-env", "THEMISTO_UNSET_VARIABLE")
    assert unset.returncode == 2 and "--pass-env THEMISTO_UNSET_VARIABLE: no such variable" in unset.stderr


@pytest.mark.kernel
def test_python_api_caller_environment_is_out_of_the_kernels_reach(tmp_path: Path) -> None:
    # record_source() cannot change its caller's environment: the caller is made unreadable instead
    notebook = probe_notebook(tmp_path / "probe.ipynb")
    script = (
        "import sys\nfrom themisto.recording.record import record_source\n"
        "record_source(sys.argv[1], sys.argv[2])\n"
        "print(open(f'/proc/self/environ', 'rb').read().count(b'themisto-attack'))"  # the caller keeps them
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(notebook), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        env=process_environment(**SECRETS),
        cwd=REPOSITORY,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(SECRETS)
    assert_no_leak(tmp_path / "out")


@pytest.mark.kernel
def test_isolate_home_hides_the_users_home_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".netrc").write_text("machine example.org login me password themisto-attack-netrc\n")
    (home / ".cache" / "huggingface" / "token").write_text("hf_themisto-attack-file\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    cell = (
        "import os, pathlib\n"
        "home = os.path.expanduser('~')\n"
        "cache = os.environ.get('XDG_CACHE_HOME', os.path.join(home, '.cache'))\n"
        # IPython makes its own ~/.ipython wherever home is
        "print(home, sorted(set(os.listdir(home)) - {'.ipython'}), pathlib.Path('~/.netrc').expanduser().exists(),"
        " os.path.exists(os.path.join(cache, 'huggingface', 'token')))"
    )
    notebook = write_notebook(tmp_path / "home.ipynb", [cell])
    assert main(["record", str(notebook), "-o", str(tmp_path / "plain")]) == 0
    [plain] = read_trajectory(tmp_path / "plain" / "home.jsonl")
    # the control: without the option the home's files are found, but for the cache, which is the kernel's own
    assert plain.output == f"{home} ['.cache', '.netrc'] True False"
    assert main(["record", str(notebook), "-o", str(tmp_path / "isolated"), "--isolate-home"]) == 0
    [isolated] = read_trajectory(tmp_path / "isolated" / "home.jsonl")
    kernel_home, rest = isolated.output.split(" ", 1)
    assert kernel_home != str(home) and rest == "[] False False"
    assert not os.path.exists(kernel_home)  # the temporary home is removed with the kernel
    capsys.readouterr()
