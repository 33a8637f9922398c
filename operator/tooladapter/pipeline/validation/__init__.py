"""The validation stage and the checks at apply, one concept a module.

- `arguments`: a call's arguments, bounded in size and depth, then validated against the
  tool's JSON Schema 2020-12 (`linear_keywords`: the keywords in linear time; `refs`: refs
  resolve locally only; `paths`: where a problem is).
- `admission`: the same depth bound as CEL, for the API server's admission policy.
- `schemas`: a descriptor's schemas, usable and free of misspelt keywords.
- `http_templates`: an http tool's request templates, checked at apply, rendered per call.
- `descriptor`: a descriptor's internal consistency, checked once, when it is applied.
"""
