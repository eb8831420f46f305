"""``/api/v1/targets``: the targets' views as JSON documents (the status page's figures, every
window's report, load, verdict and configuration-change cut; the epochs and changes). Pure:
the caller encodes them (specmon.jsontext)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from specmon.answer import Answer, Evidence, words
from specmon.daemon.views import TargetView, WindowView
from specmon.surfaces.classes import classes_json
from specmon.surfaces.epochs import epochs_api

__all__ = ["answer_json", "views_json"]


def _report_json(window: WindowView) -> dict[str, Any]:
    return {
        "window": window.window,
        "seconds": window.seconds,
        "covered_seconds": window.covered_seconds,
        "drafts": window.drafts,
        "readings": window.readings,
        "generated_tokens": window.generated_tokens,
        "report": window.report.as_dict() if window.report else None,
        "load": dataclasses.asdict(window.load) if window.load else None,
        "verdict": answer_json(window.answer) if window.answer else None,
        # Cut at the model's configuration change (specmon.daemon.window_rules), or None.
        "straddle": window.straddle.as_dict() if window.straddle else None,
    }


def answer_json(answer: Answer) -> dict[str, Any]:
    """The window's answer (specmon.answer): every figure, and the answer in words. The
    shape ``specmon recommend --from`` reads (``per_load``, ``crossover``). A bucket without
    figures (too little data, no matching baseline bucket yet) carries its label, edges and
    the reason only: no ``"concurrency": null`` for a reader to trip on."""
    document = dataclasses.asdict(answer)
    document["speedup_interval"] = document.pop("interval")
    document["per_load"] = [
        bucket if bucket["concurrency"] is not None else {k: bucket[k] for k in _THIN_BUCKET}
        for bucket in document["per_load"]
    ]
    document["refused"] = [{"basis": r.basis.value, "reason": r.reason} for r in answer.refused]
    document["draft_cost_source"] = (
        "engine" if answer.basis is Evidence.ENGINE
        else "measured" if answer.compared else answer.basis.value
    )  # fmt: skip
    document["basis_text"] = words.basis_words(answer)
    document["detail"] = words.detail(answer)
    document["advice"] = words.advice(answer)
    return document


#: What a bucket without figures says of itself in the API.
_THIN_BUCKET = ("label", "low", "high", "reason")


def views_json(views: Iterable[TargetView]) -> list[dict[str, Any]]:
    out = []
    for view in views:
        out.append(
            {
                "target": view.name,
                "url": view.url,
                "labels": view.labels,
                "engine": view.engine.value if view.engine else None,
                "up": view.up,
                "scraped": view.scraped,
                "last_scrape_duration_seconds": view.last_duration,
                "last_success_timestamp_seconds": view.last_success,
                "error": view.error,
                "error_kind": view.error_kind,
                "speculation": view.speculation,
                "message": view.message,
                "notes": list(view.notes),
                "baseline_for": list(view.baseline_for),
                "baseline": view.baseline,
                "baseline_check": (
                    None if view.baseline_check is None else dataclasses.asdict(view.baseline_check)
                ),
                "malformed_lines": view.malformed,
                "rejected": [
                    {
                        "model": r.model,
                        "reason": r.reason.value,
                        "detail": r.detail,
                        "whole_model": r.whole_model,
                    }
                    for r in view.rejected
                ],
                "models": [
                    {
                        "model": m.model,
                        "speculating": m.speculating,
                        "chain_length": m.basis.chain_length,
                        "chain_length_source": m.basis.chain_length_source,
                        "draft_cost": m.basis.draft_cost,
                        "engine_draft_cost": m.engine_draft_cost,
                        "engine_draft_overhead": m.engine_draft_overhead,
                        "breakeven_alpha": m.basis.breakeven_alpha,
                        "resets": m.resets,
                        "requests_running": m.requests_running,
                        "windows": [_report_json(w) for w in m.windows],
                    }
                    for m in view.models
                ],
                **epochs_api(view),
                "classes": classes_json(view.classes),  # per request class (surfaces/classes.py)
            }
        )
    return out
