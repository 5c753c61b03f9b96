"""What the OS-level sandbox costs AppWorld's servers, and what a server left with spinning threads costs the episodes
after it, side by side on the synthetic world (`core/sandbox.py`, `envs/appworld/server.py`).

(a) server start: from `AppWorldServer.start()` to its first answer, then the first task's initialize; the sandbox
    ("bwrap") against mode "none" (the same server without isolation);
(b) one execution: `client.execute(task, "print(1)")` round trips on a loaded task, and the checks the episode makes
    around each one (`footprint` before and after, `leftovers`);
(c) a solution episode (reset, the task's solution, score, close) on a fresh server, on a server whose earlier code
    left 3 threads spinning (what happened before the sandbox recycled such servers), and on that server recycled.

    .venv/bin/python benchmarks/bench_sandbox.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from coevolve_lib.core.sandbox import SandboxConfig
from coevolve_lib.envs.appworld.benchmark import AppWorldEnv, load_task
from coevolve_lib.envs.appworld.server import AppWorldServer, AppWorldServerConfig
from coevolve_lib.envs.appworld.synthetic import build_synthetic_world

SPIN = ("sys = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
        ".__init__.__globals__['sys']\ndef spin():\n    while True: pass\n"
        "for _ in range(3): sys.modules['_thread'].start_new_thread(spin, ())")


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def solution_episode(server: AppWorldServer, world, task_id: str) -> float:
    def run():
        env = AppWorldEnv(load_task(task_id, world.root), server)
        env.reset()
        env.execute(world.solutions[task_id])
        assert env.score()["success"]
        env.close()
    return timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="server starts and episodes per mode")
    parser.add_argument("--executions", type=int, default=100, help="round trips per mode in (b)")
    args = parser.parse_args()
    world = build_synthetic_world()
    task_id = next(iter(world.solutions))
    rows = {}
    for mode in ("bwrap", "none"):
        config = AppWorldServerConfig(root=world.root, sandbox=SandboxConfig(mode=mode))
        starts, firsts = [], []
        for _ in range(args.repeats):
            server = AppWorldServer(config)
            starts.append(timed(server.start))
            firsts.append(timed(lambda: server.client.initialize(task_id)))
            server.stop()
        with AppWorldServer(config) as server:
            server.client.initialize(task_id)
            executions = [timed(lambda: server.client.execute(task_id, "print(1)")) for _ in range(args.executions)]
            checks = [timed(lambda: (server.footprint(), server.leftovers(server.footprint())))
                      for _ in range(args.executions)]
            server.client.close(task_id)
        rows[mode] = {"start_s": statistics.median(starts), "first_task_s": statistics.median(firsts),
                      "execute_ms": 1000 * statistics.median(executions), "checks_ms": 1000 * statistics.median(checks)}
    print(f"{'':28}{'bwrap':>10}{'none':>10}{'ratio':>8}")
    for key, label in (("start_s", "server start (s)"), ("first_task_s", "first task initialize (s)"),
                       ("execute_ms", "execute print(1) (ms)"), ("checks_ms", "after-execution checks (ms)")):
        bwrap, none = rows["bwrap"][key], rows["none"][key]
        print(f"{label:28}{bwrap:10.3f}{none:10.3f}{bwrap / none:8.2f}")

    with AppWorldServer(AppWorldServerConfig(root=world.root)) as server:
        solution_episode(server, world, task_id)  # the first task's load is not an episode's cost
        fresh = statistics.median(solution_episode(server, world, task_id) for _ in range(args.repeats))
        env = AppWorldEnv(load_task(task_id, world.root), server)
        env.reset()
        env.execute(SPIN)
        env.close()
        assert server.recycle_reason(), "the spinning threads went unnoticed"
        spun = statistics.median(solution_episode(server, world, task_id) for _ in range(args.repeats))
        server.restart()
        solution_episode(server, world, task_id)
        recycled = statistics.median(solution_episode(server, world, task_id) for _ in range(args.repeats))
    print(f"\nsolution episode (s): fresh {fresh:.3f} | threads left spinning {spun:.3f} ({spun / fresh:.2f}x) | "
          f"recycled {recycled:.3f} ({recycled / fresh:.2f}x)")


if __name__ == "__main__":
    main()
