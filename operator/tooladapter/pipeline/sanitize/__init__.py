"""Result sanitization: strip secrets, bound the size, tag the provenance, one concept a module.

A tool result goes to a model, so it is treated as hostile data, and so is every other text
that reaches status, events, logs, the artifact store or the agent:

- `secret_forms`: brokered secrets by exact value, in every spelling a tool may print;
- `rules`: known secret formats (on RE2: linear in the text);
- `redaction`: both applied to one call's texts, and bounded messages (`bounded_message`);
- `results`: a tool's result redacted first, then bounded in size (text and structured);
- `provenance`: the envelope that tells the model the result is data.
"""
