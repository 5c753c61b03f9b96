"""The paper's comparisons and ablations as studies (coevolve_lib/studies/run.py): which runs each table needs.

    comparison   Tables 2-3   zero-shot, GRPO on the static D_0, + random exploration, + feedback (CoEvolve)
    signals      Table 5      CoEvolve without the forgetting, rare or boundary signals
    validation   Table 11     CoEvolve without validating abstracted tasks
    sensitivity  Tables 4,14  CoEvolve with other initial pool sizes N and feedback frequencies F
    explorers    Table 12     synthesis only (GRPO on D_0) and CoEvolve with each explorer model, beside the profile's
    own
    baselines    Table 10     the adaptive data-generation baselines (Reflexion, Curriculum Learning, ReST) beside
                              GRPO and CoEvolve, from the same start (coevolve_lib/engine/pool_updates/)

The variants differ from the profile only by their overrides, so the CoEvolve run of one study is the reference of
the others when they run at the same scale (the same study overrides and seeds).
"""

from __future__ import annotations

from coevolve_lib.core.config import ConfigError, SignalConfig
from coevolve_lib.studies.run import Study, Variant

COEVOLVE = Variant("coevolve", ("training.pool_updates=signals",), "+ Feedback")
"""The full method: every F steps, the weakness signals' trajectories re-explored with guidance."""

COMPARISON = Study("comparison", ("table2", "table3"), (
    Variant("static", ("training.pool_updates=none",), "+ Synthetic Data"),
    Variant("random", ("training.pool_updates=random",), "+ Random Exploration"),
    COEVOLVE,
), zero_shot="Zero-shot (Qwen3-4B)", pass_k=4)
"""Tables 2-3. `static` is the paper's GRPO baseline; `random` re-explores randomly drawn pool tasks unguided."""


def _without(signal: str, paper_row: str) -> Variant:
    kept = [s for s in SignalConfig().enabled if s != signal]  # the paper's three, in the default's order
    return Variant(f"no_{signal}", (*COEVOLVE.overrides, f"data_engine.signals.enabled=[{','.join(kept)}]"), paper_row)


SIGNALS = Study("signals", ("table5",), (
    Variant(COEVOLVE.name, COEVOLVE.overrides, "CoEvolve"),
    _without("forgetting", "w/o Forgotten Signals"),
    _without("rare", "w/o Rare Signals"),
    _without("boundary", "w/o Boundary Signals"),
))
"""Table 5: each run drops one signal type from the targets the feedback round re-explores."""

VALIDATION = Study("validation", ("table11",), (
    Variant(COEVOLVE.name, COEVOLVE.overrides, "Default"),
    Variant("no_validation", (*COEVOLVE.overrides, "data_engine.synthesis.validate=false"), "+ w/o validation"),
))
"""Table 11: abstracted tasks join the pool without being executed first."""


PAPER_D0_SIZES = (50, 200, 25, 500)
"""Tables 4 and 14: the initial pool sizes N the paper tried besides its 100."""
PAPER_FEEDBACK_EVERY = (5, 20, 2, 40)
"""Tables 4 and 14: the feedback frequencies F the paper tried besides its 10."""


def sensitivity(d0_sizes: list[int], feedback_every: list[int]) -> Study:
    """Tables 4 and 14: CoEvolve at the profile's N and F, then one run per other N and per other F."""
    return Study("sensitivity", ("table4", "table14"), (
        Variant(COEVOLVE.name, COEVOLVE.overrides, "N = 100"),  # the paper's default run (N = 100, F = 10)
        *(Variant(f"n{n}", (*COEVOLVE.overrides, f"data_engine.d0_size={n}"), f"N = {n}") for n in d0_sizes),
        *(Variant(f"f{f}", (*COEVOLVE.overrides, f"training.feedback_every={f}"), f"F = {f}") for f in feedback_every),
    ))


