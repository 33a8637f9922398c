"""A real OTLP receiver on loopback for the tracing tests: the OpenTelemetry Collector built
from its pinned Go module (`hack/otel/`, only the OTLP receiver and the file exporter),
writing every span it receives as OTLP JSON lines into a file the test reads."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from tooladapter.devtools.cluster import ROOT
from tooladapter.devtools.groups import stop_group, tail_of
from tooladapter.devtools.host import free_port
from tooladapter.devtools.waiting import wait_for

HACK = ROOT / "hack" / "otel"


def build() -> Path:
    """The cached collector binary, built first if needed (`make otel-collector` builds it
    ahead)."""
    out = subprocess.run(
        [str(HACK / "build.sh")], check=True, capture_output=True, text=True, timeout=3600
    )
    return Path(out.stdout.strip().splitlines()[-1])


def config(port: int, path: Path) -> dict[str, Any]:
    return {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
        "exporters": {"file": {"path": str(path), "flush_interval": "100ms"}},
        "service": {
            # No listener of its own (its metrics would take port 8888 for everyone).
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
        },
    }


class Collector:
    """The collector in its own process group, OTLP/HTTP on a free loopback port, spans in
    `workdir/traces.jsonl`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.traces_path = workdir / "traces.jsonl"
        self.log_path = workdir / "otelcol.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        binary = build()
        conf = self.workdir / "otelcol.yaml"
        # JSON is YAML: no YAML writer needed.
        conf.write_text(json.dumps(config(self.port, self.traces_path)))
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(binary), "--config", f"file:{conf}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def listening() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                return "exited"
            with socket.socket() as s:
                s.settimeout(1)
                return "ready" if s.connect_ex(("127.0.0.1", self.port)) == 0 else None

        if wait_for(listening, timeout=timeout, what=f"the collector at {self.endpoint}") != (
            "ready"
        ):
            raise AssertionError(f"the collector exited:\n{self.tail()}")

    def operator_env(self) -> dict[str, str]:
        """The environment of an operator exporting to this collector, soon after each span."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}

    def requests(self) -> list[dict[str, Any]]:
        """Every export the file exporter wrote so far (OTLP JSON, one request a line)."""
        if not self.traces_path.exists():
            return []
        lines = self.traces_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def spans(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans of one trace (hex id), each with its resource's attributes beside it."""
        found = []
        for request in self.requests():
            for resource_spans in request.get("resourceSpans", []):
                resource = resource_spans.get("resource", {})
                for scope_spans in resource_spans.get("scopeSpans", []):
                    for span in scope_spans.get("spans", []):
                        if span.get("traceId") == trace_id:
                            found.append({**span, "resource": resource})
        return found

    def stop(self) -> None:
        stop_group(self.proc)

    def tail(self, lines: int = 40) -> str:
        return tail_of(self.log_path, lines)


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    """A span's OTLP JSON attributes as a plain dict."""
    plain: dict[str, Any] = {}
    for item in span.get("attributes", []):
        value = item.get("value", {})
        plain[item["key"]] = next(iter(value.values()), None) if value else None
    return plain
