"""Every setting a profile can hold: one validated dataclass per section of `configs/<profile>.yaml`.

A profile has six sections, each settable from the CLI (`--set section.field=value`) and from papermill
(`overrides`): `model`, `rollout` (how every episode runs: evaluation, probes and training share it), `environment`
(the benchmark's own settings: declared by its environment class, `Environment.Settings`, and validated with the
profile; BFCL's data version, category, classes and warm start are there), `evaluation`, `data_engine` (D_0, probes,
signals, exploration, synthesis, held-out sets) and `training` (GRPO). Loading, inheritance and overrides are in
`profiles.py`.

The classes are pydantic dataclasses, chosen over TRL's `HfArgumentParser` (flat, untyped beyond argparse, no
nesting, no ranges) and over pydantic models (their API replaces the dataclass one the kit uses everywhere):
- each value is checked for type and range when the config is built (`"abc"` for an int, `-5` steps, `fast` for a
  learning rate), and a number written as a string (`2e-4`) is read as the number;
- unknown fields are errors, so a misspelt override or papermill parameter never passes silently;
- registry names (signal types, explorers, rewards, schedulers) are checked at load, before any model loads;
- `dataclasses.replace` re-validates, `dataclasses.asdict` still works, and the docstring under each field is its
  help text (`use_attribute_docstrings`).

One name per meaning: `max_steps` counts optimizer steps (training and warm start); an action sequence has
`min_calls`..`max_calls` calls; an exploration run has up to `calls_per_run` calls; a probe runs `batches`.

The one library module over 450 lines, on purpose: about 40% of it is the docstrings under the fields, which are the
profiles' help text, and a section split over files would scatter what `--set` can reach.
"""

from __future__ import annotations

import dataclasses
import reprlib
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.dataclasses import dataclass

STRICT = ConfigDict(extra="forbid", use_attribute_docstrings=True)
"""Unknown fields are errors; a field's docstring is its description."""



def _no_bool(value):
    """YAML's `true` is not a count: pydantic would read it as 1."""
    if isinstance(value, bool):
        raise ValueError("Input should be a number, not a boolean")
    return value


MAX_COUNT = 10**9
"""Above any count, step or size the kit uses: a 30-digit `max_steps` is a typo, not a plan."""
PositiveInt = Annotated[int, BeforeValidator(_no_bool), Field(gt=0, le=MAX_COUNT)]
NonNegativeInt = Annotated[int, BeforeValidator(_no_bool), Field(ge=0, le=MAX_COUNT)]
Seed = Annotated[int, BeforeValidator(_no_bool), Field(ge=0, le=2**32 - 1)]
"""A sampling seed: numpy and torch take 0 .. 2**32 - 1."""


def _distinct(seeds: list[int]) -> list[int]:
    """A seed given twice would train one run and count it twice."""
    if len(set(seeds)) < len(seeds):
        raise ValueError("List should name each seed once")
    return seeds


Seeds = Annotated[list[Seed], Field(min_length=1), AfterValidator(_distinct)]
"""The training seeds of a study (`compare --seeds`, `reproduce --seeds`, a notebook's `seeds`, a sweep file's)."""
Port = Annotated[int, BeforeValidator(_no_bool), Field(ge=1, le=65535)]
"""A TCP port."""
PositiveFloat = Annotated[float, BeforeValidator(_no_bool), Field(gt=0.0, allow_inf_nan=False)]
"""A finite positive number (`inf` and `nan` are refused: a learning rate of inf trains nothing)."""
NonNegativeFloat = Annotated[float, BeforeValidator(_no_bool), Field(ge=0.0, allow_inf_nan=False)]
"""A finite number >= 0 (pydantic's own `NonNegativeFloat` takes `inf`: a KL coefficient of inf)."""
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
Temperature = Annotated[float, Field(ge=0.0, le=10.0)]
ToolDocs = Literal["full", "compact", "none"]
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                 "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr",
                 "warmup_stable_decay", "greedy")
"""transformers' `SchedulerType` names, written out: importing transformers to check them would make every load
slow (a test keeps the two lists equal)."""
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
FORGETTING_KEYS = ("task", "task_type")
RARE_PATTERNS = ("bigram", "sequence", "set")


class ConfigError(ValueError):
    """A bad profile, override or parameter, in one line."""


QUOTED_CHARS = 80
"""Most characters of a value an error message quotes (`quoted`): a bad value may be megabytes long."""
_QUOTE = reprlib.Repr()
_QUOTE.maxstring = _QUOTE.maxother = _QUOTE.maxlong = QUOTED_CHARS // 2
_QUOTE.maxlist = _QUOTE.maxtuple = _QUOTE.maxdict = _QUOTE.maxset = 4
_QUOTE.maxlevel = 3


def quoted(value) -> str:
    """`repr(value)` for an error message: at most about `QUOTED_CHARS` characters, whatever its size (containers
    and strings cut inside, an integer past Python's digit limit named by its size)."""
    try:
        text = _QUOTE.repr(value)
    except ValueError:  # repr of an int over sys.get_int_max_str_digits()
        text = f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else f"<a {type(value).__name__}>"
    return text if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS - 3]}..."


class RunError(RuntimeError):
    """A run that cannot go on for a reason outside the kit (an endpoint that does not answer, a D_0 without a task),
    in one line that says why: the CLI prints it and exits with status 1."""


# ------------------------------------------------------------------------------------------------ rollout

RolloutEngine = Literal["auto", "generate", "kv_cache", "continuous_batching", "vllm"]
"""The rollout engines of `coevolve_lib.rollout.engines`."""


