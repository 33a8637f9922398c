"""`make bench`: what governance costs, measured against the floor in the same run.

Everything runs against the cluster of KUBECONFIG with the operator started exactly as
`make run` starts it (`python -m tooladapter run`, its own process), sharded to the bench's
namespaces with TOOLADAPTER_NAMESPACES so it never touches anyone else's objects.

Parts (BENCH_PARTS, default all):

1. calls: non-sandboxed calls (native `read-configmap`, an `http` tool against a server on
   the node's address; `list-tools` on request) at sustained, open-loop offered loads by
   many agent clients (real ServiceAccount tokens), create -> Observed seen on a watch.
2. floor: the same clients doing only what a CR-based call cannot avoid: create a
   `BenchFloor` (a CRD of the bench's own, with a status subresource), one status update by
   a minimal controller (a separate process), the watch event back to the client.
3. sandbox: a trivial shell tool, sequential and concurrent, against a bare Job with the
   same pod spec (create -> Complete, plus reading its log).
4. resources: the operator's CPU seconds per 1000 calls and RSS (from /proc), and RSS with
   BENCH_FILL (10,000) finished invocations stored, also after a restart.
5. stages: where the time goes, from status.stages[].time of (1) and (3).
6. overload: twice the capacity (the highest load (1) held) for BENCH_OVERLOAD_SECONDS:
   achieved/offered, admitted p95, queue and RSS over time, plotted beside the report
   (`<report>-overload.png`, matplotlib).
7. stored: BENCH_STORED (100,000) finished invocations stored at once (written straight to
   the API server with a real call's status, the operator stopped meanwhile): etcd's
   database size, the operator's start-up (process start -> a new call Observed) and RSS
   with them stored, then retention at its defaults deleting them (pace, size and RSS
   after, and the start-up after it).
8. doors: another namespace's tools list through the gateway, alone and while one agent
   holds BENCH_DOORS_STREAMS (150) live streams of the reviewers' page (`doors`): latency
   side by side, streams held and refused (429).

Knobs (environment or flags): BENCH_SECONDS (60 per load), BENCH_LOADS ("10,25,50,100"),
BENCH_TOOLS ("read-configmap,http"), BENCH_AGENTS (8), BENCH_PARTS ("1,2,3,4,5,6,7,8"),
BENCH_STORED (100000), BENCH_OVERLOAD_SECONDS (60), BENCH_OVERLOAD_CAPACITY (0: measured by part 1),
BENCH_FILL (10000), BENCH_FILL_RATE (100), BENCH_FILL_INFLIGHT (200), BENCH_DRAIN_SECONDS (60),
BENCH_SANDBOX_SEQUENTIAL (10), BENCH_SANDBOX_CONCURRENT (10), BENCH_SANDBOX_ROUNDS (3),
BENCH_REPORT (bench-report.json), BENCH_PYSPY (record the operator with py-spy during the
highest load: .svg flame graph, .json speedscope, else collapsed stacks),
BENCH_APISERVER_PPROF (path stem: the API server's CPU profile during the highest load of
each kind, `<stem>-<kind>.pprof`, and `go tool pprof -top -cum` of it beside),
BENCH_TIMELINE ("1": every call's times per phase, `<report>-timeline-<kind>-<rate>.json`),
BENCH_OPERATOR_SRC (run the operator from another copy of the package, for A/B runs).
A quick run: `BENCH_SECONDS=10 make bench`; without make, from the repository root:
`PYTHONPATH=hack .venv/bin/python -m bench --help`.

Traffic goes only to the API server of KUBECONFIG and to the node's own address. The bench
deletes its namespaces and its CRD at the end.

Modules: `config` (knobs and names), `api` (a lean async API client), `procfs` (CPU and
memory from /proc), `calls` and `stats` (one call; latency and stage statistics), `base`
(the bench's state, one call sent) with its parts `setup`, `load` (1, 2), `sandbox` (3),
`fill` (4), `overload` (6) and `stored` (7), put together in `runner`; `floor` (the floor's
CRD and minimal controller) and `http_server` (the http tool's server) run as their own
processes; `report` derives the ratios and goals and prints the table.
"""
