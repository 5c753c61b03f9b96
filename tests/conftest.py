"""The tests run with the kit's process settings (offline hub, one OpenMP thread), as the CLI and notebooks do. The
AppWorld fixtures are shared by the test modules that need AppWorld's real server on the synthetic world (one
server for the session: a server costs ~12 s of CPU to start and load its first task)."""

import importlib.util

import pytest

from coevolve_lib.core.runtime import configure_process

configure_process()


def pytest_collection_modifyitems(config, items):
    """The `vllm` tests need vLLM, which lives in `.venv-vllm/` (`make test-vllm` runs them there): elsewhere they are
    skipped with that reason, not failed."""
    if importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="vLLM is not installed here: `make test-vllm` runs these tests in .venv-vllm")
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def world():
    """The synthetic AppWorld world, built by AppWorld's own code (cached after the first build, ~40 s)."""
    from coevolve_lib.envs.appworld.synthetic import build_synthetic_world

    return build_synthetic_world()


@pytest.fixture(scope="session")
def server(world):
    """AppWorld's server on the synthetic world (a test that kills it leaves it restarted: `ensure_running`)."""
    from coevolve_lib.envs.appworld.server import AppWorldServer, AppWorldServerConfig

    with AppWorldServer(AppWorldServerConfig(root=world.root)) as server:
        yield server


@pytest.fixture(scope="session")
def api_docs(server):
    return server.client.api_docs()
