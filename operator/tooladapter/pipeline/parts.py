"""The parts of an object as the API returns it (a plain dict): a missing or null part
reads as empty, so views never test for None."""

from __future__ import annotations

from typing import Any


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("spec") or {})


def status_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("status") or {})


def meta_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def name_of(obj: dict[str, Any]) -> str:
    return str(meta_of(obj).get("name") or "")