@dataclass(config=STRICT)
class EpisodeBudget:
    """What model replies may make one episode do: each budget hit ends the episode as a failure, without running
    the reply that hit it, its `terminated` (and `agent:<reason>` error type) naming the budget (`BUDGET_REASONS`);
    training counts the hits per step as `budget/<reason>`. Against replies built to multiply work (one reply of a
    few kB can ask for thousands of calls). The defaults are far above what any profile's episodes use (docs/log.md
    has both measurements)."""

    max_reply_chars: PositiveInt = 65_536
    """Longest reply looked at (before any parsing or execution): longer ends the episode (`reply_cap`); the record
    keeps its first `max_reply_chars` characters."""
    max_calls_per_step: PositiveInt = 32
    """Most calls one reply may ask for (an AppWorld code block is one call); more ends the episode (`step_call_cap`)
    before any of them runs."""
    max_calls_per_episode: PositiveInt = 256
    """Most calls in one episode; a reply that would pass it ends the episode (`episode_call_cap`) before it runs."""
    max_observation_chars: PositiveInt = 65_536
    """Longest observation (one call's result); longer ends the episode (`observation_cap`) after that reply, and the
    record keeps its first `max_observation_chars` characters."""
    max_episode_observation_chars: PositiveInt = 1_048_576
    """Most observation characters in one episode; passing it ends the episode (`episode_observation_cap`)."""
    max_record_chars: PositiveInt = 2_097_152
    """Most characters of replies (an endpoint's structured calls included), observations and accepted calls one
    episode's record holds, as its JSON writes them (escapes included) and wherever it stores them (the messages,
    the steps, the tool messages); passing it ends the episode (`record_cap`), before a call that would pass it runs.
    The JSONL line is this plus the prompt, its token ids and the keys."""
    max_state_chars: PositiveInt = 524_288
    """Largest environment state, as the environment's tools walk it (BFCL: `envs/bfcl/state_size.py`, shared
    folders counted once per place and paths in full, as `find` prints them); measured after every call, passing
    it ends the episode (`state_cap`) and no later call runs. BFCL's largest task state is 40,431 (v3 and v4,
    `multi_turn_long_context_18`, its ground truth run); work per call stays within a few times this."""
    max_execution_seconds: PositiveInt = 10
    """Longest one code execution may run, in environments that execute code (AppWorld, as its own
    `timeout_seconds`, which interrupts the code); a time-out ends the episode (`time_cap`). Code that catches the
    interrupt and runs on is cut by the client a little later (an environment fault: the server restarts)."""


BUDGET_REASONS = ("reply_cap", "step_call_cap", "episode_call_cap", "observation_cap", "episode_observation_cap",
                  "record_cap", "state_cap", "time_cap")
"""The `terminated` values of an episode that hit an `EpisodeBudget`."""


@dataclass(config=STRICT)
class RolloutConfig:
    """How an episode runs, wherever it runs (evaluation, probes, held-out checks, GRPO rollouts)."""

    tool_format: Literal["auto", "native", "prompt"] = "auto"
    """`native` (chat-template tools, `<tool_call>` JSON), `prompt` (BFCL's `[f(a=1)]`), or `auto`: native when the
    model's template supports tools."""
    tool_docs: ToolDocs = "full"
    """`full` BFCL function docs, `compact` (names, parameter types, one-sentence descriptions) for small models, or
    `none` (no docs in the prompt: a model trained on the tools, such as the warm-started tiny profile)."""
    max_new_tokens: PositiveInt = 1024
    """Most tokens per model reply."""
    max_steps_per_turn: PositiveInt = 20
    """Model steps with tool calls allowed in one user turn (BFCL's MAXIMUM_STEP_LIMIT); more fails the episode."""
    max_steps_per_episode: PositiveInt = 30
    """Model steps with tool calls allowed in one episode (the paper's max interaction steps: 30); more fails it."""
    batch_size: PositiveInt = 32
    """Live episodes whose model calls are batched together."""
    temperature: Temperature = 0.9
    """Sampling temperature of training and probe rollouts (the paper: 0.9); evaluation has its own (0)."""
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    """Nucleus sampling mass of training and probe rollouts."""
    engine: RolloutEngine = "auto"
    """How token-level rollouts (training, evaluation of local models) compute replies (`rollout.engines`): `auto`
    (`continuous_batching` on CUDA, `kv_cache` on CPU), or one of them by name; `generate` re-feeds whole
    conversations (the reference). `vllm` is not chosen here: `training.use_vllm` sends the GRPO rollouts to it."""
    budget: EpisodeBudget = field(default_factory=EpisodeBudget)
    """What model replies may make one episode do (calls, observation and record sizes): `EpisodeBudget`."""


# ------------------------------------------------------------------------------------------------ evaluation

@dataclass(config=STRICT)
class EvalConfig:
    """Zero-shot (or checkpoint) evaluation on the run's benchmark."""

    model: str = "tiny"
    """Chat model: `tiny`, `smollm2-135m`, a local path or hub id, or `openai:<model>` for an OpenAI-compatible
    endpoint."""
    profile: str = "tiny"
    """Profile the values came from (recorded in results)."""
    environment_name: str = "bfcl"
    """The run's environment, a registry name (its `check` runs at load): its environments seed D_0 and the rounds, and
    its `split` is evaluated. `bfcl` (BFCL multi-turn), `appworld` (AppWorld's server on APPWORLD_ROOT's official data,
    else on the synthetic world the kit builds offline; docs/appworld.md), or an environment of your own: an installed
    entry point or a `module:Class` reference (`core.extensions`; `python -m coevolve_lib extensions` lists them).
    Named `benchmark` before: still read, with a notice, and recorded under that name (`RENAMED_FIELDS`)."""
    split: str = "val"
    """BFCL: `val` (the kit's evaluation split), `train`, or `all` (see envs.bfcl.split_tasks). AppWorld: a dataset
    file of the data root: `dev`, `test_normal`, `test_challenge` (official), `dev` (the synthetic world)."""
    split_seed: Seed = 42
    """Seed of the train/val split (fixed so every run evaluates the same tasks)."""
    limit: PositiveInt | None = None
    """Evaluate only the first `limit` tasks of the split (None = all)."""
    seed: Seed = 0
    """Seed of model sampling (irrelevant at temperature 0)."""
    temperature: Temperature = 0.0
    """Evaluation sampling temperature; the paper evaluates at 0 (greedy)."""
    base_url: str | None = None
    """OpenAI-compatible endpoint for `openai:` models (default: $OPENAI_BASE_URL)."""
    deadline_s: PositiveFloat = 600.0
    """Most seconds one reply of an `openai:` model may take, its retries and back-off included (each try waits at
    most 120 s); a reply still missing then is a model error of its episode, counted, never a crash."""
    batch_deadline_s: PositiveFloat = 3600.0
    """Most seconds one batch of `openai:` replies may take (one per live episode, `rollout.batch_size` at most);
    replies not answered by then are model errors. A batch still waiting after 10 s says so on stderr."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """The profile's rollout section."""
    environment: dict[str, Any] = field(default_factory=dict)
    """The profile's environment section: the benchmark's own settings, declared and validated by its environment
    class (`Environment.Settings`) when the profile loads."""

    def recorded(self) -> dict:
        """This section as run folders and results record it: the fields under the names they had when runs were
        first recorded (`recorded_names`), so hashes made before a rename still match."""
        return recorded_names("evaluation", dataclasses.asdict(self))

    @field_validator("model")
    @classmethod
    def _model_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a model name, hub id, local path or openai:<model> is required")
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// URL is required, e.g. http://127.0.0.1:8000/v1")
        return value

    def __post_init__(self):
        if self.base_url and not self.model.startswith("openai:"):  # a local model has no endpoint to point at
            raise ValueError(f"base_url {self.base_url} is for openai:<model> models; model {self.model!r} runs "
                             "locally")



