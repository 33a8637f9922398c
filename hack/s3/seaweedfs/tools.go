//go:build tools

// Package tools pins the SeaweedFS command built by hack/s3/build.sh.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
