"""The admission CEL of a call's arguments: the API server bounds them before they are stored.

The expressions go into the ValidatingAdmissionPolicy `tooladapter-invocation-arguments`
(`manifests/admission/invocation-arguments.yaml` and the chart's generated copy; a unit test
compares them): no watcher ever decodes arguments nested deeper than the operator accepts.
"""

from __future__ import annotations

from tooladapter.pipeline.validation.arguments import DEFAULT_MAX_DEPTH

#: Entries of one object or array at admission (`admission_bounds_cel`).
MAX_ADMISSION_ENTRIES = 1024


def admission_bounds_cel(
    arguments: str = "variables.arguments",
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_entries: int = MAX_ADMISSION_ENTRIES,
) -> str:
    """The CEL of the admission policy `tooladapter-invocation-arguments`: the nesting bound
    of `check_bounds`, checked by the API server before the object is stored, so no watcher
    ever decodes deeper arguments; and at most `max_entries` entries per object or array.

    CEL has no recursion, so the walk is unrolled, one `all()` per level; each level names
    its value once, so the expression grows linearly with the depth. The entry bound keeps
    the API server's work linear: iterating one collection costs it time quadratic in the
    collection's size (measured on 1.34: 40,000 values in one array took 5.9 s, in 40
    arrays of 1,000 0.28 s); beyond ~40,000 values in all (fewer in objects) the evaluation
    exceeds the CEL cost budget and the API server refuses the object. Sizes are bounded by
    the API server (3 MiB requests, 1.5 MiB objects) and again by `check_bounds` in the
    operator."""

    def level(depth: int, value: str) -> str:
        container = f"(type({value}) == map || type({value}) == list)"
        if depth > max_depth:
            return f"!{container}"
        child = f"v{depth + 1}"
        children = (
            f"(type({value}) == map ? {value}.map(k, {value}[k]) : "
            f"type({value}) == list ? {value} : [])"
        )
        return (
            f"(!{container} || size({value}) <= {max_entries}) && "
            f"{children}.all({child}, {level(depth + 1, child)})"
        )

    return level(1, arguments)


def admission_flat_cel(
    arguments: str = "object.spec.?arguments.orValue({})",
    *,
    max_entries: int = MAX_ADMISSION_ENTRIES,
) -> str:
    """The match condition of `tooladapter-invocation-arguments`: true unless the arguments
    are one object of at most `max_entries` scalars. Such arguments (the common call) meet
    `admission_bounds_cel` by construction, so the API server skips its unrolled walk: one
    pass over the top level instead (issue 17: cheaper admission on the common path)."""
    value = f"{arguments}[k]"
    return (
        f"!(type({arguments}) == map && size({arguments}) <= {max_entries} && "
        f"{arguments}.all(k, type({value}) != map && type({value}) != list))"
    )
