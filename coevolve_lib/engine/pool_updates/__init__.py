"""What happens to the task pool every F steps (`training.pool_updates`): the registry and its contract (`base`), the
static pool, CoEvolve's signal-guided round and random exploration (`guided`), and the paper's Table 10 baselines,
each our reading of the paper that defines it (`curriculum`, `rest`, `reflexion`)."""

# isort: off
# each registers its own; in this order, which is the order the registry lists them in (`coevolve_lib extensions`)
from coevolve_lib.engine.pool_updates import guided, curriculum, rest, reflexion  # noqa: F401
# isort: on
from coevolve_lib.engine.pool_updates.base import (
    POOL_UPDATES,
    PoolUpdate,
    RoundInputs,
    pool_update,
    register_pool_update,
)

__all__ = ["POOL_UPDATES", "PoolUpdate", "RoundInputs", "pool_update", "register_pool_update"]
