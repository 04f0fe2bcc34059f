"""How much of TRL's private surface the trainers lean on, and whether TRL's deprecations reach us.

The GRPO trainer hands stored rollouts to TRL through one TRL method
(`_generate_and_score_completions`); its opt-in layer (tree packing, the sampler gap) adds
one more (`_get_per_token_logps_and_entropies`); metrics go through `log`, never into TRL's
private `_metrics`. A TRL release that renames a private method breaks exactly these, which
`.ci/trl-latest` runs against the newest TRL. The training libraries' DeprecationWarnings,
which announce such breakage, are shown in the test summary (pyproject's `filterwarnings`).
"""

from __future__ import annotations

import inspect
import warnings

from transformers import Trainer
from trl import GRPOTrainer

import training.grpo_trainer
import training.grpo_tree_trainer
from training.grpo import grpo_trainer_class
from training.grpo_config import TrajlakeGRPOConfig
from training.grpo_trainer import StoredGroupsGRPOTrainer
from training.grpo_tree_trainer import TreePackedGRPOTrainer


def private_overrides(cls: type) -> set[str]:
    """Private (single-underscore) methods `cls` itself defines over one of TRL's or transformers'."""
    return {
        name
        for name, value in vars(cls).items()
        if name.startswith("_")
        and not name.startswith("__")
        and callable(value)
        and (hasattr(GRPOTrainer, name) or hasattr(Trainer, name))
    }


def test_stored_rollouts_reach_trl_through_one_private_method() -> None:
    assert private_overrides(StoredGroupsGRPOTrainer) == {"_generate_and_score_completions"}
    assert private_overrides(TreePackedGRPOTrainer) == {"_get_per_token_logps_and_entropies"}
    for module in (training.grpo_trainer, training.grpo_tree_trainer):
        source = inspect.getsource(module)
        assert "._metrics" not in source and "_gap_batch" not in source, module.__name__


def test_the_opt_in_layer_is_used_only_when_asked_for(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def cfg(**kw: bool) -> TrajlakeGRPOConfig:
        return TrajlakeGRPOConfig(output_dir=str(tmp_path), report_to="none", **kw)

    assert grpo_trainer_class(cfg()) is TreePackedGRPOTrainer  # both on by default
    assert grpo_trainer_class(cfg(tree_packing=False)) is TreePackedGRPOTrainer  # the gap still measured
    assert grpo_trainer_class(cfg(measure_sampler_gap=False)) is TreePackedGRPOTrainer
    plain = grpo_trainer_class(cfg(tree_packing=False, measure_sampler_gap=False))
    assert plain is StoredGroupsGRPOTrainer


def shown(module: str) -> bool:
    """Whether a DeprecationWarning attributed to `module` gets through this test's filters
    (pytest's, from pyproject.toml, are in effect inside a test)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("going away", DeprecationWarning, "lib.py", 1, module=module)
    return bool(caught)


def test_the_training_libraries_deprecations_are_shown_and_others_are_not() -> None:
    for module in ("trl.trainer.grpo_trainer", "transformers.modeling_utils", "peft.peft_model", "trl"):
        assert shown(module), module
    assert shown("training.grpo")  # a library's warning about how trajlake calls it
    assert not shown("prefect.server.api")
    assert not shown("trlx")  # a prefix of a name, not a package
