"""Page-fact tasks: new questions about labelled values on the pages a phase's episodes reached.

WebRL's curriculum asks an LLM for tasks unlike the training set, grown from what the agent met; a
135M generator cannot write them. Pages can: a product page an episode opened for "What is the price of
X?" also shows "SKU: KIT-0006" and "In stock: 88", so it yields "What is the SKU of X?" with a known
answer. These tasks ask for fields of the entities the agent met, most of which no training template asks
for and the template curriculum never reaches, and each carries a `string_match` evaluator with the value
read off the page.

A page is used only when its heading names an entity of the episode's own task (a value of the task's
`instantiation_dict`), so that the question names something the agent can search or click, and not a
page title such as "Directions". A fact that a held-out task asks (the same entity with the same
reference answer) is never proposed, so held-out tasks cannot leak into training.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from webrl.curriculum.filters import normalise_intent
from webrl.data.trajectory import Task, Trajectory

_HEADING = re.compile(r"<h1>\s*(.*?)\s*</h1>")
_PARAGRAPH = re.compile(r"<p>\s*(.*?)\s*</p>")
_FACT = re.compile(r"^([A-Za-z][A-Za-z ]{0,23}):\s+(.+)$")
_LONE_LINK = re.compile(r'^<a id="[^"]*">\s*([^<]+?)\s*</a>$')
_CURRENCY = re.compile(r"^[$€£]\s*(?=\d)")
MAX_VALUE_WORDS = 4
"""Longer values ("4.0 out of 5 (2 reviews)") are sentences to paraphrase rather than facts to copy."""
QUESTION = "What is the {label} of {subject}?"


@dataclass(frozen=True)
class PageFact:
    """One labelled value on a page whose heading is `subject`, as found in an episode's observation."""

    subject: str
    label: str
    value: str


def heading_subject(heading: str) -> str:
    """The entity a page heading names: the part after a "Kind: " prefix ("Edit product: Mug" -> "Mug")."""
    return heading.rsplit(": ", 1)[-1].strip()


def facts_on_page(observation: str) -> list[PageFact]:
    """Every `Label: value` in the paragraphs of a simplified-HTML page with one `<h1>` heading.

    A paragraph may hold several facts separated by " | ". A value must be plain text or one link's
    text, at most `MAX_VALUE_WORDS` words: form controls (an input's value, a select) and filter bars
    ("State: Open Closed All") are not facts.
    """
    headings = _HEADING.findall(observation)
    if len(headings) != 1:
        return []
    subject = heading_subject(headings[0])
    facts = []
    for paragraph in _PARAGRAPH.findall(observation):
        for segment in paragraph.split(" | "):
            match = _FACT.match(segment.strip())
            if match is None:
                continue
            value = match.group(2).strip()
            if "<" in value:
                link = _LONE_LINK.match(value)
                if link is None:
                    continue
                value = link.group(1)
            if 0 < len(value.split()) <= MAX_VALUE_WORDS:
                facts.append(PageFact(subject, match.group(1).strip(), value))
    return facts


def answer_of(value: str) -> str:
    """The reference answer of a fact: the value without a leading currency sign ("$6.00" -> "6.00").

    `must_include` is a substring test, so "6.00" accepts the answers "6.00" and "$6.00" alike.
    """
    return _CURRENCY.sub("", value)


def reference_answers(answer: str) -> dict[str, object]:
    """The `string_match` reference of a fact's answer: a whole number must be the answer (`exact_match`),
    since as a substring "88" would accept "1880"; any other value must be in it (`must_include`)."""
    return {"exact_match": answer} if answer.isdigit() else {"must_include": [answer]}


def question(label: str, subject: str) -> str:
    """The task's intent; an acronym label keeps its case ("SKU"), others are lower-cased ("price").

    A subject ending in punctuation (a post titled "Why X?") is quoted, so the question ends once.
    """
    quoted = f'"{subject}"' if subject[-1:] in "?!." else subject
    return QUESTION.format(label=_label_word(label), subject=quoted)


def _label_word(label: str) -> str:
    return label if label.isupper() else label.lower()


class HeldOutFacts:
    """The facts that held-out tasks ask: an entity of a task's `instantiation_dict` with its reference answer.

    A page fact is held out when its answer is one of a held-out task's answers and its subject names
    that task's entity, by the same rule that ties a page to its episode's task ("Order #1171" names
    the order "1171"), so that a test task's fact never reaches training under another phrasing.
    """

    def __init__(self, tasks: Iterable[Task] = ()) -> None:
        self._asked: list[tuple[set[str], list[list[list[str]]]]] = []
        self._intents: set[str] = set()
        for task in tasks:
            self._intents.add(normalise_intent(task.intent))
            answers = _reference_answers(task)
            if answers:
                entities = {normalise_intent(str(value)) for value in task.instantiation_dict.values()}
                self._asked.append((entities, answers))

    def has_intent(self, intent: str) -> bool:
        """Whether a held-out task asks `intent`, compared by words alone (`normalise_intent`): stricter than the
        curriculum's dedupe, which also tells "$10" from "10%", since training must never see an evaluation task."""
        return normalise_intent(intent) in self._intents

    def covers(self, subject: str, answer: str) -> bool:
        value = f" {normalise_intent(answer)} "
        return any(
            _names_any(subject, entities) and any(_answers(value, items) for items in answers)
            for entities, answers in self._asked
        )


