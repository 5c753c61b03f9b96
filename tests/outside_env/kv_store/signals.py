"""The store's signal type: every failed rollout (a random-init policy fails everything, so rounds have targets)."""

import os

from coevolve_lib.engine.signals import Signal


class AnyFailure(Signal):
    type = "any_failure"

    def observe(self, step, rollouts):
        if step == 2 and "signal" in os.environ.get("KV_STORE_FAULTS", ""):
            raise RuntimeError("injected fault: the signal type raised")
        return [self.fire(r, step, {"score": r["score"]}) for r in rollouts if r["score"] < 0.5]
