"""Modality: does the conversation carry images? (SPEC §4: an image_url part means vision; one in an
earlier turn too, since the answering model reads the whole conversation.) ``image_only``: the
asked message is images without text.

Only an image in the asked message also settles the intent (``vision``, before any embedding):
a text turn after an earlier image keeps its own intent, so a harmful ask there still reaches
the safety decision, which profiles rank above the vision decision's ``modality: image``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..context import RequestContext
from .base import SignalMatch

if TYPE_CHECKING:  # deps imports the code and short-text signals
    from .deps import SignalDeps


class ModalitySignal:
    type = "modality"

    async def evaluate(self, ctx: RequestContext) -> list[SignalMatch]:
        if not ctx.conversation_has_image:
            return [SignalMatch(self.type, "text", 1.0, source="rule:no_image")]
        matches = [SignalMatch(self.type, "image", 1.0, source="rule:image_url",
                               details={"images": ctx.conversation_images})]
        if ctx.image_only:
            matches.append(SignalMatch(self.type, "image_only", 1.0, source="rule:image_url"))
        return matches


def build(deps: "SignalDeps") -> ModalitySignal:
    return ModalitySignal()
