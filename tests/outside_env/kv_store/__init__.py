"""A key-value store behind the CoEvolve kit's environment seam, written as a user's package outside the kit.

This folder is what `pip install -e .` of a package with these entry points in its `pyproject.toml` leaves on
`sys.path` (the `kv_store-0.1.dist-info` folder is pip's record of them), so the kit finds it with no file of the kit
edited:

    [project.entry-points."coevolve_lib.environments"]
    kv = "kv_store.environment:KeyValueStore"
    [project.entry-points."coevolve_lib.signals"]
    any_failure = "kv_store.signals:AnyFailure"

With this folder on PYTHONPATH, `python -m coevolve_lib train --profile tests/outside_env/kv.yaml` trains on it.
`KV_STORE_FAULTS` (a comma-separated list) makes it misbehave on purpose, for the kit's fault tests: `tool` (a tool
raises in the first sample of every rollout group), `explore` (exploring start kv-1 raises), `observation` (an
exploration observation of 300,000 characters, and one in every validation), `empty_task` (abstraction also drafts a
task with no call and no query), `signal` (its signal type raises at step 2, after the round).
"""
