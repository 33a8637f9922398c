// Command coredns is CoreDNS with only the plugins the local cluster needs:
// cluster names from the API (kubernetes), a cache, health and readiness
// probes, error logging. Deliberately no forward, hosts or etcd: a name
// outside the cluster domain gets SERVFAIL and no query leaves the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The plugin chain, in the relative order of upstream's
// core/dnsserver/zdirectives.go (a request walks it top to bottom).
var directives = []string{"ready", "health", "errors", "cache", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
