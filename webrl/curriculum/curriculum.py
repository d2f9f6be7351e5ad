"""Self-evolving curriculum (docs/method.md §3): each phase's new tasks, grown from the last phase's failures.

Per phase:
1. Seeds: the tasks of the previous phase's failed trajectories, one per intent, grouped by site.
2. Candidates: in `llm` mode a generator LLM evolves each site's seeds into new intents
   (`TaskGenerator`; the tasks have no evaluator, the ORM rewards them, and they start on the page where most
   of the site's seeds started, unless `start_urls` names the site's start page); in `template` mode the
   failed tasks' templates get new values from the site data (`reinstantiate`, e.g.
   `webrl.env.sites.reinstantiate`), so the tasks keep their evaluators and the run can measure the ORM
   against them; `mixed` does both. With `page_facts` > 0, any mode
   also offers questions about labelled values on the pages the previous phase's episodes reached
   (`page_facts.page_fact_tasks`: fields of the entities the agent met, each with its evaluator).
3. Filters, cheap first: dedupe against every intent seen so far (training set, seeds, earlier
   phases' tasks) and within the phase, and refuse any intent a held-out task asks; the critic's
   P(success) on the task's start page must lie in `value_window` (skipped while no critic exists);
   then, while choosing, an optional feasibility judge on LLM-made tasks (`FeasibilityJudge`).
4. Keep K, balanced across sites: candidates are taken round-robin from per-site queues shuffled by
   a per-phase stream, and a site whose candidate the judge refuses gets the next turn back. At most
   `max_per_template` kept tasks may share an intent template: a candidate of a full template is set aside
   (`template_cap`) and its site draws again, so the other templates fill the phase where candidates remain.

Everything random derives from (config.seed, phase), and the only cross-phase memory is the seen
set in `CurriculumState`, saved per phase directory: loading phase p-1's state and running phase p
again yields the same tasks (given the same trajectories and a deterministic engine and critic).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webrl.curriculum.config import CurriculumConfig, template_full
from webrl.curriculum.filters import (
    FeasibilityJudge,
    dedupe_key,
    group_by,
    phase_rng,
    pick_balanced,
    value_verdict,
)
from webrl.curriculum.generation import GenerationRequest, TaskGenerator
from webrl.curriculum.page_facts import HeldOutFacts, checked_facts, page_fact_tasks
from webrl.curriculum.state import CurriculumState, PhaseRecord
from webrl.data.prompts import build_actor_prompt
from webrl.data.steps import StepSample
from webrl.data.trajectory import Task, Trajectory
from webrl.inference.engine import InferenceEngine

Critic = Callable[[list[str | StepSample]], Sequence[float]]
"""Batched critic: the inputs `critic_prompt` builds -> P(success) each, e.g. `CriticModule.values` (a tensor is
fine)."""
Reinstantiate = Callable[[Task, random.Random, int], list[Task]]
"""`reinstantiate(task, rng, n)`: up to n new tasks of `task`'s template, each with its evaluator."""
CriticPrompt = Callable[[Task, str], str | StepSample]
"""`critic_prompt(task, html)`: the critic's input for `task` on its start page showing `html`, the first step's
state (which keeps the page, for a critic to cut as its training cuts it) or that state's prompt."""

PARSE_REASONS = ("empty", "multiline", "too_short", "too_long", "garbage")
_FILTER_OF_REASON = {
    **{reason: "parse" for reason in PARSE_REASONS},
    "duplicate": "duplicate",
    "held_out": "held_out",
    "critic_low": "critic",
    "critic_high": "critic",
    "infeasible": "judge",
    "judge_unparsed": "judge",
    "template_cap": "template_cap",
    "unverified": "page_check",
}


@dataclass
class CurriculumResult:
    """The tasks of one phase (fewer than K when candidates ran out), its metrics and its full record."""

    phase: int
    tasks: list[Task]
    metrics: dict[str, float]
    record: PhaseRecord


@dataclass
class _Candidate:
    task: Task
    origin: str
    source: str
    value: float | None = None