# ------------------------------------------------------------------------------------------------ data engine

@dataclass(config=STRICT)
class ProbeConfig:
    """Rollouts that feed the signal extractor outside training (notebooks 03-05): the current policy samples K
    trajectories per pool task at the rollout temperature, in a few batches without parameter updates."""

    batches: PositiveInt = 3
    """Probe batches (each one a batch of groups, as a training step would produce)."""
    tasks_per_step: PositiveInt = 32
    """Pool tasks per batch (the paper's batch is 32 tasks)."""
    samples_per_task: PositiveInt = 4
    """K, the group size (the paper: 8)."""
    seed: Seed = 0
    """Seed of task sampling and generation."""


@dataclass(config=STRICT)
class SignalConfig:
    """Which signal types run, and their parameters."""

    enabled: tuple[str, ...] = ("forgetting", "boundary", "rare")
    """Signal types to run, by registry name (`engine.signals.SIGNALS`), installed entry point or `module:Class`
    reference (`engine.signals.signal_class`; `profiles.run_config` checks them). The default is the paper's three."""
    success_threshold: Fraction = 0.5
    """The paper's 0.5 on [0, 1] scores: a score >= it counts as solved, below it as failed, in every signal (a
    boundary group holds at least one of each)."""
    forgetting_window: PositiveInt = 16
    """W, the paper leaves it open. It counts scores, not steps: each visit of a key pushes all K samples of
    that step. 16 is two visits at the paper's K = 8. With batch 32 drawn from a pool of 100 or more tasks, a
    task comes back every few steps, so two visits span about one feedback period (F = 10 steps). A task that
    solved something and then fails two visits in a row is flagged both times. With W = K, one all-failed
    group would already erase the earlier success."""
    forgetting_key: Literal["task", "task_type"] = "task"
    """What a window is kept for: `task` (the task_id) or `task_type` (the sorted involved_classes joined by
    "+", e.g. "GorillaFileSystem+TwitterAPI"). Many tasks share a task type and so one window: give it a
    larger W."""
    rare_pattern: Literal["bigram", "sequence", "set"] = "bigram"
    """What an action pattern is, over the tool names of the whole trajectory in call order:
    `bigram`: each pair of consecutive names ("cd>mv"); a trajectory with a single call has the unigram "cd".
    `sequence`: the whole name sequence ("cd>mkdir>mv"). `set`: the sorted distinct names ("cd,mkdir,mv").
    Bigram is the default. Whole sequences are almost all unique (194 distinct in BFCL v3 base's 200 ground
    truths, and sets give 190), so with them "rare" would mean "any trajectory". Sets also drop the order, and
    that is where tool-use mistakes are (mv before cd). Bigrams are the shortest patterns that keep order.
    A rollout counts each distinct pattern once, so c_p is the number of trajectories that contain p, and a
    loop that repeats one pair does not inflate it."""
    rare_rule: Literal["tail", "pattern"] = "tail"
    """When a recurring pattern counts as infrequent. `tail` (default): the least frequent patterns that together
    make up under theta % of all N pattern occurrences (whole count levels, rarest first). `pattern`: the paper's
    literal c_p / N < theta / 100 for each pattern alone. With many distinct patterns `pattern` flags nearly every
    trajectory (at theta = 5, every bigram of BFCL v3 base's ground truth), `tail` a minority (docs/log.md)."""
    rare_theta: Annotated[float, Field(gt=0.0, lt=100.0)] = 5.0
    """theta in (0, 100), the paper's "e.g. 5": the frequency bound of `rare_rule`, in % of N."""
    rare_min_tasks: PositiveInt = 3
    """The paper's recurrence condition ("low empirical frequency ... that still recur across several
    trajectories"), which it does not quantify: a pattern can be rare only once trajectories of this many distinct
    tasks contained it. Tasks, not trajectories: the K samples of one task repeat one situation. 1 drops the
    condition (the paper's literal c_p > 0)."""
    rare_min_total: NonNegativeInt = 200
    """N_min: no rare signal until N >= N_min. N counts all pattern occurrences (each rollout's distinct
    patterns), cumulative over training, so c_p / N is a frequency. It does not count distinct patterns. With
    N < 100 / theta (20 at theta = 5) no pattern can be rare at all. At N = 200 a 5% frequency has a standard
    error of 1.5 points. The paper's scale (batch 32 x K = 8 = 256 rollouts per step) reaches it in the first
    step."""
    compositional_window: PositiveInt = 10
    """Training steps of single-class outcomes that the `compositional` signal looks at, including the current
    step. 10 is one feedback period (the paper's F)."""
    compositional_min_rate: Fraction = 0.5
    """The `compositional` signal needs at least this success rate on single-class tasks of every class involved."""


