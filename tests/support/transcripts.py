"""Where the real agent transcripts are: `shared/transcripts/openai/` beside the checkout (as CI
lays it out), or $CTXPROXY_TRANSCRIPTS. Tests that use them fail loudly when they are missing."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRANSCRIPTS = Path(os.environ.get("CTXPROXY_TRANSCRIPTS", REPO.parent / "shared" / "transcripts" / "openai"))
