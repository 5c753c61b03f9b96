"""What recording the explorer's LLM calls costs (`core.llm_calls`): the same asks through a model live, through
`RecordedChatModel` recording them (each reply hashed, appended and fsynced), and replayed from that recording.

Two models: the warm-started tiny policy in process (the fastest model the kit has: the worst case for recording's
share), and the same policy behind `transformers serve` on loopback (an endpoint, as the paper's explorer is). Asks
are explorer-sized (a ~3,000-character prompt, distinct each time, so recording always asks the model). Prints
milliseconds per ask for each mode and the record/live ratio (medians of interleaved repeats).

    .venv/bin/python benchmarks/bench_llm_calls.py [--asks 32] [--repeats 3] [--no-server]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from coevolve_lib.cli.local_servers import transformers_serve
from coevolve_lib.core.llm_calls import RecordedChatModel
from coevolve_lib.core.models import GenerationConfig, HFChatModel
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.core.paths import LIBRARY_DATA

POLICY = LIBRARY_DATA / "warm_start" / "tiny"
PROMPT = "Explore the file system and write one call inside <action> tags. " * 45  # ~3,000 characters
CONFIG = GenerationConfig(max_new_tokens=16, temperature=0.0)


def asks(tag: str, count: int, batch: int = 8) -> list[list[list[dict]]]:
    conversations = [[{"role": "user", "content": f"{PROMPT} ({tag} {i})"}] for i in range(count)]
    return [conversations[i:i + batch] for i in range(0, count, batch)]


def ms_per_ask(model, batches) -> float:
    start = time.perf_counter()
    for batch in batches:
        model.generate(batch, None, CONFIG)
    return 1000 * (time.perf_counter() - start) / sum(map(len, batches))


def measure(name: str, live, count: int, repeats: int, folder: Path) -> None:
    ms_per_ask(live, asks("warm-up", 8))
    times = {"live": [], "record": [], "replay": []}
    for repeat in range(repeats):  # interleaved, so every mode sees the same machine load
        times["live"].append(ms_per_ask(live, asks(f"live {repeat}", count)))
        path = folder / f"{name}_{repeat}.jsonl"
        times["record"].append(ms_per_ask(RecordedChatModel(live.name, path, live), asks(f"rec {repeat}", count)))
        times["replay"].append(ms_per_ask(RecordedChatModel(live.name, path), asks(f"rec {repeat}", count)))
    median = {mode: statistics.median(values) for mode, values in times.items()}
    print(f"{name:<22} live {median['live']:8.2f} ms/ask   record {median['record']:8.2f} ms/ask   "
          f"record/live {median['record'] / median['live']:.3f}   replay {median['replay']:.3f} ms/ask")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asks", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-server", action="store_true", help="only the in-process model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        measure("in process (tiny)", HFChatModel(POLICY), args.asks, args.repeats, Path(folder))
        if not args.no_server:
            with transformers_serve(POLICY, Path(folder) / "server.log") as (base_url, _, _):
                measure("transformers serve", OpenAIChatModel(str(POLICY), base_url=base_url), args.asks,
                        args.repeats, Path(folder))


if __name__ == "__main__":
    main()