@dataclass(config=STRICT)
class ExploreConfig:
    """How one signal-annotated trajectory (or one D_0 seed task) is re-explored."""

    explorer: Literal["schema", "llm"] = "schema"
    """`schema` (no LLM: calls drawn from the tool schemas and the observed state) or `llm` (Figs. 9-10)."""
    context_builder: Literal["heuristic", "llm"] = "heuristic"
    """`heuristic` (offline, deterministic, read off the trajectory) or `llm` (the Fig. 11 prompt)."""
    runs: PositiveInt = 3
    """R: independent exploration runs per context, each from a fresh environment (the paper leaves R open)."""
    calls_per_run: PositiveInt = 8
    """S: most calls (one per step) per run (the paper leaves S open)."""
    temperature: Temperature = 0.9
    """Sampling temperature of the LLM explorer; > 0 so that the R runs differ."""
    max_new_tokens: PositiveInt = 256
    """Tokens per LLM explorer step (the context builder gets twice as many: its JSON is longer)."""
    guided: bool = True
    """False: unguided exploration (D_0 and the "random exploration" baseline of Table 3); no context is built.
    A target without a signal is always explored unguided."""
    focus_ratio: Fraction = 0.7
    """Guided schema explorer: share of steps whose tool is drawn from the context's focus_pattern tools."""
    seed: Seed = 0
    """Seed of the schema explorer's draws, combined with the target and the run index."""


@dataclass(config=STRICT)
class SynthesisConfig:
    """Task abstraction and validation."""

    abstraction: Literal["deterministic", "llm"] = "deterministic"
    """`deterministic` (offline: windows of successful exploration calls, templated queries) or `llm` (Fig. 12)."""
    min_calls: PositiveInt = 3
    """Fewest calls a task's action sequence may have (the paper's Fig. 12 rule: at least 3 steps)."""
    max_calls: PositiveInt = 6
    """Most calls in an action sequence the deterministic abstraction writes."""
    description_words: PositiveInt | None = None
    """Deterministic abstraction: words of each function's description that name its step in the query (None: the
    description's whole first sentence). 4 gives short clauses that still tell every function of a BFCL class apart
    ("Create a new directory (dir_name: 'x'), then copy a file or (source: ...)"); the tiny profile uses it."""
    validate: bool = True
    """Execute every abstracted task before it joins the pool (the paper's validation). False: the "w/o validation"
    ablation of Table 11: every abstracted task is kept unexecuted (duplicates and tasks under `min_calls` are still
    refused: the pool holds each task once, and the abstraction's own rule is not validation)."""
    judge: bool = False
    """Also ask the LLM judge (Fig. 13) whether the validated execution answers the query (needs a model)."""
    max_new_tokens: PositiveInt = 768
    """Tokens per abstraction or judge reply."""
    temperature: Temperature = 0.0
    """Sampling temperature of the abstraction and judge model."""

    def __post_init__(self):
        if self.max_calls < self.min_calls:
            raise ValueError(f"max_calls ({self.max_calls}) must be >= min_calls ({self.min_calls})")


@dataclass(config=STRICT)
class HeldoutSetConfig:
    """One held-out evaluation set: validated synthetic tasks built as D_0 is, with their own exploration seed."""

    size: NonNegativeInt = 100
    """Tasks in the set (capped round-robin over its source environments, as D_0 is); 0: no such set."""
    runs: PositiveInt = 10
    """Exploration runs R per source environment (enough runs to fill `size`)."""
    seed: Seed = 1000
    """Exploration seed (apart from D_0's, the rounds' and the warm start's)."""


@dataclass(config=STRICT)
class HeldoutConfig:
    """The held-out evaluation sets of a profile (`coevolve_lib.engine.heldout`): where a small policy shows what it
    learned at a scale where the BFCL val split, the headline metric, stays at 0. No pool may hold a held-out task: D_0
    and every round reject a task whose content matches one (`heldout_leak` in the round reports)."""

    new_tasks: HeldoutSetConfig = field(default_factory=lambda: HeldoutSetConfig(size=0, runs=24, seed=4242))
    """(a) New tasks in the pool's environments: the environments D_0 and the rounds explore, explored with the set's
    own seed. Measures what GRPO on the pool teaches about those environments beyond the tasks trained on."""
    new_envs: HeldoutSetConfig = field(default_factory=lambda: HeldoutSetConfig(size=0, runs=10, seed=1000))
    """(b) Tasks in unseen environments: BFCL's val-split environments, which nothing trains on or explores."""
    rank_by: Literal["new_tasks", "new_envs"] = "new_tasks"
    """The set a study's table ranks its variants by (and computes their differences on); the other is shown beside."""

    def sets(self) -> dict[str, HeldoutSetConfig]:
        """The sets with tasks, by name."""
        return {name: cfg for name, cfg in (("new_tasks", self.new_tasks), ("new_envs", self.new_envs)) if cfg.size}


