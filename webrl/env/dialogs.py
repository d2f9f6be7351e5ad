"""Native dialogs (alert, confirm, prompt): answered as a web agent needs, and told to it in words.

With no one listening, Playwright dismisses every dialog, so a "Delete" button guarded by
`confirm("Delete?")` never acts and the agent, which sees no dialog in its text observation, cannot learn
why. A person who clicked "Delete" meant it, so:

- `alert` and `confirm` are accepted (OK): the click that opened them was the agent's intent;
- `prompt` is dismissed (Cancel): no action can type into it, and OK would submit an empty or default
  answer the agent never chose;
- `beforeunload` ("Leave site?") is accepted without a word, as Playwright does by default: the agent's
  navigation was its intent, and the page it reaches shows that it left.

Each answered dialog becomes a line at the top of the agent's next observation
(`the page asked "Delete?"; accepted`), as a refused navigation does (webrl.env.site_guard), and is
recorded in the trajectory's metadata (`dialogs`, the first few). The embedded sites open no dialogs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playwright.async_api import Error as PlaywrightError

_KEPT_DIALOGS = 20
_MESSAGE_CHARS = 200


def _told(kind: str, message: str) -> str:
    """What the agent reads about a dialog the episode answered."""
    if kind == "alert":
        return f'the page showed the alert "{message}"; closed with OK'
    if kind == "prompt":
        return f'the page asked for text ("{message}"); cancelled, since no action can type into it'
    return f'the page asked "{message}"; accepted'


class DialogAnswerer:
    """The dialogs of one episode: answered as they open (module docstring), told at the next `notice()`."""

    def __init__(self, metadata: dict[str, Any]) -> None:
        self._metadata = metadata
        self._untold: list[str] = []

    def install(self, context: Any, current: Callable[[], DialogAnswerer] | None = None) -> None:
        """Answer the dialogs of every tab of `context`; `current`, for a context that serves episodes in turn,
        names the answerer of the episode running when a dialog opens (as `SiteGuard.install`)."""
        answerer = current or (lambda: self)
        context.on("dialog", lambda dialog: answerer().answer(dialog))

    async def answer(self, dialog: Any) -> None:
        """Accept or dismiss `dialog`, and keep what to tell the agent."""
        kind = dialog.type
        if kind != "beforeunload":
            message = " ".join(dialog.message.split())[:_MESSAGE_CHARS]
            self._untold.append(_told(kind, message))
            kept = self._metadata.setdefault("dialogs", [])
            if len(kept) < _KEPT_DIALOGS:
                kept.append({"type": kind, "message": message})
        try:
            await (dialog.dismiss() if kind == "prompt" else dialog.accept())
        except PlaywrightError:
            return  # the tab closed with its dialog open; nothing is left to answer

    def notice(self) -> str | None:
        """What the agent is told about the dialogs answered since the last call, if any."""
        if not self._untold:
            return None
        told = "\n".join(self._untold[:3])
        self._untold.clear()
        return told
