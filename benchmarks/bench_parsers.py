"""Parse time of every parser of model or LLM text on adversarial inputs, at growing sizes (issue 22: linear time).

Each parser gets inputs of every family, built on its own opening delimiter (`<action>`, ```` ``` ````, `success`,
...): a long run of blanks after it, the delimiter repeated (20,000+ times at 256k characters), the delimiter
repeated with blanks after each, a long unclosed block of prose, deep JSON nesting, a long word. Printed per
(parser, family): the best time of one parse at each size (default 2k / 32k / 256k characters: the least over
`--repeats` rounds, each round a loop of at least 5 ms), and the ratio of consecutive sizes beside the linear
expectation (their size ratio; 8 for 256k / 32k, a quadratic parser gives 64). A size whose time, extrapolated
linearly from the size before it, would pass `--max-seconds` is not run (shown as `>=` that, a lower bound). Replies
longer than a parser's own cap (`llm_json.MAX_CHARS` = 200k, `safe_calls.MAX_SOURCE_CHARS` = 100k) are cut or
refused by it, so its ratio there is below linear. A parser that only copies the text once (`prompt_calls` on text
that is not a call) can jump once between 32k and 256k: copies over ~128 kB get fresh pages from the allocator
(`--sizes 32000,64000,128000,256000,384000` shows the step, linear on both sides).

    .venv/bin/python benchmarks/bench_parsers.py
    .venv/bin/python benchmarks/bench_parsers.py --sizes 2000,8000,32000 --repeats 5 --parser judge
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from coevolve_lib.cli.openai_server import parse_tool_calls
from coevolve_lib.core.llm_json import LLMOutputError, extract_json_object
from coevolve_lib.core.safe_calls import CallParseError
from coevolve_lib.engine.judge import parse_judge
from coevolve_lib.engine.llm_abstraction import parse_task_blocks
from coevolve_lib.envs.appworld.benchmark import extract_code
from coevolve_lib.envs.appworld.calls import parse_appworld_call
from coevolve_lib.envs.appworld.explore import focus_apis
from coevolve_lib.envs.bfcl.explore_llm import parse_action
from coevolve_lib.rollout.toolcalls import parse_native, parse_prompt_style


def _refusing(parse, *errors):
    """`parse`, with its documented refusal of unusable text (an exception) counted as a parse."""
    def run(text):
        try:
            parse(text)
        except errors:
            pass
    return run


PARSERS = {
    "judge": ("success", parse_judge),
    "appworld_code": ("```", extract_code),
    "explorer_action": ("<action>", lambda text: parse_action(text, ["ls", "cd"])),
    "task_blocks": ("<task>", lambda text: parse_task_blocks(text, Counter())),
    "json_object": ("```", _refusing(extract_json_object, LLMOutputError)),
    "server_tool_calls": ("<tool_call>", parse_tool_calls),
    "native_tool_calls": ("<tool_call>", parse_native),
    "prompt_calls": ("```", parse_prompt_style),
    "appworld_call": ("a.b(", _refusing(parse_appworld_call, CallParseError)),
    "focus_apis": ("a", lambda text: focus_apis({"focus_pattern": [text]}, ["a.b"])),
}
"""name -> (its opening delimiter, a call of it on one text)."""

FAMILIES = {
    "blank run": lambda tag, n: tag + " " * (n - len(tag) - 1) + "x",
    "opening tags": lambda tag, n: tag * (n // len(tag)),
    "tags + blanks": lambda tag, n: (tag + " " * 24) * (n // (len(tag) + 24)),
    "unclosed block": lambda tag, n: tag + "\n" + "word " * ((n - len(tag)) // 5),
    "deep nesting": lambda tag, n: tag + '{"a": [' * ((n - len(tag)) // 7),
    "long word": lambda tag, n: tag + "a" * (n - len(tag)),
    "many keywords": lambda tag, n: tag + "\nf(" + ", ".join(f"k{i}=0" for i in range((n - len(tag)) // 9)) + ")",
}
"""name -> the text of about n characters built on an opening delimiter."""


def best_time(parse, text: str, repeats: int, min_round_s: float = 0.005, slow_s: float = 0.5) -> float:
    """Seconds of one `parse(text)`: the least over `repeats` rounds of a loop lasting at least `min_round_s`
    (a first call slower than `slow_s` is the answer: no repeats)."""
    start = time.perf_counter()
    parse(text)
    first = time.perf_counter() - start
    if first > slow_s:
        return first
    calls = max(1, int(min_round_s / max(first, 1e-7)))
    best = first
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            parse(text)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def measure(parse, tag: str, family, sizes: list[int], repeats: int, max_seconds: float) -> list[tuple[float, bool]]:
    """(seconds, measured) per size; an unmeasured size holds its linear extrapolation, a lower bound."""
    out = []
    for index, size in enumerate(sizes):
        estimate = out[-1][0] * size / sizes[index - 1] if out else 0.0
        out.append((estimate, False) if estimate > max_seconds
                   else (best_time(parse, family(tag, size), repeats), True))
    return out


def _milliseconds(seconds: float, measured: bool) -> str:
    ms = seconds * 1e3
    text = f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"
    return text if measured else f">={text}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,32000,256000", help="text lengths in characters, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=20.0,
                        help="skip a size whose linear extrapolation from the size before passes this")
    parser.add_argument("--parser", action="append", choices=sorted(PARSERS), help="only these (repeatable)")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    steps = [f"t({b // 1000}k)/t({a // 1000}k) [lin {b / a:g}]" for a, b in zip(sizes, sizes[1:])]
    header = ["parser", "family", *(f"t({size // 1000}k) ms" for size in sizes), *steps]
    rows, results = [], {}
    for name in args.parser or PARSERS:
        tag, parse = PARSERS[name]
        for family_name, family in FAMILIES.items():
            times = measure(parse, tag, family, sizes, args.repeats, args.max_seconds)
            ratios = [b / a if ma and mb else None for (a, ma), (b, mb) in zip(times, times[1:])]
            results[f"{name}/{family_name}"] = {"seconds": [t for t, _ in times], "measured": [m for _, m in times],
                                                "ratios": ratios}
            rows.append([name, family_name, *(_milliseconds(*t) for t in times),
                         *("-" if r is None else f"{r:.1f}" for r in ratios)])
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, [""] * len(header), *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
    # Under a millisecond, copies and page faults weigh more than the parser's own work: left out of the summary.
    last = [(r["ratios"][-1], key) for key, r in results.items()
            if r["ratios"] and r["ratios"][-1] is not None and r["seconds"][-1] >= 1e-3]
    if last:
        worst, key = max(last)
        print(f"\nworst {steps[-1]} of the parses over 1 ms: {worst:.1f} ({key}); linear is "
              f"{sizes[-1] / sizes[-2]:g}, quadratic {(sizes[-1] / sizes[-2]) ** 2:g}")
    return results


if __name__ == "__main__":
    main()