@dataclass(config=STRICT)
class DataEngineConfig:
    """The data engine of one profile: D_0, probe rollouts, signals, exploration, synthesis, held-out sets."""

    profile: str = "tiny"
    """Profile the values came from."""
    model: str = "tiny"
    """The policy (see EvalConfig.model)."""
    explorer_model: str | None = None
    """Chat model for `llm` contexts, exploration, abstraction and judging (e.g. `openai:qwen3-max`); None when
    every stage runs offline (heuristic context, schema explorer, deterministic abstraction)."""
    explorer_deadline_s: PositiveFloat = 600.0
    """Most seconds one explorer-LLM call may take, its retries and back-off included (`openai:` models); a call
    still unanswered then is a model error of the round (counted in its cost, never a crash)."""
    explorer_max_concurrent: PositiveInt = 8
    """Most explorer-LLM calls in flight at once over the whole run (`openai:` models): each of a multi-process run's
    P processes keeps at most this // P in flight (at least one each: fewer than P is refused). A hosted explorer's
    concurrency quota goes here (docs/explorer.md: Qwen3-Max's)."""
    explorer_requests_per_minute: PositiveInt | None = None
    """Most explorer-LLM requests started per minute over the whole run, retries included (`openai:` models): each of
    P processes starts one at most every 60 x P / this seconds. None: unpaced. A hosted explorer's RPM quota goes
    here (Qwen3-Max's default: 600, docs/explorer.md)."""
    round_deadline_s: PositiveFloat = 1800.0
    """Most seconds one process spends on one round of the data engine (D_0 included): a target, group or spec not
    started by then is skipped and counted in the round's cost (`round_deadline`) and logged, and explorer calls in
    flight are cut at it; the round then ends as usual. The paper's rounds took 480 s (BFCL) and 811 s (AppWorld) on
    all its GPUs together (Table 7, "single feedback cost"). It sizes how long a multi-process run's processes wait
    for each other (`training.process_group_timeout_s`)."""
    explorer_batch_deadline_s: PositiveFloat = 3600.0
    """Most seconds one batch of explorer-LLM calls may take together; calls not answered by then are model errors
    of the round. A batch still waiting after 10 s says so on stderr."""
    llm_calls: Literal["live", "record", "replay"] = "live"
    """How the explorer model's calls are answered (`core.llm_calls`): `live` (asked, nothing kept), `record` (asked,
    and every reply appended to `llm_record`; replies already there are not asked again, but recorded model errors
    are, so a resumed run does not pay twice) or `replay` (answered from `llm_record` alone, with no endpoint: the
    recorded run again, every file byte for byte but the rounds' `timings.json`).
    Not part of the run's identity (`run_identity`): a replayed run is the recorded run, in the same folder."""
    llm_record: str | None = None
    """The record file of `llm_calls` = record | replay (None: `llm_calls.jsonl` in the run folder). A relative path is
    read from the repository root (the committed recordings are under `coevolve_lib/data/llm_calls/`)."""
    d0_size: PositiveInt = 100
    """N, the initial synthetic task set size (the paper: 100)."""
    d0_source_split: Literal["train", "all"] = "train"
    """Benchmark split whose initial states D_0 explores (never `val`: those are evaluation tasks)."""
    max_targets: PositiveInt | None = 32
    """Signal trajectories re-explored per round (None: all)."""
    signals: SignalConfig = field(default_factory=SignalConfig)
    explore: ExploreConfig = field(default_factory=ExploreConfig)
    synthesis: SynthesisConfig = field(default_factory=SynthesisConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """The profile's rollout section (probe rollouts, warm-start checks and held-out evaluation use it)."""
    environment: dict[str, Any] = field(default_factory=dict)
    """The profile's environment section: the benchmark's own settings, declared and validated by its environment
    class (`Environment.Settings`) when the profile loads."""



# ------------------------------------------------------------------------------------------------ training

@dataclass(config=STRICT)
class WarmStartConfig:
    """Supervised fine-tuning before RL, and the synthetic tasks it trains on."""

    enabled: bool = False
    """Run the warm start (tiny profiles: on; paper profiles: off)."""
    max_steps: PositiveInt = 600
    """Optimizer steps; the cosine schedule ends exactly here."""
    batch_size: PositiveInt = 16
    """Conversations per step."""
    learning_rate: PositiveFloat = 3e-3
    """Peak learning rate (a random-init 2M-parameter model needs a large one)."""
    final_lr_ratio: Fraction = 0.1
    """The cosine decay ends at this fraction of the peak learning rate."""
    warmup_steps: NonNegativeInt = 30
    """Linear warm-up steps before the cosine decay."""
    adam_beta2: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.95
    """AdamW's second-moment decay (0.95 adapts faster than 0.999 in a short run)."""
    max_grad_norm: PositiveFloat = 1.0
    """Gradient clipping norm."""
    max_length: PositiveInt = 512
    """Tokens per conversation (longer ones are cut)."""
    seed: Seed = 0
    """Seed of the data order."""
    data_seeds: PositiveInt = 12
    """Unguided explorations of every source environment, one per seed (`first_data_seed` + i). More seeds: more
    distinct call sequences and argument values."""
    first_data_seed: Seed = 100
    """Seed of the first exploration (D_0 uses the profile's exploration seed; keep them apart)."""
    data_runs: PositiveInt = 10
    """Exploration runs R per environment and seed."""
    data_calls_per_run: PositiveInt = 5
    """Exploration calls S per run (short runs give short tasks)."""
    data_min_calls: PositiveInt = 1
    """Shortest reference of a warm-start task (1-call tasks teach the format; the RL pool keeps >= 3)."""
    data_max_calls: PositiveInt = 4
    """Longest reference of a warm-start task."""


@dataclass(config=STRICT)
class LoraConfig:
    """Optional LoRA adapters through peft (off in the paper, which trains all weights)."""

    enabled: bool = False
    """Train LoRA adapters instead of all weights."""
    r: PositiveInt = 16
    """Adapter rank."""
    alpha: PositiveInt = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Dropout on the adapter input."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Modules that get adapters."""


@dataclass(config=STRICT)
class BaselinesConfig:
    """Settings of the paper's Table 10 baselines (`pool_updates: curriculum | rest | reflexion`; the paper gives no
    details, our readings are in `coevolve_lib/engine/pool_updates/` and docs/deviations.md)."""

    curriculum_start: Annotated[float, Field(gt=0.0, le=1.0)] = 0.25
    """Curriculum: the competence c_0, the share of the pool (easiest first) sampled before the first round; it
    grows linearly to 1 at `max_steps` (c(t) = c_0 + (1 - c_0) t / max_steps, re-chosen every F steps)."""
    curriculum_prior: NonNegativeFloat = 4.0
    """Curriculum: pseudo-episodes of the pool's mean success added to each task's own record (shrinks the estimate
    of a task seen a few times towards the mean; a task never seen gets the mean)."""
    rest_threshold: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    """ReST: the Improve filter, reward >= threshold (1.0 with the binary reward = successful episodes only)."""
    reflexion_reflector: Literal["policy", "explorer"] = "policy"
    """Reflexion: who writes the reflection: `policy` (the model being trained, as in Reflexion, where the agent
    reflects on itself; single-process runs only) or `explorer` (`data_engine.explorer_model`)."""
    reflexion_memory: PositiveInt = 3
    """Reflexion: reflections kept per task (Reflexion's memory bound Omega, 1-3 in the paper); the oldest drop out."""
    reflexion_max_new_tokens: PositiveInt = 128
    """Reflexion: most tokens per reflection (greedy)."""
    reflexion_chars: PositiveInt = 600
    """Reflexion: a reflection is cut to this many characters before it goes into a task's query."""


@dataclass(config=STRICT)
class LaunchConfig:
    """Where a run executes (used to compute per-device batches and to print launch commands)."""

    num_machines: PositiveInt = 1
    """Nodes (the paper: 1 for the 4B/7B models, 2 for Qwen3-30B-A3B)."""
    num_processes: PositiveInt = 1
    """Training processes in total, one per GPU (the paper: 8 or 16)."""
    accelerate_config: str | None = None
    """accelerate config file (relative to the repo), e.g. configs/accelerate/zero3_1x8.yaml; None: in-process."""
    gpu_memory_gb: PositiveFloat = 96.0
    """Memory of one GPU, GB (10^9 bytes; the paper's H20: 96, an H100 or A100: 80, an H200: 141, a B200: 180): the
    plan checks that vLLM's weights and KV cache fit the share of it a vLLM recipe gives them, and that the
    training's recipe fits the rest (`training.memory`); a recipe that does not fit is refused, naming one that
    does."""
    offload_optimizer: bool = False
    """Keep the optimizer's state (fp32 master weights, Adam's moments: 12 bytes a parameter) in CPU memory instead
    of on the GPUs: DeepSpeed's `--offload_optimizer_device cpu`, which the printed `accelerate launch` command then
    passes (a DeepSpeed `accelerate_config` is needed). Slower steps, ~12 bytes a parameter less on each GPU."""

    def __post_init__(self):
        if self.offload_optimizer and not self.accelerate_config:
            raise ValueError("launch.offload_optimizer is DeepSpeed's: set launch.accelerate_config to a DeepSpeed "
                             "config (configs/accelerate/zero3_*.yaml)")


@dataclass(config=STRICT)
class TrainConfig:
    """GRPO on the task pool with a feedback round every `feedback_every` steps."""

    max_steps: PositiveInt = 120
    """Optimizer steps (the paper: 120)."""
    tasks_per_step: PositiveInt = 32
    """Pool tasks per step over all processes (the paper's training batch size 32)."""
    group_size: Annotated[int, Field(ge=2)] = 8
    """K rollouts per task (GRPO group size; the paper: 8); at least 2, since GRPO compares rollouts in a group."""
    draw_factor: Annotated[int, Field(ge=1, le=64)] = 1
    """Dynamic sampling (DAPO, a kit addition; 1: off, as in the paper): each step draws `draw_factor` x
    `tasks_per_step` tasks, runs K episodes of each, and trains on `tasks_per_step` of the groups, those whose
    rewards differ first (`train.select_groups`). Every drawn episode still feeds the signals and the rounds;
    `train/zero_std_drawn` and `train/zero_std_trained` log the zero-variance share before and after the selection."""
    learning_rate: PositiveFloat = 1e-6
    """Peak learning rate (the paper: 1e-6)."""
    lr_scheduler_type: Literal[LR_SCHEDULERS] = "constant"
    """transformers scheduler name (the paper: constant)."""
    warmup_steps: NonNegativeInt = 0
    """Linear warm-up steps."""
    max_grad_norm: PositiveFloat = 1.0
    """Gradient clipping norm."""
    epsilon_low: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.2
    """PPO clip range below 1 (the paper: 0.20)."""
    epsilon_high: PositiveFloat = 0.28
    """PPO clip range above 1 (the paper: 0.28, "clip-higher")."""
    num_iterations: Annotated[int, Field(ge=1, le=16)] = 1
    """Policy updates per batch of rollouts (TRL's mu; the paper: 1, one update per batch). More reuses each batch
    with PPO's clipped importance ratio (`epsilon_low` / `epsilon_high`), at the cost of one extra forward pass."""
    beta: NonNegativeFloat = 1e-3
    """KL coefficient against the initial policy (the paper: 1e-3; 0 skips the reference model)."""
    loss_type: Literal[LOSS_TYPES] = "dapo"
    """TRL loss aggregation; `dapo` = token mean over the batch, the paper's 1/sum|tau_k| normalisation."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Advantage normalisation: `group` (std within the group), `batch` or `none`."""
    max_completion_tokens: PositiveInt = 4096
    """Most tokens after the first prompt per episode, model and environment tokens (the paper: 4096)."""
    reward: str = "binary"
    """What GRPO optimises, by the name of one of the environment's rewards (`Environment.rewards`; the profile check
    refuses others): `binary` (the paper, every environment: the episode's score, 1 when its checker passes, else 0),
    or one the environment adds (BFCL's `prefix`, a kit addition: `envs/bfcl/rewards.py`). Rollout records keep the
    checker's `score` and `success` and add `reward`, which the signals read."""
    pool_updates: str = "signals"
    """What changes every F steps: `signals` (CoEvolve: signal-guided re-exploration of the step's weakness
    trajectories), `random` (the paper's "+ Random Exploration" baseline: as many pool tasks drawn at random,
    re-explored unguided, no signals), the Table 10 baselines (`coevolve_lib/engine/pool_updates/`): `curriculum` (no
    new tasks; which pool tasks GRPO draws, easiest first by the policy's recorded success, widening to the whole pool),
    `rest` (ReST: the policy's own rollouts with reward >= `training.baselines.rest_threshold` abstracted and validated
    into new tasks), `reflexion` (failed tasks re-posed with the reflector's verbal self-reflection in the query), or
    `none` (GRPO on the fixed D_0, the paper's GRPO baseline), or one of your own (`engine.pool_updates.pool_update`:
    registered, an installed entry point, or a `module:Class` reference; the profile check refuses unknown names).
    Signals are extracted and logged in every mode."""
    baselines: BaselinesConfig = field(default_factory=BaselinesConfig)
    """Settings of the `curriculum`, `rest` and `reflexion` pool updates."""
    feedback_every: PositiveInt = 10
    """F: a feedback round after every F steps (the paper: 10), the last step excepted: no step would train on a round
    after it (`rounds`)."""
    eval_every: NonNegativeInt | None = None
    """Greedy success on the held-out set (and a fixed sample of D_0) every E steps, before training and at the end
    (None: every F steps; 0: only before and after)."""
    eval_limit: NonNegativeInt | None = None
    """BFCL val tasks evaluated before training and at the end (None: the evaluation section's limit; 0: skip)."""
    eval_pool_tasks: NonNegativeInt = 32
    """D_0 tasks solved greedily at each evaluation (a fixed sample: progress on the training distribution)."""
    save_every: PositiveInt | None = None
    """Checkpoint every this many steps (None: every F steps, right after the round)."""
    save_total_limit: PositiveInt | None = 2
    """Checkpoints kept on disk (oldest deleted first)."""
    gradient_accumulation_steps: PositiveInt = 1
    """Micro-batches per optimizer step (one generation per optimizer step either way)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower)."""
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """Training dtype: `auto` (bfloat16 on GPU, float32 on CPU), `bfloat16` or `float32`."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    use_vllm: bool = False
    """Generate the GRPO rollouts with TRL's vLLM (rollout engine `vllm`, `coevolve_lib/rollout/vllm.py`), whatever
    `rollout.engine` says (the evaluations' engine: they stay local and greedy). Needs the `vllm` package, checked
    when training starts (loading the profile and `--dry-run` do not need it)."""
    vllm_mode: Literal["server", "colocate"] = "server"
    """`server`: a `trl vllm-serve` process on GPUs of its own (start it first; `--dry-run` prints both commands);
    `colocate`: a vLLM engine inside each training process, sharing its GPU (`vllm_gpu_memory_utilization`)."""
    vllm_server_host: str = "0.0.0.0"
    """Server mode: the host the vLLM server runs on (TRL's default `0.0.0.0`: this machine)."""
    vllm_server_port: Port = 8000
    """Server mode: the vLLM server's port (`trl vllm-serve --port`)."""
    vllm_gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.3
    """Colocate mode: share of each GPU's memory vLLM reserves for weights and KV cache (TRL's default 0.3); the
    training gets the rest. A server takes `trl vllm-serve`'s 0.9 of its own GPUs."""
    max_prompt_tokens: PositiveInt = 8192
    """The longest first prompt (system, tool docs, first user turn) vLLM must hold; BFCL's full docs: at most 5,202
    Qwen tokens on the val split and 5,118 on the train split (measured). A longer one is a model error of its
    episode under vLLM."""
    vllm_max_model_length: PositiveInt | None = None
    """vLLM's context length; None: `max_prompt_tokens` + `max_completion_tokens` (what an episode can reach). The
    model's own (Qwen3 2507: 262,144 tokens) would make vLLM reserve a KV cache that a colocated share cannot hold."""
    vllm_tensor_parallel_size: PositiveInt = 1
    """vLLM's tensor parallel size (the paper's rollout TP: 1 for 4B/7B, 2 for 30B-A3B): GPUs per colocated engine
    (must divide the processes), or the server's `--tensor-parallel-size`."""
    report_to: Literal["none", "tensorboard", "wandb"] = "none"
    """Extra metric sinks for TRL's logs: `none`, `tensorboard`, `wandb` (metrics.jsonl is always written)."""
    seed: Seed = 0
    """Seed of task sampling, generation and TRL."""
    process_group_timeout_s: PositiveInt | None = None
    """Seconds a process of a multi-process run waits at a collective (a barrier, a gather) before torch.distributed
    kills the run. None: a round's deadline (`data_engine.round_deadline_s`) and a margin
    (`training.loop.collective_timeout_s`; the plan prints it). NCCL's default of 10 minutes would kill a run at its
    first LLM-explored round. A process that dies takes the others down through the launcher, so a long timeout only
    delays noticing a true deadlock."""
    torch_threads: PositiveInt | None = None
    """CPU threads for torch (None: $COEVOLVE_TORCH_THREADS or 1; more is often slower on a shared machine)."""
    launch: LaunchConfig = field(default_factory=LaunchConfig)

    def __post_init__(self):
        completions = self.tasks_per_step * self.group_size
        shards = self.launch.num_processes * self.gradient_accumulation_steps
        # Each process rolls out whole groups (one generation per optimizer step), then TRL splits them into
        # `gradient_accumulation_steps` equal micro-batches.
        if completions % shards or (completions // self.launch.num_processes) % self.group_size:
            raise ValueError(
                f"tasks_per_step x group_size = {completions} completions must split into whole groups over "
                f"{self.launch.num_processes} process(es) and into {self.gradient_accumulation_steps} equal "
                "accumulation micro-batch(es)")
        if self.pool_updates == "reflexion" and self.baselines.reflexion_reflector == "policy" \
                and self.launch.num_processes > 1:
            raise ValueError(
                "pool_updates=reflexion with baselines.reflexion_reflector=policy runs single-process only (the "
                "reflections are generated on the main process while the others wait); set "
                "training.baselines.reflexion_reflector=explorer (data_engine.explorer_model writes them)")
        if self.use_vllm and self.vllm_mode == "colocate" \
                and self.launch.num_processes % self.vllm_tensor_parallel_size:
            raise ValueError(f"vllm_mode=colocate: vllm_tensor_parallel_size {self.vllm_tensor_parallel_size} must "
                             f"divide the {self.launch.num_processes} training process(es)")

    @property
    def vllm_context(self) -> int:
        """vLLM's context length: `vllm_max_model_length`, else the longest episode (first prompt + completion)."""
        return self.vllm_max_model_length or self.max_prompt_tokens + self.max_completion_tokens

    @property
    def per_device_batch_size(self) -> int:
        """Completions per process per micro-batch."""
        return self.tasks_per_step * self.group_size // (self.launch.num_processes * self.gradient_accumulation_steps)

    @property
    def checkpoint_every(self) -> int:
        return self.save_every or self.feedback_every

    def round_after(self, step: int) -> bool:
        """Whether a feedback round runs after `step`: every F steps, not after the last (its tasks would never be
        sampled, and its time would count in Table 7's feedback share)."""
        return step % self.feedback_every == 0 and step < self.max_steps

    @property
    def rounds(self) -> int:
        """The feedback rounds of a run (every F steps, not after the last: `round_after`)."""
        return (self.max_steps - 1) // self.feedback_every

    @property
    def evaluation_every(self) -> int:
        """Steps between held-out evaluations (0: only before and after training)."""
        return self.feedback_every if self.eval_every is None else self.eval_every


NOT_IDENTITY = ("llm_calls", "llm_record")
"""The data-engine settings that say how a run gets its explorer's replies, not which run it is: a run replayed from
its recording is the recorded run (same hash, same folder, resumable in either mode)."""


def data_engine_identity(config: "DataEngineConfig | dict") -> dict:
    """A data-engine config (or the dict a run recorded) as a dict, without the `NOT_IDENTITY` settings: what a hash
    of it is taken of."""
    config = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    return {k: v for k, v in config.items() if k not in NOT_IDENTITY}


RENAMED_FIELDS = {"evaluation": {"environment_name": "benchmark"}}
"""Fields renamed since runs were first recorded: section -> {name now: name before}. A profile or `--set` may still
give the name before (read with a notice, until the next release); run identities and results keep it
(`recorded_names`), so every run folder and results file made before the rename is still found and still matches."""


def recorded_names(section: str, values: dict) -> dict:
    """`values` of `section` with each renamed field under its name before (`RENAMED_FIELDS`)."""
    before = RENAMED_FIELDS.get(section, {})
    return {before.get(key, key): value for key, value in values.items()}


def run_identity(run: "RunConfig | dict") -> dict:
    """A run's whole resolved config (a RunConfig, or the dict a run folder recorded), as a dict, with its data engine
    as `data_engine_identity` gives it and renamed fields under their recorded names (`recorded_names`): what the
    run's hash is taken of, and what a resumed run must match."""
    config = dataclasses.asdict(run) if dataclasses.is_dataclass(run) else dict(run)
    for section in RENAMED_FIELDS:
        if isinstance(config.get(section), dict):
            config[section] = recorded_names(section, config[section])
    if isinstance(config.get("data_engine"), dict):
        config["data_engine"] = data_engine_identity(config["data_engine"])
    return config


@dataclass(config=STRICT)
class RunConfig:
    """Everything one training run needs: the profile's model and its sections."""

    profile: str
    """Profile name (configs/<profile>.yaml)."""
    model: str
    """The policy's starting model (see EvalConfig.model)."""
    rollout: RolloutConfig
    environment: dict[str, Any]
    """The benchmark's own settings (see EvalConfig.environment)."""
    evaluation: EvalConfig
    data_engine: DataEngineConfig
    training: TrainConfig

    def with_environment(self, settings: dict) -> "RunConfig":
        """This run with `settings` as its `environment` section, in every section that carries it."""
        return dataclasses.replace(self, environment=settings,
                                   evaluation=dataclasses.replace(self.evaluation, environment=settings),
                                   data_engine=dataclasses.replace(self.data_engine, environment=settings))

    def __post_init__(self):
        data = self.data_engine
        if data.llm_calls != "live" and not data.explorer_model:
            raise ValueError(f"data_engine.llm_calls={data.llm_calls} records or replays the explorer model's calls, "
                             "and data_engine.explorer_model is unset (every stage runs offline): set both, or keep "
                             "llm_calls=live")
        llm_stages = [name for name, on in (("explore.explorer=llm", data.explore.explorer == "llm"),
                                            ("explore.context_builder=llm", data.explore.context_builder == "llm"),
                                            ("synthesis.abstraction=llm", data.synthesis.abstraction == "llm"),
                                            ("synthesis.judge=true", data.synthesis.judge)) if on]
        if llm_stages and not data.explorer_model:  # found here, not when the first round needs the model
            raise ValueError(f"data_engine.explorer_model is needed by data_engine.{', data_engine.'.join(llm_stages)}"
                             " (set it, e.g. to openai:<name>, or run those stages offline: explorer=schema, "
                             "context_builder=heuristic, abstraction=deterministic, judge=false)")
        cfg = self.training
        if data.explorer_max_concurrent < cfg.launch.num_processes:
            raise ValueError(f"data_engine.explorer_max_concurrent {data.explorer_max_concurrent} is shared by the "
                             f"run's {cfg.launch.num_processes} processes (training.launch.num_processes), each of "
                             f"which needs one call in flight at least: set it to {cfg.launch.num_processes} or more")
        if cfg.pool_updates == "reflexion" and cfg.baselines.reflexion_reflector == "explorer" \
                and not self.data_engine.explorer_model:
            raise ValueError("training.baselines.reflexion_reflector=explorer needs data_engine.explorer_model "
                             "(e.g. openai:<name>); or let the policy reflect (reflexion_reflector=policy)")
        if self.rollout.engine == "vllm":  # the evaluations share the rollout section and have no trainer
            raise ValueError("rollout.engine=vllm is not chosen by name: set training.use_vllm=true and keep "
                             "rollout.engine=auto (vLLM for the GRPO rollouts, local engines for evaluations)")
