"""Two one-line changes to the vendored sources of containerd-shim-runsc-v1, so that the
shim of the pinned gVisor runs under the local cluster's containerd (Debian's 1.6) on
these VMs. Applied by hack/cluster/build.sh to a throwaway `go mod vendor` copy of this
module, never to the module cache; runsc itself is built unpatched.

1. gVisor's shim start sets the shim's oom_score_adj to -999. Lowering it needs
   CAP_SYS_RESOURCE, which root on these VMs lacks (the reason containerd's config
   sets restrict_oom_score_adj, and the kubelet runs with oomScoreAdj 0): a permission
   error is ignored, as containerd's own helper does for unprivileged callers. The shim
   keeps containerd's score.
2. containerd 2's shim library answers `start` with JSON bootstrap parameters
   (containerd >= 1.7 reads them); containerd 1.6 reads the bare socket address and
   fails with "dial unix {...}". The shim prints the address, which every containerd
   version accepts (the shims of 1.6 did the same).

Each change must match exactly once: a new pin that moved the code stops the build
here, loudly, instead of building a shim that fails at the first pod.

    python3 patch.py VENDOR_DIR
"""

import sys
from pathlib import Path

PATCHES = [
    (
        "gvisor.dev/gvisor/pkg/shim/v1/manager.go",
        "if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {",
        "if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax);"
        " err != nil && !os.IsPermission(err) {",
    ),
    (
        "github.com/containerd/containerd/v2/pkg/shim/shim.go",
        "data, err := json.Marshal(&params)",
        "data, err := []byte(params.Address), error(nil) // containerd 1.6\n\t\t_ = json.Marshal",
    ),
]


def main(vendor: Path) -> None:
    for rel, old, new in PATCHES:
        path = vendor / rel
        text = path.read_text()
        if text.count(old) != 1:
            sys.exit(f"patch.py: {rel}: expected one {old!r} (did the gvisor pin move it?)")
        path.write_text(text.replace(old, new))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
