"""`make chaos`: exactly once and never stuck, while the operator and the cluster fail.

Against the cluster of KUBECONFIG, in namespaces of its own (`chaos-<id>-*`) served by an
operator process of its own (`python -m tooladapter run`, TOOLADAPTER_NAMESPACES set to that
prefix, leader election on with a short Lease so a restart takes over quickly):

1. load: CHAOS_INVOCATIONS (500) calls at CHAOS_RATE (4) calls/s, a quarter each of a read
   (native `list-tools`), an `http` tool with an effect (class external, so gated), a
   sandboxed shell tool (`wget` from its pod) and a gated `http` tool (class shared-write);
   every call has its own `spec.idempotencyKey`, which is also the path the counting
   server on the node's address counts (GET and POST); an automatic reviewer approves
   every call that waits in AwaitingApproval;
2. faults while the load runs: CHAOS_KILLS (20) SIGKILLs of the operator at random moments,
   each followed by a restart (which waits for the dead leader's Lease to expire);
   CHAOS_APISERVER_RESTARTS (2) restarts of the local cluster's kube-apiserver (same argv
   and environment, pid files updated, under the cluster scripts' lock; "not done" on any
   other cluster); CHAOS_POD_DELETES (15) deletions of a random sandbox pod. An operator
   that exits on its own (it stops acting when it cannot renew its Lease, e.g. while the
   API server is down) is started again, as a Deployment would, and reported;
3. settle: every call must be terminal within CHAOS_SETTLE_SECONDS (120) of the last
   fault; the time it took is reported;
4. one key, 50 creators: CHAOS_CREATORS (50) concurrent creates with one idempotency key
   (the `http` effect tool, in a second namespace, no faults): exactly one execution, the
   others duplicates ending in the winner's state with its receipt (`duplicateOf`).

Hard rules (exit status 1 when one fails): no key executed more than once; no call
non-terminal CHAOS_SETTLE_SECONDS after the last fault; every terminal call's `receiptRef`
is a file of the operator's artifact store whose sha256 it is; `Uncertain` only where an
effect may have started (an execution recorded, a class whose effects are not contained);
`Failed` only where nothing started (no effectful `Failed` call was seen by the server); an
`Observed` effectful call was seen by the server; the 50 creators executed exactly once.
Observed calls whose tool answered with an error (`result.isError`) are counted apart.

Other knobs: CHAOS_LEASE_SECONDS (5), CHAOS_HTTP_DELAY (0.3: the counting server answers
after up to this many seconds, so kills land mid-request too), CHAOS_SEED (random),
CHAOS_OPERATOR_SRC (`tree`: the working tree's package, copied once at the start so that
edits made meanwhile never reach the operator under test; `HEAD`; or a directory holding
a `tooladapter` package), CHAOS_REPORT (chaos-report.json), CHAOS_KEEP=1 (keep namespaces
and the operator's workdir; the workdir, with the operator's log, is also kept when a rule
fails). Without make, from the repository root: `PYTHONPATH=hack .venv/bin/python -m chaos
--help`.

Modules: `config` (knobs), `objects` (descriptors, agents, grants, approvals), `counter`
(the counting server), `tracker` (a watch per namespace, and the reviewer), `supervisor`
(the operator's source snapshot and its supervised process), `faults` (kills, API server
restarts, pod deletions), `load` (the creators), `runner` (set-up, the run, clean-up),
`report` (rules and table).
"""
