"""`python -m coevolve_lib <command> [options]`: the kit's command line. Each command is a module with `main(argv)`."""

import importlib
import sys

COMMANDS = {
    "setup": ("coevolve_lib.setup_offline", "install the BFCL data wheels, build the offline models, install the kernel"),
    "bfcl-replay": ("coevolve_lib.envs.bfcl_replay", "replay BFCL ground truth through the kit and the official checker"),
    "evaluate": ("coevolve_lib.evaluate", "zero-shot evaluation of a chat model on BFCL multi-turn"),
    "train": ("coevolve_lib.train", "CoEvolve training: GRPO on the evolving task pool (--dry-run prints the plan)"),
    "compare": ("coevolve_lib.compare", "zero-shot vs GRPO vs + random exploration vs CoEvolve, several seeds"),
    "heldout": ("coevolve_lib.heldout", "build a profile's held-out evaluation set; --commit records its task ids"),
    "warm-start": ("coevolve_lib.warmstart", "build (or find) a profile's warm start and check it; --ship ships it"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m coevolve_lib <command> [options]\n\ncommands:")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:<12} {help_text}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
