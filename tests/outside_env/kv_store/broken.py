"""The store with an evaluation that breaks the seam's contract (its rows count nothing), for the contract test."""

from coevolve_lib.core.records import config_hash
from coevolve_lib.core.results import write_result
from kv_store.environment import KeyValueStore


class NoCounts(KeyValueStore):
    name = "kv-broken"

    def evaluate(self, model, evaluation, out, rollout, experiment, progress=False):
        row = {"benchmark": self.name, "eval_set": "kv/val", "metric": "success", "value": 0.0}
        return write_result(out, experiment=experiment, profile=evaluation.profile, model=model.name,
                            config_hash=config_hash({}), metrics=[row])