def _reference_answers(task: Task) -> list[list[list[str]]]:
    """Every answer a task's string_match accepts, each a list of items, each item its `|OR|` alternatives.

    `exact_match`, `fuzzy_match` and `one_of` values are answers of one item; a `must_include` list is one
    answer of all its items ("Jane", "Doe": a page's "Jane Doe" is that answer).
    """
    references = (task.eval or {}).get("reference_answers") or {}
    answers: list[list[list[str]]] = []
    for approach in ("exact_match", "fuzzy_match", "one_of", "must_include"):
        value = references.get(approach) or []
        items = [_alternatives(item) for item in ([value] if isinstance(value, str) else value)]
        if approach == "must_include":
            answers += [items] if items else []
        else:
            answers += [[item] for item in items]
    return answers


def _alternatives(item: object) -> list[str]:
    return [normalise_intent(part) for part in str(item).split(" |OR| ") if normalise_intent(part)]


def _answers(value: str, items: list[list[str]]) -> bool:
    """Whether the padded, normalised page `value` holds every item (one of its alternatives) as whole words."""
    return all(any(f" {alternative} " in value for alternative in item) for item in items)


def _names_any(subject: str, entities: Iterable[str]) -> bool:
    """Whether `subject` is one of the normalised `entities` or holds one as whole words."""
    key = f" {normalise_intent(subject)} "
    return any(entity and f" {entity} " in key for entity in entities)


def _names_task_entity(subject: str, task: Task) -> bool:
    return _names_any(subject, (normalise_intent(str(value)) for value in task.instantiation_dict.values()))


def _observations(trajectory: Trajectory) -> Iterator[tuple[str, str]]:
    """(page URL, observation) of every page the episode saw: each step's, then the final one."""
    for step in trajectory.steps:
        if step.observation:
            yield step.url, step.observation
    if trajectory.final_observation:
        yield trajectory.final_url, trajectory.final_observation


def page_fact_tasks(trajectories: Iterable[Trajectory], held_out: HeldOutFacts) -> list[Task]:
    """One task per distinct (site, subject, label) seen in `trajectories`, in first-seen order.

    Each starts where its episode started, carries a `string_match` evaluator with the page's value,
    and records its page fact in `instantiation_dict` (`subject`) so that its own episodes can seed
    further facts, and in `extra["page_fact"]` with the page's URL, where `fact_holds` checks it. A fact
    shown with two values (an episode that starred a project saw its stars before and after) is dropped:
    the start state's value is not known. So are facts `held_out` covers.
    """
    found: dict[tuple[str, str, str], tuple[Task, PageFact, str]] = {}
    values: dict[tuple[str, str, str], set[str]] = {}
    for trajectory in trajectories:
        origin = trajectory.task
        for url, observation in _observations(trajectory):
            for fact in facts_on_page(observation):
                if not _names_task_entity(fact.subject, origin):
                    continue
                key = (origin.site, normalise_intent(fact.subject), fact.label.casefold())
                found.setdefault(key, (origin, fact, url))
                values.setdefault(key, set()).add(fact.value)
    tasks = []
    for key, (origin, fact, url) in found.items():
        answer = answer_of(fact.value)
        if len(values[key]) == 1 and not held_out.covers(fact.subject, answer):
            tasks.append(_task(origin, fact, answer, url))
    return tasks


def fact_holds(task: Task, observation: str) -> bool:
    """Whether `observation`, the fact's page opened afresh, still shows the page-fact task's fact.

    An episode may have made the page it read: a question episode that opened a new issue saw the issue's page,
    which does not exist when an episode starts. Opening the URL in a new episode tells such pages apart.
    """
    fact = task.extra["page_fact"]
    return PageFact(task.instantiation_dict["subject"], fact["label"], fact["value"]) in facts_on_page(observation)


def checked_facts(tasks: Iterable[Task], limit: int, open_page: Callable[[Task], str]) -> tuple[list[Task], list[Task]]:
    """The first `limit` page-fact tasks whose fact holds on its page opened afresh, and those refused on the way.

    `open_page(task)` returns the simplified HTML of `task.start_url` in a new episode; each task is checked
    through a copy that starts at its fact's page, so a refused one is named by that URL.
    """
    kept: list[Task] = []
    refused: list[Task] = []
    for task in tasks:
        if len(kept) == limit:
            break
        check = dataclasses.replace(task, start_url=task.extra["page_fact"]["url"])
        if fact_holds(task, open_page(check)):
            kept.append(task)
        else:
            refused.append(check)
    return kept, refused


def _task(origin: Task, fact: PageFact, answer: str, url: str) -> Task:
    return Task(
        task_id="",
        intent=question(fact.label, fact.subject),
        sites=list(origin.sites),
        start_url=origin.start_url,
        eval={
            "eval_types": ["string_match"],
            "reference_answers": reference_answers(answer),
            "reference_url": "",
            "program_html": [],
            "url_note": "EXACT",
            "string_note": "",
            "reference_answer_raw_annotation": fact.value,
        },
        intent_template=QUESTION.format(label=_label_word(fact.label), subject="{subject}"),
        instantiation_dict={"subject": fact.subject},
        extra={"page_fact": {"url": url, "label": fact.label, "value": fact.value}},
        require_login=origin.require_login,
        storage_state=origin.storage_state,
    )
