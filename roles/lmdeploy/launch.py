"""Start `lmdeploy serve api_server` with its API key read from a file, never from the command line.

Run on the host by the venv's python (no toolkit import):  python launch.py KEY serve api_server MODEL ...
LMDeploy 0.15.0 takes API keys only as `--api-keys KEY...` words (lmdeploy/cli/utils.py ArgumentHelper.api_keys), and
a process's argv is readable by every local user (/proc/PID/cmdline). This launcher reads the key file (one key per
non-empty line), appends `--api-keys KEY...` to sys.argv inside this Python process (which /proc/PID/cmdline does not
show: it keeps the words the process was started with) and calls LMDeploy's own entry point
(lmdeploy/cli/entrypoint.py run, the console script `lmdeploy`).

KEY is the key file's path, or a credential's name (no '/'): the file of that name under $CREDENTIALS_DIRECTORY,
where systemd's LoadCredential= puts it, readable by the service alone; or '-': the instance has no key (said
explicitly in its environment file, so that a lost key file can never start an instance without its key). An empty
or missing file stops the start.
"""

import os
import sys


def key_path(key: str) -> str:
    """The file `key` names: a path as it is; a credential's name under $CREDENTIALS_DIRECTORY. Raises SystemExit
    when a credential is named but systemd set no credentials directory."""
    if "/" in key:
        return key
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        raise SystemExit(f"lmdeploy launcher: credential {key!r} named but no $CREDENTIALS_DIRECTORY (LoadCredential=)")
    return os.path.join(directory, key)


def keyed_argv(argv: list, key_file: str) -> list:
    """argv[0] plus the LMDeploy words with `--api-keys KEY...` from key_file appended (`--api-keys=KEY` for one key
    that starts with '-'). Raises SystemExit naming the file when it is missing, holds no key, or holds several keys
    of which one starts with '-'."""
    try:
        with open(key_file, encoding="utf-8") as f:
            keys = [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise SystemExit(f"lmdeploy launcher: cannot read the API key file {key_file}: {e.strerror}") from None
    if not keys:
        raise SystemExit(f"lmdeploy launcher: the API key file {key_file} holds no key")
    if any(k.startswith("-") for k in keys):
        # argparse reads a word after `--api-keys KEY...` that starts with '-' as an option and stops LMDeploy; one
        # key can be joined to the flag (`--api-keys=-KEY`), several cannot
        if len(keys) > 1:
            raise SystemExit(f"lmdeploy launcher: the API key file {key_file} holds several keys and one starts with "
                             "'-', which LMDeploy's parser cannot take among several: keep one key, or none with '-'")
        return [argv[0], *argv[2:], f"--api-keys={keys[0]}"]
    return [argv[0], *argv[2:], "--api-keys", *keys]


def launch_argv(argv: list) -> list:
    """sys.argv for LMDeploy's entry point from `launch.py KEY WORDS...`: the words, with the keys of KEY appended
    (keyed_argv), or as they are for KEY '-'."""
    if argv[1] == "-":
        return [argv[0], *argv[2:]]
    return keyed_argv(argv, key_path(argv[1]))


def main() -> None:
    """Entry point: `python launch.py KEY WORDS...`."""
    if len(sys.argv) < 3:
        raise SystemExit("usage: launch.py KEYFILE|CREDENTIAL|- serve api_server MODEL [OPTIONS]")
    sys.argv = launch_argv(sys.argv)
    from lmdeploy.cli.entrypoint import run  # noqa: PLC0415 (only inside the venv)
    run()


if __name__ == "__main__":
    main()
