"""The models' settings as plain dataclasses: LoRA, the actor's advantage and loss, the critic's head init.

They are part of the run config (`webrl.loop_config`), which `--help`, `--print-config` and
`--dry-run` read without loading a model, so this module imports neither torch nor peft nor
transformers; the modules that use the settings (`webrl.modules.lm`, `.losses`, `.critic`) import them
from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webrl.config_checks import one_of, positive, within
from webrl.data.steps import DEFAULT_GAMMA

_FORMS = ("paper", "release")
OBJECTIVES = ("squared", "smooth_l1", "policy_gradient")
LOGRATIOS = ("sum", "mean")
ADVANTAGE_KEY = "actor.advantage"
"""Where the run config holds `AdvantageConfig`: the prefix of the keys its errors name when it is built."""
ACTOR_LOSS_KEY = "actor.loss"
"""Where the run config holds `ActorLossConfig`: the prefix of the keys its errors name when it is built."""
HEAD_INIT_STD = 0.2
"""The release's std of the critic heads' first two Linear weights."""


@dataclass
class LoraSettings:
    """LoRA adapter settings (peft); the base weights stay frozen and only the adapters train."""

    r: int = 16
    """Adapter rank."""
    alpha: int = 32
    """Scaling numerator: the update is scaled by alpha / r."""
    dropout: float = 0.0
    """Dropout on the adapter input; 0 keeps training and scoring deterministic."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Names of the Linear layers that get adapters (Llama attention projections by default)."""


@dataclass
class AdvantageConfig:
    """How the actor's advantage is computed from critic values and the step's labels."""

    form: str = "paper"
    """"paper": λ-mix of one-step TD and Monte-Carlo [P eq. 8]; "release": the released code's clamp + binarise."""
    gamma: float = DEFAULT_GAMMA
    """Discount γ of both forms and of each step's mc_return (data pipeline); defaults to `webrl.data.steps`'s."""
    lam: float = 0.5
    """λ weighting the one-step TD term against the Monte-Carlo term (paper form)."""
    margin: float = 0.05
    """Rise the critic must show beyond V(s) for a failed step to count as positive (release form)."""
    binarise: bool = True
    """Release form: map A ≥ 0 to `positive` and A < 0 to `negative`."""
    positive: float = 1.0
    """Release form: advantage given to non-negative steps."""
    negative: float = -0.6
    """Release form: advantage given to negative steps."""

    def __post_init__(self) -> None:
        """Checked when built: the run config builds it while it is read, before any section's `validate`."""
        self.validate(ADVANTAGE_KEY)

    def validate(self, prefix: str) -> None:
        """Raise ConfigError naming `prefix.<key>`, its value and what is allowed."""
        one_of(f"{prefix}.form", self.form, _FORMS)
        within(f"{prefix}.lam", self.lam, 0, 1)


@dataclass
class ActorLossConfig:
    """Each choice of the actor objective; `paper()` (the default) and `release()` are the two presets."""

    objective: str = "squared"
    """"squared": (β·logratio − A)² [P eq. 5]; "smooth_l1": SmoothL1(β·logratio, A) [C];
    "policy_gradient": −A·log π, no KL term: the paper's "WebRL without KL" ablation (REINFORCE with
    the critic as baseline, Fig. 5). `logratio` still chooses sum or per-token mean of log π."""
    logratio: str = "sum"
    """"sum": sequence log-ratio Σlogπ − Σlogπ_ref [P]; "mean": per action token [C]."""
    beta: float = 1.0
    """Fixed β [P], or the default β of the adaptive rule [C: 1]."""
    adaptive_beta: bool = False
    """[C] β = `beta_confident` if (A ≥ 0, p_ref ≥ `positive_confidence`) or (A < 0, p_ref < `negative_confidence`)."""
    beta_confident: float = 5.0
    """β chosen by the adaptive rule [C: 5]."""
    positive_confidence: float = 0.8
    """Reference geometric-mean token probability from which a positive action counts as already likely [C]."""
    negative_confidence: float = 0.9
    """Reference probability below which a negative action counts as already unlikely [C]."""
    cap_beta: bool = False
    """[C] β ← min(β, |A / logratio|), detached: stops pushing once β·logratio reaches A."""
    divide_by_beta: bool = False
    """[C] divide each sample's loss by β (keeps gradients comparable across β)."""
    train_negatives: bool = True
    """[P] train every sample; False = [C] mask 1[A > 0], so negatives give no gradient."""
    sft_weight: float = 0.0
    """[C] `add_sft_loss`: weight of −Σlogπ·exp(1 − p̄) on positives, p̄ = policy geometric-mean prob (detached)."""
    fp32_logprobs: bool = True
    """Run the π and π_ref log-prob forwards with autocast off: in the fp32 master weights under `*-mixed` precision.
    The loss regresses on Σlogπ − Σlogπ_ref, a difference of two forwards: moving SmolLM2-135M's weights by 1e-6
    (one AdamW step at lr 1e-6) moves it by 1e-4 to 1e-3 per action in fp32 (rms 0.0008) but by 0.08 to 0.7 under
    bf16 autocast (rms 0.44), so the residual's sign would follow rounding. Default on: under `32-true` autocast is
    off anyway and training is bit-identical. Under `bf16-mixed` the actor's steps pay fp32 compute and activation
    memory (advantage scoring stays in bf16): a whole SmolLM2 step took 78 s in fp32 against 16.5 s in bf16 on an
    AVX512-BF16 Xeon, while a CPU that emulates bf16 is faster in fp32 (`webrl_smollm2.yaml`). It cannot help where
    the weights themselves are bf16, so it changes nothing there and is not refused: `bf16-true`, and FSDP1
    (`fabric.strategy` fsdp), whose bf16-mixed gathers the weights in bf16."""

    def __post_init__(self) -> None:
        """Checked when built: the run config builds it while it is read, before any section's `validate`."""
        self.validate(ACTOR_LOSS_KEY)

    def validate(self, prefix: str) -> None:
        """Raise ConfigError naming `prefix.<key>`, its value and what is allowed."""
        one_of(f"{prefix}.objective", self.objective, OBJECTIVES)
        one_of(f"{prefix}.logratio", self.logratio, LOGRATIOS)
        positive(f"{prefix}.beta", self.beta)
        positive(f"{prefix}.beta_confident", self.beta_confident)

    @classmethod
    def paper(cls, beta: float = 1.0) -> ActorLossConfig:
        """[P] eq. 5: squared regression of β·Σlog(π/π_ref) onto A with a fixed β, negatives trained."""
        return cls(beta=beta)

    @classmethod
    def release(cls, sft_weight: float = 0.0) -> ActorLossConfig:
        """[C] per-token log-ratio, SmoothL1, adaptive β ∈ {1, 5} capped at |A/logratio|, ÷β, positives only."""
        return cls(
            objective="smooth_l1",
            logratio="mean",
            beta=1.0,
            adaptive_beta=True,
            cap_beta=True,
            divide_by_beta=True,
            train_negatives=False,
            sft_weight=sft_weight,
        )
