//go:build tools

// Package tools pins Pulumi's Python language host. Its own module
// (sdk/python/cmd/pulumi-language-python/v3) is not served by the Go module
// proxy reachable here; v3.68.0 is the newest sdk/v3 release that still ships
// it inside sdk/v3, so it is built from there, unmodified.
package tools

import _ "github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python"
