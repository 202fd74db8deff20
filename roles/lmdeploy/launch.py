"""Start `lmdeploy serve api_server` with its API key read from a file, never from the command line.

Run on the host by the venv's python (no toolkit import):  python launch.py KEYFILE serve api_server MODEL ...
LMDeploy 0.15.0 takes API keys only as `--api-keys KEY...` words (lmdeploy/cli/utils.py ArgumentHelper.api_keys), and
a process's argv is readable by every local user (/proc/PID/cmdline). This launcher reads KEYFILE (one key per
non-empty line; systemd's LoadCredential= puts it under $CREDENTIALS_DIRECTORY, readable by the service alone),
appends `--api-keys KEY...` to sys.argv inside this Python process (which /proc/PID/cmdline does not show: it keeps
the words the process was started with) and calls LMDeploy's own entry point (lmdeploy/cli/entrypoint.py run, the
console script `lmdeploy`). An empty or missing file stops the start: an instance must not run without its key.
"""

import sys


def keyed_argv(argv: list, key_file: str) -> list:
    """argv[0] plus the LMDeploy words with `--api-keys KEY...` from key_file appended. Raises SystemExit
    naming the file when it is missing or holds no key."""
    try:
        with open(key_file, encoding="utf-8") as f:
            keys = [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise SystemExit(f"lmdeploy launcher: cannot read the API key file {key_file}: {e.strerror}") from None
    if not keys:
        raise SystemExit(f"lmdeploy launcher: the API key file {key_file} holds no key")
    return [argv[0], *argv[2:], "--api-keys", *keys]


def main() -> None:
    """Entry point: `python launch.py KEYFILE WORDS...`."""
    if len(sys.argv) < 3:
        raise SystemExit("usage: launch.py KEYFILE serve api_server MODEL [OPTIONS]")
    sys.argv = keyed_argv(sys.argv, sys.argv[1])
    from lmdeploy.cli.entrypoint import run  # noqa: PLC0415 (only inside the venv)
    run()


if __name__ == "__main__":
    main()