class Curriculum:
    """Chooses each phase's tasks from the previous phase's failures; see the module docstring.

    `generator_engine` is needed in llm/mixed mode, `reinstantiate` in template/mixed mode,
    `judge_engine` (defaulting to the generator's, with its tokenizer) when `config.judge` is on. `start_urls` maps a
    site to its start page, where LLM-made tasks begin (default: the commonest start URL of the
    site's seeds). `start_observation(task)` returns the simplified HTML of the task's start page
    (the loop opens it in the browser); it is called once per start URL and cached. `critic_prompt
    (task, html)` builds the critic's input; it must be the first-step state or prompt in the form the rollouts
    record, which the critic is trained on (the loop passes `phase.start_page_prompt` of the rollouts' builder). The
    default, the round-0 actor prompt in completion form, is that form only for actors without a chat
    template. `held_out` holds the intents and facts of the held-out tasks, which no candidate may ask; page
    facts also need `start_observation`, which opens each fact's page afresh to check it.
    """

    def __init__(
        self,
        config: CurriculumConfig,
        *,
        generator_engine: InferenceEngine | None = None,
        generator_tokenizer: Any = None,
        judge_engine: InferenceEngine | None = None,
        judge_tokenizer: Any = None,
        reinstantiate: Reinstantiate | None = None,
        start_urls: Mapping[str, str] | None = None,
        start_observation: Callable[[Task], str] | None = None,
        critic_prompt: CriticPrompt | None = None,
        state: CurriculumState | None = None,
        held_out: HeldOutFacts | None = None,
    ) -> None:
        config.validate()
        if config.mode in ("llm", "mixed") and generator_engine is None:
            raise ValueError(f"curriculum.mode={config.mode!r} needs a generator engine (none was given)")
        if config.mode in ("template", "mixed") and reinstantiate is None:
            raise ValueError(f"curriculum.mode={config.mode!r} needs a reinstantiate(task, rng, n) function")
        if config.page_facts and start_observation is None:
            raise ValueError("curriculum.page_facts needs start_observation(task) -> html to check each fact's page")
        if judge_engine is None:
            judge_engine, judge_tokenizer = generator_engine, generator_tokenizer
        self.config = config
        self.generator = None
        if generator_engine is not None:
            self.generator = TaskGenerator(generator_engine, config, generator_tokenizer)
        self.judge = FeasibilityJudge(judge_engine, config, judge_tokenizer) if config.judge else None
        self.reinstantiate = reinstantiate
        self.start_urls = dict(start_urls or {})
        self.start_observation = start_observation
        self.critic_prompt = critic_prompt or (lambda task, html: build_actor_prompt(task.intent, [], html))
        self.state = state or CurriculumState()
        self.held_out = held_out or HeldOutFacts()
        self._observations: dict[str, str] = {}

    def register_tasks(self, tasks: Iterable[Task]) -> None:
        """Mark tasks already given to the agent (the phase-0 training set) so that none is proposed again."""
        self.state.mark_seen(task.intent for task in tasks)

    def propose(
        self, phase: int, trajectories: Iterable[Trajectory], *, critic: Critic | None = None
    ) -> CurriculumResult:
        """Choose phase `phase`'s tasks from `trajectories` (the previous phase's) and update the state."""
        if phase <= self.state.phase:
            raise ValueError(
                f"curriculum state already covers phase {self.state.phase}; to redo phase {phase}, load the "
                f"state saved after phase {phase - 1}"
            )
        if critic is not None and self.start_observation is None:
            raise ValueError("the critic filter needs start_observation(task) -> html (none was given)")
        record = PhaseRecord(phase=phase)
        trajectories = list(trajectories)
        seeds = self._seeds(trajectories)
        record.seeds = [{"task_id": t.task_id, "site": t.site, "intent": t.intent} for t in seeds]
        self.state.mark_seen(t.intent for t in seeds)
        candidates: list[_Candidate] = []
        if self.config.mode in ("llm", "mixed"):
            candidates += self._from_llm(phase, seeds, record)
        if self.config.mode in ("template", "mixed"):
            candidates += self._from_templates(phase, seeds, record)
        if self.config.page_facts:
            candidates += self._from_pages(phase, trajectories, record)
        record.generated = [
            {"intent": c.task.intent, "site": c.task.site, "origin": c.origin, "source": c.source} for c in candidates
        ]
        fresh = self._dedupe(candidates, record)
        if critic is not None:
            fresh = self._critic_filter(fresh, critic, record)
        tasks = _finalise(phase, self._select(phase, fresh, record))
        record.kept = [task.to_dict() for task in tasks]
        record.metrics = _metrics(seeds, candidates, tasks, record)
        self.state.mark_seen(task.intent for task in tasks)
        self.state.phase, self.state.record = phase, record
        return CurriculumResult(phase, tasks, record.metrics, record)

    def _seeds(self, trajectories: Iterable[Trajectory]) -> list[Task]:
        """Failed tasks, one per `dedupe_key`, in an order that does not depend on the input order."""
        failed = sorted(
            (t.task for t in trajectories if not t.succeeded),
            key=lambda task: (task.site, dedupe_key(task.intent), task.task_id),
        )
        unique: dict[str, Task] = {}
        for task in failed:
            unique.setdefault(dedupe_key(task.intent), task)
        return list(unique.values())

    def _from_llm(self, phase: int, seeds: list[Task], record: PhaseRecord) -> list[_Candidate]:
        rng = phase_rng(self.config.seed, phase, "seeds")
        requests, start_urls = [], {}
        for site, site_seeds in group_by(seeds, lambda task: task.site).items():
            start_urls[site] = self.start_urls.get(site) or _commonest(t.start_url for t in site_seeds)
            intents = [task.intent for task in site_seeds]
            for _ in range(self.config.generation_turns):
                requests.append(
                    GenerationRequest(site, rng.sample(intents, min(self.config.seeds_per_call, len(intents))))
                )
        call_seed = phase_rng(self.config.seed, phase, "generate").randrange(2**31)
        replies = self.generator.generate(requests, call_seed)
        candidates = []
        for call, (request, (reply, parsed)) in enumerate(zip(requests, replies, strict=True)):
            source = f"llm call {call}"
            record.replies.append({"call": call, "site": request.site, "seeds": request.seeds, "reply": reply})
            for text, reason in parsed.rejected:
                record.rejected.append(_rejection(text, request.site, "llm", reason, source))
            for text in parsed.tasks:
                task = Task(task_id="", intent=text, sites=[request.site], start_url=start_urls[request.site])
                candidates.append(_Candidate(task, "llm", source))
        return candidates

    def _from_templates(self, phase: int, seeds: list[Task], record: PhaseRecord) -> list[_Candidate]:
        rng = phase_rng(self.config.seed, phase, "templates")
        candidates = []
        for seed in seeds:
            if seed.intent_template_id is None:
                record.rejected.append(_rejection(seed.intent, seed.site, "template", "no_template", seed.task_id))
                continue
            for task in self.reinstantiate(seed, rng, self.config.variants_per_seed):
                candidates.append(_Candidate(task, "template", seed.task_id))
        return candidates

    def _from_pages(self, phase: int, trajectories: list[Trajectory], record: PhaseRecord) -> list[_Candidate]:
        """Up to `page_facts` page-fact tasks in the order the phase's stream draws them, each whose page still
        shows its fact when opened afresh (`checked_facts`). Questions asked in earlier phases are left out before
        the check, so that a page that every phase revisits does not take the slots of facts not yet asked. The
        episodes are read in task-id order, as the seeds are chosen in an order of their own: the facts are listed
        first-seen, and the shuffle of that list must not depend on the order the episodes came in."""
        episodes = sorted(trajectories, key=lambda trajectory: trajectory.task.task_id)
        tasks = [t for t in page_fact_tasks(episodes, self.held_out) if not self.state.is_seen(t.intent)]
        phase_rng(self.config.seed, phase, "pages").shuffle(tasks)
        kept, refused = checked_facts(tasks, self.config.page_facts, self._start_html)
        record.rejected.extend(_rejection(t.intent, t.site, "page", "unverified", t.start_url) for t in refused)
        return [_Candidate(task, "page", task.instantiation_dict["subject"]) for task in kept]

    def _dedupe(self, candidates: list[_Candidate], record: PhaseRecord) -> list[_Candidate]:
        """The candidates whose intent is new, the first of each; one that a held-out task asks is refused as
        `held_out`: a generator may write an evaluation task word for word, which training must not see."""
        fresh, keys = [], set()
        for candidate in candidates:
            key = dedupe_key(candidate.task.intent)
            if self.held_out.has_intent(candidate.task.intent):
                record.rejected.append(_rejection_of(candidate, "held_out"))
            elif key in self.state.seen or key in keys:
                record.rejected.append(_rejection_of(candidate, "duplicate"))
            else:
                keys.add(key)
                fresh.append(candidate)
        return fresh

    def _critic_filter(self, candidates: list[_Candidate], critic: Critic, record: PhaseRecord) -> list[_Candidate]:
        if not candidates:
            return []
        prompts = [self.critic_prompt(c.task, self._start_html(c.task)) for c in candidates]
        values = [float(v) for v in critic(prompts)]
        if len(values) != len(candidates):
            raise RuntimeError(f"critic returned {len(values)} values for {len(candidates)} prompts")
        kept = []
        for candidate, value in zip(candidates, values, strict=True):
            candidate.value = value
            reason = value_verdict(value, self.config.value_window)
            if reason is None:
                kept.append(candidate)
            else:
                record.rejected.append(_rejection_of(candidate, reason, f"value {value:.4f}"))
        return kept

    def _start_html(self, task: Task) -> str:
        if task.start_url not in self._observations:
            self._observations[task.start_url] = self.start_observation(task)
        return self._observations[task.start_url]

    def _select(self, phase: int, candidates: list[_Candidate], record: PhaseRecord) -> list[_Candidate]:
        """Up to K candidates, balanced across sites; the judge (if on) vets LLM-made ones as they are picked."""
        rng = phase_rng(self.config.seed, phase, "select")
        queues = group_by(candidates, lambda c: c.task.site)
        for queue in queues.values():
            rng.shuffle(queue)
        counts: dict[str, int] = {}
        per_template: Counter[str] = Counter()
        kept: list[_Candidate] = []
        while len(kept) < self.config.tasks_per_phase:
            batch = pick_balanced(queues, counts, self.config.tasks_per_phase - len(kept))
            if not batch:
                break
            batch = [(site, c) for site, c in batch if self._template_has_room(site, c, counts, per_template, record)]
            judged = [c.task for _, c in batch if self._needs_judge(c)]
            verdicts = iter(self.judge.judge(judged) if judged else [])
            for site, candidate in batch:
                verdict = next(verdicts) if self._needs_judge(candidate) else None
                feasible = True if verdict is None else verdict.feasible
                if feasible is None:
                    feasible = self.config.judge_keeps_unparsed
                if feasible:
                    kept.append(candidate)
                    continue
                counts[site] -= 1
                per_template[candidate.task.intent_template] -= 1
                reason = "judge_unparsed" if verdict.feasible is None else "infeasible"
                record.rejected.append(_rejection_of(candidate, reason, verdict.reply))
        for queue in queues.values():
            record.rejected.extend(_rejection_of(c, "unused") for c in queue)
        return kept

    def _template_has_room(
        self, site: str, candidate: _Candidate, counts: dict[str, int], per_template: Counter[str], record: PhaseRecord
    ) -> bool:
        """Count the candidate against its template, or set it aside when the template already has the cap.

        A set-aside candidate gives its site the turn back, as a judge refusal does, so the cap does not
        unbalance the sites. Tasks without a template (LLM-made ones) are never capped.
        """
        template = candidate.task.intent_template
        if template_full(per_template, template, self.config.max_per_template):
            counts[site] -= 1
            record.rejected.append(_rejection_of(candidate, "template_cap"))
            return False
        per_template[template] += 1
        return True

    def _needs_judge(self, candidate: _Candidate) -> bool:
        # Template tasks are feasible by construction: the site's reference solver solves their template.
        return self.judge is not None and candidate.origin == "llm"


