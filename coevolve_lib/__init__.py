"""CoEvolve kit: agent-data co-evolution for LLM agents (arXiv:2604.15840), reproducible offline.

Importing the package changes no process-wide setting; the CLI, the notebooks and the tests call
`coevolve_lib.core.runtime.configure_process()` first (offline hub, one OpenMP thread).
"""

__version__ = "0.1.0"