def baselines(reflector: str = "policy") -> Study:
    """Table 10: each baseline is a `training.pool_updates` value; `reflector` writes Reflexion's reflections
    (`policy`: single-process runs; `explorer`: `data_engine.explorer_model`, the paper profiles')."""
    return Study("baselines", ("table10",), (
        Variant("reflexion", ("training.pool_updates=reflexion",
                              f"training.baselines.reflexion_reflector={reflector}"), "Reflexion"),
        Variant("curriculum", ("training.pool_updates=curriculum",), "Curriculum Learning"),
        Variant("rest", ("training.pool_updates=rest",), "ReST"),
        Variant("static", ("training.pool_updates=none",), "GRPO"),
        Variant(COEVOLVE.name, COEVOLVE.overrides, "CoEvolve"),
    ), zero_shot="Zero-shot")


LLM_EXPLORER = ("data_engine.explore.explorer=llm", "data_engine.explore.context_builder=llm",
                "data_engine.synthesis.abstraction=llm")
"""What an LLM explorer drives: re-exploration (Figs. 9-10), the exploration contexts (Fig. 11), abstraction (Fig.
12)."""


def explorer_overrides(model: str, recording: str | None = None) -> tuple[str, ...]:
    """The settings of a run whose LLM stages (`LLM_EXPLORER`) are `model`'s: asked live, or, with a `recording`,
    answered from it alone (`data_engine.llm_calls=replay`)."""
    replayed = ("data_engine.llm_calls=replay", f"data_engine.llm_record={recording}") if recording else ()
    return (f"data_engine.explorer_model={model}", *LLM_EXPLORER, *replayed)


def explorers(models: dict[str, str], default_row: str = "", recordings: dict[str, str] | None = None) -> Study:
    """Table 12: each explorer builds D_0 and runs the feedback rounds; "synthesis only" is GRPO on its D_0, "CoEvolve"
    adds its feedback rounds. First the profile's own explorer (`default_row`: the paper's row it stands for, e.g.
    "Qwen-Max" on the paper profiles), then `models`: the paper's row -> a chat model (`openai:<name>` behind
    OPENAI_BASE_URL, or a local model folder). `recordings`: the paper's row -> a recording of that explorer's calls
    (`core.llm_calls`), replayed instead of asking the model (no endpoint; `python -m coevolve_lib record-explorer`
    makes one); a row without one asks its model live."""
    recordings = recordings or {}
    unknown = sorted(set(recordings) - set(models))
    if unknown:
        raise ConfigError(f"explorer_recordings: row(s) {unknown} are not in explorer_models ({sorted(models)})")
    variants = [Variant("default_static", ("training.pool_updates=none",), default_row),
                Variant("default_coevolve", COEVOLVE.overrides, default_row)]
    for index, (row, model) in enumerate(models.items()):
        llm = explorer_overrides(model, recordings.get(row))
        variants += [Variant(f"explorer{index + 1}_static", (*llm, "training.pool_updates=none"), row),
                     Variant(f"explorer{index + 1}_coevolve", (*llm, *COEVOLVE.overrides), row)]
    return Study("explorers", ("table12",), tuple(variants))


STUDIES = {study.name: study for study in (COMPARISON, SIGNALS, VALIDATION)}
"""The fixed studies by name (`sensitivity`, `baselines` and `explorers` are built from their parameters)."""
TRAINED_STUDIES = (*STUDIES, "sensitivity", "baselines")
"""The studies of one profile's own runs (notebooks 07-10 and 15), by name; `explorers` also runs other explorers."""


def study_named(name: str, d0_sizes: list[int] = PAPER_D0_SIZES[:2],
                feedback_every: list[int] = PAPER_FEEDBACK_EVERY[:2], reflector: str = "policy") -> Study:
    """One of `TRAINED_STUDIES` by name, the parametrised ones built from these values (`sensitivity`'s N and F,
    `baselines`' reflector)."""
    if name == "sensitivity":
        return sensitivity(list(d0_sizes), list(feedback_every))
    if name == "baselines":
        return baselines(reflector)
    if name not in STUDIES:
        raise ConfigError(f"no study {name!r}; known: {', '.join(TRAINED_STUDIES)}")
    return STUDIES[name]

