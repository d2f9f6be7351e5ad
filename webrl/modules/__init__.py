"""The models: actor, critic, ORM and SFT LightningModules, WebRL's losses, and model builders.

Every name loads lazily (`import webrl.modules` does not import torch; the first use of a name does).

    from webrl.modules import ActorModule, CriticModule, build_tiny_model, load_model_and_tokenizer
"""

from webrl.lazy_exports import lazy_exports

_EXPORTS = {
    "ActorModule": "webrl.modules.actor",
    "CriticModule": "webrl.modules.critic",
    **dict.fromkeys(("OutcomeRewardModule", "orm_scorer"), "webrl.modules.orm"),
    "SFTModule": "webrl.modules.sft",
    "WebRLModule": "webrl.modules.base",
    **dict.fromkeys(("build_tiny_model", "convert_smollm2"), "webrl.modules.model_factory"),
    **dict.fromkeys(
        ("action_logprobs", "actor_scorer", "apply_lora", "load_model_and_tokenizer"),
        "webrl.modules.lm",
    ),
    **dict.fromkeys(
        (
            "actor_loss",
            "compute_advantage",
            "critic_loss",
            "critic_state_loss",
            "orm_loss",
        ),
        "webrl.modules.losses",
    ),
    **dict.fromkeys(("ActorLossConfig", "AdvantageConfig", "LoraSettings"), "webrl.modules.settings"),
    "precompute_advantages": "webrl.modules.advantages",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