def _finalise(phase: int, kept: list[_Candidate]) -> list[Task]:
    """The kept candidates as the phase's tasks: ids in the order kept, and their provenance in `extra`."""
    tasks = []
    for index, candidate in enumerate(kept):
        provenance = {"phase": phase, "origin": candidate.origin, "source": candidate.source}
        if candidate.origin == "template":
            provenance["template_task_id"] = candidate.task.task_id
        if candidate.value is not None:
            provenance["critic_value"] = candidate.value
        task = dataclasses.replace(
            candidate.task,
            task_id=f"curriculum-p{phase}-{index:04d}",
            extra={**candidate.task.extra, "curriculum": provenance},
        )
        tasks.append(task)
    return tasks


def _metrics(
    seeds: list[Task], candidates: list[_Candidate], tasks: list[Task], record: PhaseRecord
) -> dict[str, float]:
    by_filter = Counter(_FILTER_OF_REASON.get(r["reason"], r["reason"]) for r in record.rejected)
    metrics: dict[str, float] = {
        "curriculum/seeds": float(len(seeds)),
        "curriculum/generated": float(len(candidates)),
        "curriculum/kept": float(len(tasks)),
        "curriculum/unused": float(by_filter["unused"]),
        "curriculum/duplicate_rate": by_filter["duplicate"] / len(candidates) if candidates else 0.0,
    }
    for name in ("parse", "duplicate", "held_out", "critic", "judge", "no_template", "template_cap", "page_check"):
        metrics[f"curriculum/rejected_{name}"] = float(by_filter[name])
    for origin, count in sorted(Counter(task.extra["curriculum"]["origin"] for task in tasks).items()):
        metrics[f"curriculum/kept_{origin}"] = float(count)
    values = [c.value for c in candidates if c.value is not None]
    if values:
        metrics["curriculum/critic_value_mean"] = sum(values) / len(values)
    for key, items in (("seeds", seeds), ("generated", [c.task for c in candidates]), ("kept", tasks)):
        for site, count in sorted(Counter(task.site for task in items).items()):
            metrics[f"curriculum/{site}/{key}"] = float(count)
    return metrics


def _commonest(values: Iterable[str]) -> str:
    counts = Counter(values)
    return min(counts, key=lambda value: (-counts[value], value))


def _rejection(intent: str, site: str, origin: str, reason: str, detail: str = "") -> dict[str, Any]:
    return {"intent": intent, "site": site, "origin": origin, "reason": reason, "detail": detail}


def _rejection_of(candidate: _Candidate, reason: str, detail: str = "") -> dict[str, Any]:
    """The rejection record of a candidate; one the critic scored keeps its `value` (the report's histogram)."""
    out = _rejection(candidate.task.intent, candidate.task.site, candidate.origin, reason, detail or candidate.source)
    if candidate.value is not None:
        out["value"] = candidate.value
    return out
