"""`Shards`: the processes that run a feedback round (and D_0) together."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from coevolve_lib.core.records import read_jsonl
from coevolve_lib.core.shared_files import file_digest, wait_for_files


@dataclass(frozen=True)
class Shards:
    """The processes that run a round together (a multi-process training run's, `training.loop`): each explores its
    share of the targets, abstracts its share of the groups and validates its share of the specs, appending its
    records to a file of its own (`<stage>.p<index>.jsonl`); then every process waits (`barrier`) and reads every
    file, so each stage ends with the whole stage's records everywhere. The main process commits the pool. One
    process (the default): the stage files of a single-process round, no waiting."""

    index: int = 0
    """This process (0: the main one)."""
    count: int = 1
    """Processes that run the round."""
    gather: Callable[[object], list] = field(default=lambda mine: [mine], compare=False)
    """Every process's object, in process order, once every process has given its own (accelerate's
    `gather_object`, a collective: it also waits for everyone)."""

    @property
    def is_main(self) -> bool:
        return self.index == 0

    def settle(self, written: Iterable[Path] = ()) -> None:
        """Go on together once every process's `written` files read back here as their writers wrote them: the
        digests go over the process group, the files over the shared filesystem, which may show another node's
        files late (`core.shared_files`; a RunError after `SETTLE_TIMEOUT_S`). One process: nothing to wait for."""
        if self.count == 1:
            return
        mine = {str(path): digest for path in written if (digest := file_digest(path)) is not None}
        wait_for_files({path: digest for share in self.gather(mine) for path, digest in share.items()})

    def share(self, items: list, split: bool = True) -> list:
        """This process's units: every `count`-th item from its index (stable, so a resumed round gives each
        process the same units); with `split=False` the main process takes them all."""
        if not split:
            return list(items) if self.is_main else []
        return list(items)[self.index::self.count]

    def file(self, round_dir: Path, stage: str) -> Path:
        return round_dir / (f"{stage}.jsonl" if self.count == 1 else f"{stage}.p{self.index}.jsonl")

    def records(self, round_dir: Path, stage: str) -> list[dict]:
        """Every process's records of `stage` (the single-process file first, then each process's)."""
        paths = [round_dir / f"{stage}.jsonl", *sorted(round_dir.glob(f"{stage}.p*.jsonl"))]
        return [record for path in paths for record in read_jsonl(path)]


SINGLE = Shards()
"""One process runs the round."""
