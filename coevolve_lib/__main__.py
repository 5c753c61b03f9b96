"""`python -m coevolve_lib <command> [options]`: the kit's command line. Each command is a module with `main(argv)`.

A user error (a bad profile, override or option value) is one line on stderr and exit status 2, never a traceback; a
run that cannot go on (`RunError`: an endpoint that never answers; a corrupt file) is one line and status 1.
"""

import errno
import importlib
import signal
import sys

PROG = "python -m coevolve_lib"
USAGE_ERROR = 2
INTERRUPTED = 130
"""The shell's status for a process stopped by SIGINT (128 + 2)."""
TERMINATED = 143
"""The shell's status for a process stopped by SIGTERM (128 + 15)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's preemption, `timeout`, `docker stop`), raised where the process is, as SIGINT raises
    KeyboardInterrupt: every `finally` runs (servers stopped, files closed) and the command ends as interrupted."""


def _terminated(signum, frame):
    raise Terminated()
COMMANDS = {
    "setup": ("coevolve_lib.cli.setup_offline",
              "install the BFCL data wheels, build the offline models, install the kernel"),
    "bfcl-replay": ("coevolve_lib.cli.bfcl_replay",
                    "replay BFCL ground truth through the kit and the official checker"),
    "evaluate": ("coevolve_lib.cli.evaluate",
                 "zero-shot evaluation of a chat model on its benchmark (BFCL, AppWorld, yours)"),
    "train": ("coevolve_lib.cli.train",
              "CoEvolve training: GRPO on the evolving task pool (--dry-run prints the plan)"),
    "compare": ("coevolve_lib.cli.compare",
                "one study (Tables 2-3 by default, or an ablation) over several seeds"),
    "rehearse": ("coevolve_lib.cli.rehearse",
                 "a paper profile's GPU path on CPU: its stand-in on 2 processes, a resume, an evaluation"),
    "reproduce": ("coevolve_lib.cli.reproduce",
                  "run the notebooks with papermill: every table and figure of a profile"),
    "sweep": ("coevolve_lib.cli.sweep",
              "a GRPO recipe sweep: one training run per cell of configs/sweeps/<name>.yaml"),
    "heldout": ("coevolve_lib.cli.heldout",
                "build a profile's held-out evaluation sets; --commit records their task ids"),
    "warm-start": ("coevolve_lib.cli.warm_start",
                   "build (or find) a profile's warm start and check it; --ship ships it"),
    "notebook": ("coevolve_lib.cli.notebook",
                 "run a notebook with papermill after checking its parameters"),
    "record-explorer": ("coevolve_lib.cli.record_explorer",
                        "record the explorer calls of the Table 12 rows make reproduce replays (vllm serve)"),
    "extensions": ("coevolve_lib.cli.extensions",
                   "the environments, signal types and pool updates a profile can name, and where each comes from"),
}


def usage() -> str:
    return f"usage: {PROG} <command> [options]\n\ncommands:\n" + "".join(
        f"  {name:<12} {help_text}\n" for name, (_, help_text) in COMMANDS.items())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"{PROG}: error: unknown command {argv[0]!r}; choose from {list(COMMANDS)}", file=sys.stderr)
        return 2
    # Threads and the offline hub are process-wide settings: the command line sets them, importing the library does not.
    from coevolve_lib.core.runtime import configure_process

    configure_process()
    signal.signal(signal.SIGTERM, _terminated)
    from coevolve_lib.core.config import ConfigError, RunError
    from coevolve_lib.core.records import CorruptFileError

    try:
        return importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])
    except ConfigError as exc:
        print(f"{PROG} {argv[0]}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except (CorruptFileError, RunError) as exc:
        print(f"{PROG} {argv[0]}: error: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # argparse: --help, or a bad option (one line, status 2)
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt as exc:  # every command resumes from what it wrote: say so, not where Python was
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"{PROG} {argv[0]}: {how}; the same command again resumes where it stopped", file=sys.stderr)
        return TERMINATED if isinstance(exc, Terminated) else INTERRUPTED
    except FileNotFoundError as exc:  # what set-up builds or a profile names is missing: the message says what to do
        detail = (f"{exc.strerror}: {exc.filename}" if exc.filename
                  else next(iter(str(exc).strip().splitlines()), type(exc).__name__))
        print(f"{PROG} {argv[0]}: error: {detail}", file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):  # what was written before stays; none half-read
            print(f"{PROG} {argv[0]}: error: {exc.strerror}{f': {exc.filename}' if exc.filename else ''}; make room "
                  "(or raise the file size limit), then the same command resumes where it stopped", file=sys.stderr)
            return 1
        if exc.filename is None:  # not about a file (a socket, a subprocess): the traceback says more
            raise
        print(f"{PROG} {argv[0]}: error: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
