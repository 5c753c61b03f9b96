"""The tests run with the kit's process settings (offline hub, one OpenMP thread), as the CLI and notebooks do."""

from coevolve_lib.runtime import configure_process

configure_process()
